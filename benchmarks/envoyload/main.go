// Command envoyload compares floodgate serve with envoyproxy/ratelimit, the
// reference implementation of Envoy's rate limit service, on one private
// redis-server, through a neutral load generator.
//
// It builds both services (floodgate from this repository, envoyproxy/ratelimit
// from the Go module proxy at the version the nested module ../ratelimit pins),
// starts a redis-server of its own (free port of 127.0.0.1, persistence off;
// never the shared one), writes one Envoy domain file that both load
// unchanged, and runs every workload against every contender in interleaved
// passes (pass 1: workload 1 × contenders A, B, C…, workload 2 × A, B, C…;
// pass 2: the same again). Each run starts the contender afresh on an emptied
// Redis (FLUSHALL), drives it with Envoy RLS v3 ShouldRateLimit calls from
// this process (plain gRPC clients, no floodgate code), and reads
// utime+stime of redis-server and of the contender from /proc/<pid>/stat at
// the start and the end of the measured window. The report gives the median
// of each figure over the passes.
//
// Run from the benchmarks directory:
//
//	go run ./envoyload -out /tmp/envoy
//
// See ../README.md ("floodgate serve against envoyproxy/ratelimit").
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/benchmarks/internal/cmdstats"
	"github.com/floodgatehq/floodgate/benchmarks/internal/procstat"
	"github.com/floodgatehq/floodgate/benchmarks/redisserver"
	"github.com/floodgatehq/floodgate/internal/delayproxy"
)

type options struct {
	root, rlModule         string // the repository; the nested module pinning envoyproxy/ratelimit
	fgBin, rlBin           string // prebuilt binaries; empty: build
	passes                 int
	warmup, duration       time.Duration
	openRate, openWorkers  int
	conns                  int
	contenders, workloads  *regexp.Regexp
	maxForeign             float64
	maxTries               int
	maxWait                time.Duration
	outDir                 string
	keepWork               bool
	logw                   io.Writer // progress log
	commandLine            string
	redisServer            string
	redisDelay             time.Duration // one way, through a delay proxy; 0: none
	skipMachineDescription bool
}

func main() {
	serveFloorFromEnv()
	var o options
	var contRe, workRe string
	flag.StringVar(&o.root, "root", "..", "the floodgate repository (built with go build ./cmd/floodgate)")
	flag.StringVar(&o.rlModule, "ratelimit-module", "ratelimit", "the nested module that pins github.com/envoyproxy/ratelimit")
	flag.StringVar(&o.fgBin, "floodgate-bin", "", "a floodgate binary to use instead of building one")
	flag.StringVar(&o.rlBin, "ratelimit-bin", "", "an envoyproxy/ratelimit service_cmd binary to use instead of building one")
	flag.IntVar(&o.passes, "passes", 3, "passes; each runs every workload against every contender once")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "warm-up of each run, not measured")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "measured duration of each run")
	flag.IntVar(&o.openRate, "open-rate", 10_000, "open loop: arrivals per second")
	flag.IntVar(&o.openWorkers, "open-workers", 256, "open loop: the most requests in flight")
	flag.IntVar(&o.conns, "conns", 4, "gRPC connections of the load generator (workers take them in turn)")
	flag.StringVar(&contRe, "contenders", ".", "regexp of the contenders to run")
	flag.StringVar(&workRe, "workloads", ".", "regexp of the workloads to run (hot16, hot64, keys100k, overlimit, open)")
	flag.Float64Var(&o.maxForeign, "max-foreign", 15, "rerun a run during which other processes used more than this % of all CPUs")
	flag.IntVar(&o.maxTries, "max-tries", 3, "runs of one sample before keeping a disturbed one")
	flag.DurationVar(&o.maxWait, "max-wait", time.Minute, "before each run, wait up to this long for a second of other processes under -max-foreign")
	flag.StringVar(&o.outDir, "out", "", "directory for envoy.md (the report, also on stdout), envoy.tsv (every run) and envoy.log (the progress log, also on stderr)")
	flag.BoolVar(&o.keepWork, "keep", false, "keep the work directory (binaries, configuration, service logs)")
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary")
	flag.DurationVar(&o.redisDelay, "redis-delay", 0, "put this delay each way between the contenders and redis-server, as a remote Redis would (a round trip gains twice it; standalone contenders only)")
	flag.Parse()
	log.SetFlags(log.Ltime)
	o.contenders = regexp.MustCompile(contRe)
	o.workloads = regexp.MustCompile(workRe)
	o.logw = os.Stderr
	o.commandLine = "go run ./envoyload " + strings.Join(os.Args[1:], " ")
	// SIGINT or SIGTERM ends the run early, with everything it started
	// stopped and its files removed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, o, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// row is one run of one workload against one contender.
type row struct {
	pass     int
	w        workload
	c        contender
	res      *loadResult
	degraded int64 // floodgate's degraded decisions over the whole run; -1: n/a
	// per decision of the measured window
	redisUs, contUs, genUs float64
	// % of all CPUs over the window
	foreign, steal, genPct, redisPct, contPct float64
	commands                                  string
	kept                                      string
}

// run measures what o selects, writes the report to stdout (and o.outDir)
// and returns every run.
func run(ctx context.Context, o options, stdout io.Writer) ([]row, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(o.logw, time.Now().Format("15:04:05 ")+format+"\n", a...) }
	if err := procstat.Init(); err != nil {
		return nil, err
	}
	redisserver.Binary = o.redisServer
	work, err := os.MkdirTemp("", "envoyload-")
	if err != nil {
		return nil, err
	}
	if o.keepWork {
		logf("work directory %s", work)
	} else {
		defer os.RemoveAll(work)
	}
	e := &env{work: work, floodgate: o.fgBin, ratelimit: o.rlBin}
	if e.floodgate == "" || e.ratelimit == "" {
		logf("building floodgate and envoyproxy/ratelimit")
		fg, rl, err := build(o.root, o.rlModule, work)
		if err != nil {
			return nil, err
		}
		if e.floodgate == "" {
			e.floodgate = fg
		}
		if e.ratelimit == "" {
			e.ratelimit = rl
		}
	}
	rlVersion, err := ratelimitVersion(o.rlModule)
	if err != nil {
		return nil, err
	}

	srv, err := redisserver.Start()
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	e.redisAddr = srv.Addr
	admin := srv.Admin()
	defer admin.Close()
	logf("redis-server pid %d on %s", srv.Pid(), srv.Addr)
	if o.redisDelay > 0 {
		px, err := delayproxy.Start(srv.Addr, o.redisDelay)
		if err != nil {
			return nil, err
		}
		defer px.Close()
		e.redisAddr = px.Addr
		logf("contenders reach redis-server through %s, %s each way", px.Addr, o.redisDelay)
	}

	var cs []contender
	needCluster := false
	for _, c := range contenders() {
		if o.contenders.MatchString(c.name) {
			cs = append(cs, c)
			needCluster = needCluster || c.cluster
		}
	}
	if needCluster && o.redisDelay > 0 {
		// A Cluster's node names its own address to its clients, which
		// would then bypass the proxy.
		return nil, fmt.Errorf("-redis-delay %s: the Cluster contenders cannot be delayed; select standalone contenders only", o.redisDelay)
	}
	redisFor := map[bool]redisTarget{false: {pid: srv.Pid(), admin: admin}}
	if needCluster {
		csrv, cadmin, err := startCluster(ctx)
		if err != nil {
			return nil, err
		}
		defer csrv.Stop()
		defer cadmin.Close()
		e.clusterAddr = csrv.Addr
		redisFor[true] = redisTarget{pid: csrv.Pid(), admin: cadmin}
		logf("one-node Redis Cluster: redis-server pid %d on %s", csrv.Pid(), csrv.Addr)
	}
	var ws []workload
	for _, w := range workloads(o.openRate, o.openWorkers) {
		if o.workloads.MatchString(w.name) {
			ws = append(ws, w)
		}
	}
	if len(cs) == 0 || len(ws) == 0 {
		return nil, fmt.Errorf("no contender or no workload selected")
	}

	var tsv io.Writer = io.Discard
	var report io.Writer = stdout
	if o.outDir != "" {
		if err := os.MkdirAll(o.outDir, 0o755); err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(o.outDir, "envoy.tsv"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		tsv = f
		rep, err := os.Create(filepath.Join(o.outDir, "envoy.md"))
		if err != nil {
			return nil, err
		}
		defer rep.Close()
		report = io.MultiWriter(stdout, rep)
		lf, err := os.Create(filepath.Join(o.outDir, "envoy.log"))
		if err != nil {
			return nil, err
		}
		defer lf.Close()
		o.logw = io.MultiWriter(o.logw, lf)
	}
	fmt.Fprintln(tsv, "pass\tworkload\tcontender\tdecisions_per_s\tok\tover_limit\terrors\tunsent\tdegraded\tp50_us\tp99_us\tp999_us\tmax_us\tredis_us_per_decision\tcontender_us_per_decision\tloadgen_us_per_decision\tforeign_pct\tsteal_pct\tredis_commands\tkept")

	var rows []row
	runN := 0
	for pass := 1; pass <= o.passes; pass++ {
		for _, w := range ws {
			for _, c := range cs {
				var r row
				for try := 1; ; try++ {
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					rt := redisFor[c.cluster]
					if o.maxForeign < 100 {
						if f := procstat.WaitQuiet(ctx, o.maxForeign, o.maxWait, rt.pid); f > o.maxForeign {
							logf("still %.0f%% foreign CPU after waiting %s; running anyway", f, o.maxWait)
						}
					}
					runN++
					r, err = runOne(ctx, e, rt.admin, rt.pid, o, w, c, pass, runN)
					if err != nil {
						return nil, err
					}
					r.kept = "kept"
					if r.foreign > o.maxForeign {
						r.kept = "dropped"
						if try >= o.maxTries {
							r.kept = "kept (disturbed)"
						}
					}
					res := r.res
					logf("pass %d %-9s %-20s %8.0f/s ok %d over %d err %d deg %d  p50 %s p99 %s p99.9 %s  redis %.1fµs contender %.1fµs loadgen %.1fµs /decision  cpu%%: redis %.0f contender %.0f loadgen %.0f foreign %.1f steal %.1f  [%s] %s",
						pass, w.name, c.name, res.perSec, res.ok, res.overLimit, res.errors, r.degraded,
						fmtDur(quantile(res.lat, .5)), fmtDur(quantile(res.lat, .99)), fmtDur(quantile(res.lat, .999)),
						r.redisUs, r.contUs, r.genUs, r.redisPct, r.contPct, r.genPct, r.foreign, r.steal, r.commands, r.kept)
					if res.firstErr != nil {
						logf("  first error: %v", res.firstErr)
					}
					fmt.Fprintf(tsv, "%d\t%s\t%s\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%s\t%s\n",
						pass, w.name, c.name, res.perSec, res.ok, res.overLimit, res.errors, res.unsent, r.degraded,
						quantile(res.lat, .5).Microseconds(), quantile(res.lat, .99).Microseconds(),
						quantile(res.lat, .999).Microseconds(), quantile(res.lat, 1).Microseconds(),
						r.redisUs, r.contUs, r.genUs, r.foreign, r.steal, r.commands, r.kept)
					if r.kept != "dropped" {
						break
					}
				}
				rows = append(rows, r)
			}
		}
	}
	machine := ""
	if !o.skipMachineDescription {
		machine = describeMachine(ctx, admin, o, rlVersion)
	}
	printReport(report, rows, ws, cs, o, machine)
	return rows, nil
}

type redisTarget struct {
	pid   int
	admin *redis.Client
}

// startCluster starts a second private redis-server in cluster mode and
// makes it a one-node Redis Cluster owning every slot.
func startCluster(ctx context.Context) (*redisserver.Server, *redis.Client, error) {
	srv, err := redisserver.Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if err != nil {
		return nil, nil, err
	}
	admin := srv.Admin()
	fail := func(err error) (*redisserver.Server, *redis.Client, error) {
		admin.Close()
		srv.Stop()
		return nil, nil, fmt.Errorf("one-node cluster: %w", err)
	}
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		return fail(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := admin.ClusterInfo(ctx).Result()
		if err != nil {
			return fail(err)
		}
		if strings.Contains(info, "cluster_state:ok") {
			return srv, admin, nil
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("cluster_state not ok after 10 s"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runOne is one run: an emptied Redis, the contender started afresh, the
// load, the contender stopped.
func runOne(ctx context.Context, e *env, admin *redis.Client, redisPid int, o options, w workload, c contender, pass, runN int) (row, error) {
	r := row{pass: pass, w: w, c: c}
	if err := admin.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
		return r, err
	}
	p, err := e.start(ctx, c, runN)
	if err != nil {
		return r, err
	}
	defer p.stop()
	deg0, err := p.degraded()
	if err != nil {
		return r, err
	}
	cl, err := dial(p.grpcAddr, o.conns)
	if err != nil {
		return r, err
	}
	defer cl.close()
	var stats []cmdstats.Stat
	first := true
	// mark reads the CPU time of redis-server (Pids[0]) and of the
	// contender (Pids[1]).
	mark := func() (procstat.Sample, error) {
		if first {
			first = false
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				return procstat.Sample{}, err
			}
			return procstat.Read(redisPid, p.pid())
		}
		s, err := procstat.Read(redisPid, p.pid())
		if err != nil {
			return s, err
		}
		stats, err = cmdstats.Read(ctx, admin)
		return s, err
	}
	res, err := runLoad(ctx, cl, w, o.warmup, o.duration, uint64(pass*1000+runN), mark)
	if err != nil {
		return r, fmt.Errorf("%s %s: %w", w.name, c.name, err)
	}
	deg1, err := p.degraded()
	if err != nil {
		return r, err
	}
	r.res = res
	r.degraded = -1
	if deg0 >= 0 {
		r.degraded = deg1 - deg0
	}
	n := float64(res.decisions())
	if n > 0 {
		r.redisUs = float64(procstat.Ticks(res.cpu1.Pids[0]-res.cpu0.Pids[0])) / 1e3 / n
		r.contUs = float64(procstat.Ticks(res.cpu1.Pids[1]-res.cpu0.Pids[1])) / 1e3 / n
		r.genUs = float64(res.cpu1.Self-res.cpu0.Self) / 1e3 / n
		r.commands = cmdstats.PerDecision(stats, n)
	}
	sh := res.cpu1.Shares(res.cpu0, res.cpu1.At.Sub(res.cpu0.At))
	r.foreign, r.steal, r.genPct, r.redisPct, r.contPct = sh.Foreign, sh.Steal, sh.Self, sh.Pids[0], sh.Pids[1]
	return r, nil
}

// describeMachine is the report's preamble: versions, machine, commit,
// command.
func describeMachine(ctx context.Context, admin *redis.Client, o options, rlVersion string) string {
	var b strings.Builder
	ver := "?"
	if s, err := admin.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				ver = v
			}
		}
	}
	commit := "?"
	if out, err := exec.Command("git", "-C", o.root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if out, err := exec.Command("git", "-C", o.root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	goVer := "?"
	if out, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		goVer = strings.TrimSpace(string(out))
	}
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Fprintf(&b, "- `%s` (%s, %s warm-up + %s measured per run, open loop %d/s with at most %d in flight, %d gRPC connections)\n",
		o.commandLine, plural(o.passes, "pass", "passes"), o.warmup, o.duration, o.openRate, o.openWorkers, o.conns)
	if o.redisDelay > 0 {
		fmt.Fprintf(&b, "- every contender reached redis-server through a delay proxy adding %s each way (a round trip at least %s longer); its CPU is the load generator's\n", o.redisDelay, 2*o.redisDelay)
	}
	fmt.Fprintf(&b, "- floodgate at %s; github.com/envoyproxy/ratelimit %s (src/service_cmd); redis-server %s; %s; %d CPUs (%s); CLK_TCK %d; %s\n",
		commit, rlVersion, ver, goVer, procstat.CPUs(), model, procstat.ClockTick(), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	return b.String()
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
}

func groupDigits(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
