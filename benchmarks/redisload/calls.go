package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/benchmarks/internal/cmdstats"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// callCase is one contender of the per-call measurement: a limiter and
// the top-level command each decision sends (whose INFO commandstats
// usec_per_call is the figure: it includes the commands the script or
// function calls, which Redis also counts on their own).
type callCase struct {
	name    string
	policy  string
	command string // evalsha, fcall, …: the decision's top-level command
	batch   int    // decisions per call of the limiter (TakeBatch); 0 means 1
	new     func(ctx context.Context, c *redis.Client) (limiter, error)
}

// callParams: every decision of a run allowed (a run makes 11 requests
// per key), each key's state living through the run, and limits of the
// size policies have (at most 65,535 remaining, windows within 71
// minutes), for which floodgate replies with one integer.
var callParams = params{
	gcra:  gcraParams{count: 1000, period: time.Hour, burst: 50_000},
	fixed: fixedParams{max: 50_000, window: time.Hour},
}

// callCases are the per-call contenders: each floodgate algorithm and
// the peers' scripts, with callParams or limits of the same size, and
// floodgate's gcra and fixed_window again with loadParams (limits of 10^6
// and 10^9, past one integer's reply: floodgate replies with an array).
// floodgate reads the server's TIME, as the peers do, except in the rows
// "caller's clock". The "TakeBatch ×16" rows send 16 decisions (distinct
// keys) per Store.TakeBatch: their figure is the batch's command time
// divided by its decisions.
func callCases(fgCommand string) []callCase {
	p := callParams
	fg := func(name, text string, opts ...redisstore.Option) callCase {
		return callCase{name: name, policy: text, command: fgCommand, new: func(ctx context.Context, c *redis.Client) (limiter, error) {
			return newFloodgate(ctx, c, text, opts...)
		}}
	}
	peer := func(lib library, policy, command string) callCase {
		return callCase{name: lib.name, policy: policy, command: command, new: func(ctx context.Context, c *redis.Client) (limiter, error) {
			return lib.new(ctx, c, p)
		}}
	}
	return []callCase{
		fg("floodgate gcra", gcraText(p.gcra)),
		fg("floodgate fixed_window", fixedText(p.fixed)),
		fg("floodgate fixed_window, track", fixedText(p.fixed)+" track"),
		fg("floodgate fixed_window, track 1m for 24h", fixedText(p.fixed)+" track 1m for 24h"),
		fg("floodgate fixed_window, track 1s for 24h", fixedText(p.fixed)+" track 1s for 24h"),
		fg("floodgate gcra, track", gcraText(p.gcra)+" track"),
		fg("floodgate gcra, track 1m for 24h", gcraText(p.gcra)+" track 1m for 24h"),
		fg("floodgate token_bucket", "token_bucket 50000/1h burst 50000"),
		fg("floodgate sliding_window", "sliding_window 50000/1h resolution 1m"),
		fg("floodgate sliding_log", "sliding_log 50000/1h"),
		fg("floodgate ar1", "ar1 50000/1h decay 2"),
		fg("floodgate gcra, caller's clock", gcraText(p.gcra), redisstore.WithClock(storekit.SystemClock{})),
		fg("floodgate fixed_window, caller's clock", fixedText(p.fixed), redisstore.WithClock(storekit.SystemClock{})),
		fg("floodgate gcra, array reply", gcraText(loadParams.gcra)),
		fg("floodgate fixed_window, array reply", fixedText(loadParams.fixed)),
		batched(fg("floodgate gcra, TakeBatch ×16", gcraText(p.gcra)), 16),
		batched(fg("floodgate fixed_window, TakeBatch ×16", fixedText(p.fixed)), 16),
		batched(fg("floodgate fixed_window, TakeBatch ×16, caller's clock", fixedText(p.fixed), redisstore.WithClock(storekit.SystemClock{})), 16),
		native(fg("floodgate fixed_window, counters", counterText(p.fixed), redisstore.WithClock(storekit.SystemClock{}), redisstore.WithCounters())),
		batched(native(fg("floodgate fixed_window, counters, TakeBatch ×16", counterText(p.fixed), redisstore.WithClock(storekit.SystemClock{}), redisstore.WithCounters())), 16),
		peer(redisRateLib(), fmt.Sprintf("GCRA Limit{Rate: %d, Period: %s, Burst: %d}", p.gcra.count, p.gcra.period, p.gcra.burst), "evalsha"),
		peer(ululeLib(), fmt.Sprintf("fixed window Rate{Period: %s, Limit: %d}", p.fixed.window, p.fixed.max), "evalsha"),
		peer(throttledLib(), fmt.Sprintf("GCRA RateQuota{MaxRate: PerHour(%d), MaxBurst: %d}", p.gcra.count, p.gcra.burst-1), "eval"),
	}
}

// native returns cc measured by a counter's commands (redisstore's
// WithCounters: INCRBY and PEXPIRE per decision, no function call): its
// figure is the two commands' time together, per INCRBY.
func native(cc callCase) callCase {
	cc.command = "incrby+pexpire"
	return cc
}

// batched returns cc deciding batch requests per call.
func batched(cc callCase, batch int) callCase {
	cc.batch = batch
	return cc
}

// callResult is the best run of one contender.
type callResult struct {
	name, policy, command string
	usPerCall             float64 // best run
	runs                  []float64
	others                string // the other commands of the best run, per decision
}

// measureCalls runs each contender runs times: FLUSHALL, a fresh client
// and limiter, one request for each of keys (not measured), CONFIG
// RESETSTAT, then calls decisions from conc goroutines on keys chosen
// uniformly; the figure of a run is its command's usec_per_call.
//
// hook, when set, is run (sh -c) with the argument "start" before and
// "stop" after each run's measured calls: to zero and dump callgrind's
// counters of a redis-server run under valgrind, say.
func measureCalls(ctx context.Context, admin *redis.Client, addr string, cases []callCase, keys []string, calls, conc, runs int, hook string) ([]callResult, error) {
	var out []callResult
	for _, cc := range cases {
		r := callResult{name: cc.name, policy: cc.policy, command: cc.command}
		batch := max(cc.batch, 1)
		for run := 0; run < runs; run++ {
			if err := admin.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
				return nil, err
			}
			c := newClient(addr, conc*2)
			lim, err := cc.new(ctx, c)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("%s: %w", cc.name, err)
			}
			lib := library{name: cc.name, batch: 1}
			if err := prepareKeys(ctx, lim, lib, keys, 16); err != nil {
				c.Close()
				return nil, fmt.Errorf("%s: creating keys: %w", cc.name, err)
			}
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				c.Close()
				return nil, err
			}
			runHook(hook, "start")
			var wg sync.WaitGroup
			errs := make(chan error, conc)
			for g := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(run), uint64(g)))
					k := make([]string, batch)
					ok := make([]bool, batch)
					for i := g * batch; i < calls; i += conc * batch {
						for j := range k {
							k[j] = keys[rng.IntN(len(keys))]
						}
						if err := lim.decide(ctx, k, ok); err != nil {
							errs <- err
							return
						}
						for j := range ok {
							if !ok[j] {
								errs <- fmt.Errorf("%s: a request of %s was denied", cc.name, k[j])
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			runHook(hook, "stop")
			c.Close()
			close(errs)
			if err := <-errs; err != nil {
				return nil, err
			}
			stats, err := cmdstats.Read(ctx, admin)
			if err != nil {
				return nil, err
			}
			// The decision's commands: one, or a counter's two
			// ("incrby+pexpire"), whose time is summed per call of the
			// first.
			var us float64 = -1
			var others []string
			names := strings.Split(cc.command, "+")
			var usec, first float64
			for _, st := range stats {
				if i := slices.Index(names, st.Name); i >= 0 {
					usec += st.Usec
					if i == 0 {
						first = st.Calls
					}
				}
			}
			if first > 0 {
				us = usec / first / float64(batch)
				if cc.batch > 1 && len(names) > 1 {
					us = usec / first // a counter's commands are per decision, not per batch
				}
			}
			for _, st := range stats {
				if slices.Contains(names, st.Name) {
					continue
				} else if st.Calls >= float64(calls)/100 {
					others = append(others, fmt.Sprintf("%s %.2f× %.2fµs", st.Name, st.Calls/float64(calls), st.Usec/st.Calls))
				}
			}
			if us < 0 {
				return nil, fmt.Errorf("%s: no %s in INFO commandstats", cc.name, cc.command)
			}
			r.runs = append(r.runs, us)
			if len(r.runs) == 1 || us < r.usPerCall {
				r.usPerCall = us
				r.others = strings.Join(others, ", ")
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func printCalls(w io.Writer, rs []callResult, calls, conc, nkeys int) {
	fmt.Fprintf(w, "redis-server time per decision (INFO commandstats usec_per_call of the decision's command; for the TakeBatch rows, of the batch's command divided by its decisions): best of %d runs of %d decisions from %d goroutines on %d keys.\n\n",
		len(rs[0].runs), calls, conc, nkeys)
	fmt.Fprintln(w, "| contender | configured with | command | µs/decision (best) | all runs | commands it calls, per decision |")
	fmt.Fprintln(w, "| --- | --- | --- | ---: | --- | --- |")
	for _, r := range rs {
		var all []string
		for _, x := range r.runs {
			all = append(all, fmt.Sprintf("%.2f", x))
		}
		fmt.Fprintf(w, "| %s | `%s` | %s | %.2f | %s | %s |\n", r.name, r.policy, r.command, r.usPerCall, strings.Join(all, " "), r.others)
	}
	fmt.Fprintln(w)
}

func runHook(hook, arg string) {
	if hook == "" {
		return
	}
	if out, err := exec.Command("sh", "-c", hook+" "+arg).CombinedOutput(); err != nil {
		log.Printf("hook %s %s: %v\n%s", hook, arg, err, out)
	}
}
