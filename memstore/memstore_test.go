package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/storekit"
)

func newStore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	floodgatetest.Run(t, floodgatetest.Harness{
		NewStore: func(t *testing.T, clock storekit.Clock) floodgate.Store {
			s, err := memstore.New(memstore.WithClock(clock), memstore.WithSweepInterval(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Keys: func(s floodgate.Store) int { return s.(*memstore.Store).Stats().Entries },
	})
}

func TestOptionErrors(t *testing.T) {
	for _, c := range []struct {
		opt  memstore.Option
		want string
	}{
		{memstore.WithMaxKeys(0), "memstore: WithMaxKeys(0): must be ≥ 1"},
		{memstore.WithMaxKeyLen(-1), "memstore: WithMaxKeyLen(-1): must be ≥ 1"},
		{memstore.WithShards(3), "memstore: WithShards(3): must be a power of two from 1 to 65536"},
		{memstore.WithSweepInterval(0), "memstore: WithSweepInterval(0s): must be > 0"},
		{memstore.WithClock(nil), "memstore: WithClock: nil clock"},
	} {
		s, err := memstore.New(c.opt)
		if err == nil {
			s.Close()
			t.Errorf("New accepted an option that should fail with %q", c.want)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("New: %q, want %q", err, c.want)
		}
	}
}

// TestZeroAllocs: a decision for a key the store holds allocates nothing,
// for every algorithm, add and peek.
func TestZeroAllocs(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock))
	ctx := context.Background()
	for i, p := range floodgatetest.PropertyPolicies() {
		p.Name = fmt.Sprintf("allocs%d", i)
		lim, err := floodgate.NewLimiter(s, p)
		if err != nil {
			t.Fatal(err)
		}
		step := int64(0)
		allocs := testing.AllocsPerRun(1000, func() {
			step += 7919 // µs: crosses buckets, windows and slots
			clock.SetMicros(floodgatetest.BaseMicros + step)
			lim.Allow(ctx, "hot")
			lim.Peek(ctx, "hot", 2)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per decision, want 0", p.String(), allocs)
		}
	}
}

// TestMaxKeysEvicts: the store never holds more entries than WithMaxKeys.
// While every entry it holds still limits, it forgets none of them: new
// keys are refused with ErrFull (so ErrUnavailable) and the keys it holds
// keep their counts; once their windows have ended, their entries make
// room for new keys. (Before the store refused, it evicted the entry
// closest to its expiry here, and a key's counts were lost.)
func TestMaxKeysEvicts(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithMaxKeys(100), memstore.WithShards(4))
	p := floodgate.Policy{Name: "evict", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Minute, Align: floodgate.AlignFirst}
	lim, _ := floodgate.NewLimiter(s, p)
	ctx := context.Background()
	var held []string
	refused := 0
	for i := 0; i < 1000; i++ {
		clock.SetMicros(floodgatetest.BaseMicros + int64(i))
		key := fmt.Sprintf("k%d", i)
		d, err := lim.Allow(ctx, key)
		switch {
		case err == nil && d.Allowed && d.Remaining == 4:
			held = append(held, key)
		case errors.Is(err, memstore.ErrFull) && errors.Is(err, floodgate.ErrUnavailable):
			refused++
		default:
			t.Fatalf("key %d: %v, %v; want a fresh key's decision or ErrFull", i, d, err)
		}
		if n := s.Stats().Entries; n > 100 {
			t.Fatalf("after %d keys the store holds %d entries, want ≤ 100", i+1, n)
		}
	}
	st := s.Stats()
	if st.Entries != 100 || len(held) != 100 || refused != 900 || st.Refused != 900 || st.Evictions != 0 || st.Bound != 100 {
		t.Errorf("Stats = %+v, %d keys held, %d refused; want 100 entries and keys held, 900 refused, 0 evictions, bound 100", st, len(held), refused)
	}
	// Every key the store took still has its count.
	for _, k := range held {
		if d, _ := lim.Peek(ctx, k, 1); d.Remaining != 3 {
			t.Fatalf("%s lost its count: %v", k, d)
		}
	}
	// Their windows end: the entries are empty, and each makes room for a
	// new key. 400 new keys fill every shard's 25 places (a shard gets
	// fewer than 25 of them with a probability below 10^-9), and the
	// others are refused, the new keys' state being live in turn.
	clock.Advance(time.Minute)
	admitted := 0
	for i := 0; i < 400; i++ {
		d, err := lim.Allow(ctx, fmt.Sprintf("new%d", i))
		switch {
		case err == nil && d.Remaining == 4:
			admitted++
		case errors.Is(err, memstore.ErrFull):
		default:
			t.Fatalf("new key %d after the windows ended: %v, %v", i, d, err)
		}
	}
	if st := s.Stats(); admitted != 100 || st.Entries != 100 || st.Swept != 100 || st.Evictions != 0 || st.Refused != 900+300 {
		t.Errorf("Stats = %+v, %d new keys admitted; want 100 admitted and entries, 100 swept, 0 evictions, 1200 refused", st, admitted)
	}
}

// TestEvictionPrefersEmpty: a full shard drops state that has expired
// before anything else, and refuses a new key rather than evict live
// state.
func TestEvictionPrefersEmpty(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithMaxKeys(4), memstore.WithShards(1))
	short := floodgate.Policy{Name: "short", Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1}
	long := floodgate.Policy{Name: "long", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour}
	ctx := context.Background()
	ls, _ := floodgate.NewLimiter(s, short)
	ll, _ := floodgate.NewLimiter(s, long)
	ll.Allow(ctx, "keep1")
	ll.Allow(ctx, "keep2")
	ls.Allow(ctx, "gone1")
	ls.Allow(ctx, "gone2")
	clock.Advance(2 * time.Second) // the gcra states are empty now
	ll.Allow(ctx, "new1")
	ll.Allow(ctx, "new2")
	if st := s.Stats(); st.Evictions != 0 || st.Swept != 2 || st.Entries != 4 || st.Refused != 0 {
		t.Errorf("Stats = %+v, want 0 evictions, 2 swept, 4 entries, 0 refused", st)
	}
	if _, err := ll.Allow(ctx, "new3"); !errors.Is(err, memstore.ErrFull) {
		t.Errorf("a fifth key with four live ones: %v, want ErrFull", err)
	}
	if st := s.Stats(); st.Refused != 1 || st.Entries != 4 {
		t.Errorf("Stats = %+v, want 1 refused, 4 entries", st)
	}
	for _, k := range []string{"keep1", "keep2", "new1", "new2"} {
		if d, _ := ll.Peek(ctx, k, 1); d.Remaining != 3 {
			t.Errorf("%s: %v, want its count kept (remaining 3)", k, d)
		}
	}
}

// TestSweep: the sweeper forgets empty state, and a swept key decides as a
// fresh one.
func TestSweep(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithSweepInterval(time.Millisecond))
	p := floodgate.Policy{Name: "sweep", Algorithm: floodgate.SlidingLog, Max: 2, Window: time.Second}
	lim, _ := floodgate.NewLimiter(s, p)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		lim.Allow(ctx, fmt.Sprintf("k%d", i))
	}
	if n := s.Stats().Entries; n != 50 {
		t.Fatalf("%d entries, want 50", n)
	}
	clock.Advance(time.Second)
	deadline := time.Now().Add(30 * time.Second) // only a hang
	for s.Stats().Entries != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sweeper left %d entries after their state expired", s.Stats().Entries)
		}
		time.Sleep(time.Millisecond)
	}
	if d, _ := lim.Allow(ctx, "k1"); d.Remaining != 1 {
		t.Errorf("swept key: %v, want a fresh key's decision (remaining 1)", d)
	}
}

// TestCloseStopsSweeper: Close ends the sweeper goroutine. It counts the
// goroutines running a sweeper, not all goroutines: the testing package's
// own (a subtest's, finishing) came and went under a busy machine.
func TestCloseStopsSweeper(t *testing.T) {
	before := sweepers()
	var stores []*memstore.Store
	for i := 0; i < 20; i++ {
		s, err := memstore.New(memstore.WithSweepInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	// Another test's store may still be closing: its sweeper counts in
	// before and may end meanwhile.
	if n := sweepers(); n < 20 || n > before+20 {
		t.Fatalf("%d sweepers after starting 20 stores (%d before), want 20 to %d", n, before, before+20)
	}
	for _, s := range stores {
		s.Close()
	}
	deadline := time.Now().Add(30 * time.Second) // only a hang
	for sweepers() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d sweepers after Close, want %d", sweepers(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// sweepers returns how many goroutines are running a store's sweeper: the
// goroutines New started (the only ones it starts).
func sweepers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "created by github.com/floodgatehq/floodgate/memstore.New ")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestPolicyChange: a policy with the same name and shape keeps the keys'
// state (a reload with a new max); one with another shape starts afresh.
func TestPolicyChange(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock))
	ctx := context.Background()
	mustTake := func(p floodgate.Policy) floodgate.Decision {
		t.Helper()
		d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	p1, _ := floodgate.ParsePolicy("api", "sliding_window 5/1m resolution 1s")
	p2, _ := floodgate.ParsePolicy("api", "sliding_window 10/1m resolution 1s")
	p3, _ := floodgate.ParsePolicy("api", "sliding_window 10/1m resolution 10s")
	p4, _ := floodgate.ParsePolicy("api", "gcra 1/1s")
	mustTake(p1)
	mustTake(p1)
	if d := mustTake(p2); d.Remaining != 7 {
		t.Errorf("same shape, new max: %v, want the count kept (remaining 7)", d)
	}
	if d := mustTake(p3); d.Remaining != 9 {
		t.Errorf("new resolution: %v, want a fresh count (remaining 9)", d)
	}
	if d := mustTake(p4); !d.Allowed || d.Remaining != 0 {
		t.Errorf("new algorithm: %v, want a fresh gcra decision", d)
	}
	bad := p4
	bad.Burst = 0
	if _, err := s.Take(ctx, floodgate.Request{Policy: &bad, Key: "k", N: 1}); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("invalid policy under an existing key: %v, want ErrInvalidPolicy", err)
	}
}

// TestClockOutOfRange: a clock before 1970 or after 2155 is refused rather
// than decided with arithmetic that is no longer exact.
func TestClockOutOfRange(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.Date(2160, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newStore(t, memstore.WithClock(clock))
	lim, _ := floodgate.NewLimiter(s, floodgate.Policy{Name: "c", Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1})
	_, err := lim.Allow(context.Background(), "k")
	if !errors.Is(err, floodgate.ErrUnavailable) || !strings.Contains(err.Error(), "2160-01-01T00:00:00Z, outside 1970 to 2155") {
		t.Errorf("Allow in 2160: %v", err)
	}
	clock.Set(time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC))
	if _, err := lim.Allow(context.Background(), "k"); !errors.Is(err, floodgate.ErrUnavailable) {
		t.Errorf("Allow in 1969: %v", err)
	}
	clock.Set(time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC))
	if d, err := lim.Allow(context.Background(), "k"); err != nil || !d.Allowed {
		t.Errorf("Allow in 2150: %v, %v", d, err)
	}
}
