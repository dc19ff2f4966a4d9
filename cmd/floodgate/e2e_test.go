package main_test

// End-to-end tests of the floodgate binary: each test builds nothing
// itself (TestMain builds the binary once), starts real processes on free
// loopback ports, talks to them over HTTP and gRPC, and stops them with
// SIGTERM.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgatehq/floodgate/internal/redistest"
)

// binary is the floodgate binary TestMain builds.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "floodgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "floodgate")
	goTool := "go"
	if root := os.Getenv("GOROOT"); root != "" {
		goTool = filepath.Join(root, "bin", "go")
	}
	if out, err := exec.Command(goTool, "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building floodgate: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one running "floodgate serve".
type server struct {
	t          *testing.T
	cmd        *exec.Cmd
	http, grpc string // the addresses it listens on, from its first log line
	logs       *logBuffer
	exited     chan struct{}
	waitErr    error
}

// logBuffer collects a process's stderr and lets a test wait for a line.
type logBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	grew  chan struct{} // closed and replaced whenever buf grows
	ended bool
}

func newLogBuffer() *logBuffer { return &logBuffer{grew: make(chan struct{})} }

func (l *logBuffer) add(line string) {
	l.mu.Lock()
	l.buf.WriteString(line)
	l.buf.WriteByte('\n')
	close(l.grew)
	l.grew = make(chan struct{})
	l.mu.Unlock()
}

func (l *logBuffer) end() {
	l.mu.Lock()
	l.ended = true
	close(l.grew)
	l.grew = make(chan struct{})
	l.mu.Unlock()
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits up to d for a log line matching re, starting at byte
// offset from, and returns its submatches and the offset after it.
func (l *logBuffer) waitFor(re *regexp.Regexp, from int, d time.Duration) ([]string, int, bool) {
	deadline := time.After(d)
	for {
		l.mu.Lock()
		text := l.buf.String()[from:]
		grew, ended := l.grew, l.ended
		l.mu.Unlock()
		if loc := re.FindStringSubmatchIndex(text); loc != nil {
			m := make([]string, len(loc)/2)
			for i := range m {
				if loc[2*i] >= 0 {
					m[i] = text[loc[2*i]:loc[2*i+1]]
				}
			}
			return m, from + loc[1], true
		}
		if ended {
			return nil, from, false
		}
		select {
		case <-grew:
		case <-deadline:
			return nil, from, false
		}
	}
}

func (l *logBuffer) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

var servingLine = regexp.MustCompile(`msg="floodgate serving".* http=(\S+) grpc=(\S+)|"msg":"floodgate serving".*"http":"([^"]+)","grpc":"([^"]+)"`)

// cleanEnv is the environment of a started server: the test's own minus
// floodgate's variables, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOODGATE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// start runs the binary with args and waits until it serves.
func start(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	s := &server{t: t, logs: newLogBuffer(), exited: make(chan struct{})}
	s.cmd = exec.Command(binary, args...)
	s.cmd.Env = env
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = io.Discard
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.logs.add(sc.Text())
		}
		s.waitErr = s.cmd.Wait()
		s.logs.end()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("floodgate %s log:\n%s", strings.Join(args, " "), s.logs)
		}
	})
	m, _, ok := s.logs.waitFor(servingLine, 0, 60*time.Second)
	if !ok {
		t.Fatalf("floodgate %s did not start serving:\n%s", strings.Join(args, " "), s.logs)
	}
	s.http, s.grpc = m[1], m[2]
	if s.http == "" { // --log-format json
		s.http, s.grpc = m[3], m[4]
	}
	return s
}

// stop sends SIGTERM and checks the process exits 0 after logging that it
// stopped.
func (s *server) stop() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("floodgate did not exit within 30s of SIGTERM")
	}
	if s.waitErr != nil {
		s.t.Errorf("floodgate exited with %v after SIGTERM, want status 0", s.waitErr)
	}
	if logs := s.logs.String(); !strings.Contains(logs, `msg=stopped`) && !strings.Contains(logs, `"msg":"stopped"`) {
		s.t.Errorf("floodgate's log does not say it stopped")
	}
}

var client = &http.Client{Timeout: 30 * time.Second}

// checkReply is the part of a /v1/check answer the tests read.
type checkReply struct {
	Allowed   bool `json:"allowed"`
	Decisions []struct {
		Policy     string `json:"policy"`
		Allowed    bool   `json:"allowed"`
		Limit      int64  `json:"limit"`
		Remaining  int64  `json:"remaining"`
		RetryAfter int64  `json:"retry_after_us"`
		Degraded   bool   `json:"degraded"`
	} `json:"decisions"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// post sends body as curl -d would (a form Content-Type) and decodes the
// JSON reply.
func post(addr, path, body string) (*http.Response, checkReply, error) {
	var r checkReply
	resp, err := client.Post("http://"+addr+path, "application/x-www-form-urlencoded", strings.NewReader(body))
	if err != nil {
		return nil, r, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return resp, r, fmt.Errorf("%s %s: %d reply is not JSON: %v: %q", http.MethodPost, path, resp.StatusCode, err, data)
	}
	return resp, r, nil
}

func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// portFree says whether addr can be listened on now.
func portFree(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// TestFirstCommand is the README's first command: serve with no flags, no
// configuration and no Redis, asked with curl -d, then stopped with
// SIGTERM.
func TestFirstCommand(t *testing.T) {
	const secretKey = "e2e-key-that-must-not-be-logged"
	// With no flags at all when the documented default ports are free;
	// otherwise the same run on ports the kernel picks.
	var args []string
	if portFree("127.0.0.1:8080") && portFree("127.0.0.1:8081") {
		args = []string{"serve", "--log-level", "debug"}
	} else {
		t.Log("127.0.0.1:8080 or :8081 is taken; serving on ports the kernel picks")
		args = []string{"serve", "--log-level", "debug", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}
	}
	s := start(t, cleanEnv(), args...)
	if len(args) == 3 && (s.http != "127.0.0.1:8080" || s.grpc != "127.0.0.1:8081") {
		t.Errorf("default addresses: HTTP %s, gRPC %s; want 127.0.0.1:8080 and 127.0.0.1:8081", s.http, s.grpc)
	}
	hint := regexp.MustCompile(`try it: curl -d '(\{[^']*\})' http://(\S+)/v1/check`)
	m, _, ok := s.logs.waitFor(hint, 0, 30*time.Second) // 30 s: only a hang's bound
	if !ok {
		t.Fatalf("no log line says how to try the service with curl:\n%s", s.logs)
	}
	if m[2] != s.http {
		t.Errorf("the curl hint names %s, the service listens on %s", m[2], s.http)
	}
	// The hint's own command works.
	resp, r, err := post(s.http, "/v1/check", m[1])
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !r.Allowed || len(r.Decisions) != 1 {
		t.Fatalf("the hint's request: %d %+v, want 200 and one allowed decision", resp.StatusCode, r)
	}

	// The built-in "api" policy: gcra 10/1s burst 20. The first 20 are
	// allowed whatever the timing; a denial follows within a few more,
	// once the requests outrun the rate. They are sent until then, for up
	// to a minute: a loaded machine's stalls refill the burst, so no count
	// of requests is sure to outrun it; a minute only bounds a hang.
	body := `{"policy":"api","key":"` + secretKey + `"}`
	var denied *http.Response
	began := time.Now()
	for i := 0; denied == nil && time.Since(began) < time.Minute; i++ {
		resp, r, err := post(s.http, "/v1/check", body)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case resp.StatusCode == http.StatusOK && r.Allowed:
			if r.Decisions[0].Limit != 10 { // gcra reports the count of its rate
				t.Fatalf("request %d: limit %d, want 10", i+1, r.Decisions[0].Limit)
			}
			if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
				t.Fatalf("request %d: no RateLimit or RateLimit-Policy header: %v", i+1, resp.Header)
			}
		case resp.StatusCode == http.StatusTooManyRequests && !r.Allowed:
			if i < 20 {
				t.Fatalf("request %d denied; the first 20 fit the burst", i+1)
			}
			denied = resp
		default:
			t.Fatalf("request %d: %d %+v", i+1, resp.StatusCode, r)
		}
	}
	if denied == nil {
		t.Fatal("a minute of requests one after another to gcra 10/1s burst 20 were all allowed")
	}
	if ra := denied.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("a denial's Retry-After is %q, want a positive number of seconds", ra)
	}

	// Envoy's API on the built-in domain "example" (10 per second per
	// remote_address): 11 hits at once are over, 1 on another value is
	// OK with 9 left.
	cc := dialGRPC(t, s.grpc)
	rls := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	over, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "example", HitsAddend: 11, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "10.0.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if over.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("11 hits on 10/s: %v, want OVER_LIMIT", over.OverallCode)
	}
	ok1, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "example", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "10.0.0.2")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok1.OverallCode != rlsv3.RateLimitResponse_OK || len(ok1.Statuses) != 1 ||
		ok1.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 || ok1.Statuses[0].LimitRemaining != 9 {
		t.Errorf("1 hit on a fresh value: %v", ok1)
	}
	hc, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health: %v, %v; want SERVING", hc, err)
	}

	for path, want := range map[string]string{
		"/healthz":     "",
		"/readyz":      "",
		"/v1/policies": `"api"`,
		"/metrics":     `floodgate_decisions_total{policy="api",verdict="denied"}`,
	} {
		code, text := get(t, s.http, path)
		if code != http.StatusOK || !strings.Contains(text, want) {
			t.Errorf("GET %s: %d, want 200 with %q in:\n%.2000s", path, code, want, text)
		}
	}

	s.stop()
	if strings.Contains(s.logs.String(), secretKey) {
		t.Errorf("the log shows a raw key:\n%s", s.logs)
	}
	if _, err := client.Get("http://" + s.http + "/healthz"); err == nil {
		t.Errorf("the HTTP port still answers after the process exited")
	}
}

// writeConfig writes a configuration file into a new directory and returns
// its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// replaceFile swaps path's content atomically, as an editor or a
// ConfigMap update would.
func replaceFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestClusterSharesLimits runs two service processes on one 3-master
// Redis Cluster: together they admit exactly each policy's max, for every
// algorithm with a quota, through /v1/check (single and batched) and
// Envoy's gRPC API. The store timeout and the overload queue's wait are a
// minute: under this concurrent load on a loaded machine (goroutines
// stalled for seconds), a shorter one could cut a call or refuse a
// queued decision (503, or a degraded answer), and the counts must be
// exact.
func TestClusterSharesLimits(t *testing.T) {
	const max = 40
	cluster := redistest.StartCluster(t, 3)
	// Windows of an hour or more, so that nothing refills during the test;
	// the fixed window opens at the first request rather than on the clock.
	path := writeConfig(t, fmt.Sprintf(`
policies:
  fw: "fixed_window %[1]d/1h align first"
  sw: "sliding_window %[1]d/1h resolution 1m"
  gc: "gcra %[1]d/24h burst %[1]d"
  tb: "token_bucket %[1]d/24h burst %[1]d"
  sl: "sliding_log %[1]d/24h"
store:
  timeout: 1m
overload:
  queue_wait: 1m
`, max))
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "shared.yaml"), []byte(fmt.Sprintf(`
domain: shared
descriptors:
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: %d
`, max)), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	// A day window aligned to the clock: stay clear of midnight UTC.
	if left := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)); left < 2*time.Minute {
		t.Logf("waiting %v for the day to turn", left)
		time.Sleep(left + time.Second)
	}
	args := []string{"serve", "--config", dir, "--redis-cluster", strings.Join(cluster.Addrs, ","),
		"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--watch", "0"}
	a, b := start(t, cleanEnv(), args...), start(t, cleanEnv(), args...)
	servers := []*server{a, b}

	policies := []string{"fw", "sw", "gc", "tb", "sl"}
	keys := []string{"k1", "k2", "user:{odd}"}
	type counter struct {
		mu              sync.Mutex
		allowed, denied map[string]int
		errs            []string
	}
	c := counter{allowed: map[string]int{}, denied: map[string]int{}}
	record := func(name string, ok bool) {
		c.mu.Lock()
		if ok {
			c.allowed[name]++
		} else {
			c.denied[name]++
		}
		c.mu.Unlock()
	}
	fail := func(format string, args ...any) {
		c.mu.Lock()
		c.errs = append(c.errs, fmt.Sprintf(format, args...))
		c.mu.Unlock()
	}

	// Each (policy, key) is asked 2·max+10 times, split between the two
	// processes and between single and batched requests, all at once.
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := servers[w%2]
			for round := w; round < 2*max+10; round += workers {
				if round%2 == 0 {
					for _, p := range policies {
						for _, k := range keys {
							resp, r, err := post(s.http, "/v1/check", fmt.Sprintf(`{"policy":%q,"key":%q}`, p, k))
							if err != nil || len(r.Decisions) != 1 || (resp.StatusCode != 200 && resp.StatusCode != 429) {
								fail("single %s/%s: %v %+v", p, k, err, r)
								return
							}
							if r.Decisions[0].Degraded {
								fail("single %s/%s: a degraded decision", p, k)
							}
							record(p+"/"+k, r.Decisions[0].Allowed)
						}
					}
					continue
				}
				var items []string
				var names []string
				for _, p := range policies {
					for _, k := range keys {
						items = append(items, fmt.Sprintf(`{"policy":%q,"key":%q}`, p, k))
						names = append(names, p+"/"+k)
					}
				}
				resp, r, err := post(s.http, "/v1/check", `{"requests":[`+strings.Join(items, ",")+`]}`)
				if err != nil || len(r.Decisions) != len(items) || (resp.StatusCode != 200 && resp.StatusCode != 429) {
					fail("batch: %v %d %+v", err, resp.StatusCode, r)
					return
				}
				for i, d := range r.Decisions {
					if d.Degraded {
						fail("batch %s: a degraded decision", names[i])
					}
					record(names[i], d.Allowed)
				}
			}
		}()
	}
	// Envoy's API: the same shared count through both processes.
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rls := rlsv3.NewRateLimitServiceClient(dialGRPC(t, servers[w%2].grpc))
			for range (2*max + 10) / 4 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang's bound, as the HTTP client's
				resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
					Domain: "shared", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("tenant", "acme")},
				})
				cancel()
				if err != nil {
					fail("gRPC: %v", err)
					return
				}
				record("envoy/acme", resp.OverallCode == rlsv3.RateLimitResponse_OK)
			}
		}()
	}
	wg.Wait()
	for _, e := range c.errs {
		t.Error(e)
	}
	for _, p := range policies {
		for _, k := range keys {
			name := p + "/" + k
			if c.allowed[name] != max || c.allowed[name]+c.denied[name] != 2*max+10 {
				t.Errorf("%s: %d allowed, %d denied; want exactly %d allowed of %d", name, c.allowed[name], c.denied[name], max, 2*max+10)
			}
		}
	}
	if n := c.allowed["envoy/acme"]; n != max {
		t.Errorf("envoy tenant=acme: %d allowed, %d denied; want exactly %d allowed", n, c.denied["envoy/acme"], max)
	}
	// The state is in the cluster, spread over its masters: each process
	// sees what the other spent.
	for _, s := range servers {
		resp, r, err := post(s.http, "/v1/peek", `{"policy":"fw","key":"k1"}`)
		// A peek answers 200 whatever it finds.
		if err != nil || resp.StatusCode != http.StatusOK || r.Allowed || r.Decisions[0].Remaining != 0 {
			t.Errorf("peek through %s: %v %+v; want exhausted", s.http, err, r)
		}
	}
	spread := 0
	for _, n := range cluster.Nodes {
		if reply, err := n.Do(t, "DBSIZE"); err == nil && reply.(int64) > 0 {
			spread++
		}
	}
	if spread < 2 {
		t.Errorf("the keys sit on %d of 3 masters; the test meant to spread them", spread)
	}
	a.stop()
	b.stop()
}

// TestRedisKilledUnderLoad kills redis-server while two service processes,
// one failing open and one failing closed, are under load: every request
// is answered (none hangs); /readyz turns
// unready and back when Redis returns; fail-closed denies with
// Retry-After.
func TestRedisKilledUnderLoad(t *testing.T) {
	const (
		timeout = 100 * time.Millisecond
		// margin only catches a request that hangs: how long a loaded
		// machine takes to answer is no property of the service (up to
		// 572ms seen under the race detector with the suite on two
		// cores). That the store timeout holds is shown without a clock
		// by the failure package's tests and httplimit's
		// TestFailurePolicyRedis. 15 s is far above what a loaded machine
		// adds (goroutines stalled for seconds).
		margin = 15 * time.Second
	)
	redis := redistest.StartServer(t)
	conf := func(mode string) string {
		return writeConfig(t, fmt.Sprintf(`
policies:
  api: "fixed_window 1000000/1h"
store:
  type: redis
  url: redis://%s
  timeout: %s
failure:
  mode: %s
  retry_after: 3s
`, redis.Addr, timeout, mode))
	}
	args := func(path string) []string {
		return []string{"serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--watch", "0"}
	}
	open := start(t, cleanEnv(), args(conf("open"))...)
	closed := start(t, cleanEnv(), args(conf("closed"))...)

	type stats struct {
		mu                            sync.Mutex
		answered, degraded, closed503 int
		openDegraded                  int // degraded answers of fail-open
		slowest                       time.Duration
		errs                          []string
	}
	var st stats
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, mode := open, "open"
			if w%2 == 1 {
				s, mode = closed, "closed"
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				resp, r, err := post(s.http, "/v1/check", fmt.Sprintf(`{"policy":"api","key":"w%d-%d"}`, w, i%50))
				took := time.Since(t0)
				st.mu.Lock()
				if took > st.slowest {
					st.slowest = took
				}
				switch {
				case err != nil:
					st.errs = append(st.errs, fmt.Sprintf("fail-%s: %v", mode, err))
				case took > timeout+margin:
					st.errs = append(st.errs, fmt.Sprintf("fail-%s: a request took %v", mode, took))
				case len(r.Decisions) != 1:
					msg := fmt.Sprintf("fail-%s: %d %+v", mode, resp.StatusCode, r)
					if r.Error != nil {
						msg += fmt.Sprintf(" (error %s: %s)", r.Error.Code, r.Error.Message)
					}
					st.errs = append(st.errs, msg)
				case !r.Decisions[0].Degraded:
					if resp.StatusCode != http.StatusOK || !r.Allowed {
						st.errs = append(st.errs, fmt.Sprintf("fail-%s: a store decision denied: %d %+v", mode, resp.StatusCode, r))
					}
				case mode == "open":
					st.degraded++
					st.openDegraded++
					if resp.StatusCode != http.StatusOK || !r.Allowed {
						st.errs = append(st.errs, fmt.Sprintf("fail-open answered %d %+v", resp.StatusCode, r))
					}
				default:
					st.degraded++
					// Denied by the failure policy, not by a limit: the
					// limiter is unavailable (503), with Retry-After, and no
					// RateLimit field claims a remaining quota.
					if resp.StatusCode != http.StatusServiceUnavailable || r.Allowed || resp.Header.Get("Retry-After") != "3" || resp.Header.Get("RateLimit") != "" {
						st.errs = append(st.errs, fmt.Sprintf("fail-closed answered %d, Retry-After %q, RateLimit %q: %+v",
							resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"), r))
					} else {
						st.closed503++
					}
				}
				st.answered++
				st.mu.Unlock()
			}
		}()
	}
	ready := func(s *server) int { code, _ := get(t, s.http, "/readyz"); return code }
	waitReady := func(s *server, want int, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for ready(s) != want {
			if time.Now().After(deadline) {
				t.Fatalf("/readyz of %s did not turn %d within %v", s.http, want, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, s := range []*server{open, closed} {
		// Polled: one check of Redis up may be cut on a loaded machine.
		waitReady(s, http.StatusOK, 10*time.Second)
	}
	time.Sleep(300 * time.Millisecond)
	redis.Kill(t)
	for _, s := range []*server{open, closed} {
		waitReady(s, http.StatusServiceUnavailable, 10*time.Second)
	}
	time.Sleep(time.Second) // load on a dead store, past the breaker's first pause
	// And until both services have answered a request of the load by
	// their failure policy: the workers may have stalled all that second.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st.mu.Lock()
		both := st.openDegraded > 0 && st.closed503 > 0
		st.mu.Unlock()
		if both {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no degraded answer of the load from both services within 30 s of Redis's death")
		}
		time.Sleep(20 * time.Millisecond)
	}
	redis.Restart(t)
	for _, s := range []*server{open, closed} {
		waitReady(s, http.StatusOK, 15*time.Second)
	}
	// Decisions come from the store again (the load loop flags any
	// store decision that denies).
	deadline = time.Now().Add(30 * time.Second) // only a hang's bound
	for {
		resp, r, err := post(closed.http, "/v1/check", `{"policy":"api","key":"after"}`)
		if err == nil && resp.StatusCode == http.StatusOK && !r.Decisions[0].Degraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fail-closed still degraded 30s after Redis returned: %v %+v", err, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for i, e := range st.errs {
		if i == 10 {
			t.Errorf("... and %d more", len(st.errs)-10)
			break
		}
		t.Error(e)
	}
	t.Logf("%d requests answered, %d degraded (%d fail-closed 503s); slowest %v", st.answered, st.degraded, st.closed503, st.slowest)
	if st.degraded == 0 || st.closed503 == 0 {
		t.Errorf("no degraded decisions while Redis was down (%d, %d fail-closed)", st.degraded, st.closed503)
	}
	for _, s := range []*server{open, closed} {
		_, metrics := get(t, s.http, "/metrics")
		for _, want := range []string{`floodgate_degraded_decisions_total{policy="api"}`, `floodgate_store_errors_total{cause=`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics of %s lacks %s", s.http, want)
			}
		}
	}
	open.stop()
	closed.stop()
}

// TestHotReload changes the configuration file under load: a valid file
// changes answers and no request fails; an invalid one is refused with
// file:line in the log and the old policies keep answering; SIGHUP
// reloads too.
func TestHotReload(t *testing.T) {
	path := writeConfig(t, `
policies:
  api: "fixed_window 5/1h align first"
`)
	s := start(t, cleanEnv(), "serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--watch", "50ms")

	var (
		mu       sync.Mutex
		answered int
		errs     []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, r, err := post(s.http, "/v1/check", fmt.Sprintf(`{"policy":"api","key":"load-%d-%d"}`, w, i))
				mu.Lock()
				answered++
				if err != nil || len(r.Decisions) != 1 || resp.StatusCode != http.StatusOK {
					errs = append(errs, fmt.Sprintf("%v %+v", err, r))
				}
				mu.Unlock()
			}
		}()
	}
	limitOf := func(policy string) int64 {
		resp, r, err := post(s.http, "/v1/peek", fmt.Sprintf(`{"policy":%q,"key":"probe"}`, policy))
		if err != nil || resp.StatusCode != http.StatusOK || len(r.Decisions) != 1 {
			return -1
		}
		return r.Decisions[0].Limit
	}
	waitLimit := func(policy string, want int64) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for limitOf(policy) != want {
			if time.Now().After(deadline) {
				t.Fatalf("policy %s: limit %d 15s after the change, want %d\n%s", policy, limitOf(policy), want, s.logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLimit("api", 5)
	time.Sleep(200 * time.Millisecond)

	// 1. A valid new file: the limit changes and a new policy appears.
	replaceFile(t, path, `
policies:
  api: "fixed_window 7/1h align first"
  extra: "gcra 3/1s"
`)
	waitLimit("api", 7)
	waitLimit("extra", 3)
	// 30 s: only a hang's bound.
	if _, _, ok := s.logs.waitFor(regexp.MustCompile(`msg="configuration reloaded" reason="files changed"`), 0, 30*time.Second); !ok {
		t.Errorf("no log line says the configuration was reloaded")
	}

	// 2. An invalid file: refused, logged with file:line and the field,
	// the old policies still in force.
	from := s.logs.len()
	replaceFile(t, path, `
policies:
  api: "fixed_window 9/1h align first"
  extra: "gcra 0/1s"
`)
	at := regexp.MustCompile(`msg="configuration error" at=` + regexp.QuoteMeta(path) + `:4 field=policies\.extra\S* problem=`)
	if _, _, ok := s.logs.waitFor(at, from, 15*time.Second); !ok {
		t.Fatalf("no log line names %s:4 and policies.extra:\n%s", path, s.logs.String()[from:])
	}
	time.Sleep(200 * time.Millisecond)
	if got := limitOf("api"); got != 7 {
		t.Errorf("after an invalid file: api's limit %d, want the old 7", got)
	}
	if got := limitOf("extra"); got != 3 {
		t.Errorf("after an invalid file: extra's limit %d, want the old 3", got)
	}

	// 3. SIGHUP reloads a fixed file.
	from = s.logs.len()
	replaceFile(t, path, `
policies:
  api: "fixed_window 11/1h align first"
`)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLimit("api", 11)
	if _, _, ok := s.logs.waitFor(regexp.MustCompile(`msg="configuration reloaded" reason=(SIGHUP|"files changed")`), from, 30*time.Second); !ok {
		t.Errorf("no reload logged after SIGHUP")
	}
	if resp, r, err := post(s.http, "/v1/check", `{"policy":"extra","key":"k"}`); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("a policy the new file drops: %v %d %+v, want 404", err, resp.StatusCode, r)
	}

	close(stop)
	wg.Wait()
	for i, e := range errs {
		if i == 10 {
			t.Errorf("... and %d more", len(errs)-10)
			break
		}
		t.Errorf("a request during reloads: %s", e)
	}
	t.Logf("%d requests answered during three reloads", answered)
	_, metrics := get(t, s.http, "/metrics")
	// SIGHUP and the file watcher may both have seen the last change; the
	// metric counts what the log says was applied.
	applied := strings.Count(s.logs.String(), `msg="configuration reloaded"`)
	if applied < 2 {
		t.Errorf("%d reloads logged, want at least 2", applied)
	}
	for _, want := range []string{fmt.Sprintf(`floodgate_config_reloads_total{result="applied"} %d`, applied), `floodgate_config_reloads_total{result="rejected"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	s.stop()
}
