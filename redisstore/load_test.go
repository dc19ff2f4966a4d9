package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
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

// hammer runs goroutines on clients (round robin) deciding cost 1 for one
// key until d has passed, and returns every decision.
func hammer(t *testing.T, stores []*redisstore.Store, p *floodgate.Policy, key string, goroutines int, d time.Duration) []floodgate.Decision {
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
			for time.Now().Before(stop) {
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

// TestConcurrentClients: 8 clients × 32 goroutines on one key, on the
// server's clock. Admitted cost never exceeds what SPEC.md allows for the
// elapsed time; fixed_window, sliding_window and sliding_log admit exactly
// max per window while demand exceeds it.
func TestConcurrentClients(t *testing.T) {
	srv := redistest.StartServer(t)
	var stores []*redisstore.Store
	for i := 0; i < 8; i++ {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: 32})
		t.Cleanup(func() { c.Close() })
		stores = append(stores, newStore(t, c))
	}
	run := 2 * time.Second
	if testing.Short() {
		run = 500 * time.Millisecond
	}
	for i, text := range []string{
		"fixed_window 40/250ms",
		"sliding_window 40/500ms resolution 50ms",
		"sliding_log 40/250ms count_denied false",
		"sliding_log 40/250ms", // count_denied by default: hammering keeps it blocked
		"token_bucket 40/250ms burst 10",
		"gcra 100/1s burst 10",
		"ar1 30/100ms decay 2",
	} {
		p, err := floodgate.ParsePolicy(fmt.Sprintf("conc%d", i), text)
		if err != nil {
			t.Fatal(err)
		}
		first := serverMicros(t, srv)
		ds := hammer(t, stores, &p, "hot", 256, run)
		last := serverMicros(t, srv)
		var admitted int64
		byRemaining := map[int64]int{}
		for _, d := range ds {
			if d.Allowed {
				admitted++
				byRemaining[d.Remaining]++
			}
		}
		bound := floodgatetest.MaxAdmitted(&p, 1, first, last)
		t.Logf("%-40s %6d decisions, %5d admitted, SPEC bound %d", p.String(), len(ds), admitted, bound)
		if admitted > bound {
			t.Errorf("%s: admitted %d over %v; SPEC.md allows at most %d", p.String(), admitted, time.Duration(last-first)*time.Microsecond, bound)
		}
		if int64(len(ds)) < 3*bound {
			t.Errorf("%s: only %d decisions for a bound of %d: demand did not exceed the limit", p.String(), len(ds), bound)
		}
		if p.Algorithm == floodgate.SlidingLog && storekit.CountsDenied(&p) {
			// Every denied attempt is recorded: the log never empties while
			// 256 goroutines hammer, so only the first max pass.
			if admitted != p.Max {
				t.Errorf("%s: %d admitted while hammered; want exactly the first %d", p.String(), admitted, p.Max)
			}
			continue
		}
		switch p.Algorithm {
		case floodgate.FixedWindow:
			// Each window's admissions see every remaining value from max-1
			// down to 0 exactly once: equal counts mean exactly max per window
			// (the last window may be cut short by the end of the run).
			windows := byRemaining[0]
			for r := int64(0); r < p.Max; r++ {
				if c := byRemaining[r]; c < windows || c > windows+1 {
					t.Errorf("%s: remaining %d seen %d times, remaining 0 %d times: not exactly %d per window (%v)", p.String(), r, c, windows, p.Max, byRemaining)
					break
				}
			}
		case floodgate.SlidingWindow, floodgate.SlidingLog:
			// Rolling windows admit as old cost expires: while demand exceeds
			// the limit, the total stays within one window's max of the bound.
			max := p.Max
			if p.Algorithm == floodgate.SlidingWindow {
				max = int64(p.Limits[0].Max)
			}
			if admitted < bound-max {
				t.Errorf("%s: admitted %d, below the bound %d less one window (%d): the limiter held back", p.String(), admitted, bound, max)
			}
		}
	}
}

// TestScriptFlushUnderLoad: SCRIPT FLUSH during a load run: decisions go on
// (the script is sent again on NOSCRIPT, which means it did not run), and
// nothing is counted twice: the count in Redis equals the adds that
// succeeded, single and batched.
func TestScriptFlushUnderLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv))
	p := floodgate.Policy{Name: "flush", Algorithm: floodgate.FixedWindow, Max: floodgate.MaxCost, Window: time.Hour}
	ctx := context.Background()
	var ok, failed atomic.Int64
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
				if g%2 == 0 {
					if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1}); err != nil {
						failed.Add(1)
					} else {
						ok.Add(1)
					}
					continue
				}
				s.TakeBatch(ctx, reqs, out)
				for _, r := range out {
					if r.Err != nil {
						failed.Add(1)
					} else {
						ok.Add(1)
					}
				}
			}
		}(g)
	}
	for i := 0; i < 10; i++ {
		time.Sleep(50 * time.Millisecond)
		if _, err := srv.Do(t, "SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	// A peek reads the count whatever form the state is stored in: its
	// remaining is what is left after the add of 1 it previews.
	d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1, Peek: true})
	if err != nil {
		t.Fatal(err)
	}
	count := p.Max - d.Remaining - 1
	t.Logf("%d adds succeeded, %d failed; Redis counted %d", ok.Load(), failed.Load(), count)
	if failed.Load() != 0 {
		t.Errorf("%d decisions failed across SCRIPT FLUSH", failed.Load())
	}
	if count != ok.Load() {
		t.Errorf("Redis counted %d, but %d adds succeeded: counted twice or lost", count, ok.Load())
	}
}

// TestServerDownUnderLoad: stopping redis-server under load gives callers
// ErrUnavailable within their deadline, leaks no goroutine, and the store
// works again once the server is back.
func TestServerDownUnderLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: 32, DialTimeout: 100 * time.Millisecond})
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
	time.Sleep(200 * time.Millisecond)
	srv.Stop(t)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d decided, %d unavailable, %d other errors; slowest call %v", fine.Load(), unavailable.Load(), other.Load(), time.Duration(slowest.Load()))
	if unavailable.Load() == 0 || other.Load() != 0 {
		t.Errorf("with the server down: %d ErrUnavailable, %d other errors", unavailable.Load(), other.Load())
	}
	if max := time.Duration(slowest.Load()); max > deadline+50*time.Millisecond {
		t.Errorf("a call took %v with a deadline of %v", max, deadline)
	}

	srv.Restart(t)
	var d floodgate.Decision
	var err error
	for i := 0; i < 50; i++ { // the pool reconnects on demand
		if d, err = s.Take(context.Background(), floodgate.Request{Policy: &p, Key: "k", N: 1}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || !d.Allowed {
		t.Fatalf("after the server came back: %v, %v", d, err)
	}
	c.Close()
	deadlineGoroutines := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadlineGoroutines) {
			t.Fatalf("%d goroutines after the run, %d before: a leak", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
