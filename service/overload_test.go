package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
)

// overloadRecorder is a recorder that counts the decisions the overload
// bound refused too.
type overloadRecorder struct {
	recorder
	overloaded atomic.Int64
	byReason   sync.Map // reason -> *atomic.Int64
}

func (r *overloadRecorder) Overloaded(reason, mode string, n int) {
	r.overloaded.Add(int64(n))
	v, _ := r.byReason.LoadOrStore(reason+"/"+mode, new(atomic.Int64))
	v.(*atomic.Int64).Add(int64(n))
}

func (r *overloadRecorder) reason(key string) int64 {
	if v, ok := r.byReason.Load(key); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// TestOverloadStalledStore: a redis-server behind a proxy that stalls, as
// a saturated Redis does.
//
// First, with nothing timing out (store.timeout and queue_wait of a
// minute): the bound full (2 calls in flight, or 1 batched decision; 8
// decisions queued), further
// decisions are refused at once with ErrOverloaded; once the proxy
// resumes, the store decides every one it was sent, and none is degraded.
//
// Then, with a short store.timeout and queue_wait, many callers at once
// against the stalled store: each returns within queue_wait +
// store.timeout (give or take a generous margin: liveness, not speed),
// with ErrOverloaded or a fail-open answer, and every fail-open answer is
// a store call that was sent and timed out while no caller queued: none
// comes from queueing.
func TestOverloadStalledStore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			t.Parallel()
			proxy := redistest.StartProxy(t, srv.Addr)
			// The context (store.timeout) bounds every read, not go-redis's
			// 3s read timeout: a loaded machine may keep phase 1 (where
			// nothing must time out) stalled longer than that.
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 16,
				ReadTimeout: clientTimeout, WriteTimeout: clientTimeout})
			t.Cleanup(func() { c.Close() })
			// The calls in flight that fill the bound: without batching,
			// a bound of 2 calls; with it, a bound of 1 decision, so that
			// one batch fills it whether the batcher takes the store for
			// near or far (a loaded machine's round trips may be either).
			const (
				maxQueue = 8
				margin   = 10 * time.Second // a loaded machine: liveness only
			)
			inflight := map[bool]int{false: 2, true: 1}[batched]
			maxInflight := map[bool]int{false: 2, true: 1}[batched]
			config := func(storeTimeout, queueWait time.Duration) string {
				return fmt.Sprintf(`
policies: {fw: "fixed_window 1000000/1h"}
store: {timeout: %s, batching: %t}
failure: {mode: open, breaker: {disabled: true}}
overload: {max_inflight: %d, max_queue: %d, queue_wait: %s}
`, storeTimeout, batched, maxInflight, maxQueue, queueWait)
			}
			st, err := redisstore.New(c, redisstore.WithPrefix(fmt.Sprintf("ov%d", time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			rec := &overloadRecorder{}
			svc, err := service.New(mustParse(t, config(time.Minute, time.Minute)), service.Options{Store: st, Logger: quiet, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			if d := one(t, svc, "fw", "warm"); d.Degraded {
				t.Fatalf("before the stall: %v", d)
			}
			// Every connection the test will use is open before the
			// stall: a connection dialed through the stalled proxy would
			// wait on its handshake, not on the store, and could fail it
			// (and end its call early) at a read timeout, so that the
			// queue drained before the test saw it full.
			warmPool(t, c, 16)

			type answer struct {
				d    floodgate.Decision
				err  error
				took time.Duration
			}
			call := func(wg *sync.WaitGroup, out *answer) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					v, err := svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: "k"}})
					out.took, out.err = time.Since(start), err
					if err == nil {
						out.d = v.Items[0].Decision
					}
				}()
			}

			// Phase 1: the bound full, nothing times out.
			base := rec.snapshot()
			proxy.Stall()
			var held, refusedWG sync.WaitGroup
			sent := make([]answer, inflight)
			for i := range sent {
				call(&held, &sent[i])
				waitFor(t, "a call in flight", func() bool {
					in, q := service.Bound(svc)
					return in == i+1 && q == 0
				})
			}
			var lastIn, lastQ int
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("last seen: %d in flight, %d queued; overloaded %d", lastIn, lastQ, rec.overloaded.Load())
				}
			})
			queued := make([]answer, maxQueue)
			for i := range queued {
				call(&held, &queued[i])
			}
			waitFor(t, "the queue full", func() bool {
				in, q := service.Bound(svc)
				if q != maxQueue && t.Context().Err() == nil {
					lastIn, lastQ = in, q
				}
				return q == maxQueue
			})
			refused := make([]answer, 8)
			for i := range refused {
				call(&refusedWG, &refused[i])
			}
			refusedWG.Wait()
			proxy.Resume()
			held.Wait()
			for i, a := range refused {
				if !errors.Is(a.err, service.ErrOverloaded) || a.took > margin {
					t.Errorf("refused %d: %v, %v after %s; want ErrOverloaded at once", i, a.d, a.err, a.took)
				}
			}
			for i, a := range append(sent, queued...) {
				if a.err != nil || a.d.Degraded {
					t.Errorf("sent or queued %d: %v, %v; want the store's decision once resumed", i, a.d, a.err)
				}
			}
			got := rec.snapshot()
			if d := got.degraded - base.degraded; d != 0 {
				t.Errorf("phase 1: %d degraded answers; want none", d)
			}
			if f := rec.reason("queue_full/backpressure"); f != int64(len(refused)) {
				t.Errorf("phase 1: %d refused as queue_full counted; want %d", f, len(refused))
			}
			if n := svc.Queued(); n != 0 {
				t.Errorf("Queued() = %d after every caller returned; want 0", n)
			}

			// Phase 2: short timeouts, many callers at once.
			const storeTimeout, queueWait = 300 * time.Millisecond, 100 * time.Millisecond
			if err := svc.Reload(mustParse(t, config(storeTimeout, queueWait))); err != nil {
				t.Fatal(err)
			}
			base, baseOver, baseCut := rec.snapshot(), rec.overloaded.Load(), rec.reason("store_timeout/backpressure")
			proxy.Stall()
			var all sync.WaitGroup
			many := make([]answer, inflight+maxQueue+16)
			for i := range many {
				call(&all, &many[i])
			}
			all.Wait()
			proxy.Resume()
			bound := queueWait + storeTimeout + margin
			var overloaded int64
			var degraded int
			for i, a := range many {
				switch {
				case a.took > bound:
					t.Errorf("caller %d: returned after %s; want within %s", i, a.took, bound)
				case errors.Is(a.err, service.ErrOverloaded):
					overloaded++
				case a.err == nil && a.d.Degraded && a.d.Allowed:
					degraded++
				default:
					t.Errorf("caller %d: %v, %v; want ErrOverloaded or a fail-open answer of a timed-out call", i, a.d, a.err)
				}
			}
			got = rec.snapshot()
			cut := rec.reason("store_timeout/backpressure") - baseCut
			if d, e := got.degraded-base.degraded, got.storeErrors-base.storeErrors; d != degraded || int64(d)+cut != int64(e) {
				t.Errorf("phase 2: %d degraded answers seen, %d counted, %d cut while callers queued, %d failed store calls; want degraded seen = counted, and counted + cut = failed: only a call sent to the store may end degraded", degraded, d, cut, e)
			}
			if o := rec.overloaded.Load() - baseOver; o != overloaded {
				t.Errorf("phase 2: %d ErrOverloaded answers, %d counted", overloaded, o)
			}
			if n := svc.Queued(); n != 0 {
				t.Errorf("Queued() = %d after every caller returned; want 0", n)
			}
			t.Logf("phase 2: %d callers: %d refused (backpressure; %d of them cut while callers queued), %d fail-open after a store timeout", len(many), overloaded, cut, degraded)

			// Resumed: the store decides again (the timed-out connections
			// are replaced). The timeouts are a minute again first: a
			// call that must be decided by the store has no short
			// store.timeout to miss on a loaded machine.
			if err := svc.Reload(mustParse(t, config(time.Minute, time.Minute))); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a decision by the store after Resume", func() bool {
				v, err := svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: "after"}})
				return err == nil && !v.Items[0].Decision.Degraded
			})
		})
	}
}

// TestOverloadFailurePolicyMode: overload mode failure_policy answers a
// refused decision as the failure mode does (here closed: denied,
// degraded, Retry-After), never with ErrOverloaded.
func TestOverloadFailurePolicyMode(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	// A minute's read timeout (not go-redis's 3s): the first call, dialed
	// through the stalled proxy, stays in flight until Resume however long
	// a loaded machine takes to queue the others; failed at 3s, it would
	// free the bound and let them through to the store.
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2,
		ReadTimeout: clientTimeout, WriteTimeout: clientTimeout})
	t.Cleanup(func() { c.Close() })
	const cfg = `
policies: {fw: "fixed_window 1000000/1h"}
store: {timeout: 1m, batching: false}
failure: {mode: closed, retry_after: 2s, breaker: {disabled: true}}
overload: {mode: failure_policy, max_inflight: 1, max_queue: 1, queue_wait: 100ms}
`
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rec := &overloadRecorder{}
	svc, err := service.New(mustParse(t, cfg), service.Options{Store: st, Logger: quiet, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stall()
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: "k"}})
	}()
	waitFor(t, "a call in flight", func() bool { in, _ := service.Bound(svc); return in == 1 })
	var wg sync.WaitGroup
	res := make([]service.Verdict, 2)
	errs := make([]error, 2)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: "k"}})
		}()
	}
	wg.Wait()
	for i := range res {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v; want the failure policy's answer", i, errs[i])
		}
		if d := res[i].Items[0].Decision; d.Allowed || !d.Degraded || d.RetryAfter != 2*time.Second {
			t.Errorf("caller %d: %v; want denied, degraded, retry after 2s (failure mode closed)", i, d)
		}
	}
	if n := rec.overloaded.Load(); n != 2 {
		t.Errorf("%d refused decisions counted; want 2", n)
	}
	proxy.Resume()
	<-done
}

// peakStore is a store that records the most calls it had in flight at
// once.
type peakStore struct {
	*redisstore.Store
	cur, peak atomic.Int64 // decisions in flight
}

func (s *peakStore) enter(n int64) {
	n = s.cur.Add(n)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (s *peakStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	s.enter(1)
	defer s.cur.Add(-1)
	return s.Store.Take(ctx, req)
}

func (s *peakStore) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	s.enter(int64(len(reqs)))
	defer s.cur.Add(-int64(len(reqs)))
	s.Store.TakeBatch(ctx, reqs, out)
}

// TestOverloadHealthyExact: a healthy store and far more callers (256)
// than the bound (4 decisions in flight): every decision is the store's —
// none degraded, none refused — the decisions in flight at the store never
// exceed the bound, batched or not,
// and a fixed window admits exactly its limit. The queue is deep and its
// wait generous, so that nothing here depends on the machine's speed.
func TestOverloadHealthyExact(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			t.Parallel()
			const (
				callers, each = 256, 8
				limit         = 300
				bound         = 4
			)
			cfg := fmt.Sprintf(`
policies: {fw: "fixed_window %d/1h"}
store: {timeout: 1m, batching: %t}
overload: {max_inflight: %d, max_queue: 100000, queue_wait: 1m}
`, limit, batched, bound)
			rs, err := redisstore.New(redisClient(t, srv), redisstore.WithPrefix(fmt.Sprintf("ovx%d", time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() })
			st := &peakStore{Store: rs}
			rec := &overloadRecorder{}
			svc, err := service.New(mustParse(t, cfg), service.Options{Store: st, Logger: quiet, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			var admitted, denied, degraded, failed atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range each {
						v, err := svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: "hot"}})
						switch {
						case err != nil:
							failed.Add(1)
						case v.Items[0].Decision.Degraded:
							degraded.Add(1)
						case v.Allowed:
							admitted.Add(1)
						default:
							denied.Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if failed.Load() != 0 || degraded.Load() != 0 || rec.overloaded.Load() != 0 {
				t.Errorf("%d errors, %d degraded, %d refused by the bound; want none", failed.Load(), degraded.Load(), rec.overloaded.Load())
			}
			if admitted.Load() != limit || denied.Load() != callers*each-limit {
				t.Errorf("admitted %d, denied %d; want exactly %d and %d", admitted.Load(), denied.Load(), limit, callers*each-limit)
			}
			if p := st.peak.Load(); p > bound {
				t.Errorf("%d decisions in flight at the store at once; want at most %d", p, bound)
			}
		})
	}
}

// heldStore is a memory store whose decisions wait while hold is set; as
// a BatchStore (batch) it makes the service batch.
type heldStore struct {
	floodgate.Store
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if s.hold.Load() {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.Take(ctx, req)
}

type heldBatchStore struct{ *heldStore }

// takeEach is the TakeBatch of the test stores here: one Take each.
func takeEach(ctx context.Context, s floodgate.Store, reqs []floodgate.Request, out []storekit.Outcome) {
	for i := range reqs {
		d, err := s.Take(ctx, reqs[i])
		out[i] = storekit.Outcome{Decision: d, Err: err}
	}
}

func (s heldBatchStore) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	takeEach(ctx, s, reqs, out)
}

// newHeld returns a heldStore over a new memory store, and the store to
// give the service: the heldStore itself, or as a BatchStore when batched.
func newHeld(t *testing.T, batched bool) (*heldStore, floodgate.Store) {
	held := &heldStore{Store: newMem(t, storekit.SystemClock{}), entered: make(chan struct{}), release: make(chan struct{})}
	if batched {
		return held, heldBatchStore{held}
	}
	return held, held
}

// holdFirst starts call, waits until its store call is held, and returns
// the channel of call's error, which comes once s.release is closed.
// Later store calls are not held.
func (s *heldStore) holdFirst(call func() error) <-chan error {
	s.hold.Store(true)
	first := make(chan error, 1)
	go func() { first <- call() }()
	<-s.entered
	s.hold.Store(false)
	return first
}

// TestOverloadCallerLeavesQueue: a caller whose context ends while its
// decision waits in the queue gets its context's error — not a degraded
// decision, not ErrOverloaded — and its request is never sent; the queue
// is empty again. Batched and not.
func TestOverloadCallerLeavesQueue(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			held, st := newHeld(t, batched)
			cfg := fmt.Sprintf(`
policies: {fw: "fixed_window 10/1h"}
store: {batching: %t}
overload: {max_inflight: 1, max_queue: 4, queue_wait: 1m}
`, batched)
			rec := &overloadRecorder{}
			svc, err := service.New(mustParse(t, cfg), service.Options{Store: st, Logger: quiet, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			if got := service.BatcherQueued(svc) >= 0; got != batched {
				t.Fatalf("batching %t, want %t", got, batched)
			}
			first := held.holdFirst(func() error {
				_, err := svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: "k"}})
				return err
			})
			cctx, cancel := context.WithCancel(context.Background())
			second := make(chan error, 1)
			go func() {
				_, err := svc.Check(cctx, []service.Item{{Policy: "fw", Key: "k"}})
				second <- err
			}()
			waitFor(t, "the second caller queued", func() bool { _, q := service.Bound(svc); return q == 1 })
			cancel()
			if err := <-second; !errors.Is(err, context.Canceled) || errors.Is(err, service.ErrOverloaded) {
				t.Errorf("a caller that left the queue: %v; want context.Canceled", err)
			}
			if _, q := service.Bound(svc); q != 0 {
				t.Errorf("%d queued after the caller left; want 0", q)
			}
			close(held.release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			d := one(t, svc, "fw", "k")
			if d.Degraded || d.Remaining != 8 {
				t.Errorf("after: %v; want the store's decision, remaining 8: the canceled request was never sent", d)
			}
			if c := rec.snapshot(); c.degraded != 0 || rec.overloaded.Load() != 0 {
				t.Errorf("%d degraded, %d refused by the bound; want none", c.degraded, rec.overloaded.Load())
			}
		})
	}
}

// TestOverloadQueueWait: a decision that waits in the queue longer than
// overload.queue_wait is refused with ErrOverloaded (reason queue_wait),
// never sent, and not before its own wait passed: two callers queued
// 100 ms apart behind a held store call each wait their whole
// queue_wait from their own start, whatever the other's. Batched (one
// sweep of the queue for every request) and not.
func TestOverloadQueueWait(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			t.Parallel()
			held, st := newHeld(t, batched)
			const wait = 300 * time.Millisecond
			cfg := fmt.Sprintf(`
policies: {fw: "fixed_window 10/1h"}
store: {batching: %t}
overload: {max_inflight: 1, max_queue: 4, queue_wait: %s}
`, batched, wait)
			rec := &overloadRecorder{}
			svc, err := service.New(mustParse(t, cfg), service.Options{Store: st, Logger: quiet, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			first := held.holdFirst(func() error {
				_, err := svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: "k"}})
				return err
			})
			type answer struct {
				err  error
				took time.Duration
			}
			queue := func(out chan<- answer) {
				start := time.Now()
				_, err := svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: "k"}})
				out <- answer{err, time.Since(start)}
			}
			a, b := make(chan answer, 1), make(chan answer, 1)
			go queue(a)
			waitFor(t, "the first caller queued", func() bool { _, q := service.Bound(svc); return q == 1 })
			time.Sleep(wait / 3)
			go queue(b)
			for i, ch := range []chan answer{a, b} {
				var got answer
				select {
				case got = <-ch:
				case <-time.After(time.Minute): // a hang check
					close(held.release)
					t.Fatalf("queued caller %d: no answer after a minute; want ErrOverloaded after %s", i, wait)
				}
				if !errors.Is(got.err, service.ErrOverloaded) || got.took < wait {
					t.Errorf("queued caller %d: %v after %s; want ErrOverloaded once its queue_wait of %s passed", i, got.err, got.took, wait)
				}
			}
			if _, q := service.Bound(svc); q != 0 {
				t.Errorf("%d queued after both waits passed; want 0", q)
			}
			if n := rec.reason("queue_wait/backpressure"); n != 2 {
				t.Errorf("%d refusals counted as queue_wait; want 2", n)
			}
			close(held.release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if d := one(t, svc, "fw", "k"); d.Degraded || d.Remaining != 8 {
				t.Errorf("after: %v; want the store's decision, remaining 8: the refused requests were never sent", d)
			}
		})
	}
}

// stalledStore is a store that, while stalled, answers no call until its
// context ends (as a Redis that stopped answering), then fails with the
// context's error. A stalled call first takes its turn: a value sent on
// turn, or turn closed. The test hands out turns, so that it decides when
// and in which order calls are cut, whatever the machine's speed (a
// call's context ends store.timeout after it was sent, but no call
// returns before its turn).
type stalledStore struct {
	floodgate.Store
	stalled atomic.Bool
	turn    chan struct{}
}

func (s *stalledStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if s.stalled.Load() {
		<-s.turn
		<-ctx.Done()
		return floodgate.Decision{}, fmt.Errorf("%w: stalled: %w", floodgate.ErrUnavailable, ctx.Err())
	}
	return s.Store.Take(ctx, req)
}

type stalledBatchStore struct{ *stalledStore }

func (s stalledBatchStore) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	takeEach(ctx, s, reqs, out)
}

// TestOverloadCutWhileQueued: a store call that store.timeout cuts while
// decisions queue behind the bound is the service's overload, answered by
// the overload mode (backpressure: ErrOverloaded, counted with reason
// store_timeout; failure_policy: the failure mode's decision, counted
// too), never a fail-open answer; a call cut while nothing queues is the
// failure mode's (the store stopped answering, not the service saturated).
// The failure policy's observer sees every cut call as a failed one.
//
// Without batching the order is exact: 2 calls in flight and 4 queued
// against a store that never answers; the first 4 cuts each see callers
// queued behind them, the last 2 see none. With batching (the one batch in
// flight at its bound of 1 decision, 5 callers queued behind it), at least
// the first cut sees the queue; the rest go in later batches.
//
// No call is cut before the test lets it (stalledStore's turns): every
// caller is in flight or queued first, and without batching the calls are
// cut one at a time, each once the one before it has returned and a
// queued caller took its slot. On a loaded machine a goroutine may stall
// for seconds, far longer than store.timeout: left to the clock, a call
// would be cut before the queue filled, or two cuts would see the same
// last queued caller, and the counts below would not be exact.
func TestOverloadCutWhileQueued(t *testing.T) {
	for _, mode := range []string{"backpressure", "failure_policy"} {
		for _, batched := range []bool{false, true} {
			t.Run(mode+"/"+batchedName(batched), func(t *testing.T) {
				t.Parallel()
				stalled := &stalledStore{Store: newMem(t, storekit.SystemClock{}), turn: make(chan struct{})}
				var letAll sync.Once
				cutAll := func() { letAll.Do(func() { close(stalled.turn) }) }
				t.Cleanup(cutAll) // a test that failed early leaves no call waiting
				var st floodgate.Store = stalled
				if batched {
					st = stalledBatchStore{stalled}
				}
				// The bound full: 2 calls without batching; with it, the
				// one batch in flight carrying its bound of 1 decision
				// (under a larger bound, the 5 queued would fit the next
				// batch: pipelining, not saturation).
				maxInflight := map[bool]int{false: 2, true: 1}[batched]
				sent := map[bool]int{false: 2, true: 1}[batched]
				cfg := fmt.Sprintf(`
policies: {fw: "fixed_window 10/1h"}
store: {timeout: 200ms, batching: %t}
failure: {mode: closed, retry_after: 3s, breaker: {disabled: true}}
overload: {mode: %s, max_inflight: %d, max_queue: 16, queue_wait: 1m}
`, batched, mode, maxInflight)
				rec := &overloadRecorder{}
				svc, err := service.New(mustParse(t, cfg), service.Options{Store: st, Logger: quiet, Observer: rec})
				if err != nil {
					t.Fatal(err)
				}
				stalled.stalled.Store(true)
				type answer struct {
					d   floodgate.Decision
					err error
				}
				answers := make([]answer, 6)
				var wg sync.WaitGroup
				for i := range answers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						v, err := svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: fmt.Sprint("k", i)}})
						answers[i].err = err
						if err == nil {
							answers[i].d = v.Items[0].Decision
						}
					}()
					if i < sent {
						waitFor(t, "a call in flight", func() bool { in, q := service.Bound(svc); return in == i+1 && q == 0 })
					} else {
						waitFor(t, "a call queued", func() bool { _, q := service.Bound(svc); return q == i-sent+1 })
					}
				}
				if batched {
					cutAll()
				} else {
					// One cut at a time: the k-th sees 4-k callers queued
					// (none from the fifth on); wait until its slot went to
					// the next queued caller before the next cut.
					for k := range len(answers) {
						stalled.turn <- struct{}{}
						if q := len(answers) - 2 - (k + 1); q >= 0 {
							waitFor(t, "a cut call's slot taken by a queued caller", func() bool {
								in, queued := service.Bound(svc)
								return in == 2 && queued == q
							})
						}
					}
				}
				wg.Wait()
				var overloaded, failureMode int
				for i, a := range answers {
					switch {
					case errors.Is(a.err, service.ErrOverloaded) && mode == "backpressure":
						overloaded++
					case a.err == nil && a.d.Degraded && !a.d.Allowed && a.d.RetryAfter == 3*time.Second:
						failureMode++
					default:
						t.Errorf("caller %d: %+v, %v; want ErrOverloaded (backpressure) or the closed mode's decision", i, a.d, a.err)
					}
				}
				cut := rec.reason("store_timeout/" + mode)
				if mode == "backpressure" && cut != int64(overloaded) {
					t.Errorf("%d ErrOverloaded answers, %d counted as store_timeout", overloaded, cut)
				}
				if n := rec.overloaded.Load(); n != cut {
					t.Errorf("%d refused by the bound, %d of them store_timeout; want all (nothing was refused before it was sent)", n, cut)
				}
				want := map[bool]int64{false: 4, true: -1}[batched]
				if want >= 0 && cut != want || cut < 1 {
					t.Errorf("%d cut calls answered by the overload mode; want %d (without batching) and at least 1", cut, want)
				}
				if e := rec.snapshot().storeErrors; e != len(answers) {
					t.Errorf("%d failed store calls observed; want %d: every cut call is a failure for the breaker", e, len(answers))
				}
				t.Logf("%d callers: %d answered by the overload mode (store_timeout), %d by the failure mode", len(answers), cut, len(answers)-int(cut))
			})
		}
	}
}

// warmPool opens n connections of c's pool (each answers a PING), and
// returns them to it idle.
func warmPool(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = c.Conn()
		if err := conns[i].Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cn := range conns {
		cn.Close()
	}
	if idle := c.PoolStats().IdleConns; idle < uint32(n) {
		t.Fatalf("%d idle connections after warming %d", idle, n)
	}
}

// heldBudgetStore is a heldStore over a store with budgets (groups,
// partial grants), which it reports.
type heldBudgetStore struct{ *heldStore }

func (heldBudgetStore) Budgets() bool { return true }

// TestOverloadBoundsBudgets: atomic groups and partial grants go through
// the bound on store calls like single decisions: while one group holds
// the only call in flight, another group and a partial grant are refused
// with ErrOverloaded (backpressure) or answered by the failure mode
// (failure_policy, here closed), counted as queue_full; once the held call
// returns, both are decided by the store.
func TestOverloadBoundsBudgets(t *testing.T) {
	for _, mode := range []string{"backpressure", "failure_policy"} {
		t.Run(mode, func(t *testing.T) {
			held := &heldStore{Store: newMem(t, storekit.SystemClock{}), entered: make(chan struct{}), release: make(chan struct{})}
			cfg := fmt.Sprintf(`
policies: {a: "fixed_window 10/1h", b: "fixed_window 10/1h"}
store: {batching: false}
failure: {mode: closed, retry_after: 3s}
overload: {mode: %s, max_inflight: 1, max_queue: 1, queue_wait: 1m}
`, mode)
			rec := &overloadRecorder{}
			svc, err := service.New(mustParse(t, cfg), service.Options{Store: heldBudgetStore{held}, Logger: quiet, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			group := []service.Item{{Policy: "a", Key: "k"}, {Policy: "b", Key: "k"}}
			first := held.holdFirst(func() error {
				_, err := svc.CheckGroup(context.Background(), group, false)
				return err
			})
			queued := make(chan error, 1)
			go func() {
				_, err := svc.CheckGroup(context.Background(), group, false)
				queued <- err
			}()
			waitFor(t, "a group queued", func() bool { _, q := service.Bound(svc); return q == 1 })
			v, err := svc.CheckGroup(context.Background(), group, false)
			g, gerr := svc.CheckAtMost(context.Background(), []service.Item{{Policy: "a", Key: "p", Cost: 3, AtMost: true}}, false)
			switch mode {
			case "backpressure":
				if !errors.Is(err, service.ErrOverloaded) || !errors.Is(gerr, service.ErrOverloaded) {
					t.Errorf("group %v, partial grant %v while the bound is full; want ErrOverloaded for both", err, gerr)
				}
			default:
				if err != nil || v.Decision.Allowed || !v.Decision.Degraded || v.Decision.RetryAfter != 3*time.Second {
					t.Errorf("group while the bound is full: %+v, %v; want the closed mode's decision", v, err)
				}
				if gerr != nil || g.Allowed || !g.Items[0].Decision.Degraded {
					t.Errorf("partial grant while the bound is full: %+v, %v; want the closed mode's decision", g, gerr)
				}
			}
			if n := rec.reason("queue_full/" + mode); n != 2 {
				t.Errorf("%d counted as queue_full/%s; want 2", n, mode)
			}
			close(held.release)
			if err := <-first; err != nil {
				t.Fatalf("held group: %v", err)
			}
			if err := <-queued; err != nil {
				t.Fatalf("queued group: %v", err)
			}
			v, err = svc.CheckGroup(context.Background(), group, true)
			if err != nil || v.Decision.Degraded || v.Decision.Remaining != 7 {
				t.Errorf("peek after: %+v, %v; want the store's decision, remaining 7 (a peek of 1 after two groups: none refused was counted)", v, err)
			}
		})
	}
}

// routedStore is a memory store whose keys live on two nodes by their
// first letter ("a…" on A, the rest on B), and whose node A holds its
// calls while hold is set (each holder sends on entered, then waits for
// release). It is a storekit.Router and a storekit.BatchStore.
type routedStore struct {
	floodgate.Store
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *routedStore) Node(_ context.Context, _ *floodgate.Policy, key string) string {
	if strings.HasPrefix(key, "a") {
		return "A"
	}
	return "B"
}

func (s *routedStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if strings.HasPrefix(req.Key, "a") && s.hold.Load() {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.Take(ctx, req)
}

func (s *routedStore) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	takeEach(ctx, s, reqs, out)
}

// TestOverloadBoundPerNode: each store node has a bound of its own. While
// node A holds the only call in flight it may have and its queue is full,
// A's next decision is refused (ErrOverloaded), and node B's decisions are
// made at once, alone or in a request whose items span both nodes (those
// are split by node; a request that finds one node's bound full is refused
// whole). Batched and not.
func TestOverloadBoundPerNode(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			st := &routedStore{Store: newMem(t, storekit.SystemClock{}), entered: make(chan struct{}), release: make(chan struct{})}
			cfg := fmt.Sprintf(`
policies: {fw: "fixed_window 100/1h"}
store: {batching: %t}
overload: {max_inflight: 1, max_queue: 1, queue_wait: 1m}
`, batched)
			rec := &overloadRecorder{}
			svc, err := service.New(mustParse(t, cfg), service.Options{Store: st, Logger: quiet, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			check := func(keys ...string) (service.Verdict, error) {
				items := make([]service.Item, len(keys))
				for i, k := range keys {
					items[i] = service.Item{Policy: "fw", Key: k}
				}
				return svc.Check(context.Background(), items)
			}
			// Split by node with nothing held: every item decided.
			if v, err := check("a0", "b0", "a0", "b0"); err != nil || !v.Allowed || v.Items[2].Decision.Remaining != 98 || v.Items[3].Decision.Remaining != 98 {
				t.Fatalf("a request over both nodes: %+v, %v; want all four decided, each key twice", v, err)
			}
			st.hold.Store(true)
			held := make(chan error, 2)
			go func() { _, err := check("a1"); held <- err }()
			<-st.entered
			go func() { _, err := check("a2"); held <- err }()
			waitFor(t, "a decision queued for node A", func() bool { _, q := service.Bound(svc); return q == 1 })
			if _, err := check("a3"); !errors.Is(err, service.ErrOverloaded) {
				t.Errorf("node A's third decision: %v; want ErrOverloaded (its bound and queue full)", err)
			}
			for _, keys := range [][]string{{"b1"}, {"b2", "b3"}} {
				v, err := check(keys...)
				if err != nil || !v.Allowed || v.Items[0].Decision.Degraded {
					t.Errorf("node B's %v while A is full: %+v, %v; want decided by the store at once", keys, v, err)
				}
			}
			if _, err := check("b4", "a4"); !errors.Is(err, service.ErrOverloaded) {
				t.Errorf("a request over both nodes while A is full: %v; want ErrOverloaded", err)
			}
			st.hold.Store(false)
			close(st.release)
			for range 2 {
				if err := <-held; err != nil {
					t.Errorf("held or queued decision on A: %v", err)
				}
			}
			if n := rec.overloaded.Load(); n != 2 {
				t.Errorf("%d decisions refused; want 2 (a3, and a4 of the split request)", n)
			}
		})
	}
}

// TestCallerLeavesDuringStoreCall: a caller whose context ends while its
// decisions are at the store (sent, not answered) gets its context's
// error, and nothing is counted: not a degraded decision (the store did
// not fail; the caller left), not a decision at all. One request and two,
// without a bound on store calls, with one, and batched.
func TestCallerLeavesDuringStoreCall(t *testing.T) {
	for _, tc := range []struct{ name, cfg string }{
		{"unbounded", `store: {batching: false, timeout: 1m}`},
		{"bounded", `store: {batching: false, timeout: 1m}
overload: {max_inflight: 4}`},
		{"batched", `store: {batching: true, timeout: 100ms}`},
	} {
		for _, n := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				st := &stalledStore{Store: newMem(t, storekit.SystemClock{}), turn: make(chan struct{})}
				st.stalled.Store(true)
				rec := &overloadRecorder{}
				svc, err := service.New(mustParse(t, "policies: {fw: \"fixed_window 10/1h\"}\n"+tc.cfg),
					service.Options{Store: stalledBatchStore{st}, Logger: quiet, Observer: rec})
				if err != nil {
					t.Fatal(err)
				}
				items := []service.Item{{Policy: "fw", Key: "a"}, {Policy: "fw", Key: "b"}}[:n]
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					_, err := svc.Check(ctx, items)
					done <- err
				}()
				st.turn <- struct{}{} // the call is at the store
				close(st.turn)
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Errorf("Check: %v; want context.Canceled", err)
				}
				if c := rec.snapshot(); c.decisions != 0 || c.degraded != 0 {
					t.Errorf("%d decisions counted, %d degraded; want none: the caller left", c.decisions, c.degraded)
				}
			})
		}
	}
}
