package memstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/memstore"
)

// BenchmarkGroup measures what a decision over two policies costs as one
// atomic group (a Limiter over both) against two single decisions (a
// Limiter each, which is not atomic: the first spends when the second
// denies). Named
//
//	BenchmarkGroup/<keys>/<two-singles|group>/<serial|parallel>
//
// with <keys> 1key or 100000keys as in BenchmarkMemstore, the policies'
// limits out of reach (every request allowed, or the run fails), and
// sec/op per pair of policies decided. BENCHMARKS.md has the figures.
func BenchmarkGroup(b *testing.B) {
	a, err := floodgate.ParsePolicy("bench_group_fw", "fixed_window 1000000000000/1s")
	if err != nil {
		b.Fatal(err)
	}
	g, err := floodgate.ParsePolicy("bench_group_gcra", "gcra 1000000/1s burst 1000000000000")
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, benchManyKeys} {
		name := "1key"
		if n > 1 {
			name = fmt.Sprintf("%dkeys", n)
		}
		b.Run(name, func(b *testing.B) {
			for _, mode := range []string{"two-singles", "group"} {
				b.Run(mode, func(b *testing.B) {
					b.Run("serial", func(b *testing.B) { benchGroup(b, a, g, n, mode == "group", false) })
					b.Run("parallel", func(b *testing.B) { benchGroup(b, a, g, n, mode == "group", true) })
				})
			}
		})
	}
}

func benchGroup(b *testing.B, p, q floodgate.Policy, n int, group, parallel bool) {
	s, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	var lims []*floodgate.Limiter
	if group {
		l, err := floodgate.NewLimiter(s, p, q)
		if err != nil {
			b.Fatal(err)
		}
		lims = append(lims, l)
	} else {
		for _, x := range []floodgate.Policy{p, q} {
			l, err := floodgate.NewLimiter(s, x)
			if err != nil {
				b.Fatal(err)
			}
			lims = append(lims, l)
		}
	}
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%06d", i)
		for _, l := range lims {
			if _, err := l.Allow(ctx, keys[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	var denied, goroutine atomic.Int64
	run := func(j int, next func() bool) {
		bad := int64(0)
		for next() {
			for _, l := range lims {
				d, err := l.Allow(ctx, keys[j])
				if err != nil {
					b.Error(err)
					return
				}
				if !d.Allowed {
					bad++
				}
			}
			if j++; j == len(keys) {
				j = 0
			}
		}
		denied.Add(bad)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) { run(int(goroutine.Add(1)*7919)%len(keys), pb.Next) })
	} else {
		i := 0
		run(0, func() bool { i++; return i <= b.N })
	}
	b.StopTimer()
	benchCheck(b, int(denied.Load()), false)
}
