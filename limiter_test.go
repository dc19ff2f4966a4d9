package floodgate_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
)

// waitFixture returns a limiter on a memstore with a manual clock, whose
// Wait sleeps by moving that clock and records every sleep.
func waitFixture(t *testing.T, text string) (*floodgate.Limiter, *floodgatetest.ManualClock, *[]time.Duration) {
	t.Helper()
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.NewLimiter(store, mustParse(t, text))
	if err != nil {
		t.Fatal(err)
	}
	var sleeps []time.Duration
	// Deadlines are real time; sleeping moves the store's clock.
	floodgate.SetWaitHooks(lim, time.Now, func(ctx context.Context, d time.Duration) error {
		sleeps = append(sleeps, d)
		clock.Advance(d)
		return ctx.Err()
	})
	return lim, clock, &sleeps
}

func TestWaitSleepsRetryAfter(t *testing.T) {
	lim, clock, sleeps := waitFixture(t, "gcra 2/1s burst 1")
	ctx := context.Background()
	start := clock.Micros()
	for i := 0; i < 4; i++ {
		d, err := lim.Wait(ctx, "k")
		if err != nil || !d.Allowed {
			t.Fatalf("Wait #%d = %v, %v", i, d, err)
		}
	}
	want := []time.Duration{500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond}
	if !reflect.DeepEqual(*sleeps, want) {
		t.Errorf("sleeps %v, want %v", *sleeps, want)
	}
	if got := clock.Micros() - start; got != 1_500_000 {
		t.Errorf("4 waits at 2/s took %d µs, want 1500000", got)
	}
}

func TestWaitRetriesWhenOvertaken(t *testing.T) {
	lim, clock, sleeps := waitFixture(t, "fixed_window 1/10s")
	ctx := context.Background()
	lim.Allow(ctx, "k")
	// Another client takes the next window's unit while we sleep.
	floodgate.SetWaitHooks(lim, time.Now, func(ctx context.Context, d time.Duration) error {
		*sleeps = append(*sleeps, d)
		clock.Advance(d)
		if len(*sleeps) == 1 {
			lim.Allow(ctx, "k")
		}
		return nil
	})
	d, err := lim.Wait(ctx, "k")
	if err != nil || !d.Allowed {
		t.Fatalf("Wait = %v, %v", d, err)
	}
	if want := []time.Duration{10 * time.Second, 10 * time.Second}; !reflect.DeepEqual(*sleeps, want) {
		t.Errorf("sleeps %v, want %v", *sleeps, want)
	}
}

func TestWaitRefusesAtOnce(t *testing.T) {
	lim, _, sleeps := waitFixture(t, "token_bucket 10/1h burst 2")
	ctx := context.Background()

	d, err := lim.WaitN(ctx, "k", 3) // more than burst: never
	if !errors.Is(err, floodgate.ErrNeverAllowed) || d.RetryAfter != floodgate.Never {
		t.Errorf("WaitN(3) with burst 2 = %v, %v; want ErrNeverAllowed", d, err)
	}

	lim.AllowN(ctx, "k", 2)
	// A token takes 6 minutes; a minute left is too short, and long
	// enough that no pause of a loaded machine ends it first.
	short, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err = lim.Wait(short, "k")
	if !errors.Is(err, floodgate.ErrWouldExceedDeadline) || d.Allowed {
		t.Errorf("Wait with a minute left = %v, %v; want ErrWouldExceedDeadline", d, err)
	}

	done, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := lim.Wait(done, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a canceled context: %v", err)
	}
	if _, err := lim.WaitN(ctx, "k", 0); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("WaitN(0): %v, want ErrInvalidCost", err)
	}
	if len(*sleeps) != 0 {
		t.Errorf("refusals slept %v", *sleeps)
	}
}

func TestWaitRealTimer(t *testing.T) {
	store, _ := memstore.New()
	defer store.Close()
	lim, _ := floodgate.NewLimiter(store, floodgate.Policy{Name: "real", Algorithm: floodgate.GCRA, Max: 100, Window: time.Second, Burst: 1})
	ctx := context.Background()
	lim.Allow(ctx, "k")
	if d, err := lim.Wait(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("Wait = %v, %v", d, err)
	}
	// A context canceled during the sleep ends it.
	lim2, _ := floodgate.NewLimiter(store, floodgate.Policy{Name: "slow", Algorithm: floodgate.GCRA, Max: 1, Window: time.Hour, Burst: 1})
	lim2.Allow(ctx, "k")
	c, cancel := context.WithCancel(ctx)
	time.AfterFunc(10*time.Millisecond, cancel)
	if _, err := lim2.Wait(c, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait canceled while sleeping: %v", err)
	}
}

// TestAllowNRefusesNonPositiveCosts: a cost below 1 (an underflow in the
// caller's arithmetic, say) is ErrInvalidCost and changes nothing: it
// neither peeks nor, as the seed systems' negative counts did, resets the
// key.
func TestAllowNRefusesNonPositiveCosts(t *testing.T) {
	lim, _, _ := waitFixture(t, "fixed_window 3/1m")
	ctx := context.Background()
	if _, err := lim.AllowN(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{0, -1, -1 << 62, floodgate.MaxCost + 1} {
		if d, err := lim.AllowN(ctx, "k", n); !errors.Is(err, floodgate.ErrInvalidCost) || d != (floodgate.Decision{}) {
			t.Errorf("AllowN(%d) = %+v, %v; want ErrInvalidCost and no decision", n, d, err)
		}
		if d, err := lim.Peek(ctx, "k", n); !errors.Is(err, floodgate.ErrInvalidCost) || d != (floodgate.Decision{}) {
			t.Errorf("Peek(%d) = %+v, %v; want ErrInvalidCost and no decision", n, d, err)
		}
	}
	if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("after the refused costs: %+v, %v; want the third of 3 allowed (nothing reset)", d, err)
	}
}

func TestNewLimiter(t *testing.T) {
	store, _ := memstore.New()
	defer store.Close()
	if _, err := floodgate.NewLimiter(nil, mustParse(t, "1/1s")); err == nil {
		t.Error("NewLimiter(nil store) succeeded")
	}
	if _, err := floodgate.NewLimiter(store, floodgate.Policy{Name: "p"}); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("NewLimiter(invalid policy): %v", err)
	}
	p := mustParse(t, "sliding_window 2/1s resolution 100ms")
	lim, err := floodgate.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Limits[0].Max = 1000 // the limiter has its own copy
	if got := lim.Policy().Limits[0].Max; got != 2 {
		t.Errorf("limiter policy changed with the caller's: max %v", got)
	}
	got := lim.Policy()
	got.Limits[0].Max = 7
	if lim.Policy().Limits[0].Max != 2 {
		t.Error("Policy() returned the limiter's own limits")
	}
}

// TestKeysAreUTF8: a key that is not valid UTF-8 is ErrInvalidKey for
// every operation, as the service's HTTP and gRPC APIs refuse it, and it
// decides nothing; the error does not repeat the key. Valid keys,
// non-ASCII ones included, are decided.
func TestKeysAreUTF8(t *testing.T) {
	lim, _, _ := waitFixture(t, "fixed_window 3/1m")
	ctx := context.Background()
	for _, key := range []string{"secret\xffb", "secret\xfeb", "secret\xc3", "secret\xed\xa0\x80"} { // the last: a surrogate
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, floodgate.ErrInvalidKey) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s(%q): %v, want ErrInvalidKey without the key", op, key, err)
			}
		}
		_, err := lim.Allow(ctx, key)
		check("Allow", err)
		_, err = lim.AllowN(ctx, key, 2)
		check("AllowN", err)
		_, err = lim.Peek(ctx, key, 1)
		check("Peek", err)
		_, err = lim.Wait(ctx, key)
		check("Wait", err)
		check("Reset", lim.Reset(ctx, key))
	}
	for _, key := range []string{"grüße", "\U0001F600", "\uFFFD"} {
		if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed || d.Remaining != 2 {
			t.Errorf("Allow(%q) = %+v, %v; want the first of 3", key, d, err)
		}
	}
}
