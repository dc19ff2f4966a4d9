package failure_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/storekit"
)

var epoch = time.Unix(1_700_000_000, 0)

// shardedStore is a memory store whose keys live on two "nodes" by their
// first letter ("a…" on node A, the rest on node B); a node can be made
// to fail. It is a storekit.Router and a storekit.BatchStore.
type shardedStore struct {
	*memstore.Store
	down  sync.Map // node -> bool
	calls atomic.Int64
	aNode atomic.Pointer[string] // where keys "a…" live; nil: "A"
}

func (s *shardedStore) Node(_ context.Context, p *floodgate.Policy, key string) string {
	if strings.HasPrefix(key, "a") {
		if n := s.aNode.Load(); n != nil {
			return *n
		}
		return "A"
	}
	return "B"
}

func (s *shardedStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	s.calls.Add(1)
	if v, _ := s.down.Load(s.Node(ctx, req.Policy, req.Key)); v == true {
		return floodgate.Decision{}, fmt.Errorf("%w: node down", floodgate.ErrUnavailable)
	}
	return s.Store.Take(ctx, req)
}

func (s *shardedStore) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	for i := range reqs {
		d, err := s.Take(ctx, reqs[i])
		out[i] = storekit.Outcome{Decision: d, Err: err}
	}
}

func newSharded(t *testing.T, clock storekit.Clock) *shardedStore {
	t.Helper()
	m, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &shardedStore{Store: m}
}

var policy = floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour}

func take(t *testing.T, s floodgate.Store, key string) floodgate.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), floodgate.Request{Policy: &policy, Key: key, N: 1})
	if err != nil {
		t.Fatalf("Take(%s): %v", key, err)
	}
	return d
}

// nodeADown returns a sharded store whose node A is down, wrapped in the
// failure policy of mode with a breaker that opens after 3 calls, half of
// them failed, for a second, on a manual clock at epoch, with opts.
func nodeADown(t *testing.T, mode failure.Mode, opts ...failure.Option) (*floodgatetest.ManualClock, *shardedStore, *failure.Store) {
	t.Helper()
	clock := floodgatetest.NewManualClock(epoch)
	inner := newSharded(t, clock)
	s, err := failure.Wrap(inner, failure.Policy{Mode: mode, Breaker: failure.Breaker{MinCalls: 3, FailureRatio: 0.5, OpenFor: time.Second}},
		append([]failure.Option{failure.WithClock(clock), failure.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	inner.down.Store("A", true)
	return clock, inner, s
}

// TestBreakerPerNode: node A failing opens A's breaker only; keys of node
// B are still decided by the store, never degraded.
func TestBreakerPerNode(t *testing.T) {
	_, inner, s := nodeADown(t, failure.Closed)
	for i := range 3 {
		if d := take(t, s, "a1"); !d.Degraded || d.Allowed {
			t.Fatalf("node A down, call %d: %+v", i, d)
		}
	}
	before := inner.calls.Load()
	for i := range 10 {
		if d := take(t, s, "a1"); !d.Degraded {
			t.Fatalf("node A, breaker open, call %d: %+v", i, d)
		}
		if d := take(t, s, "b1"); d.Degraded || !d.Allowed {
			t.Fatalf("node B while A's breaker is open, call %d: %+v", i, d)
		}
	}
	if got := inner.calls.Load() - before; got != 10 {
		t.Errorf("%d calls reached the store, want the 10 of node B", got)
	}
	// A batch mixing both nodes: B decided, A degraded without a call.
	reqs := []floodgate.Request{{Policy: &policy, Key: "a2", N: 1}, {Policy: &policy, Key: "b2", N: 1}}
	out := make([]storekit.Outcome, 2)
	before = inner.calls.Load()
	s.TakeBatch(context.Background(), reqs, out)
	if !out[0].Decision.Degraded || out[1].Decision.Degraded || !out[1].Decision.Allowed || inner.calls.Load()-before != 1 {
		t.Errorf("batch: %+v; %d calls", out, inner.calls.Load()-before)
	}
	var open []string
	for _, b := range s.Guard().Breakers() {
		if b.Open {
			open = append(open, b.Node)
		}
	}
	if len(open) != 1 || open[0] != "A" {
		t.Errorf("open breakers %v, want [A]", open)
	}
}

// breakerLog records BreakerChanged calls.
type breakerLog struct {
	mu      sync.Mutex
	changes []string
}

func (l *breakerLog) StoreCall(op, node string, took time.Duration, err error) {}
func (l *breakerLog) BreakerChanged(node string, open bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, fmt.Sprintf("%s=%v", node, open))
}

// TestBreakerForgotten: after a failover moves node A's keys to node C,
// A's open breaker is forgotten once no call has asked for A in a
// minute; C's keys are decided by the store at once.
func TestBreakerForgotten(t *testing.T) {
	obs := &breakerLog{}
	clock, inner, s := nodeADown(t, failure.Closed, failure.WithObserver(obs))
	for range 3 {
		take(t, s, "a1")
	}
	c := "C"
	inner.aNode.Store(&c) // the replica took over
	if d := take(t, s, "a1"); d.Degraded || !d.Allowed {
		t.Fatalf("a key on the new master C: %+v", d)
	}
	open := func() (nodes []string) {
		for _, b := range s.Guard().Breakers() {
			if b.Open {
				nodes = append(nodes, b.Node)
			}
		}
		return nodes
	}
	if got := open(); len(got) != 1 || got[0] != "A" {
		t.Fatalf("open breakers %v, want [A] until it is forgotten", got)
	}
	for range 4 { // a minute and more of calls for B and C only
		clock.Advance(20 * time.Second)
		take(t, s, "a1")
		take(t, s, "b1")
	}
	if got := open(); len(got) != 0 {
		t.Errorf("open breakers %v a minute after A was last asked for, want none", got)
	}
	for _, b := range s.Guard().Breakers() {
		if b.Node == "A" {
			t.Errorf("A's breaker still listed: %+v", b)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if want := []string{"A=true", "A=false"}; fmt.Sprint(obs.changes) != fmt.Sprint(want) {
		t.Errorf("breaker changes %v, want %v", obs.changes, want)
	}
}

// TestBreakerProbe: after OpenFor a single probe goes through; others wait
// for its outcome; success closes, failure reopens.
func TestBreakerProbe(t *testing.T) {
	clock := floodgatetest.NewManualClock(epoch)
	inner := newSharded(t, clock)
	s, _ := failure.Wrap(inner, failure.Policy{Breaker: failure.Breaker{MinCalls: 1, FailureRatio: 1, OpenFor: time.Second}},
		failure.WithClock(clock), failure.WithLogger(slog.New(slog.DiscardHandler)))
	inner.down.Store("B", true)
	take(t, s, "b") // opens
	n := inner.calls.Load()
	take(t, s, "b")
	clock.Advance(time.Second)
	take(t, s, "b") // the probe: fails, reopens
	take(t, s, "b")
	if got := inner.calls.Load() - n; got != 1 {
		t.Fatalf("%d calls after opening, want the one probe", got)
	}
	inner.down.Store("B", false)
	clock.Advance(time.Second)
	if d := take(t, s, "b"); d.Degraded {
		t.Fatalf("probe with the node back: %+v", d)
	}
	if d := take(t, s, "b"); d.Degraded {
		t.Fatalf("closed again: %+v", d)
	}
}

// TestRequestErrorsPassThrough: a request the store refuses is the
// caller's error, not a store failure: not degraded, not counted.
func TestRequestErrorsPassThrough(t *testing.T) {
	clock := floodgatetest.NewManualClock(epoch)
	inner := newSharded(t, clock)
	s, _ := failure.Wrap(inner, failure.Policy{Breaker: failure.Breaker{MinCalls: 1, FailureRatio: 0.1}}, failure.WithClock(clock))
	for range 5 {
		_, err := s.Take(context.Background(), floodgate.Request{Policy: &policy, Key: "", N: 1})
		if !errors.Is(err, floodgate.ErrInvalidKey) {
			t.Fatalf("empty key: %v", err)
		}
		_, err = s.Take(context.Background(), floodgate.Request{Policy: &policy, Key: "k", N: 0})
		if !errors.Is(err, floodgate.ErrInvalidCost) {
			t.Fatalf("cost 0: %v", err)
		}
	}
	if d := take(t, s, "k"); d.Degraded {
		t.Errorf("after refused requests: %+v; the breaker must not count them", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, floodgate.Request{Policy: &policy, Key: "k", N: 1}); err == nil {
		// memstore does not look at its context: a decision is fine too.
		t.Log("a canceled context still decided (memstore does not wait)")
	}
}

// TestFallbackAndLogThrottle: in Fallback mode the fallback store decides;
// a failing store logs one line a second, then how many were held back.
func TestFallbackAndLogThrottle(t *testing.T) {
	clock := floodgatetest.NewManualClock(epoch)
	inner := newSharded(t, clock)
	fb, _ := memstore.New(memstore.WithClock(clock))
	defer fb.Close()
	var buf bytes.Buffer
	s, err := failure.Wrap(inner, failure.Policy{Mode: failure.Fallback, Fallback: fb, Breaker: failure.Breaker{Disabled: true}},
		failure.WithClock(clock), failure.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	inner.down.Store("B", true)
	for i := range 50 {
		d := take(t, s, "b")
		if !d.Degraded || !d.Allowed || d.Limit != 1000 || d.Remaining != int64(999-i) {
			t.Fatalf("fallback call %d: %+v", i, d)
		}
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "suppressed=0") {
		t.Fatalf("log: %q; want one line", got)
	}
	clock.Advance(time.Second)
	take(t, s, "b")
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "suppressed=49") {
		t.Fatalf("log a second later: %q; want a second line, suppressed=49", got)
	}
}

// TestPolicyErrors: every field at fault is named.
func TestPolicyErrors(t *testing.T) {
	for _, c := range []struct {
		p    failure.Policy
		want string
	}{
		{failure.Policy{Mode: 7}, "Mode = Mode(7)"},
		{failure.Policy{Mode: failure.Fallback}, "Fallback = nil"},
		{failure.Policy{RetryAfter: 1500 * time.Millisecond}, "RetryAfter = 1.5s"},
		{failure.Policy{Breaker: failure.Breaker{Window: time.Hour}}, "Breaker.Window = 1h0m0s"},
		{failure.Policy{Breaker: failure.Breaker{MinCalls: -1}}, "Breaker.MinCalls = -1"},
		{failure.Policy{Breaker: failure.Breaker{FailureRatio: 2}}, "Breaker.FailureRatio = 2"},
		{failure.Policy{Breaker: failure.Breaker{OpenFor: time.Millisecond}}, "Breaker.OpenFor = 1ms"},
	} {
		_, err := failure.NewGuard(c.p)
		if !errors.Is(err, failure.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewGuard(%+v) = %v; want ErrInvalidPolicy naming %q", c.p, err, c.want)
		}
	}
	for _, s := range []string{"open", "closed", "fallback"} {
		if m, err := failure.ParseMode(s); err != nil || m.String() != s {
			t.Errorf("ParseMode(%s) = %v, %v", s, m, err)
		}
	}
	if _, err := failure.ParseMode("sometimes"); !errors.Is(err, failure.ErrInvalidPolicy) {
		t.Errorf("ParseMode(sometimes) = %v", err)
	}
}

// TestTimeout: a store that hangs is cut at the timeout, and the failure
// mode decides; the store saw a deadline.
func TestTimeout(t *testing.T) {
	hang := hangStore{}
	s, _ := failure.Wrap(hang, failure.Policy{Mode: failure.Closed, Timeout: 20 * time.Millisecond}, failure.WithLogger(slog.New(slog.DiscardHandler)))
	start := time.Now()
	d := take(t, s, "k")
	if took := time.Since(start); took < 20*time.Millisecond || took > 15*time.Second { // the upper bound: only a hang
		t.Errorf("took %v with a 20ms timeout", took)
	}
	if !d.Degraded || d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("decision %+v; want the closed mode's", d)
	}
}

type hangStore struct{ floodgate.Store }

func (hangStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if _, ok := ctx.Deadline(); !ok {
		return floodgate.Decision{}, errors.New("no deadline")
	}
	<-ctx.Done()
	return floodgate.Decision{}, fmt.Errorf("%w: %w", floodgate.ErrUnavailable, ctx.Err())
}

// TestFullStoreKeepsLimits: a bounded memory store flooded with new keys
// refuses those it has no room for (decided by the failure mode, here
// open) without opening the breaker, so an exhausted key stays denied by
// the store itself.
func TestFullStoreKeepsLimits(t *testing.T) {
	clock := floodgatetest.NewManualClock(epoch)
	m, err := memstore.New(memstore.WithClock(clock), memstore.WithMaxKeys(1000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	obs := &breakerLog{}
	s, err := failure.Wrap(m, failure.Policy{}, failure.WithClock(clock), failure.WithLogger(slog.New(slog.DiscardHandler)), failure.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	login := floodgate.Policy{Name: "login", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour}
	ctx := context.Background()
	for i := range 6 {
		d, err := s.Take(ctx, floodgate.Request{Policy: &login, Key: "alice", N: 1})
		if err != nil || d.Degraded || d.Allowed != (i < 5) {
			t.Fatalf("alice #%d: %+v, %v", i+1, d, err)
		}
	}
	refused := 0
	for i := range 5000 {
		d, err := s.Take(ctx, floodgate.Request{Policy: &login, Key: fmt.Sprintf("flood%d", i), N: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Degraded {
			refused++
			if !d.Allowed {
				t.Fatalf("a refused new key under fail-open: %+v", d)
			}
		}
		if i%500 == 0 {
			if d, err := s.Take(ctx, floodgate.Request{Policy: &login, Key: "alice", N: 1}); err != nil || d.Allowed || d.Degraded {
				t.Fatalf("alice after %d new keys: %+v, %v; want denied by the store", i, d, err)
			}
		}
	}
	if refused < 4000 {
		t.Errorf("%d of 5,000 new keys refused by a store bounded at 1,000", refused)
	}
	for _, b := range s.Guard().Breakers() {
		if b.Open {
			t.Errorf("breaker open after a full store's refusals: %+v", b)
		}
	}
	if len(obs.changes) != 0 {
		t.Errorf("breaker changes %v, want none", obs.changes)
	}
	if st := m.Stats(); st.Refused != uint64(refused) {
		t.Errorf("memstore counted %d refusals, the failure policy degraded %d", st.Refused, refused)
	}
}

// TestBatchIsOneCallForTheBreaker: a batch whose round trip to a node
// fails is one failed call for that node's breaker, not one per decision
// in it: a single failed batch of 50 decisions does not open a breaker
// that needs 3 calls, while 3 failed batches do.
func TestBatchIsOneCallForTheBreaker(t *testing.T) {
	_, inner, s := nodeADown(t, failure.Open)
	reqs := make([]floodgate.Request, 50)
	for i := range reqs {
		reqs[i] = floodgate.Request{Policy: &policy, Key: fmt.Sprintf("a%d", i), N: 1}
	}
	out := make([]storekit.Outcome, len(reqs))
	isOpen := func() bool {
		for _, b := range s.Guard().Breakers() {
			if b.Node == "A" && b.Open {
				return true
			}
		}
		return false
	}
	for batch := range 3 {
		if isOpen() {
			t.Fatalf("A's breaker open after %d failed batches; want it closed until 3", batch)
		}
		before := inner.calls.Load()
		s.TakeBatch(context.Background(), reqs, out)
		if got := inner.calls.Load() - before; got != int64(len(reqs)) {
			t.Fatalf("batch %d: %d decisions reached the store, want %d", batch, got, len(reqs))
		}
		for i, o := range out {
			if !o.Decision.Degraded || !o.Decision.Allowed {
				t.Fatalf("batch %d, request %d: %+v; want degraded, allowed", batch, i, o)
			}
		}
	}
	if !isOpen() {
		t.Error("A's breaker closed after 3 failed batches; want it open")
	}
}

// TestBatchCountsEachNode: a batch that spans two nodes is one call for
// each node's breaker, failed only for the node that failed: three batches
// of B's and A's decisions, A down, open A's breaker and leave B's closed.
// B's decision comes first, so that counting the batch once for its first
// node would open B's instead.
func TestBatchCountsEachNode(t *testing.T) {
	_, _, s := nodeADown(t, failure.Open)
	reqs := []floodgate.Request{{Policy: &policy, Key: "b1", N: 1}, {Policy: &policy, Key: "a1", N: 1}, {Policy: &policy, Key: "b2", N: 1}}
	out := make([]storekit.Outcome, len(reqs))
	for range 3 {
		s.TakeBatch(context.Background(), reqs, out)
		if !out[1].Decision.Degraded || out[0].Decision.Degraded || out[2].Decision.Degraded {
			t.Fatalf("batch: %+v; want only A's decision degraded", out)
		}
	}
	open := map[string]bool{}
	for _, b := range s.Guard().Breakers() {
		open[b.Node] = b.Open
	}
	if !open["A"] || open["B"] {
		t.Errorf("breakers open: %v; want A's open and B's closed", open)
	}
}

// hangBatchStore is a hangStore that decides batches too: each request
// hangs until the batch's deadline.
type hangBatchStore struct{ hangStore }

func (s hangBatchStore) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	for i := range reqs {
		d, err := s.Take(ctx, reqs[i])
		out[i] = storekit.Outcome{Decision: d, Err: err}
	}
}

// TestSaturation: a call the timeout cuts while the caller says it is
// saturated comes back as an error wrapping ErrSaturated and the store's
// error, not a degraded decision, by Take and by TakeBatch; the breaker
// counts it a failure all the same (it opens after MinCalls of them). Not
// saturated, the same cut is the failure mode's.
func TestSaturation(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%t", batch), func(t *testing.T) {
			var saturated atomic.Bool
			var inner floodgate.Store = hangStore{}
			if batch {
				inner = hangBatchStore{}
			}
			s, err := failure.Wrap(inner, failure.Policy{Mode: failure.Closed, Timeout: 10 * time.Millisecond,
				Breaker: failure.Breaker{MinCalls: 3, FailureRatio: 0.5, OpenFor: time.Minute}},
				failure.WithLogger(slog.New(slog.DiscardHandler)), failure.WithSaturation(func(string) bool { return saturated.Load() }))
			if err != nil {
				t.Fatal(err)
			}
			call := func() (floodgate.Decision, error) {
				req := floodgate.Request{Policy: &policy, Key: "k", N: 1}
				if !batch {
					return s.Take(context.Background(), req)
				}
				out := make([]storekit.Outcome, 1)
				s.TakeBatch(context.Background(), []floodgate.Request{req}, out)
				return out[0].Decision, out[0].Err
			}
			d, err := call()
			if err != nil || !d.Degraded || d.Allowed {
				t.Fatalf("not saturated: %+v, %v; want the closed mode's decision", d, err)
			}
			saturated.Store(true)
			d, err = call()
			if !errors.Is(err, failure.ErrSaturated) || !errors.Is(err, context.DeadlineExceeded) || d != (floodgate.Decision{}) {
				t.Fatalf("saturated: %+v, %v; want an error wrapping ErrSaturated and the deadline", d, err)
			}
			// The third failed call opens the breaker (MinCalls 3): the
			// next one is decided at once by the failure mode.
			if _, err := call(); !errors.Is(err, failure.ErrSaturated) {
				t.Fatalf("third call: %v; want ErrSaturated", err)
			}
			if b := s.Guard().Breakers(); len(b) != 1 || !b[0].Open {
				t.Fatalf("breakers %+v after 3 cut calls; want the store's open", b)
			}
			d, err = call()
			if err != nil || !d.Degraded || d.Allowed {
				t.Errorf("breaker open: %+v, %v; want the closed mode's decision", d, err)
			}
		})
	}
}
