package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// loadParams: every decision of a run is allowed, and a key's state lives
// across the run (the read-modify-write of existing state is measured,
// not its creation): GCRA of 10 per hour with a burst of 10^6 keeps each
// key's theoretical arrival time hours ahead after a few requests (TTL =
// that lead), far from the 10^6 it would take to deny; a fixed window of
// 10^9 per hour opened by the key's first request.
var loadParams = params{
	gcra:  gcraParams{count: 10, period: time.Hour, burst: 1_000_000},
	fixed: fixedParams{max: 1_000_000_000, window: time.Hour},
}

type loadConfig struct {
	addr     string
	redisPid int
	keys     []string
	conc     int
	warmup   time.Duration
	duration time.Duration
	poolSize int
	prepConc int
	seed     uint64
}

type loadResult struct {
	lib       string
	conc      int
	pass      int
	decisions int64
	calls     int64
	elapsed   time.Duration
	perSec    float64
	p50, p99  time.Duration
	foreign   float64 // % of all CPUs used by other processes during the run
	steal     float64
	clientCPU float64 // % of all CPUs: this process
	serverCPU float64 // % of all CPUs: redis-server
	// Over warm-up and measurement: redis-server's CPU time per decision
	// (/proc: command execution, parsing, syscalls), and from INFO
	// commandstats each command's calls per decision and time per call (a
	// script's time includes the commands it calls, which are also
	// counted on their own).
	serverUsPerDecision float64
	commands            string
}

// runLoad is one closed-loop run of lib: an emptied server, a fresh client
// and limiter, one request for every key, then cfg.conc goroutines each
// deciding back to back (batches of lib.batch uniformly chosen keys) for
// warmup + duration; the calls that start and end inside the measured
// duration count.
func runLoad(ctx context.Context, admin *redis.Client, lib library, cfg loadConfig) (loadResult, error) {
	res := loadResult{lib: lib.name, conc: cfg.conc}
	if err := admin.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
		return res, err
	}
	c := newClient(cfg.addr, cfg.poolSize)
	defer c.Close()
	lim, err := lib.new(ctx, c, loadParams)
	if err != nil {
		return res, fmt.Errorf("%s: %w", lib.name, err)
	}
	if err := prepareKeys(ctx, lim, lib, cfg.keys, cfg.prepConc); err != nil {
		return res, fmt.Errorf("%s: creating keys: %w", lib.name, err)
	}

	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return res, err
	}
	var allDecisions atomic.Int64
	cpu0, err := readCPU(cfg.redisPid)
	if err != nil {
		return res, err
	}
	start := time.Now()
	mStart := start.Add(cfg.warmup)
	end := mStart.Add(cfg.duration)
	lats := make([][]time.Duration, cfg.conc)
	var failed atomic.Bool
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		failed.Store(true)
	}
	var wg sync.WaitGroup
	for g := range cfg.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(cfg.seed, uint64(g)))
			keys := make([]string, lib.batch)
			ok := make([]bool, lib.batch)
			lat := make([]time.Duration, 0, 1<<14)
			for !failed.Load() {
				for i := range keys {
					keys[i] = cfg.keys[r.IntN(len(cfg.keys))]
				}
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				err := lim.decide(ctx, keys, ok)
				t1 := time.Now()
				if err != nil {
					fail(fmt.Errorf("%s: %w", lib.name, err))
					return
				}
				for i, a := range ok {
					if !a {
						fail(fmt.Errorf("%s: request of %s denied; every request should be allowed", lib.name, keys[i]))
						return
					}
				}
				allDecisions.Add(int64(len(keys)))
				if !t0.Before(mStart) && !t1.After(end) {
					lat = append(lat, t1.Sub(t0))
				}
			}
			lats[g] = lat
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	cpu1, err := readCPU(cfg.redisPid)
	if err != nil {
		return res, err
	}
	if firstErr != nil {
		return res, firstErr
	}
	stats, err := commandStats(ctx, admin)
	if err != nil {
		return res, err
	}
	n := float64(allDecisions.Load())
	var cmds []string
	for _, st := range stats {
		if st.calls/n >= 0.01 {
			cmds = append(cmds, fmt.Sprintf("%s %.2f/decision %.1fµs/call", st.name, st.calls/n, st.usec/st.calls))
		}
	}
	res.serverUsPerDecision = float64(cpu1.server-cpu0.server) / float64(hz) * 1e6 / n
	res.commands = strings.Join(cmds, ", ")
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	res.calls = int64(len(all))
	res.decisions = res.calls * int64(lib.batch)
	res.elapsed = cfg.duration
	res.perSec = float64(res.decisions) / cfg.duration.Seconds()
	// Every decision of a batch gets the batch's latency: percentiles over
	// calls are percentiles over decisions.
	res.p50 = quantile(all, 0.50)
	res.p99 = quantile(all, 0.99)
	res.foreign, res.steal, res.clientCPU, res.serverCPU = cpu1.sub(cpu0, wall)
	return res, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// prepareKeys makes one request for every key (batches of lib.batch), so
// that the measured decisions find existing state.
func prepareKeys(ctx context.Context, lim limiter, lib library, keys []string, conc int) error {
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	chunk := lib.batch
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := make([]bool, chunk)
			for i := g * chunk; i < len(keys); i += conc * chunk {
				ks := keys[i:min(i+chunk, len(keys))]
				if err := lim.decide(ctx, ks, ok[:len(ks)]); err != nil {
					errs <- err
					return
				}
				for j := range ks {
					if !ok[j] {
						errs <- errors.New("first request of " + ks[j] + " denied")
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cpuSample: the machine's busy (user, nice, system) and steal time
// (/proc/stat, jiffies), this process's CPU time (getrusage) and
// redis-server's (/proc/<pid>/stat).
type cpuSample struct {
	busy, steal, total int64 // jiffies
	self               time.Duration
	server             int64 // jiffies
}

var hz = int64(100) // USER_HZ; Linux reports /proc times in 1/100 s

func readCPU(redisPid int) (cpuSample, error) {
	var s cpuSample
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s, errors.New("/proc/stat: unexpected first line")
	}
	v := make([]int64, len(f))
	for i := 1; i < len(f); i++ {
		v[i], _ = strconv.ParseInt(f[i], 10, 64)
	}
	// user nice system idle iowait irq softirq steal. Interrupt time is
	// left out of busy: the loopback traffic between client and server is
	// processed in softirq, which no process's CPU time includes.
	s.busy = v[1] + v[2] + v[3]
	s.steal = v[8]
	s.total = v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7] + v[8]
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s, err
	}
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if redisPid > 0 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", redisPid))
		if err != nil {
			return s, err
		}
		str := string(b)
		rest := str[strings.LastIndexByte(str, ')')+2:]
		g := strings.Fields(rest) // g[0] is field 3 (state)
		ut, _ := strconv.ParseInt(g[11], 10, 64)
		st, _ := strconv.ParseInt(g[12], 10, 64)
		s.server = ut + st
	}
	return s, nil
}

// sub returns, as percentages of all CPUs over wall: the busy time of other
// processes, steal, this process's and redis-server's CPU.
func (b cpuSample) sub(a cpuSample, wall time.Duration) (foreign, steal, self, server float64) {
	capacity := wall.Seconds() * float64(nCPU)
	busy := float64(b.busy-a.busy) / float64(hz)
	selfS := (b.self - a.self).Seconds()
	serverS := float64(b.server-a.server) / float64(hz)
	foreign = (busy - selfS - serverS) / capacity * 100
	if foreign < 0 {
		foreign = 0
	}
	return foreign, float64(b.steal-a.steal) / float64(hz) / capacity * 100, selfS / capacity * 100, serverS / capacity * 100
}

type cmdStat struct {
	name        string
	calls, usec float64
}

// commandStats parses INFO commandstats (cmdstat_<name>:calls=…,usec=…,…),
// leaving out the admin client's own commands.
func commandStats(ctx context.Context, a *redis.Client) ([]cmdStat, error) {
	s, err := a.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	var out []cmdStat
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		if name == "info" || name == "config|resetstat" || name == "config" {
			continue
		}
		st := cmdStat{name: name}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.calls = x
			case "usec":
				st.usec = x
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b cmdStat) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// waitQuiet waits (up to max) until other processes use at most maxForeign
// % of all CPUs over one second, so that a run does not start in the middle
// of a neighbour's burst. It returns the last reading.
func waitQuiet(redisPid int, maxForeign float64, max time.Duration) float64 {
	deadline := time.Now().Add(max)
	for {
		a, err := readCPU(redisPid)
		if err != nil {
			return -1
		}
		t0 := time.Now()
		time.Sleep(time.Second)
		b, err := readCPU(redisPid)
		if err != nil {
			return -1
		}
		f, _, _, _ := b.sub(a, time.Since(t0))
		if f <= maxForeign || time.Now().After(deadline) {
			return f
		}
	}
}
