package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/internal/cli"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// run runs the command line with the environment env and returns its exit
// status and outputs.
func run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut syncBuffer
	code = cli.Run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

func writeFile(t testing.TB, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // in stdout
	}{
		{[]string{"help"}, []string{"serve", "check", "allow", "peek", "reset", "keys", "version"}},
		{[]string{"--help"}, []string{"Usage:"}},
		{[]string{"serve", "--help"}, []string{"--config", "--http", "--grpc", "--redis", "--redis-cluster", "--redis-sentinel",
			"--log-format", "--watch", "--drain", "--dashboard", "/dashboard", "(default true)", cli.EnvConfig, cli.EnvRedisPassword, cli.EnvAdminToken, cli.EnvKeySecret}},
		{[]string{"help", "serve"}, []string{"--redis-sentinel"}},
		{[]string{"check", "--help"}, []string{"--config", "file:line"}},
		{[]string{"allow", "--help"}, []string{"--url", "--cost", "3 when denied", cli.EnvURL}},
		{[]string{"peek", "--help"}, []string{"recording nothing"}},
		{[]string{"reset", "--help"}, []string{"--token", cli.EnvAdminToken}},
		{[]string{"keys", "--help"}, []string{"--sort", "--limit"}},
	} {
		code, out, _ := run(t, nil, c.args...)
		if code != 0 {
			t.Errorf("%v: exit %d, want 0", c.args, code)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, w, out)
			}
		}
	}
	if code, out, _ := run(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "floodgate ") {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		code int
		want string // in stderr
	}{
		{nil, nil, 2, "Usage:"},
		{nil, []string{"serv"}, 2, `unknown command "serv"`},
		{nil, []string{"serve", "--nope"}, 2, "floodgate serve: unknown flag --nope\nRun \"floodgate serve --help\" for its flags."},
		{nil, []string{"serve", "--dashbord"}, 2, "unknown flag --dashbord (did you mean --dashboard?)"},
		{nil, []string{"bench", "-concurency", "3"}, 2, "unknown flag --concurency (did you mean --concurrency?)"},
		{nil, []string{"serve", "--http"}, 2, "floodgate serve: flag needs an argument: --http"},
		{nil, []string{"serve", "--watch", "nope"}, 2, `floodgate serve: invalid value "nope" for flag --watch: want a duration such as 2s, 500ms or 1m30s (units ns, us, ms, s, m, h)`},
		{nil, []string{"bench", "--duration=5"}, 2, `invalid value "5" for flag --duration: want a duration such as 2s`},
		{nil, []string{"bench", "-c", "many"}, 2, `invalid value "many" for flag -c: want a whole number such as 10`},
		{nil, []string{"bench", "--rate", "fast"}, 2, `invalid value "fast" for flag --rate: want a number, such as 0.5 or 2`},
		{nil, []string{"serve", "--store-wait=-3s"}, 2, "floodgate serve: --store-wait -3s: a duration is never negative: want one such as 2s or 500ms\nRun \"floodgate serve --help\" for its flags."},
		{nil, []string{"bench", "--duration", "-1m"}, 2, "--duration -1m0s: a duration is never negative"},
		{nil, []string{"bench", "--descriptor", "a=b", "--duration", "-1s"}, 2, "--duration -1s: a duration is never negative"},
		{nil, []string{"bench", "-d", "1m"}, 2, "floodgate bench: unknown flag -d\n"},
		{nil, []string{"peek", "api", "alice", "--timeout", "0s"}, 1, "--timeout 0s: want a positive duration, such as 5s"},
		{nil, []string{"peek", "api", "alice", "--timeout=-1s"}, 2, "--timeout -1s: a duration is never negative"},
		{nil, []string{"serve", "extra"}, 1, `serve takes no arguments, found "extra"`},
		{nil, []string{"serve", "--log-level", "loud"}, 1, `--log-level "loud": want debug, info, warn or error`},
		{nil, []string{"serve", "--log-format", "xml"}, 1, `--log-format "xml": want text or json`},
		{nil, []string{"serve", "--dashboard=maybe"}, 2, `invalid boolean value "maybe" for --dashboard`},
		{nil, []string{"serve", "--redis", "localhost:6379", "--redis-cluster", "a:1"}, 1, "give one of --redis, --redis-cluster and --redis-sentinel"},
		{map[string]string{cli.EnvRedisCluster: "a:1"}, []string{"serve", "--redis", "redis://x:1"}, 1, "give one of"},
		{nil, []string{"serve", "--redis", "http://localhost:6379"}, 1, "--redis"},
		{nil, []string{"serve", "--redis-sentinel", "nomaster"}, 1, `--redis-sentinel "nomaster": want MASTER@host:port,host:port`},
		{map[string]string{cli.EnvKeySecret: "short"}, []string{"serve"}, 1, cli.EnvKeySecret + ": want at least 16 bytes"},
		{nil, []string{"serve", "--config", "/does/not/exist"}, 1, "/does/not/exist"},
		{nil, []string{"allow", "api"}, 1, "allow takes POLICY and KEY"},
		{nil, []string{"keys"}, 1, "keys takes POLICY"},
		{nil, []string{"check", "a", "b"}, 1, "check takes one configuration"},
	} {
		code, _, errOut := run(t, c.env, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v (env %v): exit %d, stderr %q; want exit %d and %q", c.args, c.env, code, errOut, c.code, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	code, out, _ := run(t, nil, "check")
	if code != 0 {
		t.Fatalf("check of the built-in configuration: exit %d", code)
	}
	for _, w := range []string{"<built-in>/floodgate.yaml", "store: memory", "api", "gcra 10/1s burst 20", "Envoy domains (1)", "example", "remote_address"} {
		if !strings.Contains(out, w) {
			t.Errorf("check's output lacks %q:\n%s", w, out)
		}
	}

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "floodgate.yaml"), []byte("policies:\n  api: \"gcra 0/1s\"\nstore:\n  url: redis://u:hunter2@localhost:6379\n  tiemout: 5ms\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hours, requests_per_unit: 1}\n"), 0o644)
	code, out, errOut := run(t, map[string]string{cli.EnvConfig: dir}, "check")
	if code != 1 || out != "" {
		t.Errorf("check of an invalid configuration: exit %d, stdout %q", code, out)
	}
	for _, re := range []string{
		`edge\.yaml:4: descriptors\[0\]\.rate_limit\.unit: invalid rate limit unit "hours"`,
		`floodgate\.yaml:2: policies\.api\S*: `,
		`floodgate\.yaml:5: store\.tiemout: unknown field`,
		`3 problem\(s\): configuration refused`,
	} {
		if !regexp.MustCompile(re).MatchString(errOut) {
			t.Errorf("check's errors lack %s:\n%s", re, errOut)
		}
	}

	// A valid Redis configuration: the password is not printed.
	path := writeFile(t, "ok.yaml", "store:\n  url: redis://u:hunter2@localhost:6379\n")
	code, out, _ = run(t, nil, "check", path)
	if code != 0 || !strings.Contains(out, "redis://u:***@localhost:6379") || strings.Contains(out, "hunter2") {
		t.Errorf("check of a Redis configuration: exit %d\n%s", code, out)
	}
}

// runClient is run for a client command (allow, peek, reserve, ...): it
// adds --timeout 1m after the command's name, so that only a hang fails
// it, not the default 5 s wait for the service on a loaded machine.
func runClient(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return run(t, env, append([]string{args[0], "--timeout", "1m"}, args[1:]...)...)
}

// serving runs serve in-process until the test ends and returns its HTTP
// address.
func serving(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	addr, _ := servingLogs(t, env, args...)
	return addr
}

// servingLogs is serving, with the service's log.
func servingLogs(t *testing.T, env map[string]string, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	errOut := &syncBuffer{}
	done := make(chan int, 1) // holds the exit status for the cleanup when the loop below read it first
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
	re := regexp.MustCompile(`msg="floodgate serving".* http=(\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(errOut.String()); m != nil {
			return m[1], errOut
		}
		select {
		case code := <-done:
			done <- 0 // reported here, not again by the cleanup
			t.Fatalf("serve exited %d:\n%s", code, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("serve did not start:\n%s", errOut.String())
	return "", nil
}

// TestClientCommands runs allow, peek, reset and keys against a service
// started in-process, with the admin token from the environment.
func TestClientCommands(t *testing.T) {
	const token = "0123456789abcdef-token"
	path := writeFile(t, "floodgate.yaml", "policies:\n  two: \"fixed_window 2/1h track\"\n")
	addr := serving(t, map[string]string{cli.EnvAdminToken: token}, "--config", path)
	env := map[string]string{cli.EnvURL: addr}
	admin := map[string]string{cli.EnvURL: "http://" + addr, cli.EnvAdminToken: token}

	for i, want := range []int{0, 0, 3} {
		code, out, errOut := runClient(t, env, "allow", "two", "alice")
		if code != want {
			t.Fatalf("allow #%d: exit %d, want %d\n%s%s", i+1, code, want, out, errOut)
		}
		verdict := "allowed"
		if want == 3 {
			verdict = "denied"
		}
		if !strings.HasPrefix(out, "two: "+verdict) || !strings.Contains(out, "limit=2") {
			t.Errorf("allow #%d printed %q", i+1, out)
		}
	}
	if code, out, _ := runClient(t, env, "peek", "two", "bob", "--cost", "2"); code != 0 || !strings.Contains(out, "remaining=0") {
		t.Errorf("peek of a fresh key at cost 2: exit %d, %q", code, out)
	}
	if code, out, _ := runClient(t, env, "allow", "--cost", "3", "two", "bob"); code != 3 || !strings.Contains(out, "retry_after=never") {
		t.Errorf("allow at a cost above the limit: exit %d, %q", code, out)
	}
	if code, out, errOut := runClient(t, env, "allow", "--cost", "1", "--", "two", "-dash-key"); code != 0 || !strings.HasPrefix(out, "two: allowed") {
		t.Errorf("allow with a key after --: exit %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := runClient(t, env, "allow", "nope", "alice"); code != 1 || !strings.Contains(errOut, "HTTP 404, unknown_policy") {
		t.Errorf("allow of an unknown policy: exit %d, %q", code, errOut)
	}

	// Admin commands: refused without the token (the flag wins over the
	// environment), accepted with it.
	if code, _, errOut := runClient(t, admin, "reset", "--token", "wrong-token-0123456", "two", "alice"); code != 1 || !strings.Contains(errOut, "HTTP 401") {
		t.Errorf("reset with a wrong token: exit %d, %q", code, errOut)
	}
	code, out, errOut := runClient(t, admin, "keys", "two", "--sort", "denied")
	if code != 0 || !regexp.MustCompile(`"alice"\s+3\s+1`).MatchString(out) {
		t.Errorf("keys: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runClient(t, admin, "keys", "two", "--sort", "loudest"); code != 1 || !strings.Contains(errOut, "sort: want requests, denied, last_seen, first_seen or usage") {
		t.Errorf("keys with a bad sort: exit %d, %q", code, errOut)
	}
	if code, out, errOut := runClient(t, admin, "reset", "two", "alice"); code != 0 || strings.Contains(out, "alice") {
		t.Errorf("reset: exit %d, %q %q", code, out, errOut)
	}
	if code, _, _ := runClient(t, env, "allow", "two", "alice"); code != 0 {
		t.Errorf("allow after reset: exit %d, want 0", code)
	}

	// The seeds' event count of 0, where the CLI emulates it: --cost 0
	// peeks (alice's one request stays one). A negative --cost is an
	// error, never a reset nor a refund.
	if code, out, _ := runClient(t, env, "allow", "--cost", "0", "two", "alice"); code != 0 || !strings.Contains(out, "remaining=0") {
		t.Errorf("allow --cost 0 (a peek of 1 with one of 2 used): exit %d, %q", code, out)
	}
	if code, out, _ := runClient(t, env, "allow", "--cost", "0", "two", "alice"); code != 0 || !strings.Contains(out, "remaining=0") {
		t.Errorf("allow --cost 0 again (still a peek): exit %d, %q", code, out)
	}
	for _, e := range []map[string]string{env, admin} {
		if code, _, errOut := runClient(t, e, "allow", "--cost", "-1", "two", "alice"); code != 1 || !strings.Contains(errOut, "--cost -1: a negative cost is never a reset nor a refund") {
			t.Errorf("allow --cost -1: exit %d, %q", code, errOut)
		}
	}
	if code, out, _ := runClient(t, env, "peek", "two", "alice"); code != 0 || !strings.Contains(out, "remaining=0") {
		t.Errorf("peek after allow --cost -1 (nothing reset): exit %d, %q", code, out)
	}

	// reserve and settle: the token printed settles once.
	code, out, errOut = runClient(t, env, "reserve", "two", "carol", "2")
	m := regexp.MustCompile(`(?m)^token: (\S+)$`).FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "granted=2") || !strings.Contains(out, "remaining=0") {
		t.Fatalf("reserve 2: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runClient(t, env, "reserve", "two", "carol", "1"); code != 3 || strings.Contains(out, "token:") {
		t.Errorf("reserve with none left: exit %d, %q", code, out)
	}
	if code, out, errOut := runClient(t, env, "settle", m[1], "1"); code != 0 || !strings.Contains(out, "two: allowed") || !strings.Contains(out, "remaining=0") {
		t.Errorf("settle 1 used of 2: exit %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := runClient(t, env, "settle", m[1], "1"); code != 1 || !strings.Contains(errOut, "already_settled") {
		t.Errorf("second settle: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runClient(t, env, "reserve", "--", "two", "carol", "-4"); code != 1 || !strings.Contains(errOut, "never a refund nor a reset") {
		t.Errorf("reserve -4: exit %d, %q", code, errOut)
	}

	// No service there: a clear message.
	if code, _, errOut := runClient(t, map[string]string{cli.EnvURL: "127.0.0.1:1"}, "allow", "two", "alice"); code != 1 || !strings.Contains(errOut, "cannot reach the service at http://127.0.0.1:1") {
		t.Errorf("allow with no service: exit %d, %q", code, errOut)
	}
}

// TestAddressPrecedence: a flag wins over the environment, which wins over
// the configuration file.
func TestAddressPrecedence(t *testing.T) {
	// An address that cannot be listened on: one this test holds.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	path := writeFile(t, "floodgate.yaml", "listen:\n  http: "+busy+"\n  grpc: 127.0.0.1:0\n")

	// The environment overrides the file's (busy) address.
	var out, errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve", "--config", path}, &out, &errOut, func(k string) string {
			return map[string]string{cli.EnvHTTP: "127.0.0.1:0"}[k]
		})
	}()
	deadline := time.After(20 * time.Second)
	for !strings.Contains(errOut.String(), "floodgate serving") {
		select {
		case code := <-done:
			t.Fatalf("serve exited %d with %s set over the file's address:\n%s", code, cli.EnvHTTP, errOut.String())
		case <-deadline:
			t.Fatalf("serve did not start:\n%s", errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d", code)
	}
	if strings.Contains(errOut.String(), "http="+busy) {
		t.Errorf("serve listened on the file's address:\n%s", errOut.String())
	}

	// The flag wins over the environment: the busy address fails clearly.
	code, _, stderr := run(t, map[string]string{cli.EnvHTTP: "127.0.0.1:0"}, "serve", "--config", path, "--http", busy)
	if code != 1 || !strings.Contains(stderr, "HTTP: ") || !strings.Contains(stderr, "choose another address with --http or "+cli.EnvHTTP) {
		t.Errorf("serve on an address in use: exit %d, %q", code, stderr)
	}
}

// TestServeDashboard: serve has the dashboard and its stats by default,
// with the binary's version; --dashboard=false leaves the page out and
// keeps /v1/stats. /v1/stats is an admin endpoint: the dashboard sends the
// admin token.
func TestServeDashboard(t *testing.T) {
	const token = "dashboard-admin-token-0123"
	fetch := func(url string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Content-Type"), string(body)
	}
	env := map[string]string{cli.EnvAdminToken: token}
	on := "http://" + serving(t, env)
	if code, ctype, body := fetch(on + "/dashboard"); code != 200 || ctype != "text/html; charset=utf-8" || !strings.Contains(body, "dashboard/app.js") {
		t.Errorf("GET /dashboard: %d %q\n%.200s", code, ctype, body)
	}
	code, _, body := fetch(on + "/v1/stats")
	var stats struct {
		Version  string
		Store    struct{ Type string }
		Policies []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(body), &stats); code != 200 || err != nil {
		t.Fatalf("GET /v1/stats: %d %v\n%s", code, err, body)
	}
	if stats.Version != cli.Version() || stats.Store.Type != "memory" || len(stats.Policies) == 0 || stats.Policies[0].Name != "api" {
		t.Errorf("GET /v1/stats: %s", body)
	}
	// The history the dashboard draws is the service's own.
	res, err := http.Post(on+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","key":"k"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	code, _, body = fetch(on + "/v1/stats/history?from=-1m")
	var hist struct {
		Policies []struct {
			Name    string
			Allowed []int64
		}
	}
	if err := json.Unmarshal([]byte(body), &hist); code != 200 || err != nil || len(hist.Policies) == 0 || hist.Policies[0].Name != "api" {
		t.Fatalf("GET /v1/stats/history: %d %v\n%s", code, err, body)
	}
	var allowed int64
	for _, n := range hist.Policies[0].Allowed {
		allowed += n
	}
	if allowed != 1 {
		t.Errorf("GET /v1/stats/history after one check of api: %d allowed\n%s", allowed, body)
	}

	off := "http://" + serving(t, env, "--dashboard=false")
	if code, _, body := fetch(off + "/dashboard"); code != 404 {
		t.Errorf("GET /dashboard with --dashboard=false: %d %s", code, body)
	}
	if code, _, _ := fetch(off + "/v1/stats"); code != 200 {
		t.Errorf("GET /v1/stats with --dashboard=false: %d", code)
	}
}

// TestUsageCommands runs usage (table, sparkline, --json) and keys in
// pages against a service started in-process.
func TestUsageCommands(t *testing.T) {
	const token = "0123456789abcdef-token"
	path := writeFile(t, "floodgate.yaml", "policies:\n  api: \"gcra 100/1s burst 100 track 1m for 1h\"\n  plain: \"fixed_window 2/1h track\"\n")
	addr := serving(t, map[string]string{cli.EnvAdminToken: token}, "--config", path)
	env := map[string]string{cli.EnvURL: addr}
	admin := map[string]string{cli.EnvURL: "http://" + addr, cli.EnvAdminToken: token}
	for i, key := range []string{"a/1", "b", "c", "d", "e"} {
		for range i + 1 {
			if code, _, errOut := runClient(t, env, "allow", "api", key); code != 0 {
				t.Fatalf("allow: exit %d %s", code, errOut)
			}
		}
	}
	code, out, errOut := runClient(t, admin, "usage", "api", "a/1", "--from", "-10m")
	if code != 0 || !strings.Contains(out, `api "a/1" from `) || !strings.Contains(out, "requests  sum 1  mean ") ||
		!strings.Contains(out, "step 1m0s (resolution 1m0s)") || !strings.ContainsAny(out, "█") {
		t.Errorf("usage: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runClient(t, admin, "usage", "api", "e", "--json", "--from", "-5m", "--step", "5m")
	var body struct {
		Policy, Key string
		StepUS      int64 `json:"step_us"`
		Requests    struct{ Sum int64 }
	}
	if err := json.Unmarshal([]byte(out), &body); code != 0 || err != nil || body.Key != "e" || body.StepUS != 300_000_000 || body.Requests.Sum != 5 {
		t.Errorf("usage --json: exit %d, %v\n%s", code, err, out)
	}
	if code, _, errOut := runClient(t, admin, "usage", "api", "e", "--step", "30s"); code != 1 || !strings.Contains(errOut, "step:") || !strings.Contains(errOut, "invalid_step") {
		t.Errorf("usage with a step finer than the resolution: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runClient(t, admin, "usage", "plain", "e"); code != 1 || !strings.Contains(errOut, "no_series") {
		t.Errorf("usage of a policy without a series: exit %d, %q", code, errOut)
	}
	// Two keys a page, then all five, oldest first.
	code, out, errOut = runClient(t, admin, "keys", "api", "--sort", "usage", "--window", "1h", "--limit", "2")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(errOut, "more keys: add --cursor ") || !regexp.MustCompile(`"e"\s+5\s+0\s+5\s+0`).MatchString(out) {
		t.Errorf("keys --limit 2: exit %d\n%s%s", code, out, errOut)
	}
	cursor := strings.TrimSpace(strings.TrimPrefix(errOut, "more keys: add --cursor "))
	code, out, _ = runClient(t, admin, "keys", "api", "--sort", "usage", "--window", "1h", "--cursor", cursor, "--all")
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, `"c"`) || strings.Contains(out, `"e"`) {
		t.Errorf("keys --cursor --all: exit %d\n%s", code, out)
	}
	code, out, _ = runClient(t, admin, "keys", "api", "--sort", "first_seen", "--order", "asc", "--all")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 6 || !strings.HasPrefix(lines[1], `"a/1"`) || !strings.HasPrefix(lines[5], `"e"`) {
		t.Errorf("keys by first_seen asc: exit %d\n%s", code, out)
	}
}
