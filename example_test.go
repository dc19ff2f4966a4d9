package floodgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
)

// run applies a policy to one key at the given offsets from a fixed
// instant (a multiple of every window below) and prints each decision.
func run(text string, steps ...struct {
	at time.Duration
	n  int64
}) {
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	store, _ := memstore.New(memstore.WithClock(clock))
	defer store.Close()
	p, err := floodgate.ParsePolicy("example", text)
	if err != nil {
		fmt.Println(err)
		return
	}
	lim, _ := floodgate.NewLimiter(store, p)
	fmt.Println(p)
	for _, s := range steps {
		clock.SetMicros(floodgatetest.BaseMicros + int64(s.at/time.Microsecond))
		d, _ := lim.AllowN(context.Background(), "k", s.n)
		fmt.Printf("t=%-6v n=%d: %s\n", s.at, s.n, describe(d))
	}
}

// describe formats a decision as "allowed limit=10 remaining=3
// retry_after=0s reset_after=42s".
func describe(d floodgate.Decision) string {
	verdict, retry := "denied", d.RetryAfter.String()
	if d.Allowed {
		verdict = "allowed"
	}
	if d.RetryAfter == floodgate.Never {
		retry = "never"
	}
	s := fmt.Sprintf("%s limit=%d remaining=%d retry_after=%s reset_after=%s", verdict, d.Limit, d.Remaining, retry, d.ResetAfter)
	if d.Binding != 0 {
		s += fmt.Sprintf(" binding=%d", d.Binding)
	}
	return s
}

type step = struct {
	at time.Duration
	n  int64
}

func ExampleNewLimiter() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	lim, err := floodgate.NewLimiter(store, floodgate.Policy{
		Name:      "api",
		Algorithm: floodgate.GCRA,
		Max:       10, Window: time.Hour,
		Burst: 3,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, err := lim.Allow(ctx, "user-42")
		if err != nil {
			panic(err) // the store failed: a denial is not an error
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}

func ExampleParsePolicy() {
	for _, text := range []string{
		"100/1m",
		"5/1s burst 10",
		"fixed_window 1000/1h align first",
		"sliding_window 1/5s resolution 1s, 5/1h resolution 10m",
		"token_bucket 1/1s burst 5",
	} {
		p, err := floodgate.ParsePolicy("p", text)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(p)
	}
	// Output:
	// gcra 100/1m burst 1
	// gcra 5/1s burst 10
	// fixed_window 1000/1h align first
	// sliding_window 1/5s resolution 1s, 5/1h resolution 10m
	// error: floodgate: policy "p": burst = 5: an integer with 1 ≤ burst ≤ limit (1)
}

// A sliding window counts costs in buckets of the resolution; a bucket
// counts for one window after it opened. Several limits must all admit.
func Example_slidingWindow() {
	run("sliding_window 2/10s resolution 1s",
		step{0, 1}, step{4 * time.Second, 1}, step{5 * time.Second, 1}, step{10 * time.Second, 1})
	// Output:
	// sliding_window 2/10s resolution 1s
	// t=0s     n=1: allowed limit=2 remaining=1 retry_after=0s reset_after=10s
	// t=4s     n=1: allowed limit=2 remaining=0 retry_after=0s reset_after=10s
	// t=5s     n=1: denied limit=2 remaining=0 retry_after=5s reset_after=9s
	// t=10s    n=1: allowed limit=2 remaining=0 retry_after=0s reset_after=10s
}

// AR(1) keeps one number per limit that is divided by the decay every
// resolution: here it halves every second. The state is gone once the
// count falls below 1e-6: 2/2^21 is the first.
func Example_ar1() {
	run("ar1 3/1s decay 2",
		step{0, 2}, step{0, 2}, step{time.Second, 2}, step{2 * time.Second, 1})
	// Output:
	// ar1 3/1s decay 2
	// t=0s     n=2: allowed limit=3 remaining=1 retry_after=0s reset_after=21s
	// t=0s     n=2: denied limit=3 remaining=1 retry_after=1s reset_after=21s
	// t=1s     n=2: allowed limit=3 remaining=0 retry_after=0s reset_after=22s
	// t=2s     n=1: allowed limit=3 remaining=0 retry_after=0s reset_after=22s
}

// A fixed window counts per window; "align first" opens a key's window at
// its first request instead of at multiples of the window.
func Example_fixedWindow() {
	run("fixed_window 3/1m align first",
		step{10 * time.Second, 2}, step{20 * time.Second, 2}, step{69 * time.Second, 1}, step{70 * time.Second, 3})
	// Output:
	// fixed_window 3/1m align first
	// t=10s    n=2: allowed limit=3 remaining=1 retry_after=0s reset_after=1m0s
	// t=20s    n=2: denied limit=3 remaining=1 retry_after=50s reset_after=50s
	// t=1m9s   n=1: allowed limit=3 remaining=0 retry_after=0s reset_after=1s
	// t=1m10s  n=3: allowed limit=3 remaining=0 retry_after=0s reset_after=1m0s
}

// A token bucket starts full with the burst and refills so that at most the
// limit passes per window: here 2 at once, then one every 2.5 s.
func Example_tokenBucket() {
	run("token_bucket 6/10s burst 2",
		step{0, 2}, step{time.Second, 1}, step{2500 * time.Millisecond, 1})
	// Output:
	// token_bucket 6/10s burst 2
	// t=0s     n=2: allowed limit=6 remaining=0 retry_after=0s reset_after=10s
	// t=1s     n=1: denied limit=6 remaining=0 retry_after=1.5s reset_after=9s
	// t=2.5s   n=1: allowed limit=6 remaining=0 retry_after=0s reset_after=7.5s
}

// A sliding log keeps every request's time: at most max per rolling
// interval, optionally a minimum gap between requests. Denied requests are
// recorded by default, so a client that keeps hammering stays blocked; an
// entry stops counting exactly one interval after it was made.
func Example_slidingLog() {
	run("sliding_log 2/1s min_interval 100ms",
		step{0, 1}, step{50 * time.Millisecond, 1}, step{200 * time.Millisecond, 1}, step{1200 * time.Millisecond, 1})
	// Output:
	// sliding_log 2/1s min_interval 100ms
	// t=0s     n=1: allowed limit=2 remaining=1 retry_after=0s reset_after=1s
	// t=50ms   n=1: denied limit=2 remaining=0 retry_after=950ms reset_after=1s
	// t=200ms  n=1: denied limit=2 remaining=0 retry_after=850ms reset_after=1s
	// t=1.2s   n=1: allowed limit=2 remaining=1 retry_after=0s reset_after=1s
}

// GCRA spaces requests by the emission interval (period/count) and lets a
// key run ahead by burst intervals.
func Example_gcra() {
	run("gcra 10/1s burst 2",
		step{0, 1}, step{0, 1}, step{0, 1}, step{150 * time.Millisecond, 1})
	// Output:
	// gcra 10/1s burst 2
	// t=0s     n=1: allowed limit=10 remaining=1 retry_after=0s reset_after=100ms
	// t=0s     n=1: allowed limit=10 remaining=0 retry_after=0s reset_after=200ms
	// t=0s     n=1: denied limit=10 remaining=0 retry_after=100ms reset_after=200ms
	// t=150ms  n=1: allowed limit=10 remaining=0 retry_after=0s reset_after=150ms
}

// A Limiter over two policies spends on both or neither: a tenant's tokens
// per minute and per calendar day, reserved before an LLM completion and
// settled with what it used.
func ExampleLimiter_Reserve() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	perMinute, _ := floodgate.ParsePolicy("tokens-per-minute", "fixed_window 1000/1m align first")
	perDay, _ := floodgate.ParsePolicy("tokens-per-day", "fixed_window 5000/1day align calendar tz Europe/Paris")
	lim, err := floodgate.NewLimiter(store, perMinute, perDay)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	r, err := lim.Reserve(ctx, "tenant-7", 800) // the most the completion may use
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Decision.Allowed, r.Decision.Remaining)
	// ... the completion used 300 tokens: give back the other 500.
	d, err := lim.Settle(ctx, r, 300)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Remaining) // a peek of 1 after the settle
	// Output:
	// true 200
	// 699
}

// AllowAtMost grants what is left, up to n, and says how much.
func ExampleLimiter_AllowAtMost() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	lim, err := floodgate.NewLimiter(store, floodgate.Policy{Name: "rows", Algorithm: floodgate.FixedWindow, Max: 250, Window: time.Minute, Align: floodgate.AlignFirst})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, err := lim.AllowAtMost(ctx, "export-1", 100)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Granted)
	}
	// Output:
	// true 100
	// true 100
	// true 50
}
