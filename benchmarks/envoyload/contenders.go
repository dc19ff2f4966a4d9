package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// domainYAML is the one Envoy domain both services load, byte for byte:
// envoyproxy/ratelimit from its runtime directory, floodgate serve from its
// configuration directory (docs/operations.md, "Envoy domain files").
//
//   - user: one fixed window per value, 10^9 per minute: out of reach, so
//     every decision is OK and the allowed path (a counter increment) is
//     what is measured.
//   - hot: 100 per second per value: a hot key goes over its limit in the
//     first milliseconds of every second, so nearly every decision is
//     OVER_LIMIT (the path a local cache can answer).
//   - check: 5 per hour per value, for the correctness check of the tests.
const domainYAML = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1000000000
  - key: hot
    rate_limit:
      unit: second
      requests_per_unit: 100
  - key: check
    rate_limit:
      unit: hour
      requests_per_unit: 5
`

const domain = "bench"

// A contender is one service configuration under test.
type contender struct {
	name string
	kind string // "ratelimit", "floodgate" or "floor"
	// ratelimit: environment variables beyond the common ones (startEnvoy).
	env []string
	// floodgate: the body of floodgate.yaml next to the domain file; empty:
	// none (every setting at its default).
	fgConfig string
	// cluster: run against the one-node Redis Cluster (REDIS_TYPE=cluster,
	// --redis-cluster) instead of the standalone redis-server.
	cluster bool
	// how it is configured, for the report.
	note string
}

func contenders() []contender {
	return []contender{
		{name: "ratelimit", kind: "ratelimit",
			note: "envoyproxy/ratelimit, defaults: REDIS_POOL_SIZE=10, no pipeline window, no local cache"},
		{name: "ratelimit-pipeline", kind: "ratelimit",
			env:  []string{"REDIS_PIPELINE_WINDOW=150us", "REDIS_PIPELINE_LIMIT=8"},
			note: "REDIS_PIPELINE_WINDOW=150us REDIS_PIPELINE_LIMIT=8 (at this version the window applies to REDIS_TYPE=cluster only and the limit is ignored, so this runs as plain)"},
		{name: "ratelimit-localcache", kind: "ratelimit",
			env:  []string{"LOCAL_CACHE_SIZE_IN_BYTES=67108864"},
			note: "LOCAL_CACHE_SIZE_IN_BYTES=67108864 (64 MiB freecache of keys over their limit)"},
		{name: "floodgate", kind: "floodgate",
			note: "floodgate serve, defaults: store.batching true, store.over_limit_cache true, store.timeout 50ms, failure.mode open"},
		{name: "floodgate-nobatch", kind: "floodgate",
			fgConfig: "store:\n  batching: false\n",
			note:     "store.batching false"},
		{name: "floodgate-serviceclock", kind: "floodgate",
			fgConfig: "store:\n  clock: service\n",
			note:     "store.clock service: floodgate's clock sent with each call, no TIME in Redis"},
		{name: "floodgate-counters", kind: "floodgate",
			fgConfig: "store:\n  clock: service\n  counters: true\n",
			note:     "store.clock service and store.counters true: the descriptors' windows as native counters (INCRBY and PEXPIRE, no function call)"},
		{name: "floodgate-nocache", kind: "floodgate",
			fgConfig: "store:\n  over_limit_cache: false\n",
			note:     "store.over_limit_cache false"},
		// Not a rate limiter: what the gRPC layer costs alone (floor.go).
		{name: "floor", kind: "floor",
			note: "not a rate limiter: a grpc-go server of the same API (this program, floor.go) that answers OK to every request without deciding or touching Redis; its decisions/s bound what any Go service of this API reaches on this machine with this load generator"},
		// envoyproxy/ratelimit's pipeline window takes effect in cluster
		// mode only (src/redis/driver_impl.go at the pinned version), so
		// these three run on a one-node Redis Cluster of their own.
		{name: "ratelimit-cluster", kind: "ratelimit", cluster: true,
			env:  []string{"REDIS_TYPE=cluster"},
			note: "REDIS_TYPE=cluster on the one-node cluster, no pipeline window"},
		{name: "ratelimit-cluster-pipeline", kind: "ratelimit", cluster: true,
			env:  []string{"REDIS_TYPE=cluster", "REDIS_PIPELINE_WINDOW=150us", "REDIS_PIPELINE_LIMIT=8"},
			note: "REDIS_TYPE=cluster REDIS_PIPELINE_WINDOW=150us (radix v4 WriteFlushInterval) on the one-node cluster"},
		{name: "floodgate-cluster", kind: "floodgate", cluster: true,
			note: "floodgate serve --redis-cluster on the one-node cluster, defaults"},
	}
}

// A process is a running service: its gRPC address, and for floodgate its
// HTTP address (metrics, readiness).
type process struct {
	c        contender
	cmd      *exec.Cmd
	done     chan error
	grpcAddr string
	httpAddr string // floodgate only
	logPath  string
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// stop terminates the service (SIGTERM, then SIGKILL after 10 s) and waits
// for it. It is idempotent.
func (p *process) stop() {
	if p == nil || p.cmd == nil {
		return
	}
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.cmd = nil
}

// logTail is the end of the service's log, for error messages.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// env is the run's fixed setup: binaries, the private redis-servers and a
// directory for configuration files and logs.
type env struct {
	work        string
	floodgate   string // binary
	ratelimit   string // binary
	redisAddr   string // standalone
	clusterAddr string // the one-node cluster; empty when no contender needs it
}

// start runs c against the private redis-server and waits until it
// answers a ShouldRateLimit of the bench domain (and, for floodgate, until
// /readyz says its store answers).
func (e *env) start(ctx context.Context, c contender, run int) (*process, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	p := &process{c: c, done: make(chan error, 1), grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[0]),
		logPath: filepath.Join(e.work, fmt.Sprintf("%03d-%s.log", run, c.name))}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	redisAddr := e.redisAddr
	if c.cluster {
		redisAddr = e.clusterAddr
	}
	switch c.kind {
	case "ratelimit":
		root := filepath.Join(e.work, "ratelimit-runtime")
		if err := writeFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), domainYAML); err != nil {
			return nil, err
		}
		p.cmd = exec.Command(e.ratelimit)
		// The settings are envoyproxy/ratelimit's src/settings/settings.go
		// (kelseyhightower/envconfig): everything on loopback, TCP to the
		// private Redis, the configuration read from
		// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (watched
		// as a directory, RUNTIME_WATCH_ROOT=false), no statsd sink and no
		// stats at all (DISABLE_STATS: a null sink; USE_STATSD=false alone
		// would log every stat each 10 s).
		p.cmd.Env = append(os.Environ(),
			"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[1]),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
			"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[0]),
			"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL="+redisAddr,
			"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
			"RUNTIME_WATCH_ROOT=false",
			"USE_STATSD=false", "DISABLE_STATS=true",
			"LOG_LEVEL=warn",
		)
		p.cmd.Env = append(p.cmd.Env, c.env...)
	case "floodgate":
		dir := filepath.Join(e.work, "floodgate-config-"+c.name)
		if err := writeFile(filepath.Join(dir, "bench.yaml"), domainYAML); err != nil {
			return nil, err
		}
		if c.fgConfig != "" {
			if err := writeFile(filepath.Join(dir, "floodgate.yaml"), c.fgConfig); err != nil {
				return nil, err
			}
		}
		p.httpAddr = "127.0.0.1:" + strconv.Itoa(ports[1])
		store := []string{"--redis", "redis://" + redisAddr}
		if c.cluster {
			store = []string{"--redis-cluster", redisAddr}
		}
		p.cmd = exec.Command(e.floodgate, append([]string{"serve", "--config", dir,
			"--http", p.httpAddr, "--grpc", p.grpcAddr}, store...)...)
		p.cmd.Env = os.Environ()
	case "floor":
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("floor: %w", err)
		}
		p.cmd = exec.Command(self)
		p.cmd.Env = append(os.Environ(), floorEnv+"="+p.grpcAddr)
	default:
		return nil, fmt.Errorf("contender %s: unknown kind %q", c.name, c.kind)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	if err := p.waitReady(ctx, 30*time.Second); err != nil {
		tail := p.logTail()
		p.stop()
		return nil, fmt.Errorf("%s did not become ready: %w\n%s", c.name, err, tail)
	}
	return p, nil
}

func (p *process) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	cl, err := dial(p.grpcAddr, 1)
	if err != nil {
		return err
	}
	defer cl.close()
	for {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("exited: %v", err)
		default:
		}
		code, err := cl.check(ctx, 0, "user", "ready", time.Second)
		if err == nil && code == codeOK && p.httpAddr != "" {
			err = httpOK("http://" + p.httpAddr + "/readyz")
		} else if err == nil && code != codeOK {
			err = fmt.Errorf("first check answered %v", code)
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func httpOK(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// degraded returns floodgate's floodgate_degraded_decisions_total summed
// over its labels: decisions its failure policy made because the store
// failed or timed out (answered OK under fail-open, indistinguishable on
// the wire). It is -1 for envoyproxy/ratelimit, which has no such answer
// (a Redis error is a gRPC error).
func (p *process) degraded() (int64, error) {
	if p.httpAddr == "" {
		return -1, nil
	}
	resp, err := http.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "floodgate_degraded_decisions_total") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics: %q: %w", line, err)
		}
		n += int64(v)
	}
	return n, nil
}

// build compiles floodgate (from the repository at root) and
// envoyproxy/ratelimit's src/service_cmd (at the version pinned by the
// nested module in rlModule) into dir.
func build(root, rlModule, dir string) (fg, rl string, err error) {
	fg = filepath.Join(dir, "floodgate")
	rl = filepath.Join(dir, "ratelimit")
	for _, b := range []struct{ dir, out, pkg string }{
		{root, fg, "./cmd/floodgate"},
		{rlModule, rl, "github.com/envoyproxy/ratelimit/src/service_cmd"},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("go build %s (in %s): %w\n%s", b.pkg, b.dir, err, out)
		}
	}
	return fg, rl, nil
}

// ratelimitVersion is the version of github.com/envoyproxy/ratelimit the
// nested module pins.
func ratelimitVersion(rlModule string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/envoyproxy/ratelimit")
	cmd.Dir = rlModule
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/envoyproxy/ratelimit: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func writeFile(path, body string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(body), 0o644)
}

// freePorts returns n distinct free TCP ports of 127.0.0.1 (free when
// probed: a race with another process binding one is possible and shows
// as a start failure).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	if len(ports) != n {
		return nil, errors.New("no free ports")
	}
	return ports, nil
}
