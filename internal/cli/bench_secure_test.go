package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/internal/redistest"
)

// TestBenchSecuredService: floodgate bench loads a service as it is
// deployed beyond loopback: HTTPS and a client token on the HTTP
// listener, mutual TLS on the gRPC one. Each run is exact; each missing
// or wrong piece fails at once (exit 1) with a message that names the
// flag that supplies it, and the flags of another target are refused.
func TestBenchSecuredService(t *testing.T) {
	t.Parallel()
	f := newTLSFiles(t)
	const token = "bench-client-0123456789"
	dir := t.TempDir()
	tokens := writeFile(t, "clients", "bench "+token+"\n")
	for file, text := range map[string]string{
		"floodgate.yaml": fmt.Sprintf(`policies:
  roomy: "gcra 1000000/1s burst 1000000"
clients:
  tokens_file: %s
listen:
  http_tls: {cert: %s, key: %s}
  grpc_tls: {cert: %s, key: %s, client_ca: %s}
`, tokens, f.cert, f.key, f.cert, f.key, f.caFile),
		"bench.yaml": "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {policy: roomy}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := startServe(t, nil, "--config", dir)
	url := "https://" + s.http
	httpRun := []string{"--target", "http", "--url", url, "--policy-name", "roomy", "-c", "2", "-i", "100"}
	grpcRun := []string{"--target", "grpc", "--addr", s.grpc, "--url", url, "--domain", "bench", "--descriptor", "user", "-c", "2", "-i", "100"}
	withToken := map[string]string{"FLOODGATE_TOKEN": token}

	rep := benchJSON(t, withToken, append(httpRun, "--ca-file", f.caFile)...)
	wantExact(t, rep, "https with FLOODGATE_TOKEN", false)
	if rep.Allowed != 200 {
		t.Errorf("https: allowed %d, want all 200", rep.Allowed)
	}
	rep = benchJSON(t, nil, append(grpcRun, "--grpc-tls", "--ca-file", f.caFile, "--cert-file", f.clientCertFile, "--key-file", f.key2, "--token", token)...)
	wantExact(t, rep, "gRPC over mutual TLS with --token", false)
	if rep.Allowed != 200 {
		t.Errorf("gRPC: allowed %d, want all 200", rep.Allowed)
	}

	wantBenchFailures(t, []string{"--timeout", "10s"}, token, []benchFailure{
		{"https without its CA", withToken, httpRun, 1, []string{"x509", "--ca-file"}},
		{"http:// to the HTTPS listener", withToken, slicesWith(httpRun, "--url", "http://"+s.http), 1, []string{"HTTP 400", "write the URL https://"}},
		{"no token", nil, append(httpRun, "--ca-file", f.caFile), 1, []string{"HTTP 401", "give --token, or set FLOODGATE_TOKEN"}},
		{"a wrong token", nil, append(httpRun, "--ca-file", f.caFile, "--token", "wrong-token-0123456789"), 1, []string{"wrong token", "check --token"}},
		{"a weak token", nil, append(httpRun, "--ca-file", f.caFile, "--token", "abc"), 2, []string{"--token"}},
		{"gRPC in plaintext to its TLS listener", withToken, append(grpcRun, "--ca-file", f.caFile), 1, []string{"add --grpc-tls"}},
		{"gRPC without the client certificate", withToken, append(grpcRun, "--ca-file", f.caFile, "--grpc-tls"), 1, []string{"it wants --cert-file and --key-file"}},
		{"--cert-file alone", withToken, append(grpcRun, "--ca-file", f.caFile, "--grpc-tls", "--cert-file", f.clientCertFile), 2, []string{"--cert-file and --key-file go together"}},
		{"a CA file that is not PEM", withToken, append(httpRun, "--ca-file", tokens), 2, []string{"--ca-file " + tokens + ": no PEM certificate"}},
		{"--grpc-tls with http", withToken, append(httpRun, "--grpc-tls"), 2, []string{"--grpc-tls applies to another target"}},
		{"--ca-file with an http:// URL", withToken, append(slicesWith(httpRun, "--url", "http://"+s.http), "--ca-file", f.caFile), 2, []string{"does not speak: write https://"}},
		{"--ca-file with neither TLS", withToken, append(slicesWith(grpcRun, "--url", "http://"+s.http), "--ca-file", f.caFile), 2, []string{"add --grpc-tls"}},
		{"--token with redis", nil, []string{"-p", "1", "--token", token}, 2, []string{"--token applies to another target"}},
	})
}

// benchFailure is a bench run that must fail: its exit status, and what
// its output must say.
type benchFailure struct {
	what string
	env  map[string]string
	args []string
	code int
	want []string
}

// wantBenchFailures runs bench with common and each case's arguments, and
// fails the test unless each exits with its status and says what it must;
// with secret, unless no output shows it.
func wantBenchFailures(t *testing.T, common []string, secret string, cases []benchFailure) {
	t.Helper()
	for _, c := range cases {
		code, out, errOut := run(t, c.env, append(append([]string{"bench", "--progress", "off"}, common...), c.args...)...)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s%s", c.what, code, c.code, out, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out+errOut, w) {
				t.Errorf("%s: the output lacks %q:\n%s%s", c.what, w, out, errOut)
			}
		}
		if secret != "" && strings.Contains(out+errOut, secret) {
			t.Errorf("%s: the output shows the secret:\n%s%s", c.what, out, errOut)
		}
	}
}

// slicesWith returns a copy of args with the value after flag replaced by
// v.
func slicesWith(args []string, flag, v string) []string {
	out := append([]string(nil), args...)
	for i := range out[:len(out)-1] {
		if out[i] == flag {
			out[i+1] = v
		}
	}
	return out
}

// TestBenchRedisTLS: the redis target, and --redis-stats of a service,
// reach a Redis that speaks only TLS and asks for client certificates
// (tls-auth-clients), with --redis-ca-file, --redis-cert-file and
// --redis-key-file; each run is exact and its Redis figures are read over
// TLS. TLS on one side only, or a missing client certificate, fails at
// once with a message that says which flag to add or drop.
func TestBenchRedisTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	srv := redistest.StartServer(t, redistest.WithTLS(certs, true))
	tlsPort := strconv.Itoa(srv.TLSPort)
	files := []string{"--redis-ca-file", certs.CAFile, "--redis-cert-file", certs.ClientCert, "--redis-key-file", certs.ClientKey}

	rep := benchJSON(t, nil, append([]string{"-p", tlsPort, "-c", "1", "-i", "100", "-t", "1000000"}, files...)...)
	wantExact(t, rep, "the redis target over TLS", false)
	if r := rep.Redis; r == nil || r.Servers != 1 || r.Commands != 4*rep.Decisions {
		t.Errorf("the redis target over TLS: redis %+v, decisions %d: want 1 server and exactly 4 commands a decision", r, rep.Decisions)
	}

	// The TLS files in the configuration, the address from --redis (as a
	// deployment that takes FLOODGATE_REDIS_URL from a secret has it).
	conf := writeFile(t, "floodgate.yaml", fmt.Sprintf(`policies:
  roomy: "gcra 1000000/1s burst 1000000"
store:
  timeout: 1m
  tls: {ca_file: %s, cert_file: %s, key_file: %s}
`, certs.CAFile, certs.ClientCert, certs.ClientKey))
	httpAddr := serving(t, nil, "--config", filepath.Dir(conf), "--redis", "rediss://"+srv.TLSAddr)
	rep = benchJSON(t, nil, append([]string{"--target", "http", "--url", httpAddr, "--policy-name", "roomy", "-c", "2", "-i", "100", "--redis-stats", "-p", tlsPort}, files...)...)
	if r := rep.Redis; r == nil || r.Servers != 1 || rep.Allowed != 200 || rep.Degraded != 0 || r.Commands < rep.Decisions || r.CPU <= 0 {
		t.Errorf("http --redis-stats over TLS: allowed %d, degraded %d, redis %+v: want 200 allowed, none degraded, each at least a command in the service's Redis", rep.Allowed, rep.Degraded, r)
	}

	plainPort := strconv.Itoa(srv.Port)
	// --timeout 20s: each failure must be the one the case is about, not a
	// handshake slower than the timeout on a loaded machine; only the TLS
	// client at the plain port waits for it (3 s), since that server never
	// answers a handshake.
	wantBenchFailures(t, []string{"-i", "1", "--timeout", "20s"}, "", []benchFailure{
		{"plaintext to the TLS port", nil, []string{"-p", tlsPort}, 1, []string{"Redis at 127.0.0.1:" + tlsPort + " speaks TLS: add --redis-tls"}},
		{"TLS to the plain port", nil, append([]string{"-p", plainPort, "--timeout", "3s"}, files...), 1, []string{"Redis at 127.0.0.1:" + plainPort + " answers without TLS: drop --redis-tls"}},
		{"--redis-stats: plaintext to the TLS port", nil, []string{"--target", "http", "--url", httpAddr, "--policy-name", "roomy", "--redis-stats", "-p", tlsPort}, 1, []string{"--redis-stats", "speaks TLS: add --redis-tls"}},
		{"without the client certificate", nil, []string{"-p", tlsPort, "--redis-ca-file", certs.CAFile}, 1, []string{"it wants --redis-cert-file and --redis-key-file"}},
		{"without the CA", nil, []string{"-p", tlsPort, "--redis-tls"}, 1, []string{"x509", "--redis-ca-file"}},
		{"--redis-key-file alone", nil, []string{"-p", tlsPort, "--redis-key-file", certs.ClientKey}, 2, []string{"--redis-cert-file and --redis-key-file go together"}},
		{"--redis-tls=false with a CA", nil, []string{"-p", tlsPort, "--redis-tls=false", "--redis-ca-file", certs.CAFile}, 2, []string{"--redis-tls=false with --redis-ca-file"}},
		{"--redis-tls with http, without --redis-stats", nil, []string{"--target", "http", "--url", httpAddr, "--policy-name", "roomy", "--redis-tls"}, 2, []string{"--redis-tls names the Redis", "add --redis-stats"}},
	})
}

// TestBenchRedisSentinel: the redis target reaches a master behind Redis
// Sentinel (--redis-sentinel), exactly, with that master's figures;
// --redis-stats reads the master of a service on Sentinel; a master name
// the sentinels do not monitor fails at once, naming those they do; a
// malformed or doubled address is a usage error.
func TestBenchRedisSentinel(t *testing.T) {
	t.Parallel()
	sn := redistest.StartSentinel(t)
	at := sn.MasterName + "@" + strings.Join(sn.Addrs, ",")
	rep := benchJSON(t, nil, "--redis-sentinel", at, "-c", "2", "-i", "100", "-t", "1000000")
	wantExact(t, rep, "the redis target behind sentinels", false)
	// The sentinels and the replica talk to the master too: at least the
	// function's 4 commands a decision.
	if r := rep.Redis; r == nil || r.Servers != 1 || rep.Allowed != 200 || r.Commands < 4*rep.Decisions {
		t.Errorf("the redis target behind sentinels: allowed %d, redis %+v: want 200 allowed, 1 server, at least 4 commands a decision", rep.Allowed, r)
	}

	conf := writeFile(t, "floodgate.yaml", "policies:\n  roomy: \"gcra 1000000/1s burst 1000000\"\n"+slowStore)
	httpAddr := serving(t, nil, "--config", filepath.Dir(conf), "--redis-sentinel", at)
	rep = benchJSON(t, nil, "--target", "http", "--url", httpAddr, "--policy-name", "roomy", "-c", "2", "-i", "100", "--redis-stats", "--redis-sentinel", at)
	if r := rep.Redis; r == nil || r.Servers != 1 || rep.Allowed != 200 || rep.Degraded != 0 || r.Commands < rep.Decisions {
		t.Errorf("http --redis-stats behind sentinels: allowed %d, degraded %d, redis %+v: want 200 allowed, none degraded, each at least a command in the master", rep.Allowed, rep.Degraded, r)
	}

	wantBenchFailures(t, []string{"-i", "1", "--timeout", "3s"}, "", []benchFailure{
		{"a master the sentinels do not monitor", nil, []string{"--redis-sentinel", "nosuch@" + strings.Join(sn.Addrs, ",")}, 1,
			[]string{"--redis-sentinel", `none monitors a master named "nosuch" (they monitor "` + sn.MasterName + `")`}},
		{"no master name", nil, []string{"--redis-sentinel", strings.Join(sn.Addrs, ",")}, 2, []string{"want MASTER@host:port,host:port"}},
		{"with --redis-cluster", nil, []string{"--redis-sentinel", at, "--redis-cluster", sn.Addrs[0]}, 2, []string{"give --redis-cluster or --redis-sentinel, not both"}},
		{"with --port", nil, []string{"--redis-sentinel", at, "-p", "6379"}, 2, []string{"give --redis-sentinel, or --host and --port, not both"}},
	})
}

// TestBenchSentinelAuth: behind sentinels that ask for credentials of
// their own (an ACL user here) and a master that asks for a password, the
// redis target is exact with both given; each one missing or wrong is
// named by its flag, and no output shows a password.
func TestBenchSentinelAuth(t *testing.T) {
	t.Parallel()
	sn := redistest.StartSentinel(t, redistest.WithMasterAuth("", "master-secret"), redistest.WithSentinelAuth("watcher", "sentinel-secret"))
	at := sn.MasterName + "@" + strings.Join(sn.Addrs, ",")
	both := []string{"--redis-sentinel", at, "-P", "master-secret", "--sentinel-user", "watcher", "--sentinel-password", "sentinel-secret"}
	rep := benchJSON(t, nil, append(both, "-c", "2", "-i", "50", "-t", "1000000")...)
	wantExact(t, rep, "the redis target behind sentinels with passwords", false)
	if rep.Allowed != 100 || rep.Redis == nil || rep.Redis.Servers != 1 {
		t.Errorf("behind sentinels with passwords: allowed %d, redis %+v: want 100 allowed, 1 server", rep.Allowed, rep.Redis)
	}
	wantBenchFailures(t, []string{"-i", "1", "--timeout", "3s"}, "-secret", []benchFailure{
		{"no sentinel credentials", nil, []string{"--redis-sentinel", at, "-P", "master-secret"}, 1,
			[]string{"the sentinels " + strings.Join(sn.Addrs, ","), "ask for a password (NOAUTH", "give theirs with --sentinel-password, and --sentinel-user for an ACL user of theirs (--password is the master's)"}},
		{"a wrong sentinel password", nil, slicesWith(both, "--sentinel-password", "wrong-secret"), 1,
			[]string{"refused the credentials given (WRONGPASS", "check --sentinel-user and --sentinel-password"}},
		{"no master password", nil, []string{"--redis-sentinel", at, "--sentinel-user", "watcher", "--sentinel-password", "sentinel-secret"}, 1,
			[]string{"requires authentication (NOAUTH", "give --user and --password"}},
		{"a master the sentinels do not monitor", nil, slicesWith(both, "--redis-sentinel", "nosuch@"+strings.Join(sn.Addrs, ",")), 1,
			[]string{`none monitors a master named "nosuch"`}},
		{"a sentinel password without sentinels", nil, []string{"--sentinel-password", "sentinel-secret"}, 2,
			[]string{"--sentinel-user and --sentinel-password are the sentinels' own: give them with --redis-sentinel"}},
		{"a sentinel user without a password", nil, []string{"--redis-sentinel", at, "--sentinel-user", "watcher"}, 2,
			[]string{`--sentinel-user "watcher" needs --sentinel-password`}},
	})
}

// TestBenchRedisAddressesAsServe: --redis-sentinel and --redis-cluster
// take addresses written as serve takes them, rediss://host:port turning
// TLS on, so that serve's FLOODGATE_REDIS_SENTINEL works as it is.
func TestBenchRedisAddressesAsServe(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	sn := redistest.StartSentinel(t, redistest.WithSentinelTLS(certs))
	var tlsAddrs []string
	for _, a := range sn.TLSAddrs {
		tlsAddrs = append(tlsAddrs, "rediss://"+a)
	}
	at := sn.MasterName + "@" + strings.Join(tlsAddrs, ",")
	rep := benchJSON(t, nil, "--redis-sentinel", at, "--redis-ca-file", certs.CAFile, "-c", "2", "-i", "50", "-t", "1000000")
	wantExact(t, rep, "the redis target behind sentinels written rediss://", false)
	if rep.Allowed != 100 || rep.Redis == nil || rep.Redis.Servers != 1 {
		t.Errorf("behind sentinels written rediss://: allowed %d, redis %+v: want 100 allowed, 1 server", rep.Allowed, rep.Redis)
	}
	wantBenchFailures(t, []string{"-i", "1", "--timeout", "20s"}, "", []benchFailure{
		{"rediss:// without the CA", nil, []string{"--redis-sentinel", at}, 1, []string{"x509", "--redis-ca-file"}},
		{"rediss:// with --redis-tls=false", nil, []string{"--redis-sentinel", at, "--redis-tls=false"}, 2,
			[]string{"--redis-tls=false with rediss:// addresses"}},
		{"rediss:// and plain mixed", nil, []string{"--redis-sentinel", sn.MasterName + "@" + tlsAddrs[0] + "," + sn.Addrs[1]}, 2,
			[]string{"--redis-sentinel", "give every address rediss:// (TLS) or none"}},
		{"a cluster's seed of another scheme", nil, []string{"--redis-cluster", "http://127.0.0.1:7000"}, 2,
			[]string{"--redis-cluster", `want host:port, redis://host:port or rediss://host:port (TLS), found "http://127.0.0.1:7000"`}},
	})
	wantBenchFailures(t, []string{"-i", "1"}, "hunter2", []benchFailure{
		{"a password in a sentinel's address", nil, []string{"--redis-sentinel", "m@rediss://:hunter2@127.0.0.1:26379"}, 2,
			[]string{"--redis-sentinel: credentials do not go in the sentinels' addresses: give the sentinels' with --sentinel-user and --sentinel-password"}},
		{"a password in a seed's address", nil, []string{"--redis-cluster", "rediss://u:hunter2@127.0.0.1:7000"}, 2,
			[]string{"--redis-cluster: credentials do not go in the addresses: give them with --user and --password"}},
	})
}

// TestBenchRedisServerName: a Redis whose certificate names another host
// than the one dialed verifies with --redis-server-name, and without it
// the failure names the flag; the flag without TLS is a usage error.
func TestBenchRedisServerName(t *testing.T) {
	t.Parallel()
	named := redistest.NewCertsNamed(t, "redis.internal")
	srv := redistest.StartServer(t, redistest.WithTLS(named, false))
	tlsPort := strconv.Itoa(srv.TLSPort)
	rep := benchJSON(t, nil, "-p", tlsPort, "--redis-ca-file", named.CAFile, "--redis-server-name", "redis.internal", "-c", "1", "-i", "50", "-t", "1000000")
	wantExact(t, rep, "the redis target with --redis-server-name", false)
	if rep.Allowed != 50 {
		t.Errorf("with --redis-server-name: allowed %d, want 50", rep.Allowed)
	}
	wantBenchFailures(t, []string{"-i", "1", "--timeout", "20s"}, "", []benchFailure{
		{"without --redis-server-name", nil, []string{"-p", tlsPort, "--redis-ca-file", named.CAFile}, 1,
			[]string{"names another host than the one dialed", "--redis-server-name"}},
		{"another name", nil, []string{"-p", tlsPort, "--redis-ca-file", named.CAFile, "--redis-server-name", "cache.internal"}, 1,
			[]string{"certificate is valid for redis.internal, not cache.internal", "--redis-server-name"}},
		{"without TLS", nil, []string{"-p", tlsPort, "--redis-server-name", "redis.internal"}, 2,
			[]string{`--redis-server-name "redis.internal" is the name in Redis's TLS certificate: add --redis-tls`}},
	})
}
