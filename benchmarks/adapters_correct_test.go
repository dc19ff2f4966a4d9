package benchmarks

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestAdmitsExactlyN proves each adapter decides right: with a tiny limit
// of N per hour, N+5 requests of one key get exactly N admissions (the
// first N), serially and from concurrent goroutines, and other keys are
// unaffected.
func TestAdmitsExactlyN(t *testing.T) {
	const n = 5
	workloads := []struct {
		name string
		cs   []contender
	}{
		// A burst of n and a rate of n per hour: over the test's
		// milliseconds the rate adds nothing, so exactly the burst passes.
		{"gcra", gcraContenders(gcraParams{count: n, period: time.Hour, burst: n})},
		{"fixed_window", fixedContenders(fixedParams{max: n, window: time.Hour})},
	}
	ctx := context.Background()
	for _, w := range workloads {
		for _, c := range w.cs {
			t.Run(w.name+"/"+c.name, func(t *testing.T) {
				a := c.new(t)
				for _, key := range []string{"alice", "bob"} {
					var got []bool
					for range n + 5 {
						ok, err := a.allow(ctx, key)
						if err != nil {
							t.Fatal(err)
						}
						got = append(got, ok)
					}
					want := make([]bool, n+5)
					for i := range n {
						want[i] = true
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("key %s: admissions %v, want %v", key, got, want)
					}
				}
			})
			t.Run(w.name+"/"+c.name+"/concurrent", func(t *testing.T) {
				a := c.new(t)
				const goroutines, each = 4, n + 5
				var mu sync.Mutex
				admitted := 0
				var wg sync.WaitGroup
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range each {
							ok, err := a.allow(ctx, "carol")
							if err != nil {
								t.Error(err)
								return
							}
							if ok {
								mu.Lock()
								admitted++
								mu.Unlock()
							}
						}
					}()
				}
				wg.Wait()
				if admitted != n {
					t.Errorf("%d goroutines × %d requests: %d admitted, want %d", goroutines, each, admitted, n)
				}
			})
		}
	}
}

// TestWorkloadsAllow checks that the benchmark parameters admit a burst of
// requests on one key with every library: the benchmarks measure the
// allowed path.
func TestWorkloadsAllow(t *testing.T) {
	ctx := context.Background()
	for _, c := range append(gcraContenders(gcraWorkload), fixedContenders(fixedWorkload)...) {
		a := c.new(t)
		for i := range 100_000 {
			ok, err := a.allow(ctx, "hot")
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Fatalf("%s: request %d denied", c.name, i)
			}
		}
	}
}
