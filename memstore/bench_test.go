package memstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/memstore"
)

// Benchmarks of the memory store, one per algorithm, named
//
//	BenchmarkMemstore/<algorithm>/<keys>/<serial|parallel>
//
// so that benchstat tables read well (BENCHMARKS.md has the commands).
// <keys> is:
//
//   - 1key: every decision is for one hot key.
//   - 100000keys: 100,000 keys, created before the timer starts; each
//     decision takes the next key of a pre-built []string round-robin (in
//     parallel each goroutine starts at its own offset), so building keys is
//     not measured and every decision finds existing state.
//   - 1key-denied: one hot key whose quota is spent before the timer starts,
//     so every measured decision is a denial.
//
// The store runs on the system clock, as in production, with its default
// options (64 shards, sweeper every minute). Each run of the benchmark
// function builds a fresh store.
//
// The "allowed" policies have limits far above what a benchmark can reach
// (a max of 10^12, or GCRA's highest rate of 10^6 per second with a burst of
// 10^12 intervals), so that the measured path is the common one: a request
// that passes and is recorded. Each benchmark counts the decisions that did
// not go the expected way and fails if there is any, so a policy that runs
// out of quota on a fast machine is caught rather than silently measuring
// denials.

// benchPolicy is one algorithm's pair of policies: one that always allows in
// a benchmark, one that denies after its first request.
type benchPolicy struct {
	name    string
	allowed string // policy text: limits out of reach
	denied  string // policy text: 1 per hour, spent by the warm-up request
}

// The denied policies allow one request per hour (fixed_window with its
// window opened by that request, so that no epoch-aligned window can start
// during a run).

var benchPolicies = []benchPolicy{
	// 10^12 per minute in buckets of 1 s: at most 60 buckets per key.
	{"sliding_window", "sliding_window 1000000000000/1m resolution 1s", "sliding_window 1/1h resolution 1m"},
	// Max 10^12, the count halving every second.
	{"ar1", "ar1 1000000000000/1s decay 2", "ar1 1/1h decay 2"},
	// 10^12 per window of a second, windows aligned to the epoch (default).
	{"fixed_window", "fixed_window 1000000000000/1s", "fixed_window 1/1h align first"},
	// Start with 10^11 tokens, at most 10^12 per second (limit × window in
	// µs must fit in 63 bits).
	{"token_bucket", "token_bucket 1000000000000/1s burst 100000000000", "token_bucket 1/1h burst 1"},
	// The log keeps one entry per distinct µs of the last interval, so the
	// interval is short (100 ms) to keep 100,000 keys' logs small; the
	// denied policy counts denials by default (count_denied is on for
	// sliding_log), so its denials still append to the log.
	{"sliding_log", "sliding_log 1000000000000/100ms", "sliding_log 1/1h"},
	// GCRA allows at most one event per µs: 10^6 per second, with a burst
	// of 10^12 emission intervals (~11.6 days of running ahead).
	{"gcra", "gcra 1000000/1s burst 1000000000000", "gcra 1/1h burst 1"},
}

const benchManyKeys = 100_000

func BenchmarkMemstore(b *testing.B) {
	for _, bp := range benchPolicies {
		b.Run(bp.name, func(b *testing.B) {
			for _, c := range []struct {
				keys   string
				n      int
				text   string
				denied bool
			}{
				{"1key", 1, bp.allowed, false},
				{fmt.Sprintf("%dkeys", benchManyKeys), benchManyKeys, bp.allowed, false},
				{"1key-denied", 1, bp.denied, true},
			} {
				b.Run(c.keys, func(b *testing.B) {
					p, err := floodgate.ParsePolicy("bench_"+bp.name, c.text)
					if err != nil {
						b.Fatal(err)
					}
					b.Run("serial", func(b *testing.B) { benchSerial(b, p, c.n, c.denied) })
					b.Run("parallel", func(b *testing.B) { benchParallel(b, p, c.n, c.denied) })
				})
			}
		})
	}
}

// benchLimiter returns a limiter on a fresh store and n keys, each decided
// once (so that its state exists).
func benchLimiter(b *testing.B, p floodgate.Policy, n int) (*floodgate.Limiter, []string) {
	b.Helper()
	s, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	lim, err := floodgate.NewLimiter(s, p)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	ctx := context.Background()
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%06d", i)
		if _, err := lim.Allow(ctx, keys[i]); err != nil {
			b.Fatal(err)
		}
	}
	return lim, keys
}

func benchSerial(b *testing.B, p floodgate.Policy, n int, wantDenied bool) {
	lim, keys := benchLimiter(b, p, n)
	ctx := context.Background()
	unexpected := 0
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for i := 0; i < b.N; i++ {
		d, err := lim.Allow(ctx, keys[j])
		if err != nil {
			b.Fatal(err)
		}
		if d.Allowed == wantDenied {
			unexpected++
		}
		if j++; j == len(keys) {
			j = 0
		}
	}
	b.StopTimer()
	benchCheck(b, unexpected, wantDenied)
}

func benchParallel(b *testing.B, p floodgate.Policy, n int, wantDenied bool) {
	lim, keys := benchLimiter(b, p, n)
	ctx := context.Background()
	var unexpected, goroutine atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine walks the keys from its own offset.
		j := int(goroutine.Add(1)*7919) % len(keys)
		bad := int64(0)
		for pb.Next() {
			d, err := lim.Allow(ctx, keys[j])
			if err != nil {
				b.Error(err)
				return
			}
			if d.Allowed == wantDenied {
				bad++
			}
			if j++; j == len(keys) {
				j = 0
			}
		}
		unexpected.Add(bad)
	})
	b.StopTimer()
	benchCheck(b, int(unexpected.Load()), wantDenied)
}

func benchCheck(b *testing.B, unexpected int, wantDenied bool) {
	b.Helper()
	if unexpected == 0 {
		return
	}
	if wantDenied {
		b.Fatalf("%d of %d decisions allowed, want all denied", unexpected, b.N)
	}
	b.Fatalf("%d of %d decisions denied, want all allowed: raise the policy's limits", unexpected, b.N)
}
