package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgatehq/floodgate/internal/certtest"
	"github.com/floodgatehq/floodgate/internal/cli"
	"github.com/floodgatehq/floodgate/internal/redistest"
)

// server is a serve started in-process for a test.
type server struct {
	http, grpc string // addresses
	log        *syncBuffer
}

// startServe runs serve with args until the test ends (on loopback ports
// of its choosing unless args give others) and returns its addresses.
func startServe(t testing.TB, env map[string]string, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	errOut := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, args...),
			&out, errOut, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, errOut.String())
		}
	})
	re := regexp.MustCompile(`msg="floodgate serving".* http=(\S+) grpc=(\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(errOut.String()); m != nil {
			return &server{http: m[1], grpc: m[2], log: errOut}
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("serve exited %d:\n%s", code, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("serve did not start:\n%s", errOut.String())
	return nil
}

// refused runs serve and returns its exit status and error output: for
// configurations it must refuse at once.
func refused(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut syncBuffer
	code := cli.Run(ctx, append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, args...),
		&out, &errOut, func(k string) string { return env[k] })
	return code, errOut.String()
}

const weak = "abcde" // a 5-character token

// TestWeakAdminTokenRefused: a 5-character admin token is refused from
// every source — the environment, --admin-token-file, admin.token,
// admin.token_file, the tokens file of clients — by serve and check, and
// by the client commands from --token and the environment; no message
// repeats it.
func TestWeakAdminTokenRefused(t *testing.T) {
	weakFile := writeFile(t, "token", weak+"\n")
	policies := "policies:\n  api: \"gcra 10/1s\"\n"
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"environment", map[string]string{cli.EnvAdminToken: weak}, nil, cli.EnvAdminToken + ": auth: unusable token: 5 characters, want at least 16"},
		{"--admin-token-file", nil, []string{"--admin-token-file", weakFile}, "--admin-token-file " + weakFile + ": auth: unusable token: 5 characters"},
		{"admin.token", nil, []string{"--config", writeFile(t, "f.yaml", policies+"admin:\n  token: "+weak+"\n")}, "admin.token: unusable token: 5 characters"},
		{"admin.token_file", nil, []string{"--config", writeFile(t, "f.yaml", policies+"admin:\n  token_file: "+weakFile+"\n")}, "admin.token_file " + weakFile + ": auth: unusable token: 5 characters"},
		{"a client's token", nil, []string{"--config", writeFile(t, "f.yaml", policies+"clients:\n  tokens_file: "+writeFile(t, "clients", "bob "+weak+"\n")+"\n")},
			"clients.tokens_file: auth: invalid tokens file: line 1: client bob: token: 5 characters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, errOut := refused(t, c.env, c.args...)
			if code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, weak) {
				t.Errorf("serve: exit %d, %q; want 1 and %q", code, errOut, c.want)
			}
			args := []string{"check"}
			for i := 0; i+1 < len(c.args); i += 2 {
				if c.args[i] == "--config" {
					args = append(args, "--config", c.args[i+1])
				}
			}
			if c.name == "--admin-token-file" {
				return // a flag of serve's alone
			}
			code, _, errOut = run(t, c.env, args...)
			if code != 1 || !strings.Contains(errOut, strings.TrimPrefix(c.want, "floodgate: ")) || strings.Contains(errOut, weak) {
				t.Errorf("check: exit %d, %q; want 1 and %q", code, errOut, c.want)
			}
		})
	}
	// The client commands check the token they would send.
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"reset", "--token", weak, "api", "k"}, "--token: auth: unusable token: 5 characters"},
		{map[string]string{cli.EnvAdminToken: weak}, []string{"keys", "api"}, cli.EnvAdminToken + ": auth: unusable token"},
		{map[string]string{cli.EnvToken: weak}, []string{"allow", "api", "k"}, cli.EnvToken + ": auth: unusable token"},
		{nil, []string{"peek", "--token", weak, "api", "k"}, "--token: auth: unusable token"},
	} {
		env := map[string]string{cli.EnvURL: "127.0.0.1:1"} // never reached
		for k, v := range c.env {
			env[k] = v
		}
		code, _, errOut := run(t, env, c.args...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "cannot reach") {
			t.Errorf("%v: exit %d, %q; want 1 and %q before any request", c.args, code, errOut, c.want)
		}
	}
}

// adminStatus returns the status of an admin endpoint (GET /v1/stats) of
// the service at addr with tok as the bearer token.
func adminStatus(t *testing.T, addr, tok string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestAdminTokenFile: the token of --admin-token-file opens the admin
// endpoints, and a new token written to the file replaces it.
func TestAdminTokenFile(t *testing.T) {
	const first, second = "first-admin-token-0123", "second-admin-token-0123"
	file := writeFile(t, "token", first+"\n")
	s := startServe(t, nil, "--admin-token-file", file, "--watch", "50ms")
	keys := func(tok string) int { return adminStatus(t, s.http, tok) }
	if keys(first) != 200 || keys(second) != 401 {
		t.Fatalf("with the first token: %d, second: %d", keys(first), keys(second))
	}
	if err := os.WriteFile(file, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for keys(second) != 200 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if keys(second) != 200 || keys(first) != 401 {
		t.Errorf("after the file changed: second %d, first %d", keys(second), keys(first))
	}
}

// TestAdminTokenFileChangedAtStart: a token written to the file while
// serve starts (here, waiting for its Redis) is the token in force once it
// serves: --watch compares the files with what the configuration was read
// from, not with what they held when the watching began.
func TestAdminTokenFileChangedAtStart(t *testing.T) {
	t.Parallel()
	const first, second = "first-admin-token-0123", "second-admin-token-0123"
	file := writeFile(t, "token", first+"\n")
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errOut := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
			"--admin-token-file", file, "--watch", "50ms", "--store-wait", "1m",
			"--redis", fmt.Sprintf("redis://127.0.0.1:%d", port)}, io.Discard, errOut, func(string) string { return "" })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, errOut.String())
		}
	})
	waitLog := func(re *regexp.Regexp) []string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if m := re.FindStringSubmatch(errOut.String()); m != nil {
				return m
			}
		}
		t.Fatalf("no line matching %s:\n%s", re, errOut.String())
		return nil
	}
	waitLog(regexp.MustCompile(`Redis is not answering yet; waiting for it`))
	if err := os.WriteFile(file, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	redistest.StartServer(t, redistest.WithPort(port))
	addr := waitLog(regexp.MustCompile(`msg="floodgate serving".* http=(\S+)`))[1]
	statusOf := func(tok string) int { return adminStatus(t, addr, tok) }
	for deadline := time.Now().Add(30 * time.Second); statusOf(second) != 200 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if s, f := statusOf(second), statusOf(first); s != 200 || f != 401 {
		t.Errorf("the token written while serve started: %d, the one before: %d; want 200 and 401", s, f)
	}
}

// tlsFiles makes a CA, a server certificate and a client certificate in
// dir.
type tlsFiles struct {
	ca                   *certtest.CA
	caFile               string
	cert, key            string
	clientCert           tls.Certificate
	clientCertFile, key2 string
}

func newTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "floodgate test CA")
	f := tlsFiles{ca: ca, caFile: ca.WriteCA(t, dir, "ca")}
	f.cert, f.key = ca.Server(t, "floodgate").Write(t, dir, "server")
	client := ca.Client(t, "envoy")
	f.clientCert = client.TLS
	f.clientCertFile, f.key2 = client.Write(t, dir, "client")
	return f
}

// grpcDial connects to addr with creds (nil: in clear).
func grpcDial(t testing.TB, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func rlsRequest() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "example", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}}
}

func shouldRateLimit(conn *grpc.ClientConn, md ...string) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsRequest())
}

// TestServeTLS: HTTPS on the HTTP listener; gRPC over mutual TLS, where a
// client without a certificate (or with one of another CA) is refused and
// one with the CA's certificate is decided, counted as client "mtls".
func TestServeTLS(t *testing.T) {
	f := newTLSFiles(t)
	conf := writeFile(t, "floodgate.yaml", fmt.Sprintf(`policies:
  api: "gcra 10/1s"
admin:
  token: admin-token-0123456789
listen:
  http_tls: {cert: %s, key: %s}
  grpc_tls: {cert: %s, key: %s, client_ca: %s}
`, f.cert, f.key, f.cert, f.key, f.caFile))
	s := startServe(t, nil, "--config", conf)
	if !strings.Contains(s.log.String(), "http_tls=tls grpc_tls=mtls") {
		t.Errorf("the start line does not say the listeners' TLS:\n%s", s.log)
	}

	// HTTPS, verified against the CA.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.ca.Pool()}}}
	res, err := client.Post("https://"+s.http+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","key":"k"}`))
	if err != nil {
		t.Fatalf("HTTPS: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.TLS == nil || !strings.Contains(string(body), `"allowed":true`) {
		t.Errorf("HTTPS /v1/check: %d %s", res.StatusCode, body)
	}
	// HTTP in clear to the TLS port is refused.
	if res, err := http.Get("http://" + s.http + "/healthz"); err == nil {
		res.Body.Close()
		if res.StatusCode == 200 {
			t.Error("plain HTTP to the HTTPS listener answered 200")
		}
	}

	// gRPC with mutual TLS.
	base := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: f.ca.Pool(), ServerName: "localhost", Certificates: certs}
	}
	if _, err := shouldRateLimit(grpcDial(t, s.grpc, nil)); err == nil {
		t.Error("gRPC in clear to the TLS listener was answered")
	}
	if _, err := shouldRateLimit(grpcDial(t, s.grpc, credentials.NewTLS(base()))); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC over TLS without a client certificate: %v, want Unavailable (the handshake fails)", err)
	}
	mallory := certtest.NewCA(t, "other").Client(t, "mallory").TLS
	if _, err := shouldRateLimit(grpcDial(t, s.grpc, credentials.NewTLS(base(mallory)))); err == nil {
		t.Error("gRPC with a client certificate of another CA was answered")
	}
	resp, err := shouldRateLimit(grpcDial(t, s.grpc, credentials.NewTLS(base(f.clientCert))))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("gRPC with the client certificate: %v %v", resp, err)
	}
	if m := scrape(t, client, "https://"+s.http); !strings.Contains(m, `floodgate_client_requests_total{client="mtls",transport="grpc"} 1`) {
		t.Errorf("metrics lack the mtls client's request:\n%s", grep(m, "floodgate_client"))
	}
}

// scrape returns the text of /metrics.
func scrape(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	res, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// grep returns the lines of s that hold sub.
func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// metric returns the value of the series named exactly series in the text
// m, or -1.
func metric(m, series string) float64 {
	for _, l := range strings.Split(m, "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestServeClientAuth: with a tokens file, /v1/check without a valid token
// is 401 and gRPC is Unauthenticated; with one, both are decided and
// counted under the client's name. A token added to the file is accepted
// without a restart.
func TestServeClientAuth(t *testing.T) {
	const alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"
	tokens := writeFile(t, "clients", "alice "+alice+"\n")
	conf := writeFile(t, "floodgate.yaml", "policies:\n  api: \"gcra 10/1s\"\nclients:\n  tokens_file: "+tokens+"\n")
	dir := filepath.Dir(conf)
	if err := os.WriteFile(filepath.Join(dir, "example.yaml"), []byte("domain: example\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, nil, "--config", dir, "--watch", "50ms")
	check := func(auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+s.http+"/v1/check", strings.NewReader(`{"policy":"api","key":"k"}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, bad := range []string{"", "Bearer " + bob, "Bearer " + alice[:len(alice)-1]} {
		if code, body := check(bad); code != 401 || !strings.Contains(body, `"unauthorized"`) {
			t.Errorf("/v1/check with %q: %d %s, want 401", bad, code, body)
		}
	}
	if code, body := check("Bearer " + alice); code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("/v1/check with alice's token: %d %s", code, body)
	}
	conn := grpcDial(t, s.grpc, nil)
	for _, md := range [][]string{nil, {"authorization", "Bearer " + bob}} {
		if _, err := shouldRateLimit(conn, md...); status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC with %q: %v, want Unauthenticated", md, err)
		}
	}
	if resp, err := shouldRateLimit(conn, "authorization", "Bearer "+alice); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("gRPC with alice's token: %v %v", resp, err)
	}
	// gRPC health needs no token (probes).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("gRPC health: %v", err)
	}
	m := scrape(t, http.DefaultClient, "http://"+s.http)
	for series, want := range map[string]float64{
		`floodgate_client_requests_total{client="alice",transport="http"}`:                                                                          1,
		`floodgate_client_requests_total{client="alice",transport="grpc"}`:                                                                          1,
		`floodgate_auth_refused_total{reason="missing",surface="client",transport="http"}`:                                                          1,
		`floodgate_auth_refused_total{reason="invalid",surface="client",transport="http"}`:                                                          2,
		`floodgate_auth_refused_total{reason="missing",surface="client",transport="grpc"}`:                                                          1,
		`floodgate_auth_refused_total{reason="invalid",surface="client",transport="grpc"}`:                                                          1,
		`floodgate_requests_total{code="Unauthenticated",endpoint="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",transport="grpc"}`: 2,
	} {
		if got := metric(m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// bob joins: the file is re-read.
	if err := os.WriteFile(tokens, []byte("alice "+alice+"\nbob "+bob+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if code, _ := check("Bearer " + bob); code == 200 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("bob's token was not accepted after the tokens file changed:\n%s", s.log)
}

// TestServeWarnings: serve warns at start when a listener is reachable
// beyond loopback without client authentication, and not on loopback.
func TestServeWarnings(t *testing.T) {
	s := startServe(t, nil, "--http", "0.0.0.0:0")
	if !strings.Contains(s.log.String(), "reachable beyond loopback with no client authentication") ||
		!strings.Contains(s.log.String(), "the HTTP listener") {
		t.Errorf("no warning for HTTP on every interface:\n%s", s.log)
	}
	if strings.Contains(s.log.String(), "the gRPC listener") {
		t.Errorf("a warning for gRPC on loopback:\n%s", s.log)
	}
	quiet := startServe(t, nil)
	if strings.Contains(quiet.log.String(), "beyond loopback") {
		t.Errorf("a warning on loopback:\n%s", quiet.log)
	}
}

// TestCheckSecurity: check validates what serve would run: the listen
// addresses of the environment, the TLS files, the tokens file; and says
// how the service is guarded.
func TestCheckSecurity(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{cli.EnvHTTP: "not an address"}, `HTTP listen address (--http, FLOODGATE_HTTP_ADDR, listen.http): "not an address": want host:port`},
		{map[string]string{cli.EnvGRPC: "127.0.0.1:70000"}, `gRPC listen address (--grpc, FLOODGATE_GRPC_ADDR, listen.grpc): "127.0.0.1:70000": want a port from 0 to 65535`},
		{map[string]string{cli.EnvConfig: writeFile(t, "f.yaml", "listen:\n  http_tls: {cert: /nonexistent.crt, key: /nonexistent.key}\n")}, "listen.http_tls: certs: unusable TLS files"},
		{map[string]string{cli.EnvConfig: writeFile(t, "f.yaml", "clients:\n  tokens_file: /nonexistent\n")}, "clients.tokens_file: auth: invalid tokens file"},
		{map[string]string{cli.EnvConfig: writeFile(t, "f.yaml", "store:\n  timeout: 1000h\n")}, "store.timeout: want at most 1m0s"},
		{map[string]string{cli.EnvConfig: writeFile(t, "f.yaml", "store:\n  tls: {server_name: redis.example}\n"), cli.EnvRedisURL: "redis://127.0.0.1:6380"},
			"store.tls: settings without TLS: set store.tls.enabled, or write the url or addrs rediss:// (the store is FLOODGATE_REDIS_URL's, not the file's)"},
		{map[string]string{cli.EnvRedisSentinel: "m@rediss://:hunter2@127.0.0.1:26379"},
			"floodgate: FLOODGATE_REDIS_SENTINEL: credentials do not go in the sentinels' addresses: the sentinels' password is FLOODGATE_REDIS_SENTINEL_PASSWORD (store.sentinel_password), the master's FLOODGATE_REDIS_PASSWORD (store.password)"},
		{map[string]string{cli.EnvRedisCluster: "redis://default:hunter2@127.0.0.1:7000"},
			"floodgate: FLOODGATE_REDIS_CLUSTER: [0]: credentials (user:password@) do not go in an address"},
		{map[string]string{cli.EnvRedisURL: "redis://127.0.0.1:6380", cli.EnvSentinelPassword: "sentinel-secret"},
			`FLOODGATE_REDIS_SENTINEL_PASSWORD: applies to a store behind Sentinel (--redis-sentinel or store.type redis-sentinel), found store type "redis"`},
	} {
		code, out, errOut := run(t, c.env, "check")
		if code != 1 || out != "" || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "hunter2") {
			t.Errorf("check with %v: exit %d, %q %q; want 1 and %q, without the password", c.env, code, out, errOut, c.want)
		}
	}
	// The file's TLS settings with the store's URL from the environment,
	// as a deployment that keeps the URL in a secret has them.
	tlsStore := map[string]string{cli.EnvConfig: writeFile(t, "f.yaml", "store:\n  tls: {server_name: redis.example}\n"), cli.EnvRedisURL: "rediss://127.0.0.1:6380"}
	if code, out, errOut := run(t, tlsStore, "check"); code != 0 || !strings.Contains(out, "store: redis (rediss://127.0.0.1:6380), TLS") {
		t.Errorf("check with store.tls and FLOODGATE_REDIS_URL=rediss://: exit %d, %q %q; want 0 and the store on TLS", code, out, errOut)
	}
	// A file of type redis whose URL is the environment's, as a
	// deployment that keeps the URL in a secret writes it.
	typeOnly := map[string]string{cli.EnvConfig: writeFile(t, "f.yaml", "store:\n  type: redis\n"), cli.EnvRedisURL: "redis://127.0.0.1:6380"}
	if code, out, errOut := run(t, typeOnly, "check"); code != 0 || !strings.Contains(out, "store: redis (redis://127.0.0.1:6380)") {
		t.Errorf("check with store.type redis and FLOODGATE_REDIS_URL: exit %d, %q %q; want 0 and the variable's store", code, out, errOut)
	}
	// The sentinels' password from the environment.
	sentinels := map[string]string{cli.EnvRedisSentinel: "m@127.0.0.1:26379", cli.EnvSentinelPassword: "sentinel-secret"}
	if code, out, errOut := run(t, sentinels, "check"); code != 0 || !strings.Contains(out, "store: redis-sentinel (m@127.0.0.1:26379), the sentinels' password set,") || strings.Contains(out+errOut, "sentinel-secret") {
		t.Errorf("check with FLOODGATE_REDIS_SENTINEL_PASSWORD: exit %d, %q %q; want 0 and the password said set, not shown", code, out, errOut)
	}
	// Peeks from the replicas, set in the file for the variable's store.
	replicas := map[string]string{cli.EnvConfig: writeFile(t, "f.yaml", "store:\n  read_from_replicas: true\n"), cli.EnvRedisSentinel: "m@127.0.0.1:26379"}
	if code, out, errOut := run(t, replicas, "check"); code != 0 || !strings.Contains(out, "store: redis-sentinel (m@127.0.0.1:26379), peeks from the replicas too,") {
		t.Errorf("check with store.read_from_replicas behind FLOODGATE_REDIS_SENTINEL: exit %d, %q %q; want 0 and the replica reads said", code, out, errOut)
	}
	f := newTLSFiles(t)
	conf := writeFile(t, "f.yaml", fmt.Sprintf("admin:\n  allow_loopback: true\nlisten:\n  grpc_tls: {cert: %s, key: %s, client_ca: %s}\n", f.cert, f.key, f.caFile))
	code, out, errOut := run(t, nil, "check", conf)
	for _, want := range []string{"listen: http 127.0.0.1:8080 (TLS off), grpc 127.0.0.1:8081 (TLS mtls), at most 4096 connections each",
		"admin: no token: admin endpoints answer loopback callers", "client authentication: client certificates"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("check: exit %d, output lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
}

// raiseFileLimit raises the soft limit on open files to the hard one and
// returns it.
func raiseFileLimit(t testing.TB) uint64 {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Logf("raising the open files limit: %v", err)
			syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		}
	}
	return lim.Cur
}

// flood opens n connections to addr that send nothing, from 64 dialers,
// and returns them (closed when the test ends).
func flood(t testing.TB, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []error
	next := make(chan int)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 30 * time.Second}
			for i := range next {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
					continue
				}
				conns[i] = c
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	if len(failed) > n/100 {
		t.Fatalf("%d of %d idle connections failed to dial: %v", len(failed), n, failed[0])
	}
	return conns
}

// TestIdleFlood: 5,000 idle connections to each listener (more than its
// cap of 1,000) leave each listener at most at its cap, and a normal
// client — a new connection, as a health probe makes — is still answered
// on both. (The time it takes is measured by BenchmarkIdleFlood, not
// asserted here.)
func TestIdleFlood(t *testing.T) {
	const cap = 1000
	n := 5000
	if lim := raiseFileLimit(t); lim < uint64(2*n+2*cap+1024) {
		n = int(lim-uint64(2*cap)-1024) / 2
		t.Logf("open files limited to %d: %d idle connections per listener instead of 5,000", lim, n)
	}
	conf := writeFile(t, "floodgate.yaml", fmt.Sprintf("policies:\n  api: \"gcra 10/1s\"\nlimits:\n  max_connections: %d\n  read_header_timeout: 5m\n  read_timeout: 5m\n", cap))
	s := startServe(t, nil, "--config", conf)
	start := time.Now()
	flood(t, s.http, n)
	flood(t, s.grpc, n)
	t.Logf("%d idle connections to each listener in %s", n, time.Since(start).Round(time.Millisecond))

	// A normal client on each listener, on a new connection.
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 60 * time.Second}
	res, err := probe.Get("http://" + s.http + "/healthz")
	if err != nil {
		t.Fatalf("HTTP /healthz during the flood: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("HTTP /healthz during the flood: %d", res.StatusCode)
	}
	conn := grpcDial(t, s.grpc, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("gRPC health during the flood: %v", err)
	}
	if resp, err := shouldRateLimit(conn); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("gRPC ShouldRateLimit during the flood: %v %v", resp, err)
	}

	m := scrape(t, probe, "http://"+s.http)
	for _, l := range []string{"http", "grpc"} {
		open := metric(m, `floodgate_connections_open{listener="`+l+`"}`)
		evicted := metric(m, `floodgate_connections_evicted_total{listener="`+l+`"}`)
		refusedN := metric(m, `floodgate_connections_refused_total{listener="`+l+`"}`)
		t.Logf("%s: open %v (cap %d), evicted %v, refused %v", l, open, cap, evicted, refusedN)
		if open < 1 || open > cap {
			t.Errorf("%s listener: %v connections open, cap %d", l, open, cap)
		}
		if evicted+refusedN < float64(n-cap) {
			t.Errorf("%s listener: %v evicted and %v refused of %d over the cap", l, evicted, refusedN, n-cap)
		}
	}
}

// closedAt reads c in the background until the server closes it and
// sends when it saw the close, or the zero time if c was still open at
// limit.
func closedAt(c net.Conn, limit time.Time) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		c.SetReadDeadline(limit)
		_, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			ch <- time.Time{}
			return
		}
		ch <- time.Now()
	}()
	return ch
}

// The timeouts the listeners fall back on (config.DefaultReadHeaderTimeout
// for HTTP's header and gRPC's preface, config.DefaultReadTimeout) are what
// the tests below tell the configured values from. The read_header_timeout
// they configure is above its default, so that no stall can fail them: the
// server cannot close the connection before the configured 12 s, so a close
// seen before 11 s (with the default's 10 s, on an idle machine) is the
// default's, however late a loaded machine sees it; the close itself is
// waited for 30 s more, a hang's bound. A timeout configured below the
// default would need a bound on how soon the close is seen, which a
// goroutine stalled for seconds can miss.
const (
	configuredHeaderTimeout = 12 * time.Second
	defaultHeaderClose      = 11 * time.Second // the default's 10 s, and a second
)

// wantHeaderTimeout checks that a connection opened at start was closed by
// the configured read_header_timeout (configuredHeaderTimeout): not before
// the default would have closed it, and not never.
func wantHeaderTimeout(t *testing.T, what string, start time.Time, closed <-chan time.Time) {
	t.Helper()
	at := <-closed
	switch {
	case at.IsZero():
		t.Errorf("%s: the connection was still open %v after it was opened", what, configuredHeaderTimeout+30*time.Second)
	case at.Before(start.Add(defaultHeaderClose)):
		t.Errorf("%s: the connection was closed after %v, before the configured %v: the default's timeout",
			what, at.Sub(start).Round(time.Millisecond), configuredHeaderTimeout)
	}
}

// TestHTTPServerBounds: the HTTP listener enforces limits.max_header_bytes
// (431), read_header_timeout, read_timeout and idle_timeout (the
// connection is closed). read_header_timeout is configured above its
// default (see configuredHeaderTimeout); read_timeout and idle_timeout far
// below theirs, and the close is waited for far longer than they take
// (a hang's bound) yet well short of the default.
func TestHTTPServerBounds(t *testing.T) {
	t.Parallel() // it waits some 12 s for read_header_timeout
	conf := writeFile(t, "floodgate.yaml", `policies:
  api: "gcra 10/1s"
limits:
  max_header_bytes: 4096
  read_header_timeout: 12s
  read_timeout: 12s
  idle_timeout: 1s
`)
	s := startServe(t, nil, "--config", conf)
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", s.http)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// A header that never ends: closed by read_header_timeout (12 s), not
	// by the default's 10 s.
	headerStart := time.Now()
	c := dial()
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	headerClosed := closedAt(c, headerStart.Add(configuredHeaderTimeout+30*time.Second))

	// A body that never comes: closed by read_timeout (12 s) within 25 s,
	// 13 s above it for a loaded machine and 5 s short of the default's
	// 30 s.
	bodyStart := time.Now()
	c = dial()
	fmt.Fprint(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	bodyClosed := closedAt(c, bodyStart.Add(25*time.Second))

	// A header over max_header_bytes: 431.
	req, _ := http.NewRequest("GET", "http://"+s.http+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 8192))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a header of 8 KiB: %d, want 431", res.StatusCode)
	}

	// An idle keep-alive connection.
	c = dial()
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("keep-alive request: %d", res.StatusCode)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := br.ReadByte(); err == nil {
		t.Error("idle_timeout: the server sent something on an idle connection")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("idle_timeout: the connection was still open after a minute")
	}

	wantHeaderTimeout(t, "read_header_timeout", headerStart, headerClosed)
	if at := <-bodyClosed; at.IsZero() {
		t.Errorf("read_timeout: the connection was still open after 25s")
	}
}

// h2conn is a raw HTTP/2 client connection: what a hostile client sends,
// which a gRPC library would refuse to.
type h2conn struct {
	c  net.Conn
	fr *http2.Framer
}

// dialH2 connects to a gRPC listener in clear and sends the client
// preface and empty settings.
func dialH2(t *testing.T, addr string) *h2conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &h2conn{c: c, fr: fr}
}

// next reads frames until keep says one is the one looked for (and
// returns it), the connection ends (nil), or d passes (the test fails).
func (h *h2conn) next(t *testing.T, d time.Duration, keep func(http2.Frame) bool) http2.Frame {
	t.Helper()
	h.c.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("nothing after %s", d)
			}
			return nil
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			h.fr.WriteSettingsAck()
		}
		if keep(f) {
			return f
		}
	}
}

// TestGRPCServerBounds: the gRPC listener advertises and enforces its
// bounds: SETTINGS_MAX_CONCURRENT_STREAMS and MAX_HEADER_LIST_SIZE from
// the limits section; a client pinging more often than
// keepalive_min_time is sent away (GOAWAY ENHANCE_YOUR_CALM); a
// connection without calls is closed after idle_timeout (GOAWAY), and one
// that never says its preface after read_header_timeout. As for HTTP,
// read_header_timeout is configured above its default (see
// configuredHeaderTimeout), idle_timeout far below its default and waited
// for at most half the default.
func TestGRPCServerBounds(t *testing.T) {
	t.Parallel() // it waits some 12 s for read_header_timeout
	// Two services: the pings' connection would be closed for idling
	// (GOAWAY NO_ERROR) before its pings if the test stalled for longer
	// than a short idle_timeout, so the service it pings has a long one.
	conf := writeFile(t, "floodgate.yaml", `policies:
  api: "gcra 10/1s"
limits:
  max_header_bytes: 8192
  max_concurrent_streams: 7
  idle_timeout: 1h
  keepalive_min_time: 1m
`)
	s := startServe(t, nil, "--config", conf)
	idleConf := writeFile(t, "floodgate.yaml", `policies:
  api: "gcra 10/1s"
limits:
  read_header_timeout: 12s
  idle_timeout: 1s
`)
	idle := startServe(t, nil, "--config", idleConf)

	// No preface at all: closed after read_header_timeout (12 s), not the
	// default's 10 s (gRPC's own default handshake deadline is 2m).
	prefaceStart := time.Now()
	c, err := net.Dial("tcp", idle.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prefaceClosed := closedAt(c, prefaceStart.Add(configuredHeaderTimeout+30*time.Second))

	h := dialH2(t, s.grpc)
	f := h.next(t, 30*time.Second, func(f http2.Frame) bool { // 30 s: a hang's bound
		sf, ok := f.(*http2.SettingsFrame)
		return ok && !sf.IsAck()
	})
	settings := f.(*http2.SettingsFrame)
	if v, ok := settings.Value(http2.SettingMaxConcurrentStreams); !ok || v != 7 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d (%v), want 7", v, ok)
	}
	if v, ok := settings.Value(http2.SettingMaxHeaderListSize); !ok || v != 8192 {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d (%v), want 8192", v, ok)
	}
	// Pings every few milliseconds, without a call.
	for i := 0; i < 5; i++ {
		if err := h.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // sent away already
		}
		time.Sleep(5 * time.Millisecond)
	}
	goaway := h.next(t, 30*time.Second, func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if g, ok := goaway.(*http2.GoAwayFrame); !ok || g.ErrCode != http2.ErrCodeEnhanceYourCalm || string(g.DebugData()) != "too_many_pings" {
		t.Errorf("after pings too often: %v, want GOAWAY ENHANCE_YOUR_CALM too_many_pings", goaway)
	}

	// An idle connection: GOAWAY after idle_timeout (the default is 2m).
	h = dialH2(t, idle.grpc)
	if f := h.next(t, time.Minute, func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }); f == nil {
		t.Error("an idle connection was closed without GOAWAY")
	}

	wantHeaderTimeout(t, "a connection without a preface", prefaceStart, prefaceClosed)
}

// TestMetadataBomb: a call whose metadata is far over max_header_bytes is
// refused (the stream is reset) before any handler runs, however the
// client ignores the limit the server advertises; the listener goes on
// answering.
func TestMetadataBomb(t *testing.T) {
	s := startServe(t, nil)
	h := dialH2(t, s.grpc)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName},
		{Name: ":authority", Value: "floodgate"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		enc.WriteField(hf)
	}
	value := strings.Repeat("b", 16<<10)
	for i := 0; i < 256; i++ { // 4 MiB of metadata, in distinct fields (hpack cannot compress them away)
		enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-bomb-%d", i), Value: value, Sensitive: true})
	}
	data := block.Bytes()
	const chunk = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: data[:chunk], EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	sent := chunk
	for sent < len(data) {
		end := min(sent+chunk, len(data))
		if err := h.fr.WriteContinuation(1, end == len(data), data[sent:end]); err != nil {
			break // the server may close first
		}
		sent = end
	}
	f := h.next(t, 30*time.Second, func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return true
		case *http2.MetaHeadersFrame:
			return f.StreamID == 1
		}
		return false
	})
	t.Logf("%d bytes of metadata sent of %d; the server answered %v", sent, len(data), f)
	switch f := f.(type) {
	case nil: // the connection was closed
	case *http2.RSTStreamFrame, *http2.GoAwayFrame:
	case *http2.MetaHeadersFrame:
		if st := f.PseudoValue("status"); st == "200" && headerValue(f, "grpc-status") == "0" {
			t.Errorf("the bomb was answered OK: %v", f.Fields)
		}
	}
	m := scrape(t, http.DefaultClient, "http://"+s.http)
	if got := metric(m, `floodgate_requests_total{code="OK",endpoint="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",transport="grpc"}`); got > 0 {
		t.Errorf("the bomb reached the handler: %v calls", got)
	}
	// The listener still answers a normal call.
	if resp, err := shouldRateLimit(grpcDial(t, s.grpc, nil)); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("a normal call after the bomb: %v %v", resp, err)
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}
