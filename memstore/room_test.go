package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
)

// TestEvictionOrder: a full shard first drops entries that hold nothing,
// then entries whose state is empty but whose tracked usage is retained
// (evicted: usage lost, no decision changed), and never one whose state
// still limits: then it refuses the new key, counts it, and keeps deciding
// the keys it holds.
func TestEvictionOrder(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithMaxKeys(6), memstore.WithShards(1))
	ctx := context.Background()
	limiter := func(name, text string) *floodgate.Limiter {
		p, err := floodgate.ParsePolicy(name, text)
		if err != nil {
			t.Fatal(err)
		}
		l, err := floodgate.NewLimiter(s, p)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	long := limiter("long", "fixed_window 5/1h")
	tracked := limiter("tracked", "fixed_window 5/1s track retention 1h")
	short := limiter("short", "gcra 1/1s burst 1")
	for _, k := range []string{"L1", "L2"} {
		long.Allow(ctx, k)
	}
	for _, k := range []string{"T1", "T2"} {
		tracked.Allow(ctx, k)
	}
	for _, k := range []string{"S1", "S2"} {
		short.Allow(ctx, k)
	}
	clock.Advance(2 * time.Second) // short and tracked states are empty; tracked usage is kept
	want := func(what string, evictions, swept, refused uint64) {
		t.Helper()
		if st := s.Stats(); st.Entries != 6 || st.Evictions != evictions || st.Swept != swept || st.Refused != refused {
			t.Fatalf("%s: Stats = %+v, want 6 entries, %d evictions, %d swept, %d refused", what, st, evictions, swept, refused)
		}
	}
	long.Allow(ctx, "N1")
	long.Allow(ctx, "N2")
	want("two new keys", 0, 2, 0) // the gcra entries went first
	long.Allow(ctx, "N3")
	long.Allow(ctx, "N4")
	want("four new keys", 2, 2, 0) // then the tracked ones, whose usage is lost
	_, err := long.Allow(ctx, "N5")
	if !errors.Is(err, memstore.ErrFull) || !errors.Is(err, floodgate.ErrUnavailable) {
		t.Fatalf("a new key with every entry limiting: %v, want ErrFull wrapping ErrUnavailable", err)
	}
	want("a refused key", 2, 2, 1)
	// The keys held are still decided, exactly; the refused one left no
	// state, and a peek (which needs none) still answers for it.
	for _, k := range []string{"L1", "L2", "N1", "N2", "N3", "N4"} {
		if d, err := long.Allow(ctx, k); err != nil || d.Remaining != 3 {
			t.Errorf("%s: %v, %v; want its second request counted (remaining 3)", k, d, err)
		}
	}
	if d, err := long.Peek(ctx, "N5", 1); err != nil || d.Remaining != 4 {
		t.Errorf("peek of the refused key: %v, %v; want a fresh key's", d, err)
	}
	want("after", 2, 2, 1)
	// A long window ends: its keys make room again.
	clock.Advance(time.Hour)
	if d, err := long.Allow(ctx, "N5"); err != nil || d.Remaining != 4 {
		t.Errorf("the refused key once the windows ended: %v, %v", d, err)
	}
}

// TestRoomFoundByScan: a large full shard with a few empty entries among
// live ones, which a sample of a few chains rarely meets, still finds
// every one of them before it refuses.
func TestRoomFoundByScan(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithMaxKeys(1000), memstore.WithShards(1))
	ctx := context.Background()
	long, _ := floodgate.NewLimiter(s, floodgate.Policy{Name: "long", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour})
	short, _ := floodgate.NewLimiter(s, floodgate.Policy{Name: "short", Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1})
	for i := 0; i < 990; i++ {
		long.Allow(ctx, fmt.Sprintf("long%d", i))
	}
	for i := 0; i < 10; i++ {
		short.Allow(ctx, fmt.Sprintf("short%d", i))
	}
	clock.Advance(2 * time.Second)
	admitted, refused := 0, 0
	for i := 0; i < 30; i++ {
		_, err := long.Allow(ctx, fmt.Sprintf("new%d", i))
		switch {
		case err == nil:
			if refused > 0 {
				t.Fatalf("new key %d admitted after a refusal: room was there before", i)
			}
			admitted++
		case errors.Is(err, memstore.ErrFull):
			refused++
		default:
			t.Fatal(err)
		}
	}
	if st := s.Stats(); admitted != 10 || refused != 20 || st.Swept != 10 || st.Refused != 20 || st.Entries != 1000 {
		t.Errorf("Stats = %+v, %d admitted; want the 10 empty entries replaced, then 20 refused", st, admitted)
	}
}

// TestRoomAfterPolicyChange: a key whose policy changes to a shorter
// window empties sooner than every other entry; a full shard finds it.
func TestRoomAfterPolicyChange(t *testing.T) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithMaxKeys(200), memstore.WithShards(1))
	ctx := context.Background()
	hour, _ := floodgate.ParsePolicy("p", "sliding_window 5/1h resolution 1m")
	second, _ := floodgate.ParsePolicy("p", "sliding_window 5/1s resolution 100ms")
	take := func(p *floodgate.Policy, key string) error {
		_, err := s.Take(ctx, floodgate.Request{Policy: p, Key: key, N: 1})
		return err
	}
	for i := 0; i < 200; i++ {
		if err := take(&hour, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := take(&hour, "new0"); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("a new key in a full shard: %v, want ErrFull", err)
	}
	// k7 is decided under a policy of the same name and another shape: its
	// state starts afresh, and lasts a second.
	if err := take(&second, "k7"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	for i := 1; i <= 5; i++ {
		err := take(&hour, fmt.Sprintf("new%d", i))
		if (i == 1) != (err == nil) {
			t.Fatalf("new key %d after k7 emptied: %v; want the first admitted in k7's place, then refusals", i, err)
		}
	}
	if st := s.Stats(); st.Swept != 1 || st.Refused != 5 {
		t.Errorf("Stats = %+v, want 1 swept, 5 refused", st)
	}
}

// TestBoundOptions: the default bound is DefaultSizing's, WithMaxKeys and
// WithUnbounded replace it (the last given applies), and an unbounded
// store never refuses.
func TestBoundOptions(t *testing.T) {
	def := memstore.DefaultSizing()
	if def.MaxKeys < 1 || def.Memory < 1 || def.Source == "" {
		t.Fatalf("DefaultSizing() = %+v", def)
	}
	t.Logf("default bound on this machine: %+v", def)
	for _, c := range []struct {
		opts []memstore.Option
		want int
	}{
		{nil, def.MaxKeys},
		{[]memstore.Option{memstore.WithMaxKeys(10)}, 10},
		{[]memstore.Option{memstore.WithUnbounded()}, 0},
		{[]memstore.Option{memstore.WithMaxKeys(10), memstore.WithUnbounded()}, 0},
		{[]memstore.Option{memstore.WithUnbounded(), memstore.WithMaxKeys(10)}, 10},
	} {
		if got := newStore(t, c.opts...).Stats().Bound; got != c.want {
			t.Errorf("New with %d options: Bound %d, want %d", len(c.opts), got, c.want)
		}
	}
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithUnbounded(), memstore.WithShards(1))
	lim, _ := floodgate.NewLimiter(s, floodgate.Policy{Name: "u", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour})
	for i := 0; i < 5000; i++ {
		if _, err := lim.Allow(context.Background(), fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Entries != 5000 || st.Refused != 0 || st.Bound != 0 {
		t.Errorf("unbounded store: Stats = %+v, want 5000 entries, none refused", st)
	}
}
