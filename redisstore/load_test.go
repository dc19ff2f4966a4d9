package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// hammer runs goroutines on stores (round robin) deciding cost 1 for one
// key, each until it has made perGoroutine requests (perGoroutine > 0) or,
// with perGoroutine 0, until d has passed, and returns every decision.
func hammer(t *testing.T, stores []*redisstore.Store, p *floodgate.Policy, key string, goroutines, perGoroutine int, d time.Duration) []floodgate.Decision {
	t.Helper()
	var mu sync.Mutex
	var all []floodgate.Decision
	var failed atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(s *redisstore.Store) {
			defer wg.Done()
			var mine []floodgate.Decision
			for i := 0; perGoroutine > 0 && i < perGoroutine || perGoroutine == 0 && time.Now().Before(stop); i++ {
				dec, err := s.Take(context.Background(), floodgate.Request{Policy: p, Key: key, N: 1})
				if err != nil {
					failed.Store(err)
					return
				}
				mine = append(mine, dec)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}(stores[g%len(stores)])
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("%s: %v", p.String(), err)
	}
	return all
}

func serverMicros(t *testing.T, srv *redistest.Server) int64 {
	r, err := srv.Do(t, "TIME")
	if err != nil {
		t.Fatal(err)
	}
	v := r.([]any)
	sec, _ := strconv.ParseInt(v[0].(string), 10, 64)
	usec, _ := strconv.ParseInt(v[1].(string), 10, 64)
	return sec*1_000_000 + usec
}

// admissions returns the cost admitted among ds and how many admitted
// decisions saw each remaining value.
func admissions(ds []floodgate.Decision) (int64, map[int64]int) {
	var admitted int64
	byRemaining := map[int64]int{}
	for _, d := range ds {
		if d.Allowed {
			admitted++
			byRemaining[d.Remaining]++
		}
	}
	return admitted, byRemaining
}

// TestConcurrentClients: 8 clients × 32 goroutines on one key, on the
// server's clock. Nothing it asserts depends on how fast the machine runs
// them.
//
// In one window: 2,048 requests, far more than any max, for policies
// whose window outlasts any run: the window-counting algorithms admit
// exactly max, each remaining value from max-1 down to 0 once; the
// rate-based ones at least what a fresh key holds (burst, max) and at most
// what SPEC.md allows for the elapsed time.
//
// Across windows: hammering for a while with short windows admits at
// most what SPEC.md allows for the elapsed time, and a fixed window's
// admissions count down within each window, so no remaining value is seen
// more often than a higher one.
func TestConcurrentClients(t *testing.T) {
	srv := redistest.StartServer(t)
	var stores []*redisstore.Store
	for i := 0; i < 8; i++ {
		// hammer fails on any error: replies are read for up to clientRead.
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: 32, ReadTimeout: clientRead, WriteTimeout: clientRead})
		t.Cleanup(func() { c.Close() })
		stores = append(stores, newStore(t, c))
	}
	parse := func(i int, text string) floodgate.Policy {
		p, err := floodgate.ParsePolicy(fmt.Sprintf("conc%d", i), text)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	for i, tc := range []struct {
		text  string
		exact bool  // exactly max admitted, remaining max-1 … 0 once each
		least int64 // else at least this many
	}{
		{"fixed_window 40/1h align first", true, 0},
		{"sliding_window 40/1h resolution 1m", true, 0},
		{"sliding_log 40/1h count_denied false", true, 0},
		{"sliding_log 40/1h", true, 0}, // count_denied by default: the denials change nothing admitted
		{"token_bucket 40/1h burst 10", false, 10},
		{"gcra 100/1s burst 10", false, 10},
		{"ar1 30/100ms decay 2", false, 30},
	} {
		p := parse(i, tc.text)
		first := serverMicros(t, srv)
		ds := hammer(t, stores, &p, "one", 256, 8, 0)
		last := serverMicros(t, srv)
		admitted, byRemaining := admissions(ds)
		bound := floodgatetest.MaxAdmitted(&p, 1, first, last)
		t.Logf("one window: %-40s %5d decisions, %4d admitted, SPEC bound %d", p.String(), len(ds), admitted, bound)
		if len(ds) != 2048 {
			t.Fatalf("%s: %d decisions, want 2048", p.String(), len(ds))
		}
		if admitted > bound {
			t.Errorf("%s: admitted %d over %v; SPEC.md allows at most %d", p.String(), admitted, time.Duration(last-first)*time.Microsecond, bound)
		}
		if !tc.exact {
			if admitted < tc.least {
				t.Errorf("%s: admitted %d; a fresh key admits at least %d", p.String(), admitted, tc.least)
			}
			continue
		}
		max := p.Max
		if p.Algorithm == floodgate.SlidingWindow {
			max = int64(p.Limits[0].Max)
		}
		if admitted != max {
			t.Errorf("%s: admitted %d of 2048 in one window; want exactly %d", p.String(), admitted, max)
		}
		for r := int64(0); r < max; r++ {
			if byRemaining[r] != 1 {
				t.Errorf("%s: remaining %d seen %d times; want once (%v)", p.String(), r, byRemaining[r], byRemaining)
				break
			}
		}
	}

	run := time.Second
	if testing.Short() {
		run = 300 * time.Millisecond
	}
	for i, text := range []string{
		"fixed_window 40/250ms",
		"sliding_window 40/500ms resolution 50ms",
		"sliding_log 40/250ms count_denied false",
		"sliding_log 40/250ms",
		"token_bucket 40/250ms burst 10",
		"gcra 100/1s burst 10",
		"ar1 30/100ms decay 2",
	} {
		p := parse(100+i, text)
		first := serverMicros(t, srv)
		ds := hammer(t, stores, &p, "hot", 256, 0, run)
		last := serverMicros(t, srv)
		admitted, byRemaining := admissions(ds)
		bound := floodgatetest.MaxAdmitted(&p, 1, first, last)
		t.Logf("windows:    %-40s %5d decisions, %4d admitted, SPEC bound %d", p.String(), len(ds), admitted, bound)
		if admitted > bound {
			t.Errorf("%s: admitted %d over %v; SPEC.md allows at most %d", p.String(), admitted, time.Duration(last-first)*time.Microsecond, bound)
		}
		if p.Algorithm == floodgate.FixedWindow {
			// A window that admitted k saw remaining max-1 down to max-k.
			for r := int64(0); r+1 < p.Max; r++ {
				if byRemaining[r] > byRemaining[r+1] {
					t.Errorf("%s: remaining %d seen %d times, remaining %d only %d: a window did not count down (%v)", p.String(), r, byRemaining[r], r+1, byRemaining[r+1], byRemaining)
					break
				}
			}
			if byRemaining[p.Max] != 0 {
				t.Errorf("%s: an admission left the whole max remaining", p.String())
			}
		}
	}
}

// TestFlushUnderLoad: FUNCTION FLUSH and SCRIPT FLUSH during a load run,
// on both paths: decisions go on (a call whose function or script is
// missing did not run, and is sent again with the script's source), and
// nothing is counted twice: the count in Redis equals the adds that
// succeeded, single and batched. Peeks run meanwhile and fail neither.
// The library is back once the run is over. The store is preloaded, so
// that an EVAL is a call a flush hit, and after each flush the test waits
// until the server has run a worker's command, however slowly the workers
// run: the first flush is hit at least.
func TestFlushUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		path    string
		opts    []redisstore.Option
		flushes [][]string
	}{
		{"Functions", nil, [][]string{{"FUNCTION", "FLUSH"}, {"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"}}},
		{"Scripts", []redisstore.Option{redisstore.WithScripts()}, [][]string{{"SCRIPT", "FLUSH"}}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := newStore(t, client(t, srv), tc.opts...)
			// A window from the first decision: an hour's end on the clock
			// would reset the count the test compares.
			p := floodgate.Policy{Name: "flush", Algorithm: floodgate.FixedWindow, Max: floodgate.MaxCost, Window: time.Hour, Align: floodgate.AlignFirst}
			ctx := context.Background()
			if err := s.Preload(ctx); err != nil {
				t.Fatal(err)
			}
			// ran counts the workers' commands the server has run.
			ran := func() (n int64) {
				for _, cmd := range []string{"fcall", "fcall_ro", "evalsha", "eval"} {
					n += srv.Calls(t, cmd)
				}
				return n
			}
			// waitRan waits until the server has run a worker's command
			// since it counted since.
			waitRan := func(since int64, after string) {
				t.Helper()
				for deadline := time.Now().Add(30 * time.Second); ran() == since; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("no decision reached the server within 30 s %s", after)
					}
				}
			}
			var ok, failed, peeks atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					reqs := make([]floodgate.Request, 8)
					out := make([]storekit.Outcome, 8)
					for i := range reqs {
						reqs[i] = floodgate.Request{Policy: &p, Key: "k", N: 1}
					}
					for {
						select {
						case <-stop:
							return
						default:
						}
						switch g % 4 {
						case 0, 1:
							if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1}); err != nil {
								failed.Add(1)
							} else {
								ok.Add(1)
							}
						case 2:
							s.TakeBatch(ctx, reqs, out)
							for _, r := range out {
								if r.Err != nil {
									failed.Add(1)
								} else {
									ok.Add(1)
								}
							}
						case 3:
							if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1, Peek: true}); err != nil {
								failed.Add(1)
							} else {
								peeks.Add(1)
							}
						}
					}
				}(g)
			}
			waitRan(ran(), "of the start")
			for i := 0; i < 12; i++ {
				time.Sleep(40 * time.Millisecond)
				flush := tc.flushes[i%len(tc.flushes)]
				if _, err := srv.Do(t, flush...); err != nil {
					t.Fatal(err)
				}
				// A command run after the flush: one whose function or
				// script the flush removed fails, and is sent again by EVAL.
				waitRan(ran(), fmt.Sprintf("after flush %d (%s)", i, strings.Join(flush, " ")))
			}
			close(stop)
			wg.Wait()
			// A peek reads the count: its remaining is what is left after
			// the add of 1 it previews.
			d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1, Peek: true})
			if err != nil {
				t.Fatal(err)
			}
			count := p.Max - d.Remaining - 1
			t.Logf("%d adds succeeded, %d peeks, %d calls failed; Redis counted %d", ok.Load(), peeks.Load(), failed.Load(), count)
			if failed.Load() != 0 {
				t.Errorf("%d decisions failed across the flushes", failed.Load())
			}
			if count != ok.Load() {
				t.Errorf("Redis counted %d, but %d adds succeeded: counted twice or lost", count, ok.Load())
			}
			// The flushes did hit calls: some were sent again by EVAL (the
			// first call after the first flush, at least).
			stats, err := srv.Do(t, "INFO", "commandstats")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(stats.(string), "cmdstat_eval:calls=") {
				t.Errorf("no call was sent again with EVAL: the flushes did not test anything\n%s", stats)
			}
			if tc.opts == nil {
				// The last flush was followed by calls: the library is back.
				libs, err := srv.Do(t, "FUNCTION", "LIST", "LIBRARYNAME", redisstore.LibraryName())
				if err != nil || len(libs.([]any)) != 1 {
					t.Errorf("after the run, FUNCTION LIST = %v, %v; want the library reloaded", libs, err)
				}
			}
		})
	}
}

// TestServerDownUnderLoad: stopping redis-server under load gives callers
// ErrUnavailable within their deadline, leaks no goroutine, and the store
// works again once the server is back.
func TestServerDownUnderLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	c := patient(t, srv, 32)
	s := newStore(t, c)
	p := floodgate.Policy{Name: "down", Algorithm: floodgate.GCRA, Max: 1_000_000, Window: time.Second, Burst: 1000}
	before := runtime.NumGoroutine()
	const deadline = 100 * time.Millisecond
	var slowest atomic.Int64
	var unavailable, other, fine atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				_, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1})
				took := time.Since(start)
				cancel()
				for {
					old := slowest.Load()
					if int64(took) <= old || slowest.CompareAndSwap(old, int64(took)) {
						break
					}
				}
				switch {
				case err == nil:
					fine.Add(1)
				case errors.Is(err, floodgate.ErrUnavailable):
					unavailable.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	// Decisions flowing, then the server stopped under them: the run
	// goes on until some call has found it down, however slowly the
	// workers run.
	poll := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !done(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 30 s", what)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	poll("decision", func() bool { return fine.Load() > 0 })
	srv.Stop(t)
	time.Sleep(500 * time.Millisecond)
	poll("call unavailable", func() bool { return unavailable.Load() > 0 || other.Load() > 0 })
	close(stop)
	wg.Wait()
	t.Logf("%d decided, %d unavailable, %d other errors; slowest call %v", fine.Load(), unavailable.Load(), other.Load(), time.Duration(slowest.Load()))
	if unavailable.Load() == 0 || other.Load() != 0 {
		t.Errorf("with the server down: %d ErrUnavailable, %d other errors", unavailable.Load(), other.Load())
	}
	// The deadline bounds every call: none waits for the client's own
	// timeouts and dial retries (see hung).
	if max := time.Duration(slowest.Load()); max > hung {
		t.Errorf("a call took %v with a deadline of %v: it waited for the client", max, deadline)
	}

	srv.Restart(t)
	// go-redis dials in the background of its callers and holds a slot of
	// the pool until the dial ends, so the store answers again once the
	// dial that was waiting clientWait between attempts has ended.
	// Each attempt gets a minute, so that a loaded machine does not cut
	// the one that succeeds; an attempt may fail (a connection the
	// restart closed, no turn of the pool within its timeout), so there
	// are several, for up to 30 s.
	var d floodgate.Decision
	var err error
	for back := time.Now().Add(30 * time.Second); time.Now().Before(back); time.Sleep(20 * time.Millisecond) { // the pool reconnects on demand
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		d, err = s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1})
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil || !d.Allowed {
		t.Fatalf("after the server came back: %v, %v", d, err)
	}
	c.Close()
	// Every goroutine of the run and of the client ends: the client's
	// dials wait clientWait between attempts; 30 s bounds a leak, not
	// the machine's speed.
	deadlineGoroutines := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadlineGoroutines) {
			t.Fatalf("%d goroutines after the run, %d before: a leak", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
