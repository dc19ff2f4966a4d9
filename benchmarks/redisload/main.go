// Command redisload compares floodgate's Redis store (redisstore) with
// Redis-backed Go rate limiters (go-redis/redis_rate v10, ulule/limiter v3's
// redis store, throttled v2's goredisstore.v9), each on a redis-server of
// its own that it starts (persistence off) on a free port of 127.0.0.1:
//
//   - memory per limited key: 100,000 keys created through each limiter
//     (one allowed request each) on an emptied server; MEMORY USAGE of a
//     sample of keys, and the used_memory delta (INFO memory) per key;
//   - throughput and latency: closed-loop goroutines (1, 16, 64) deciding
//     on 10,000 keys chosen uniformly, every decision allowed; decisions
//     per second, p50 and p99 latency per decision. The libraries take
//     turns within each pass (interleaved), and the pass of median
//     throughput is reported.
//
// Run from the benchmarks directory:
//
//	go run ./redisload -out /tmp/redisload
//
// See ../README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/benchmarks/internal/procstat"
	"github.com/floodgatehq/floodgate/benchmarks/redisserver"
)

func main() {
	var (
		mode       = flag.String("mode", "mem,load", "what to measure: mem, load, calls (redis-server time per decision), series (bytes of a tracked key's usage series), comma separated")
		seriesKeys = flag.Int("series-keys", 20, "series: tracked keys per pattern")
		memKeys    = flag.Int("mem-keys", 100_000, "memory: limited keys created per limiter")
		memSample  = flag.Int("mem-sample", 100, "memory: keys whose MEMORY USAGE is averaged")
		memConc    = flag.Int("mem-conc", 16, "memory: goroutines creating the keys")
		loadKeys   = flag.Int("keys", 10_000, "load: distinct keys, chosen uniformly")
		concs      = flag.String("conc", "1,16,64", "load: concurrency levels (goroutines)")
		warmup     = flag.Duration("warmup", time.Second, "load: warm-up per run, not measured")
		duration   = flag.Duration("duration", 5*time.Second, "load: measured duration per run")
		passes     = flag.Int("passes", 3, "load: passes (each runs every library at every concurrency once)")
		batch      = flag.Int("batch", 16, "load: requests per TakeBatch of the batched floodgate contenders")
		pool       = flag.Int("pool", 128, "go-redis PoolSize of every client")
		libs       = flag.String("libs", ".", "load: regexp of the library names to run")
		maxForeign = flag.Float64("max-foreign", 15, "load: rerun a run during which other processes used more than this % of all CPUs")
		maxTries   = flag.Int("max-tries", 5, "load: runs of one sample before keeping a disturbed one")
		maxWait    = flag.Duration("max-wait", time.Minute, "load: before each run, wait up to this long for other processes to use at most -max-foreign % of all CPUs over a second")
		outDir     = flag.String("out", "", "directory for the raw results (mem.tsv, load.tsv) and the report (report.md)")
		serverBin  = flag.String("redis-server", "redis-server", "redis-server binary")
		calls      = flag.Int("calls", 100_000, "calls: decisions per run")
		callsConc  = flag.Int("calls-conc", 16, "calls: goroutines")
		callsRuns  = flag.Int("calls-runs", 5, "calls: runs per contender (the best is reported)")
		fgCommand  = flag.String("fg-command", "fcall", "calls: the command floodgate's decisions send (fcall; evalsha for a version before Redis Functions)")
		callsHook  = flag.String("calls-hook", "", "calls: a command run (sh -c) with the argument start before, and stop after, each run's measured calls")
	)
	flag.Parse()
	log.SetFlags(log.Ltime)
	redisserver.Binary = *serverBin
	ctx := context.Background()

	var report io.Writer = os.Stdout
	var memTSV, loadTSV io.Writer = io.Discard, io.Discard
	if *outDir != "" {
		must(os.MkdirAll(*outDir, 0o755))
		rep := create(filepath.Join(*outDir, "report.md"))
		defer rep.Close()
		report = io.MultiWriter(os.Stdout, rep)
		m := create(filepath.Join(*outDir, "mem.tsv"))
		defer m.Close()
		l := create(filepath.Join(*outDir, "load.tsv"))
		defer l.Close()
		memTSV, loadTSV = m, l
	}

	if strings.Contains(*mode, "mem") {
		srv, admin := start()
		describeServer(ctx, report, admin, srv)
		var results []memResult
		for _, mc := range memCases() {
			log.Printf("memory: %s", mc.name)
			r, err := measureMemory(ctx, admin, srv.Addr, mc, *memKeys, *memSample, *memConc)
			if err != nil {
				srv.Stop()
				log.Fatal(err)
			}
			results = append(results, r)
			fmt.Fprintf(memTSV, "%s\t%d\t%d\t%.1f\t%d\t%.1f\n", r.name, r.keysPerLimited, r.dbsize, r.usageAvg, r.usedDelta, r.usedPerKey)
		}
		admin.Close()
		srv.Stop()
		printMemory(report, results, *memKeys, *memSample)
	}

	if strings.Contains(*mode, "series") {
		srv, admin := start()
		describeServer(ctx, report, admin, srv)
		rs, err := measureSeries(ctx, admin, srv.Addr, *seriesKeys)
		admin.Close()
		srv.Stop()
		must(err)
		printSeries(report, rs, *seriesKeys)
	}

	if strings.Contains(*mode, "calls") {
		srv, admin := start()
		describeServer(ctx, report, admin, srv)
		re := regexp.MustCompile(*libs)
		var cs []callCase
		for _, c := range callCases(*fgCommand) {
			if re.MatchString(c.name) {
				cs = append(cs, c)
			}
		}
		keys := make([]string, *loadKeys)
		for i := range keys {
			keys[i] = userKey(i)
		}
		rs, err := measureCalls(ctx, admin, srv.Addr, cs, keys, *calls, *callsConc, *callsRuns, *callsHook)
		admin.Close()
		srv.Stop()
		must(err)
		printCalls(report, rs, *calls, *callsConc, len(keys))
	}

	if strings.Contains(*mode, "load") {
		must(procstat.Init())
		srv, admin := start()
		defer srv.Stop()
		defer admin.Close()
		describeServer(ctx, report, admin, srv)
		var cs []int
		for _, s := range strings.Split(*concs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			must(err)
			cs = append(cs, n)
		}
		re := regexp.MustCompile(*libs)
		var ls []library
		for _, l := range loadLibraries(*batch) {
			if re.MatchString(l.name) {
				ls = append(ls, l)
			}
		}
		keys := make([]string, *loadKeys)
		for i := range keys {
			keys[i] = userKey(i)
		}
		var results []loadResult
		for pass := 1; pass <= *passes; pass++ {
			for _, conc := range cs {
				for _, lib := range ls {
					cfg := loadConfig{
						addr: srv.Addr, redisPid: srv.Pid(), keys: keys, conc: conc,
						warmup: *warmup, duration: *duration, poolSize: *pool, prepConc: 16,
						seed: uint64(pass*1000 + conc),
					}
					var r loadResult
					for try := 1; ; try++ {
						if f := procstat.WaitQuiet(ctx, *maxForeign, *maxWait, srv.Pid()); f > *maxForeign {
							log.Printf("still %.0f%% foreign CPU after waiting %s; running anyway", f, *maxWait)
						}
						var err error
						r, err = runLoad(ctx, admin, lib, cfg)
						if err != nil {
							log.Fatal(err)
						}
						r.pass = pass
						verdict := "kept"
						if r.foreign > *maxForeign {
							verdict = "dropped"
							if try >= *maxTries {
								verdict = "kept (disturbed)"
							}
						}
						log.Printf("pass %d c=%-2d %-30s %9.0f decisions/s  p50 %7.1fµs  p99 %7.1fµs  client %4.1f%% server %4.1f%% foreign %4.1f%% steal %3.1f%%  server %.1fµs/decision (%s)  %s",
							pass, conc, lib.name, r.perSec, us(r.p50), us(r.p99), r.clientCPU, r.serverCPU, r.foreign, r.steal, r.serverUsPerDecision, r.commands, verdict)
						if !strings.HasPrefix(verdict, "dropped") {
							break
						}
					}
					results = append(results, r)
					fmt.Fprintf(loadTSV, "%d\t%d\t%s\t%d\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%s\n", r.pass, r.conc, r.lib, r.decisions,
						r.perSec, us(r.p50), us(r.p99), r.clientCPU, r.serverCPU, r.foreign, r.steal, r.serverUsPerDecision, r.commands)
				}
			}
		}
		printLoad(report, results, cs, ls, *batch)
	}
}

func start() (*redisserver.Server, *redis.Client) {
	srv, err := redisserver.Start()
	must(err)
	log.Printf("redis-server pid %d on %s", srv.Pid(), srv.Addr)
	return srv, srv.Admin()
}

func describeServer(ctx context.Context, w io.Writer, a *redis.Client, srv *redisserver.Server) {
	ver, _ := infoField(ctx, a, "server", "redis_version")
	alloc, _ := infoField(ctx, a, "memory", "mem_allocator")
	var cfg []string
	for _, k := range []string{"save", "appendonly", "io-threads", "maxmemory", "maxmemory-policy", "lazyfree-lazy-user-flush", "hz"} {
		v, err := a.ConfigGet(ctx, k).Result()
		if err == nil {
			cfg = append(cfg, fmt.Sprintf("%s=%q", k, v[k]))
		}
	}
	fmt.Fprintf(w, "redis-server %s (%s) on %s, pid %d: %s\n\n", ver, alloc, srv.Addr, srv.Pid(), strings.Join(cfg, " "))
}

func printMemory(w io.Writer, rs []memResult, n, sample int) {
	fmt.Fprintf(w, "Memory per limited key: %d keys, one allowed request each; MEMORY USAGE (SAMPLES 0) summed over a limited key's Redis keys, averaged over %d keys; used_memory delta / %d.\n\n", n, sample, n)
	fmt.Fprintln(w, "| limiter | configured with | Redis keys per limited key | MEMORY USAGE (B) | used_memory Δ / key (B) |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: |")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | `%s` | %d | %.1f | %.1f |\n", r.name, r.policy, r.keysPerLimited, r.usageAvg, r.usedPerKey)
	}
	fmt.Fprint(w, "\nWhat each stores for user-000123 (key  type/encoding  MEMORY USAGE  TTL  value):\n\n```\n")
	for _, r := range rs {
		fmt.Fprintf(w, "%s:\n", r.name)
		for _, e := range r.example {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprint(w, "```\n\n")
}

func printLoad(w io.Writer, rs []loadResult, cs []int, ls []library, batch int) {
	fmt.Fprint(w, "Throughput and latency: the pass of median decisions/s of each library and concurrency (range: over all passes).\n\n")
	fmt.Fprintln(w, "| concurrency | library | decisions/s | range | p50 µs | p99 µs | client CPU % | server CPU % | server µs/decision | foreign CPU % |")
	fmt.Fprintln(w, "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	medians := map[string]loadResult{}
	for _, c := range cs {
		for _, l := range ls {
			var runs []loadResult
			for _, r := range rs {
				if r.conc == c && r.lib == l.name {
					runs = append(runs, r)
				}
			}
			if len(runs) == 0 {
				continue
			}
			slices.SortFunc(runs, func(a, b loadResult) int {
				switch {
				case a.perSec < b.perSec:
					return -1
				case a.perSec > b.perSec:
					return 1
				}
				return 0
			})
			m := runs[(len(runs)-1)/2]
			medians[fmt.Sprint(c, l.name)] = m
			fmt.Fprintf(w, "| %d | %s | %.0f | %.0f–%.0f | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f |\n", c, l.name, m.perSec,
				runs[0].perSec, runs[len(runs)-1].perSec, us(m.p50), us(m.p99), m.clientCPU, m.serverCPU, m.serverUsPerDecision, m.foreign)
		}
	}
	fmt.Fprintln(w)
	for _, c := range cs {
		b, ok1 := medians[fmt.Sprint(c, fmt.Sprintf("floodgate-gcra-batch%d", batch))]
		r, ok2 := medians[fmt.Sprint(c, "redis_rate")]
		if ok1 && ok2 {
			var per []string
			for _, x := range rs {
				if x.conc != c || x.lib != b.lib {
					continue
				}
				for _, y := range rs {
					if y.conc == c && y.lib == "redis_rate" && y.pass == x.pass {
						per = append(per, fmt.Sprintf("%.2f", x.perSec/y.perSec))
					}
				}
			}
			fmt.Fprintf(w, "c=%d: floodgate gcra batched / redis_rate = %.2f× (medians; per pass %s)\n", c, b.perSec/r.perSec, strings.Join(per, ", "))
		}
	}
	fmt.Fprintln(w)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func create(path string) *os.File {
	f, err := os.Create(path)
	must(err)
	return f
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
