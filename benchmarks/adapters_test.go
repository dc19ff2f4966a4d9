package benchmarks

import (
	"context"
	"sync"
	"testing"
	"time"

	sethvargo "github.com/sethvargo/go-limiter"
	sethmem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulumem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/memstore"
)

// allower is what every library is reduced to: decide one request of cost
// 1 for key, now, by the system clock. An error (no library here returns
// one in normal use) is a failure of the benchmark, not a denial.
type allower interface {
	allow(ctx context.Context, key string) (bool, error)
}

// contender is one library's adapter: new returns a fresh limiter (fresh
// store, no keys) with the workload's parameters, released by tb.Cleanup.
type contender struct {
	name string
	new  func(tb testing.TB) allower
}

// gcraParams is the GCRA workload: a sustained rate of count per period,
// and a burst: how many requests a fresh key may make at once (equivalently
// how many emission intervals period/count it may run ahead of the rate).
type gcraParams struct {
	count  int64
	period time.Duration
	burst  int64
}

// fixedParams is the fixed-window workload: at most max requests per key
// per window, the window opened by the key's first request.
type fixedParams struct {
	max    int64
	window time.Duration
}

// gcraContenders are the libraries of the GCRA workload, in table order.
func gcraContenders(p gcraParams) []contender {
	return []contender{
		{"floodgate", func(tb testing.TB) allower {
			// floodgate's gcra: Rate = count per period, Burst = the
			// number of emission intervals a key may run ahead, i.e. the
			// number of requests a fresh key may make at once. The rate
			// is at most one event per µs (count ≤ period in µs).
			return newFloodgate(tb, floodgate.Policy{
				Name:      "bench_gcra",
				Algorithm: floodgate.GCRA,
				Max:       p.count, Window: p.period,
				Burst: p.burst,
			})
		}},
		{"x-time-rate", func(tb testing.TB) allower {
			// rate.NewLimiter(r, b): a token bucket of b tokens, refilled
			// at r tokens per second, starting full: the same admissions
			// as GCRA with the same rate and burst.
			return &xtimeRate{
				limit: rate.Limit(float64(p.count) / p.period.Seconds()),
				burst: int(p.burst),
				m:     make(map[string]*rate.Limiter),
			}
		}},
		{"throttled", func(tb testing.TB) allower {
			// throttled's RateQuota{MaxRate, MaxBurst}: MaxRate is the
			// emission interval (PerDuration(n, d) = d/n, whole ns) and
			// MaxBurst the requests allowed *beyond* the first, so a fresh
			// key may make MaxBurst+1 at once: MaxBurst = burst - 1.
			// memstore.NewCtx(0) is its unbounded map (no LRU), like
			// floodgate's memstore WithUnbounded; with a bound it
			// uses hashicorp/golang-lru behind one lock.
			st, err := throttledmem.NewCtx(0)
			if err != nil {
				tb.Fatal(err)
			}
			rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
				MaxRate:  throttled.PerDuration(int(p.count), p.period),
				MaxBurst: int(p.burst - 1),
			})
			if err != nil {
				tb.Fatal(err)
			}
			// A decision is a read, then a compare-and-swap, retried when
			// another goroutine changed the key meanwhile: by default at
			// most 10 times, after which RateLimitCtx returns an error
			// ("Failed to store updated rate limit data ... after 10
			// attempts"). On one hot key from two goroutines that happens
			// within a 100 ms benchmark, so the limit is raised (its own
			// knob) to make it always decide; the retries stay measured.
			rl.SetMaxCASAttemptsLimit(1 << 30)
			return throttledGCRA{rl}
		}},
	}
}

// fixedContenders are the libraries of the fixed-window workload, in table
// order.
func fixedContenders(p fixedParams) []contender {
	return []contender{
		{"floodgate", func(tb testing.TB) allower {
			// floodgate's fixed_window: Max per Window. AlignFirst opens a
			// key's window at its first request, as both peers do (the
			// default, AlignEpoch, aligns windows to the epoch instead; it
			// costs the same).
			return newFloodgate(tb, floodgate.Policy{
				Name:      "bench_fixed_window",
				Algorithm: floodgate.FixedWindow,
				Max:       p.max,
				Window:    p.window,
				Align:     floodgate.AlignFirst,
			})
		}},
		{"ulule", func(tb testing.TB) allower {
			// ulule/limiter: Rate{Period, Limit} is at most Limit per
			// Period; the memory store keeps one counter per key that
			// expires Period after the request that created it, and every
			// request (allowed or not) increments it. Reached is set once
			// the count exceeds Limit. NewStore uses the default prefix
			// and cleanup interval (30 s).
			return ululeLimiter{ulule.New(ulumem.NewStore(), ulule.Rate{Period: p.window, Limit: p.max})}
		}},
		{"sethvargo", func(tb testing.TB) allower {
			// sethvargo/go-limiter's memorystore: Tokens per Interval,
			// counted in intervals that start at the key's first request.
			// Its refill after the first interval is wrong when Tokens
			// exceeds sqrt(Interval in ns) (go-limiter issue #29: 10^9
			// per hour refills to 3), so the workload keeps every run
			// inside a key's first interval (see README.md).
			st, err := sethmem.New(&sethmem.Config{Tokens: uint64(p.max), Interval: p.window})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { st.Close(context.Background()) })
			return sethvargoStore{st}
		}},
	}
}

// floodgate: a Limiter on a fresh memstore with its default options.

type floodgateLimiter struct{ lim *floodgate.Limiter }

func newFloodgate(tb testing.TB, p floodgate.Policy) allower {
	s, err := memstore.New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	lim, err := floodgate.NewLimiter(s, p)
	if err != nil {
		tb.Fatal(err)
	}
	return floodgateLimiter{lim}
}

func (f floodgateLimiter) allow(ctx context.Context, key string) (bool, error) {
	d, err := f.lim.Allow(ctx, key)
	return d.Allowed, err
}

// xtimeRate is the common way to limit per key with golang.org/x/time/rate:
// a map of limiters behind a mutex, each created on first sight. The map
// lock is held only to find or create the key's limiter; rate.Limiter has
// its own mutex. (Nothing ever forgets a key.)
type xtimeRate struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

func (x *xtimeRate) allow(_ context.Context, key string) (bool, error) {
	x.mu.Lock()
	l, ok := x.m[key]
	if !ok {
		l = rate.NewLimiter(x.limit, x.burst)
		x.m[key] = l
	}
	x.mu.Unlock()
	return l.Allow(), nil
}

type throttledGCRA struct{ rl *throttled.GCRARateLimiterCtx }

func (t throttledGCRA) allow(ctx context.Context, key string) (bool, error) {
	limited, _, err := t.rl.RateLimitCtx(ctx, key, 1)
	return !limited, err
}

type ululeLimiter struct{ lim *ulule.Limiter }

func (u ululeLimiter) allow(ctx context.Context, key string) (bool, error) {
	c, err := u.lim.Get(ctx, key)
	return !c.Reached, err
}

type sethvargoStore struct{ st sethvargo.Store }

func (s sethvargoStore) allow(ctx context.Context, key string) (bool, error) {
	_, _, _, ok, err := s.st.Take(ctx, key)
	return ok, err
}
