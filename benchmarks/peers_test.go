package benchmarks

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The workloads. Every library gets the same parameters, chosen so that no
// request of a benchmark is denied: the allowed path is the one measured,
// and each benchmark fails if a single decision was a denial.
var (
	// GCRA: 10^6 per second, the highest rate floodgate's gcra accepts
	// (one per µs), with a burst of 10^9: a key may run 1000 s ahead of
	// the rate, far more than any benchmark run (which lasts well under
	// a second, on a fresh store) can use even on one hot key.
	gcraWorkload = gcraParams{count: 1_000_000, period: time.Second, burst: 1_000_000_000}

	// Fixed window: 10^9 per hour. No run reaches 10^9 requests, and none
	// outlives a key's first window (an hour from the key's first request),
	// which sethvargo/go-limiter needs to count right (see fixedContenders).
	fixedWorkload = fixedParams{max: 1_000_000_000, window: time.Hour}
)

const manyKeys = 100_000

var (
	keysOnce sync.Once
	keyList  []string
)

// keys returns the first n of a pre-built list of distinct keys, shared by
// every benchmark so that building keys is never measured.
func keys(n int) []string {
	keysOnce.Do(func() {
		keyList = make([]string, manyKeys)
		for i := range keyList {
			keyList[i] = fmt.Sprintf("user-%06d", i)
		}
	})
	return keyList[:n]
}

// BenchmarkGCRA is the GCRA workload: BenchmarkGCRA/<keys>/<mode>/lib=<library>.
func BenchmarkGCRA(b *testing.B) { benchWorkload(b, gcraContenders(gcraWorkload)) }

// BenchmarkFixedWindow is the fixed-window workload:
// BenchmarkFixedWindow/<keys>/<mode>/lib=<library>. The library is a key=value
// part so that benchstat can put libraries in columns: -col /lib.
func BenchmarkFixedWindow(b *testing.B) { benchWorkload(b, fixedContenders(fixedWorkload)) }

// benchWorkload runs every contender in every cell: 1 key or 100,000 keys,
// serial or parallel (b.RunParallel, GOMAXPROCS goroutines).
//
// With 100,000 keys every key is created before the timer starts, and each
// decision takes the next key of the list round-robin (in parallel each
// goroutine from its own offset), so every decision finds existing state.
func benchWorkload(b *testing.B, cs []contender) {
	for _, n := range []int{1, manyKeys} {
		cell := "1key"
		if n > 1 {
			cell = fmt.Sprintf("%dkeys", n)
		}
		b.Run(cell, func(b *testing.B) {
			for _, mode := range []string{"serial", "parallel"} {
				b.Run(mode, func(b *testing.B) {
					for _, c := range cs {
						b.Run("lib="+c.name, func(b *testing.B) {
							if mode == "serial" {
								benchSerial(b, c, keys(n))
							} else {
								benchParallel(b, c, keys(n))
							}
						})
					}
				})
			}
		})
	}
}

// prepare returns a fresh limiter of c with one allowed request made for
// every key.
func prepare(b *testing.B, c contender, ks []string) allower {
	a := c.new(b)
	ctx := context.Background()
	for _, k := range ks {
		ok, err := a.allow(ctx, k)
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			b.Fatalf("%s: first request of %q denied", c.name, k)
		}
	}
	// Setup allocated every key's state: finish the garbage collection it
	// started, so that no library is timed while the collector (and its
	// write barriers) still runs.
	runtime.GC()
	return a
}

func benchSerial(b *testing.B, c contender, ks []string) {
	a := prepare(b, c, ks)
	ctx := context.Background()
	denied := 0
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for i := 0; i < b.N; i++ {
		ok, err := a.allow(ctx, ks[j])
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			denied++
		}
		if j++; j == len(ks) {
			j = 0
		}
	}
	b.StopTimer()
	if denied > 0 {
		b.Fatalf("%s: %d of %d requests denied, want none", c.name, denied, b.N)
	}
}

func benchParallel(b *testing.B, c contender, ks []string) {
	a := prepare(b, c, ks)
	ctx := context.Background()
	var denied, goroutine atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		j := int(goroutine.Add(1)*7919) % len(ks)
		var d int64
		for pb.Next() {
			ok, err := a.allow(ctx, ks[j])
			if err != nil {
				b.Error(err)
				return
			}
			if !ok {
				d++
			}
			if j++; j == len(ks) {
				j = 0
			}
		}
		denied.Add(d)
	})
	b.StopTimer()
	if n := denied.Load(); n > 0 {
		b.Fatalf("%s: %d of %d requests denied, want none", c.name, n, b.N)
	}
}
