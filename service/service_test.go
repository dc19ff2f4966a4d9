package service_test

// The service's own core, without a transport: Check and Peek over
// batches and their request errors, exactness under concurrency (memory,
// Redis, Redis Cluster; the batcher in front of a BatchStore), the
// over-limit cache, the failure modes and the circuit breaker, and reloads
// under load. Time is a manual clock wherever the service reads it; Redis
// tests use the server's clock with windows far longer than the test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/rlheader"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
)

// epoch is where every manual clock starts: a whole minute, so that
// epoch-aligned windows of a minute start there.
var epoch = time.Unix(1714825800, 0)

// quiet drops the service's logs (a failing store logs every decision).
var quiet = slog.New(slog.DiscardHandler)

var ctx = context.Background()

// flakyStore is the Store the service calls: it counts the calls that
// reach it and fails them on demand, as a Redis that is down would. It is
// not a BatchStore (the service then decides item by item).
type flakyStore struct {
	floodgate.Store
	calls   atomic.Int64
	failing atomic.Bool
	// after, when set, runs once a call has been decided: a round trip's
	// second half, during which the service's clock moves on.
	after func()
}

var errDown = fmt.Errorf("%w: test store down", floodgate.ErrUnavailable)

func (s *flakyStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	s.calls.Add(1)
	if s.failing.Load() {
		return floodgate.Decision{}, errDown
	}
	d, err := s.Store.Take(ctx, req)
	if s.after != nil {
		s.after()
	}
	return d, err
}

// batchStore makes a flakyStore a BatchStore, so that the service puts its
// batcher in front of it. It records the batches, and holds them while
// hold is open (when set before the first call): a value sent on hold
// releases one batch, closing it every batch.
type batchStore struct {
	*flakyStore
	batches  atomic.Int64
	maxBatch atomic.Int64
	held     atomic.Int64 // requests of batches that waited on hold
	hold     chan struct{}
	inflight atomic.Int64 // batches in the store now
	peak     atomic.Int64 // the most batches in the store at once
}

func (s *batchStore) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	s.batches.Add(1)
	for n := s.inflight.Add(1); ; {
		m := s.peak.Load()
		if n <= m || s.peak.CompareAndSwap(m, n) {
			break
		}
	}
	defer s.inflight.Add(-1)
	for n := int64(len(reqs)); ; {
		m := s.maxBatch.Load()
		if n <= m || s.maxBatch.CompareAndSwap(m, n) {
			break
		}
	}
	if s.hold != nil {
		s.held.Add(int64(len(reqs)))
		<-s.hold
	}
	for i := range reqs {
		out[i].Decision, out[i].Err = s.Take(ctx, reqs[i])
	}
}

// counts are what a recorder was told.
type counts struct {
	decisions       int
	degraded        int
	storeCalls      map[string]int // by op
	storeErrors     int
	cacheHits       int
	reloadsOK       int
	reloadsFailed   int
	unknownPolicies int
}

// recorder is an Observer that counts what it is told.
type recorder struct {
	mu sync.Mutex
	c  counts
}

func (r *recorder) Decision(policy string, allowed, shadow, degraded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.decisions++
	if degraded {
		r.c.degraded++
	}
}

func (r *recorder) StoreCall(op, node string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c.storeCalls == nil {
		r.c.storeCalls = map[string]int{}
	}
	r.c.storeCalls[op]++
	if err != nil {
		r.c.storeErrors++
	}
}

func (r *recorder) BreakerChanged(node string, open bool) {}

func (r *recorder) UnknownPolicy() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.unknownPolicies++
}

func (r *recorder) UnknownDomain()     {}
func (r *recorder) FailureMode(string) {}

func (r *recorder) OverLimitCacheHit(policy string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.cacheHits++
}

func (r *recorder) Reload(ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.c.reloadsOK++
	} else {
		r.c.reloadsFailed++
	}
}

// snapshot returns a copy of the counts.
func (r *recorder) snapshot() counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.c
	c.storeCalls = maps.Clone(r.c.storeCalls)
	return c
}

// rig is a service on a memory store behind a flakyStore (and a
// batchStore when batched), all on one manual clock.
type rig struct {
	svc      *service.Service
	clock    *floodgatetest.ManualClock
	mem      *memstore.Store // the state
	store    *flakyStore
	batch    *batchStore // nil unless batched
	fallback *memstore.Store
	obs      *recorder
}

func newRig(t *testing.T, batched bool, yaml string) *rig {
	t.Helper()
	cfg := mustParse(t, yaml)
	r := &rig{clock: floodgatetest.NewManualClock(epoch), obs: &recorder{}}
	r.mem = newMem(t, r.clock)
	r.store = &flakyStore{Store: r.mem}
	o := service.Options{Store: r.store, Clock: r.clock, Observer: r.obs, Logger: quiet}
	if batched {
		r.batch = &batchStore{flakyStore: r.store}
		o.Store = r.batch
	}
	if cfg.Failure.Mode == failure.Fallback {
		r.fallback = newMem(t, r.clock)
		o.Fallback = r.fallback
	}
	svc, err := service.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	r.svc = svc
	return r
}

func newMem(t testing.TB, clock storekit.Clock) *memstore.Store {
	t.Helper()
	m, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// mustParse parses a configuration in floodgate's format. Unless it sets
// store.timeout, the timeout is a minute instead of 50ms; unless it sets
// overload.queue_wait, the queue's wait is a minute instead of 500ms. No
// test here is about those defaults, and on a busy machine (two suites at
// once on 2 cores, under -race: any goroutine may stall for 2-3 s) a batch
// may wait longer than 50ms for its turn, or a queued caller longer than
// 500ms for a batch, which would hand the request to the failure mode or
// refuse it (ErrOverloaded). A minute is only a hang check.
func mustParse(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := parse(yaml)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(yaml, "timeout:") {
		cfg.Store.Timeout = time.Minute
	}
	if !strings.Contains(yaml, "queue_wait:") {
		cfg.Overload.QueueWait = time.Minute
	}
	return cfg
}

func items(policy string, keys ...string) []service.Item {
	out := make([]service.Item, len(keys))
	for i, k := range keys {
		out[i] = service.Item{Policy: policy, Key: k}
	}
	return out
}

func check(t *testing.T, svc *service.Service, its ...service.Item) service.Verdict {
	t.Helper()
	res, err := svc.Check(ctx, its)
	if err != nil {
		t.Fatalf("Check(%v): %v", its, err)
	}
	if len(res.Items) != len(its) {
		t.Fatalf("Check(%v): %d results", its, len(res.Items))
	}
	return res
}

func peek(t *testing.T, svc *service.Service, its ...service.Item) service.Verdict {
	t.Helper()
	res, err := svc.Peek(ctx, its)
	if err != nil {
		t.Fatalf("Peek(%v): %v", its, err)
	}
	if len(res.Items) != len(its) {
		t.Fatalf("Peek(%v): %d results", its, len(res.Items))
	}
	return res
}

// one checks one item and returns its decision.
func one(t *testing.T, svc *service.Service, policy, key string) floodgate.Decision {
	t.Helper()
	return check(t, svc, service.Item{Policy: policy, Key: key}).Items[0].Decision
}

// wantCalls fails the test unless the store has been called want times.
func wantCalls(t *testing.T, s *flakyStore, want int64, when string) {
	t.Helper()
	if got := s.calls.Load(); got != want {
		t.Fatalf("%s: %d store calls, want %d", when, got, want)
	}
}

func batchedName(batched bool) string {
	if batched {
		return "batched"
	}
	return "unbatched"
}

const batchConfig = `
policies:
  fw: "fixed_window 3/1m"
  gc: "gcra 1/1m burst 2"
  sw: "sliding_window 2/1m resolution 1s"
limits:
  max_batch: 8
  max_key_bytes: 16
`

// TestCheckBatch: each item of a batch is decided on its own (a denied
// item does not undo an allowed one), in order, under its own policy; the
// result is allowed only when every item is.
func TestCheckBatch(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			r := newRig(t, batched, batchConfig)
			mixed := []service.Item{{Policy: "fw", Key: "a"}, {Policy: "gc", Key: "a"}, {Policy: "sw", Key: "a"}}
			rounds := []struct {
				allowed   [3]bool
				remaining [3]int64
			}{
				{[3]bool{true, true, true}, [3]int64{2, 1, 1}},
				{[3]bool{true, true, true}, [3]int64{1, 0, 0}},
				{[3]bool{true, false, false}, [3]int64{0, 0, 0}},
				{[3]bool{false, false, false}, [3]int64{0, 0, 0}},
			}
			limits := [3]int64{3, 1, 2}
			for i, round := range rounds {
				res := check(t, r.svc, mixed...)
				all := true
				for j, it := range res.Items {
					d := it.Decision
					if it.Policy.Name != mixed[j].Policy {
						t.Errorf("round %d item %d: policy %q, want %q", i, j, it.Policy.Name, mixed[j].Policy)
					}
					if d.Allowed != round.allowed[j] || d.Remaining != round.remaining[j] || d.Limit != limits[j] || d.Degraded {
						t.Errorf("round %d item %d (%s): %v; want allowed %v limit %d remaining %d", i, j, mixed[j].Policy, d, round.allowed[j], limits[j], round.remaining[j])
					}
					if !d.Allowed && d.RetryAfter <= 0 {
						t.Errorf("round %d item %d: denied with retry after %s", i, j, d.RetryAfter)
					}
					all = all && round.allowed[j]
				}
				if res.Allowed != all {
					t.Errorf("round %d: Allowed %v, want %v", i, res.Allowed, all)
				}
			}

			// One key several times in a batch: decided in order.
			res := check(t, r.svc, items("fw", "b", "b", "b", "b")...)
			for j, want := range []struct {
				allowed   bool
				remaining int64
			}{{true, 2}, {true, 1}, {true, 0}, {false, 0}} {
				if d := res.Items[j].Decision; d.Allowed != want.allowed || d.Remaining != want.remaining {
					t.Errorf("same key, item %d: %v; want allowed %v remaining %d", j, d, want.allowed, want.remaining)
				}
			}
			if res.Allowed {
				t.Error("same key: batch allowed with a denied item")
			}

			// A denied item does not undo an allowed one; a cost above the
			// max never passes; cost 0 means 1.
			res = check(t, r.svc, service.Item{Policy: "fw", Key: "c", Cost: 2}, service.Item{Policy: "fw", Key: "d", Cost: 4}, service.Item{Policy: "fw", Key: "e"})
			if d := res.Items[0].Decision; !d.Allowed || d.Remaining != 1 {
				t.Errorf("cost 2: %v; want allowed, remaining 1", d)
			}
			if d := res.Items[1].Decision; d.Allowed || d.RetryAfter != floodgate.Never {
				t.Errorf("cost 4 of 3: %v; want denied, retry never", d)
			}
			if d := res.Items[2].Decision; !d.Allowed || d.Remaining != 2 {
				t.Errorf("cost 0: %v; want allowed, remaining 2 (a cost of 1)", d)
			}
			if res.Allowed {
				t.Error("batch with a denied item: Allowed")
			}
			if d := one(t, r.svc, "fw", "c"); !d.Allowed || d.Remaining != 0 {
				t.Errorf("key c after a batch that was not allowed: %v; want its cost 2 kept (allowed, remaining 0)", d)
			}
			if batched && r.batch.batches.Load() == 0 {
				t.Error("a BatchStore was never asked for a batch")
			}
		})
	}
}

// TestPeek: Peek answers what Check would, item by item, and records
// nothing: the Check that follows a Peek gets the very same decision.
func TestPeek(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			r := newRig(t, batched, batchConfig)
			mixed := []service.Item{{Policy: "fw", Key: "p"}, {Policy: "gc", Key: "p"}, {Policy: "sw", Key: "p"}, {Policy: "fw", Key: "q", Cost: 3}}

			first := peek(t, r.svc, mixed...)
			for i := range 5 {
				again := peek(t, r.svc, mixed...)
				if !slices.Equal(decisions(again), decisions(first)) {
					t.Fatalf("peek %d: %v; the first peek said %v", i+2, decisions(again), decisions(first))
				}
			}
			if n := r.mem.Stats().Entries; n != 0 {
				t.Fatalf("peeks created %d entries in the store", n)
			}
			if d := first.Items[3].Decision; !d.Allowed || d.Remaining != 0 {
				t.Errorf("peek of cost 3 on a fresh key of max 3: %v; want allowed, remaining 0", d)
			}

			// Peek predicts Check exactly until everything is denied.
			for round := range 4 {
				p := peek(t, r.svc, mixed...)
				c := check(t, r.svc, mixed...)
				if !slices.Equal(decisions(p), decisions(c)) {
					t.Errorf("round %d: peek %v, check %v", round, decisions(p), decisions(c))
				}
				if p.Allowed != c.Allowed {
					t.Errorf("round %d: peek Allowed %v, check %v", round, p.Allowed, c.Allowed)
				}
			}
			if last := peek(t, r.svc, mixed...); last.Allowed || last.Items[0].Decision.Allowed {
				t.Errorf("after four checks of fw (max 3): peek says %v", decisions(last))
			}

			obs := r.obs.snapshot()
			if obs.decisions != 4*len(mixed) {
				t.Errorf("observer got %d decisions; want %d (checks only, never peeks)", obs.decisions, 4*len(mixed))
			}
			if obs.storeCalls["peek"] == 0 || obs.storeCalls["take"] == 0 {
				t.Errorf("store calls by op %v; want peeks and takes", obs.storeCalls)
			}
		})
	}
}

func decisions(res service.Verdict) []floodgate.Decision {
	out := make([]floodgate.Decision, len(res.Items))
	for i, it := range res.Items {
		out[i] = it.Decision
	}
	return out
}

// TestRequestErrors: a bad item refuses the whole request with a
// *RequestError naming its index and field, before anything is decided.
func TestRequestErrors(t *testing.T) {
	ok := service.Item{Policy: "fw", Key: "k"}
	cases := []struct {
		name     string
		items    []service.Item
		code     string
		field    string
		notFound bool
	}{
		{"no items", nil, "no_items", "", false},
		{"unknown policy", []service.Item{{Policy: "nope", Key: "k"}}, "unknown_policy", "policy", true},
		{"unknown policy in a batch", []service.Item{ok, ok, {Policy: "nope", Key: "k"}}, "unknown_policy", "requests[2].policy", true},
		{"empty policy", []service.Item{ok, {Key: "k"}}, "unknown_policy", "requests[1].policy", true},
		{"empty key", []service.Item{{Policy: "fw"}}, "invalid_key", "key", false},
		{"empty key in a batch", []service.Item{ok, {Policy: "gc"}}, "invalid_key", "requests[1].key", false},
		{"key too long", []service.Item{ok, {Policy: "sw", Key: strings.Repeat("k", 17)}}, "invalid_key", "requests[1].key", false},
		{"negative cost", []service.Item{{Policy: "fw", Key: "k", Cost: -1}, ok}, "invalid_cost", "requests[0].cost", false},
		{"cost above MaxCost", []service.Item{ok, ok, ok, {Policy: "gc", Key: "k", Cost: floodgate.MaxCost + 1}}, "invalid_cost", "requests[3].cost", false},
		{"single bad cost", []service.Item{{Policy: "gc", Key: "k", Cost: -5}}, "invalid_cost", "cost", false},
		{"too many items", slices.Repeat([]service.Item{ok}, 9), "too_many_items", "requests", false},
		{"first bad item wins", []service.Item{ok, {Policy: "fw", Key: "k", Cost: -1}, {Policy: "nope", Key: "k"}}, "invalid_cost", "requests[1].cost", false},
	}
	r := newRig(t, false, batchConfig)
	for _, c := range cases {
		for _, op := range []struct {
			name string
			call func(context.Context, []service.Item) (service.Verdict, error)
		}{{"Check", r.svc.Check}, {"Peek", r.svc.Peek}} {
			res, err := op.call(ctx, c.items)
			var re *service.RequestError
			if !errors.As(err, &re) {
				t.Errorf("%s, %s: %v, %v; want a *RequestError", c.name, op.name, res, err)
				continue
			}
			if re.Code != c.code || re.Field != c.field || re.NotFound() != c.notFound {
				t.Errorf("%s, %s: code %q field %q not found %v; want %q %q %v", c.name, op.name, re.Code, re.Field, re.NotFound(), c.code, c.field, c.notFound)
			}
			if !strings.HasPrefix(err.Error(), c.field) || re.Msg == "" {
				t.Errorf("%s, %s: message %q does not start with the field %q", c.name, op.name, err, c.field)
			}
			if len(res.Items) != 0 || res.Allowed {
				t.Errorf("%s, %s: a result with an error: %+v", c.name, op.name, res)
			}
		}
	}
	wantCalls(t, r.store, 0, "after refused requests")
	if obs := r.obs.snapshot(); obs.unknownPolicies != 6 { // 3 cases naming an unknown policy first, for Check and Peek
		t.Errorf("refused requests counted %d unknown policies, want 6", obs.unknownPolicies)
	}
	if obs := r.obs.snapshot(); obs.decisions != 0 {
		t.Errorf("refused requests made %d decisions", obs.decisions)
	}

	// The edges are accepted: max_batch items, a key of max_key_bytes, the
	// largest cost (which no policy here admits).
	res := check(t, r.svc, slices.Repeat([]service.Item{{Policy: "sw", Key: strings.Repeat("k", 16)}}, 8)...)
	if !res.Items[0].Decision.Allowed || res.Allowed {
		t.Errorf("8 items of sw (max 2): %v", decisions(res))
	}
	if d := check(t, r.svc, service.Item{Policy: "gc", Key: "k", Cost: floodgate.MaxCost}).Items[0].Decision; d.Allowed || d.RetryAfter != floodgate.Never {
		t.Errorf("cost MaxCost: %v; want denied, retry never", d)
	}

	// Reset names its errors the same way.
	for _, c := range []struct{ policy, key, code string }{{"nope", "k", "unknown_policy"}, {"fw", "", "invalid_key"}} {
		var re *service.RequestError
		if err := r.svc.Reset(ctx, c.policy, c.key); !errors.As(err, &re) || re.Code != c.code {
			t.Errorf("Reset(%q, %q): %v; want %s", c.policy, c.key, err, c.code)
		}
	}
}

// exactConfig has one policy of each windowed kind whose quota is all a
// key gets during a test: windows of an hour or a day, opened by the
// first request. The store's timeout and the overload queue's wait are
// long, so that on a slow, shared machine every call reaches the store
// (the default queue_wait, 500 ms, refused one call in a CI run with two
// suites at once): these tests count exactness, not speed.
const exactConfig = `
policies:
  fw: "fixed_window 50/1h align first"
  gc: "gcra 40/24h burst 40"
  sw: "sliding_window 30/1h resolution 1m"
store:
  timeout: 30s
overload:
  queue_wait: 30s
`

var exactQuota = map[string]int64{"fw": 50, "gc": 40, "sw": 30}

// admit runs goroutines callers that each Check its items rounds times,
// and returns how many times each item was allowed. Every call must
// succeed without the failure policy.
func admit(t *testing.T, svc *service.Service, its []service.Item, goroutines, rounds int) []int64 {
	t.Helper()
	allowed := make([]atomic.Int64, len(its))
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				res, err := svc.Check(ctx, its)
				if err != nil {
					t.Errorf("Check: %v", err)
					return
				}
				for i, it := range res.Items {
					if it.Decision.Degraded {
						t.Errorf("item %d: degraded decision %v", i, it.Decision)
						return
					}
					if it.Decision.Allowed {
						allowed[i].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	out := make([]int64, len(its))
	for i := range allowed {
		out[i] = allowed[i].Load()
	}
	return out
}

// testExact: 32 goroutines asking 3 times each for one key admit exactly
// the quota of fixed_window, gcra and sliding_window policies, one item
// per Check (the batcher's path for a BatchStore) and several items per
// Check (one pipelined batch), over keys and policies mixed.
func testExact(t *testing.T, svc *service.Service) {
	const goroutines, rounds = 32, 3
	for _, p := range []string{"fw", "gc", "sw"} {
		t.Run(p, func(t *testing.T) {
			got := admit(t, svc, items(p, "hot-"+p), goroutines, rounds)
			if got[0] != exactQuota[p] {
				t.Errorf("%s: %d admitted of %d asked; want exactly the quota, %d", p, got[0], goroutines*rounds, exactQuota[p])
			}
		})
	}
	t.Run("mixed items", func(t *testing.T) {
		its := []service.Item{{Policy: "fw", Key: "m1"}, {Policy: "gc", Key: "m1"}, {Policy: "sw", Key: "m1"}, {Policy: "fw", Key: "m2"}, {Policy: "fw", Key: "m3"}}
		got := admit(t, svc, its, goroutines, rounds)
		for i, it := range its {
			if got[i] != exactQuota[it.Policy] {
				t.Errorf("item %d (%s %s): %d admitted; want exactly %d", i, it.Policy, it.Key, got[i], exactQuota[it.Policy])
			}
		}
	})
}

// TestExactUnderConcurrencyMemory: exactness on the memory store, called
// directly and through the batcher (a BatchStore wrapper).
func TestExactUnderConcurrencyMemory(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			r := newRig(t, batched, exactConfig)
			testExact(t, r.svc)
			if batched && r.batch.batches.Load() == 0 {
				t.Error("the batcher never sent a batch")
			}
		})
	}
}

// redisService returns a service on a Redis store of c with its own key
// prefix and the options opts, its scripts loaded.
func redisService(t *testing.T, c redis.UniversalClient, yaml string, clock storekit.Clock, opts ...redisstore.Option) (*service.Service, *redisstore.Store) {
	t.Helper()
	st, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("svc%d", rand.Uint32()))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := st.Preload(pctx); err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(mustParse(t, yaml), service.Options{Store: st, Clock: clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

// redisClient returns a client of srv without retries (a retried script
// could count twice), closed at the end of the test. Its reads and writes
// wait up to a minute (clientTimeout), not go-redis's 3s.
func redisClient(t *testing.T, srv *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password, MaxRetries: -1,
		ReadTimeout: clientTimeout, WriteTimeout: clientTimeout})
	t.Cleanup(func() { c.Close() })
	return c
}

// clientTimeout is the read and write timeout of the tests' Redis
// clients: a hang check only. go-redis's default, 3s, fails a round trip
// that a loaded machine (two suites at once on 2 cores, under -race)
// stalls that long, and the failure mode would answer a healthy call.
const clientTimeout = time.Minute

// TestExactUnderConcurrencyRedis: exactness on one redis-server, the
// service batching through redisstore's pipelines.
func TestExactUnderConcurrencyRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	svc, _ := redisService(t, redisClient(t, srv), exactConfig, nil)
	if service.BatcherQueued(svc) < 0 {
		t.Fatal("the service does not batch for redisstore")
	}
	testExact(t, svc)
}

// TestExactUnderConcurrencyRedisCluster: exactness on a local 3-master
// Redis Cluster, batches spanning the nodes.
func TestExactUnderConcurrencyRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout})
	t.Cleanup(func() { c.Close() })
	svc, _ := redisService(t, c, exactConfig, nil)
	testExact(t, svc)
}

// TestExactUnderConcurrencyRedisCounters: exactness on a store whose
// fixed windows that count denied requests are native counters
// (redisstore.WithCounters), standalone and on a Cluster: batches mix
// counters' INCRBYs with the other policies' function calls. The clock
// stands still, so that no window ends during the test.
func TestExactUnderConcurrencyRedisCounters(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(exactConfig, `fw: "fixed_window 50/1h align first"`, `fw: "fixed_window 50/1h count_denied true"`, 1)
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	opts := []redisstore.Option{redisstore.WithClock(clock), redisstore.WithCounters(), redisstore.WithMinTTL(time.Hour)}
	t.Run("Standalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		svc, _ := redisService(t, redisClient(t, srv), cfg, clock, opts...)
		testExact(t, svc)
		if srv.Calls(t, "incrby") == 0 {
			t.Error("no INCRBY: the counters were not used")
		}
	})
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout})
		t.Cleanup(func() { c.Close() })
		svc, _ := redisService(t, c, cfg, clock, opts...)
		testExact(t, svc)
	})
}

// waitFor polls cond until it holds, failing the test after 20 seconds.
// It waits for a state, not for time to pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// heldBatches is a batched rig on one fixed window "fw" whose store holds
// every batch until released (a value sent on hold releases one batch,
// releaseAll every one), and the calls made on it, each in a goroutine.
type heldBatches struct {
	r       *rig
	hold    chan struct{}
	wg      sync.WaitGroup
	release sync.Once
}

func newHeldBatches(t *testing.T, policy string) *heldBatches {
	h := &heldBatches{r: newRig(t, true, `policies: {fw: "`+policy+`"}`), hold: make(chan struct{})}
	h.r.batch.hold = h.hold
	t.Cleanup(h.releaseAll)
	return h
}

// call checks key "hot" in a goroutine, its decision into got[i].
func (h *heldBatches) call(t *testing.T, got []floodgate.Decision, i int) {
	h.wg.Go(func() {
		res, err := h.r.svc.Check(ctx, items("fw", "hot"))
		if err != nil {
			t.Errorf("call %d: %v", i, err)
			return
		}
		got[i] = res.Items[0].Decision
	})
}

// releaseAll releases every batch, and waits for every call.
func (h *heldBatches) releaseAll() {
	h.release.Do(func() { close(h.hold) })
	h.wg.Wait()
}

// wantRemainingOnce fails unless no decision of got is degraded and the
// allowed ones' remaining counts are each of lo to hi once: every request
// decided exactly once.
func wantRemainingOnce(t *testing.T, got []floodgate.Decision, lo, hi int64) {
	t.Helper()
	var remaining []int64
	for i, d := range got {
		if d.Degraded {
			t.Errorf("decision %d: degraded %v", i, d)
		}
		if d.Allowed {
			remaining = append(remaining, d.Remaining)
		}
	}
	slices.Sort(remaining)
	var want []int64
	for r := lo; r <= hi; r++ {
		want = append(want, r)
	}
	if !slices.Equal(remaining, want) {
		t.Errorf("allowed decisions' remaining counts %v; want each of %d to %d once", remaining, lo, hi)
	}
}

// TestBatcherQueuesBehindFullPipeline: while the batch in flight is held
// in the store (one at a time: the store is near), the other callers
// queue; released, they leave in batches of several requests, and each
// request is still decided exactly once: the allowed ones see every
// remaining count from max-1 down to 0 once.
func TestBatcherQueuesBehindFullPipeline(t *testing.T) {
	h := newHeldBatches(t, "fixed_window 20/1h")
	const callers = 32
	got := make([]floodgate.Decision, callers)
	for i := range callers {
		h.call(t, got, i)
	}
	waitFor(t, "a batch held and every other caller queued", func() bool {
		held := h.r.batch.held.Load()
		return held > 0 && held+int64(service.BatcherQueued(h.r.svc)) == callers
	})
	if b := h.r.batch.batches.Load(); b != 1 {
		t.Errorf("%d batches in flight at once; want 1", b)
	}
	h.releaseAll()
	wantRemainingOnce(t, got, 0, 19)
	if b, m := h.r.batch.batches.Load(), h.r.batch.maxBatch.Load(); m < 2 || b >= callers {
		t.Errorf("%d batches, the largest of %d requests; want fewer batches than callers", b, m)
	}
	wantCalls(t, h.r.store, callers, "after the batches")
}

// TestBatcherPipelinesToAFarStore: once a batch of one has taken a round
// trip of farRTT or more (held in the store at least that long; the
// batcher's first round trip, a warm-up call here, tells nothing), the
// store is far, and a call that finds batches in flight starts its own at
// once instead of queueing behind them: three calls, each made while the
// ones before are held, have three batches in the store at once. Each is
// still decided exactly once. (TestBatcherQueuesBehindFullPipeline is the
// near store's side: there callers queue behind the one batch in flight.)
func TestBatcherPipelinesToAFarStore(t *testing.T) {
	h := newHeldBatches(t, "fixed_window 10/1h")
	got := make([]floodgate.Decision, 5)
	for i := range 2 { // the warm-up: its second round trip tells
		h.call(t, got, i)
		waitFor(t, fmt.Sprintf("warm-up batch %d held", i+1), func() bool { return h.r.batch.held.Load() == int64(i+1) })
		time.Sleep(2 * service.FarRTT) // its round trip: at least this
		h.hold <- struct{}{}
		h.wg.Wait()
	}
	waitFor(t, "the warm-up's runner gone", func() bool { return oneLink(t, h.r.svc).Batches == 0 })
	if l := oneLink(t, h.r.svc); !l.Far || l.RoundTrip < 2*service.FarRTT {
		t.Errorf("after the warm-up Links() = %+v; want far on a round trip of %v or more", l, 2*service.FarRTT)
	}
	for i := 2; i < len(got); i++ {
		h.call(t, got, i)
		waitFor(t, fmt.Sprintf("call %d's own batch held in the store", i+1), func() bool {
			return h.r.batch.held.Load() == int64(i+1)
		})
	}
	if p := h.r.batch.peak.Load(); p != 3 {
		t.Errorf("%d batches in the store at once; want 3", p)
	}
	if l := oneLink(t, h.r.svc); l.Batches != 3 {
		t.Errorf("Links() = %+v while three batches are held; want Batches 3", l)
	}
	h.releaseAll()
	wantRemainingOnce(t, got, 5, 9)
	wantCalls(t, h.r.store, 5, "after the five calls")
}

// oneLink returns the one link svc.Links reports, failing unless there is
// exactly one, the store's node "".
func oneLink(t *testing.T, svc *service.Service) service.Link {
	t.Helper()
	links := svc.Links()
	if len(links) != 1 || links[0].Node != "" {
		t.Fatalf("Links() = %+v; want one link, to node \"\"", links)
	}
	return links[0]
}

// TestLinks: a batching service reports no link before its first
// decision, then the store's one node, near, with no round trip after the
// first batch (which dials, and tells nothing) and one after the second;
// a service that does not batch reports none.
func TestLinks(t *testing.T) {
	r := newRig(t, true, `policies: {fw: "fixed_window 10/1h"}`)
	if l := r.svc.Links(); l != nil {
		t.Fatalf("Links() before any decision = %+v; want nil", l)
	}
	check := func() {
		t.Helper()
		if _, err := r.svc.Check(ctx, items("fw", "k")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the runner gone", func() bool { return oneLink(t, r.svc).Batches == 0 })
	}
	check()
	if l := oneLink(t, r.svc); l.Far || l.RoundTrip != 0 {
		t.Errorf("after the first batch Links() = %+v; want near, round trip 0", l)
	}
	check()
	if l := oneLink(t, r.svc); l.RoundTrip <= 0 {
		t.Errorf("after the second batch Links() = %+v; want a round trip", l)
	}

	off := newRig(t, false, `policies: {fw: "fixed_window 10/1h"}`)
	if _, err := off.svc.Check(ctx, items("fw", "k")); err != nil {
		t.Fatal(err)
	}
	if l := off.svc.Links(); l != nil {
		t.Errorf("Links() without batching = %+v; want nil", l)
	}
}

// TestBatcherProbesUnderLoad: under load a near store's batches are too
// large to tell how far it is, so when no round trip told anything yet,
// the batch after the first (which dials, and tells nothing) is a probe:
// the first queued caller alone, the others waiting for it. Held in the
// store for farRTT or more, it makes the store far, and the rest leave
// together once it returns. Each decision is still made exactly once.
func TestBatcherProbesUnderLoad(t *testing.T) {
	h := newHeldBatches(t, "fixed_window 10/1h")
	got := make([]floodgate.Decision, 6)
	h.call(t, got, 0)
	waitFor(t, "the first batch held", func() bool { return h.r.batch.held.Load() == 1 })
	for i := 1; i < len(got); i++ {
		h.call(t, got, i)
	}
	waitFor(t, "five callers queued behind the first batch", func() bool { return service.BatcherQueued(h.r.svc) == 5 })
	h.hold <- struct{}{}
	waitFor(t, "a probe of one caller held, four queued behind it", func() bool {
		return h.r.batch.held.Load() == 2 && service.BatcherQueued(h.r.svc) == 4
	})
	time.Sleep(2 * service.FarRTT) // the probe's round trip: at least this
	h.hold <- struct{}{}
	waitFor(t, "the other four in one batch", func() bool { return h.r.batch.held.Load() == 6 })
	if b := h.r.batch.batches.Load(); b != 3 {
		t.Errorf("%d batches; want 3: the first, the probe, the rest", b)
	}
	h.releaseAll()
	wantRemainingOnce(t, got, 4, 9)
}

// TestOverLimitCache: once a fixed window denies with nothing remaining,
// the key is answered locally, exactly as the store would answer, until
// the window ends; Reset and Reload forget it; other algorithms, tracked
// policies and over_limit_cache: false always ask the store.
func TestOverLimitCache(t *testing.T) {
	r := newRig(t, false, `
policies:
  fw: "fixed_window 2/1m"
  tracked: "fixed_window 2/1m track"
  gc: "gcra 1/1m"
`)
	svc, calls := r.svc, int64(0)
	step := func(policy, key string, wantAllowed bool, storeCalled bool, when string) floodgate.Decision {
		t.Helper()
		d := one(t, svc, policy, key)
		if storeCalled {
			calls++
		}
		if d.Allowed != wantAllowed {
			t.Fatalf("%s: %v; want allowed %v", when, d, wantAllowed)
		}
		wantCalls(t, r.store, calls, when)
		return d
	}
	step("fw", "k", true, true, "first")
	step("fw", "k", true, true, "second")
	step("fw", "k", false, true, "third, denied by the store")
	fw := svc.Policies()[slices.IndexFunc(svc.Policies(), func(p *floodgate.Policy) bool { return p.Name == "fw" })]

	r.clock.Advance(15 * time.Second)
	for i := range 5 {
		for _, c := range []struct {
			n     int64
			retry time.Duration
		}{{1, 45 * time.Second}, {3, floodgate.Never}} {
			d := check(t, svc, service.Item{Policy: "fw", Key: "k", Cost: c.n}).Items[0].Decision
			wantCalls(t, r.store, calls, fmt.Sprintf("cached denial %d of cost %d", i, c.n))
			want, err := r.mem.Take(ctx, floodgate.Request{Policy: fw, Key: "k", N: c.n, Peek: true})
			if err != nil {
				t.Fatal(err)
			}
			if d != want || d.RetryAfter != c.retry {
				t.Fatalf("cached denial of cost %d: %v; the store says %v, want retry %v", c.n, d, want, c.retry)
			}
		}
	}
	if d := peek(t, svc, items("fw", "k")...).Items[0].Decision; d.Allowed || d.RetryAfter != 45*time.Second {
		t.Fatalf("peek of a cached key: %v; want denied, retry 45s", d)
	}
	wantCalls(t, r.store, calls, "peek of a cached key")
	res := check(t, svc, items("fw", "k", "other")...)
	calls++
	if res.Items[0].Decision.Allowed || !res.Items[1].Decision.Allowed {
		t.Fatalf("batch of a cached and a fresh key: %v", decisions(res))
	}
	wantCalls(t, r.store, calls, "batch of a cached and a fresh key")
	if hits := r.obs.snapshot().cacheHits; hits != 12 {
		t.Errorf("observer saw %d cache hits; want 12", hits)
	}

	r.clock.Advance(45*time.Second - time.Microsecond)
	step("fw", "k", false, false, "the window's last microsecond")
	r.clock.Advance(time.Microsecond)
	if d := step("fw", "k", true, true, "the next window"); d.Remaining != 1 {
		t.Fatalf("the next window: %v; want remaining 1", d)
	}
	step("fw", "k", true, true, "the next window, second")
	step("fw", "k", false, true, "the next window, denied by the store")
	step("fw", "k", false, false, "the next window, cached")

	if err := svc.Reset(ctx, "fw", "k"); err != nil {
		t.Fatal(err)
	}
	step("fw", "k", true, true, "after Reset")
	step("fw", "k", true, true, "after Reset, second")
	step("fw", "k", false, true, "after Reset, denied by the store")
	step("fw", "k", false, false, "after Reset, cached")

	if err := svc.Reload(mustParse(t, `policies: {fw: "fixed_window 2/1m"}`)); err != nil {
		t.Fatal(err)
	}
	step("fw", "k", false, true, "after Reload, the state kept in the store")
	step("fw", "k", false, false, "after Reload, cached again")

	if err := svc.Reload(mustParse(t, `
policies:
  tracked: "fixed_window 2/1m track"
  gc: "gcra 1/1m"
`)); err != nil {
		t.Fatal(err)
	}
	step("gc", "k", true, true, "gcra")
	for i := range 3 {
		step("gc", "k", false, true, fmt.Sprintf("gcra denial %d, never cached", i))
	}
	step("tracked", "k", true, true, "tracked")
	step("tracked", "k", true, true, "tracked, second")
	for i := range 3 {
		step("tracked", "k", false, true, fmt.Sprintf("tracked denial %d, never cached", i))
	}

	if err := svc.Reload(mustParse(t, `
policies: {fw: "fixed_window 2/1m"}
store: {over_limit_cache: false}
`)); err != nil {
		t.Fatal(err)
	}
	step("fw", "z", true, true, "cache off")
	step("fw", "z", true, true, "cache off, second")
	for i := range 3 {
		step("fw", "z", false, true, fmt.Sprintf("cache off, denial %d", i))
	}
}

// TestFailureModes: a failing store's requests are decided by
// failure.mode, as docs/operations.md says: open allows, closed denies
// with failure.retry_after, fallback decides on the fallback store; every
// such decision says Degraded, and the store is asked again once it works.
// TestOverLimitCacheSlowStore: the store decides at the start of a call
// that takes 40 ms to come back. The cache must count the window's end
// from the decision, not from the answer: a request at the window's end
// goes to the store and is admitted.
func TestOverLimitCacheSlowStore(t *testing.T) {
	r := newRig(t, false, `
policies:
  fw: "fixed_window 1/1s"
`)
	r.clock.Set(epoch.Truncate(time.Second).Add(time.Second)) // a window's start
	start := r.clock.Now()
	r.store.after = func() { r.clock.Advance(40 * time.Millisecond) }
	if d := one(t, r.svc, "fw", "k"); !d.Allowed {
		t.Fatalf("first: %v", d)
	}
	if d := one(t, r.svc, "fw", "k"); d.Allowed {
		t.Fatalf("second: %v; want denied", d)
	}
	r.store.after = nil
	r.clock.Set(start.Add(time.Second)) // the next window
	calls := r.store.calls.Load()
	if d := one(t, r.svc, "fw", "k"); !d.Allowed {
		t.Fatalf("at the next window: %v; want allowed (the cache must not outlive the window)", d)
	}
	wantCalls(t, r.store, calls+1, "at the next window")
}

// TestFailureLogsThrottled: a store failing every request writes one log
// line a second, and the next line says how many it held back.
func TestFailureLogsThrottled(t *testing.T) {
	var buf bytes.Buffer
	clock := floodgatetest.NewManualClock(epoch)
	store := &flakyStore{Store: newMem(t, clock)}
	store.failing.Store(true)
	svc, err := service.New(mustParse(t, `
policies:
  fw: "fixed_window 5/1m"
store: {over_limit_cache: false}
failure: {breaker: {disabled: true}}
`), service.Options{Store: store, Clock: clock, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }
	for range 100 {
		if d := one(t, svc, "fw", "k"); !d.Allowed || !d.Degraded {
			t.Fatalf("fail-open: %v", d)
		}
	}
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "store failed") || !strings.Contains(got[0], "suppressed=0") {
		t.Fatalf("after 100 failures in one instant, the log has %d lines: %q; want one", len(got), got)
	}
	clock.Advance(999 * time.Millisecond)
	one(t, svc, "fw", "k")
	if got := lines(); len(got) != 1 {
		t.Fatalf("within the second: %d lines, want 1", len(got))
	}
	clock.Advance(time.Millisecond)
	one(t, svc, "fw", "k")
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "suppressed=100") {
		t.Fatalf("a second later: %q; want a second line with suppressed=100", got)
	}
}

func TestFailureModes(t *testing.T) {
	for _, mode := range []string{"open", "closed", "fallback"} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t, false, `
policies: {fw: "fixed_window 2/1m"}
failure: {mode: `+mode+`, retry_after: 7s}
`)
			r.store.failing.Store(true)
			for i := range 3 {
				res := check(t, r.svc, items("fw", "k")...)
				d := res.Items[0].Decision
				if !d.Degraded || res.Allowed != d.Allowed {
					t.Errorf("check %d: %v (result allowed %v); want degraded", i, d, res.Allowed)
				}
				item := []rlheader.Item{{Policy: res.Items[0].Policy, Decision: d}}
				switch mode {
				case "open":
					if !d.Allowed || d.Limit != 0 || d.Remaining != 0 || d.RetryAfter != 0 {
						t.Errorf("check %d: %v; want allowed, with no numbers", i, d)
					}
				case "closed":
					if d.Allowed || d.Limit != 0 || d.RetryAfter != 7*time.Second {
						t.Errorf("check %d: %v; want denied, with no numbers but the retry after 7s", i, d)
					}
				case "fallback":
					if d.Allowed != (i < 2) || d.Limit != 2 || d.Remaining != max(0, int64(1-i)) {
						t.Errorf("check %d: %v; want the fallback's count: allowed %v", i, d, i < 2)
					}
				}
				// Only the fallback's decisions carry numbers to report.
				if bi := rlheader.Binding(item); (bi == 0) != (mode == "fallback") {
					t.Errorf("check %d: %s: RateLimit reports the decision: %v", i, mode, bi == 0)
				}
			}
			if d := peek(t, r.svc, items("fw", "k")...).Items[0].Decision; !d.Degraded {
				t.Errorf("peek of a failing store: %v; want degraded", d)
			}
			wantCalls(t, r.store, 4, "every request tried the store")
			obs := r.obs.snapshot()
			if obs.degraded != 3 || obs.decisions != 3 || obs.storeErrors != 4 {
				t.Errorf("observer: %d decisions, %d degraded, %d store errors; want 3, 3, 4", obs.decisions, obs.degraded, obs.storeErrors)
			}

			r.store.failing.Store(false)
			if d := one(t, r.svc, "fw", "k"); !d.Allowed || d.Degraded || d.Remaining != 1 {
				t.Errorf("store back: %v; want allowed by the store, its count untouched (remaining 1)", d)
			}
			if r.fallback != nil {
				if d := one(t, r.svc, "fw", "k"); !d.Allowed || d.Degraded || d.Remaining != 0 {
					t.Errorf("store back, second: %v; want allowed by the store, remaining 0", d)
				}
			}
		})
	}
}

// TestBreaker: the breaker opens when enough of the calls within its
// window failed (here: 5 calls, all failed); while open the store is not
// called and the failure mode answers at once; after open_for one probe
// goes through: its failure opens the breaker again, its success closes
// it. Failures among successes within the window keep it closed; the
// window forgets old calls.
func TestBreaker(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			r := newRig(t, batched, `
policies: {fw: "fixed_window 1000/1h"}
failure:
  mode: closed
  breaker: {window: 10s, min_calls: 5, failure_ratio: 1, open_for: 500ms}
`)
			calls := int64(0)
			// try checks n times and wants tried of them to reach the
			// store; every decision must come from the wanted side.
			try := func(n, tried int, when string) {
				t.Helper()
				for range n {
					d := one(t, r.svc, "fw", "k")
					if failing := r.store.failing.Load(); d.Degraded != (failing || tried == 0) || d.Allowed == d.Degraded {
						t.Fatalf("%s: %v", when, d)
					}
				}
				calls += int64(tried)
				wantCalls(t, r.store, calls, when)
			}

			r.store.failing.Store(true)
			try(4, 4, "four failures: fewer calls than min_calls")
			try(1, 1, "the fifth failure opens it")
			try(10, 0, "breaker open")
			res := check(t, r.svc, items("fw", "a", "b", "c")...)
			for i, it := range res.Items {
				if d := it.Decision; !d.Degraded || d.Allowed || d.RetryAfter != time.Second {
					t.Errorf("batch while open, item %d: %v; want the failure mode's denial", i, d)
				}
			}
			if d := peek(t, r.svc, items("fw", "k")...).Items[0].Decision; !d.Degraded {
				t.Errorf("peek while open: %v; want degraded", d)
			}
			wantCalls(t, r.store, calls, "batch and peek while open")

			r.clock.Advance(500*time.Millisecond - time.Microsecond)
			try(1, 0, "open until its last microsecond")
			r.clock.Advance(time.Microsecond)
			try(1, 1, "a probe after open_for")
			try(3, 0, "the probe failed: open again")

			r.clock.Advance(500 * time.Millisecond)
			r.store.failing.Store(false)
			try(1, 1, "store back: the probe closes it")
			try(2, 2, "closed")

			r.store.failing.Store(true)
			try(6, 6, "failures among successes: not all failed, closed")
			r.clock.Advance(10 * time.Second) // the window forgets them
			try(4, 4, "four failures in a fresh window: closed")
			try(1, 1, "the fifth opens it")
			try(2, 0, "open")
		})
	}
}

// TestDegradedDecisionsClaimNoQuota: a decision made without the store
// (fail open, fail closed) carries no numbers, for every algorithm: no
// limit, no remaining quota a client could read as "0 left".
func TestDegradedDecisionsClaimNoQuota(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		r := newRig(t, false, `
policies:
  fw: "fixed_window 7/1m"
  gc: "gcra 5/1s burst 10"
  tb: "token_bucket 15/1m burst 3"
  sl: "sliding_log 4/1s"
  sw: "sliding_window 6/1m resolution 1s, 20/1h resolution 1m"
  ar: "ar1 9/1s decay 2"
failure: {mode: `+mode+`}
`)
		r.store.failing.Store(true)
		for _, p := range []string{"fw", "gc", "tb", "sl", "sw", "ar"} {
			d := one(t, r.svc, p, "failed")
			if !d.Degraded || d.Allowed != (mode == "open") || d.Limit != 0 || d.Remaining != 0 || d.ResetAfter != 0 {
				t.Errorf("%s, fail %s: %v; want degraded with no numbers", p, mode, d)
			}
		}
	}
}

// TestReloadToFallbackNeedsAFallbackStore: as New, Reload refuses the
// fallback failure mode when the service has no fallback store, and the
// configuration in force keeps deciding (it used to be accepted, and the
// next store failure dereferenced the missing fallback). With a fallback
// store, the same reload is applied.
func TestReloadToFallbackNeedsAFallbackStore(t *testing.T) {
	const open = `policies: {fw: "fixed_window 2/1m"}`
	const fallback = open + "\nfailure: {mode: fallback}"
	r := newRig(t, false, open)
	before := r.svc.Config()
	if err := r.svc.Reload(mustParse(t, fallback)); err == nil {
		t.Fatal("Reload to failure mode fallback without Options.Fallback: no error")
	}
	if r.svc.Config() != before {
		t.Fatal("a refused reload replaced the configuration")
	}
	if obs := r.obs.snapshot(); obs.reloadsFailed != 1 || obs.reloadsOK != 0 {
		t.Errorf("observer: %d reloads applied, %d refused; want 0, 1", obs.reloadsOK, obs.reloadsFailed)
	}
	r.store.failing.Store(true)
	if d := one(t, r.svc, "fw", "k"); !d.Allowed || !d.Degraded {
		t.Errorf("failing store after a refused reload: %v; want failing open, as configured", d)
	}

	clock := floodgatetest.NewManualClock(epoch)
	store := &flakyStore{Store: newMem(t, clock)}
	svc, err := service.New(mustParse(t, open), service.Options{Store: store, Fallback: newMem(t, clock), Clock: clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(mustParse(t, fallback)); err != nil {
		t.Fatalf("Reload to fallback with a fallback store: %v", err)
	}
	store.failing.Store(true)
	for i, want := range []bool{true, true, false} {
		if d := one(t, svc, "fw", "k"); d.Allowed != want || !d.Degraded {
			t.Errorf("fallback decision %d: %v; want allowed %v, degraded", i, d, want)
		}
	}
}

const (
	reloadA = `
policies:
  keep: "fixed_window 1000000/1h align first"
  gone: "gcra 10/1s"
`
	reloadB = `
policies:
  keep: "fixed_window 1000000/1h align first"
  added: "sliding_window 5/1m resolution 1s"
failure: {mode: closed}
`
)

// TestReloadUnderLoad: checks keep going while configurations are swapped
// under them; none fails or degrades, the counts of a policy present in
// every configuration are all kept (the state is in the store, by policy
// name), invalid configurations are refused while the one in force keeps
// serving, and a policy removed by the last swap is not found.
func TestReloadUnderLoad(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(batchedName(batched), func(t *testing.T) {
			r := newRig(t, batched, reloadA)
			svc := r.svc
			cfgA, cfgB := svc.Config(), mustParse(t, reloadB)
			for range 10 {
				one(t, svc, "keep", "k")
			}

			const workers = 8
			var (
				stop, started sync.WaitGroup
				done          = make(chan struct{})
				adds          atomic.Int64 // adds on keep/k by the workers
				goneOK        atomic.Int64
				goneNotFound  atomic.Int64
			)
			started.Add(workers + 1)
			for w := range workers {
				stop.Go(func() {
					for i := 0; ; i++ {
						its := items("keep", "k")
						if i%2 == 1 {
							its = items("keep", "k", "k", fmt.Sprintf("w%d", w))
						}
						res, err := svc.Check(ctx, its)
						if i == 0 {
							started.Done()
						}
						if err != nil {
							t.Errorf("worker %d: %v", w, err)
							return
						}
						for _, it := range res.Items {
							if !it.Decision.Allowed || it.Decision.Degraded {
								t.Errorf("worker %d: %v", w, it.Decision)
								return
							}
						}
						adds.Add(int64(min(2, len(its))))
						select {
						case <-done:
							return
						default:
						}
					}
				})
			}
			stop.Go(func() {
				for i := 0; ; i++ {
					_, err := svc.Check(ctx, items("gone", "g"))
					if i == 0 {
						started.Done()
					}
					var re *service.RequestError
					switch {
					case err == nil:
						goneOK.Add(1)
					case errors.As(err, &re) && re.Code == "unknown_policy" && re.NotFound():
						goneNotFound.Add(1)
					default:
						t.Errorf("policy gone: %v; want a decision or unknown_policy", err)
						return
					}
					select {
					case <-done:
						return
					default:
					}
				}
			})
			var finish sync.Once
			stopWorkers := func() {
				finish.Do(func() { close(done) })
				stop.Wait()
			}
			defer stopWorkers()
			started.Wait()

			// The invalid one: a failure mode the service cannot honour. (A
			// domain that does not compile is refused by rls.Compile, before
			// the service reloads: see package rls.)
			fallback := mustParse(t, reloadA+"failure: {mode: fallback}\n")
			const reloads = 40
			for i := range reloads {
				next := cfgA
				if i%2 == 0 {
					next = cfgB
				}
				if i == reloads-1 {
					next = cfgB
				}
				if err := svc.Reload(next); err != nil {
					t.Fatalf("reload %d: %v", i, err)
				}
				if i == 10 || i == 21 {
					for _, bad := range []*config.Config{fallback} {
						if err := svc.Reload(bad); err == nil {
							t.Fatalf("reload %d: an invalid configuration applied", i)
						}
						if svc.Config() != next {
							t.Fatalf("reload %d: a refused configuration replaced the one in force", i)
						}
					}
				}
			}
			stopWorkers()

			if svc.Config() != cfgB {
				t.Fatal("the last configuration applied is not in force")
			}
			var re *service.RequestError
			if _, err := svc.Check(ctx, items("gone", "g")); !errors.As(err, &re) || !re.NotFound() || re.Field != "policy" {
				t.Errorf("a removed policy after the swap: %v; want not found", err)
			}
			if d := one(t, svc, "added", "g"); !d.Allowed || d.Limit != 5 {
				t.Errorf("a new policy: %v", d)
			}
			if goneOK.Load() == 0 {
				t.Error("the removed policy never decided while it was configured")
			}
			total := 10 + adds.Load()
			if d := peek(t, svc, items("keep", "k")...).Items[0].Decision; d.Remaining != 1_000_000-total-1 {
				t.Errorf("keep after %d adds and %d reloads: %v; want remaining %d (no count lost)", total, reloads, d, 1_000_000-total-1)
			}
			if obs := r.obs.snapshot(); obs.reloadsOK != reloads || obs.reloadsFailed != 2 || obs.degraded != 0 {
				t.Errorf("observer: %d reloads applied, %d refused, %d degraded; want %d, 2, 0", obs.reloadsOK, obs.reloadsFailed, obs.degraded, reloads)
			}

			// A new max keeps every count.
			if err := svc.Reload(mustParse(t, `policies: {keep: "fixed_window 2000000/1h align first"}`)); err != nil {
				t.Fatal(err)
			}
			if d := peek(t, svc, items("keep", "k")...).Items[0].Decision; d.Remaining != 2_000_000-total-1 || d.Limit != 2_000_000 {
				t.Errorf("keep with a new max: %v; want limit 2000000, remaining %d", d, 2_000_000-total-1)
			}
		})
	}
}

// TestRedisDown: a real redis-server killed and restarted. While it is
// down, requests are decided by the failure mode (closed, then open after
// a reload) and Ready fails; once it is back, Ready succeeds and the store
// decides again.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	clock := floodgatetest.NewManualClock(time.Now())
	// No call here needs store.timeout to end it: a killed server refuses
	// connections at once. A minute is a hang check only; a short timeout
	// could cut a healthy call on a loaded machine (the first one, or the
	// one after the restart, which loads the function library again) and
	// answer it from the failure mode.
	const cfg = `
policies: {fw: "fixed_window 5/1h align first"}
store: {timeout: 1m}
failure: {mode: closed, retry_after: 3s}
`
	svc, _ := redisService(t, redisClient(t, srv), cfg, clock)
	if d := one(t, svc, "fw", "k"); !d.Allowed || d.Degraded || d.Remaining != 4 {
		t.Fatalf("redis up: %v", d)
	}
	if err := svc.Ready(ctx); err != nil {
		t.Fatalf("Ready with redis up: %v", err)
	}

	srv.Kill(t)
	if d := one(t, svc, "fw", "k"); d.Allowed || !d.Degraded || d.RetryAfter != 3*time.Second || d.Limit != 0 {
		t.Errorf("redis down, fail closed: %v; want denied, degraded, retry after 3s, no numbers", d)
	}
	if err := svc.Ready(ctx); err == nil {
		t.Error("Ready with redis down: no error")
	}
	if err := svc.Reload(mustParse(t, strings.Replace(cfg, "closed", "open", 1))); err != nil {
		t.Fatal(err)
	}
	if d := one(t, svc, "fw", "k"); !d.Allowed || !d.Degraded {
		t.Errorf("redis down, fail open: %v; want allowed, degraded", d)
	}

	srv.Restart(t)
	waitFor(t, "Ready after redis restarted", func() bool { return svc.Ready(ctx) == nil })
	if d := one(t, svc, "fw", "k"); !d.Allowed || d.Degraded || d.Remaining != 4 {
		t.Errorf("redis back (its data gone): %v; want allowed by the store, remaining 4", d)
	}
}

func parse(files ...string) (*config.Config, error) {
	srcs := make([]config.Source, len(files))
	for i, f := range files {
		srcs[i] = config.Source{Name: "f" + string(rune('0'+i)) + ".yaml", Data: []byte(f)}
	}
	return config.Parse(srcs...)
}

// TestReloadMemoryFlat reloads a Redis-backed service 10,000 times,
// alternating two versions of a configuration of ten policies (each
// parsed anew every time, as a file watch does) and deciding through the
// store after every reload: a policy that comes back keeps its identity
// (the same value, so the store's caches keep serving it), and the live
// heap after the first thousand reloads stays flat. Before policies had an
// identity, every reload minted values that the Redis store cached for
// good.
func TestReloadMemoryFlat(t *testing.T) {
	srv := redistest.StartServer(t)
	version := func(max int) string {
		var b strings.Builder
		b.WriteString("policies:\n")
		for i := range 10 {
			fmt.Fprintf(&b, "  p%d: \"fixed_window %d/1h\"\n  g%d: \"gcra %d/1s burst 3\"\n", i, max+i, i, max+i)
		}
		b.WriteString("store: {batching: false}\n")
		return b.String()
	}
	a, b := version(100), version(200)
	svc, _ := redisService(t, redisClient(t, srv), a, nil)
	first := map[string]*floodgate.Policy{}
	for _, p := range svc.Policies() {
		first[p.Name] = p
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const reloads, settle = 10_000, 1_000
	var atSettle uint64
	for i := range reloads {
		text := b
		if i%2 == 1 {
			text = a
		}
		if err := svc.Reload(mustParse(t, text)); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("p%d", i%10)
		if i%3 == 0 {
			name = fmt.Sprintf("g%d", i%10)
		}
		if d := one(t, svc, name, "k"); d.Degraded {
			t.Fatalf("reload %d: %v", i, d)
		}
		if i%2 == 1 {
			for _, p := range svc.Policies() {
				if p != first[p.Name] {
					t.Fatalf("reload %d: policy %s is a new value; the same policy must keep its identity", i, p.Name)
				}
			}
		}
		if i+1 == settle {
			atSettle = heap()
		}
	}
	end := heap()
	t.Logf("live heap: %d KiB after %d reloads, %d KiB after %d", atSettle>>10, settle, end>>10, reloads)
	if end > atSettle+atSettle/10+256<<10 {
		t.Errorf("the live heap grew from %d KiB to %d KiB over %d reloads", atSettle>>10, end>>10, reloads-settle)
	}
}
