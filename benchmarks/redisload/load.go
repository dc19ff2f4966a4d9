package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/benchmarks/internal/cmdstats"
	"github.com/floodgatehq/floodgate/benchmarks/internal/procstat"
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
	// Pids[0] of a sample is redis-server's CPU time.
	cpu0, err := procstat.Read(cfg.redisPid)
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
	cpu1, err := procstat.Read(cfg.redisPid)
	if err != nil {
		return res, err
	}
	if firstErr != nil {
		return res, firstErr
	}
	stats, err := cmdstats.Read(ctx, admin)
	if err != nil {
		return res, err
	}
	n := float64(allDecisions.Load())
	res.serverUsPerDecision = float64(cpu1.Pids[0]-cpu0.Pids[0]) / float64(procstat.ClockTick()) * 1e6 / n
	res.commands = cmdstats.PerDecision(stats, n)
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
	sh := cpu1.Shares(cpu0, wall)
	res.foreign, res.steal, res.clientCPU, res.serverCPU = sh.Foreign, sh.Steal, sh.Self, sh.Pids[0]
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
