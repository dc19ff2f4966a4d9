package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/benchmarks/redisserver"
)

// server starts a private redis-server for one test (skipped when
// redis-server is not installed) and returns it with an admin client.
func server(t *testing.T) (*redisserver.Server, *redis.Client) {
	t.Helper()
	if !redisserver.Available() {
		t.Skip("redis-server not found in PATH")
	}
	srv, err := redisserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	admin := srv.Admin()
	t.Cleanup(func() { admin.Close() })
	return srv, admin
}

// TestAdmitsExactlyN proves each adapter decides right against a real
// redis-server: with a limit of n per hour (GCRA: burst n), n+5 requests of
// one key get exactly the first n admitted, for each of two keys, and 4
// goroutines × (n+5) requests of one key get exactly n. A batching adapter
// sends each key's n+5 requests as one batch.
func TestAdmitsExactlyN(t *testing.T) {
	const n = 5
	srv, admin := server(t)
	ctx := context.Background()
	tiny := params{gcra: gcraParams{count: n, period: time.Hour, burst: n}, fixed: fixedParams{max: n, window: time.Hour}}
	for _, lib := range loadLibraries(16) {
		t.Run(lib.name, func(t *testing.T) {
			if err := admin.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			c := newClient(srv.Addr, 16)
			defer c.Close()
			lim, err := lib.new(ctx, c, tiny)
			if err != nil {
				t.Fatal(err)
			}
			// requests makes n+5 requests of key: one call per request, or
			// one batch of n+5 for a batching adapter.
			requests := func(key string) ([]bool, error) {
				got := make([]bool, n+5)
				if lib.batch > 1 {
					keys := make([]string, n+5)
					for i := range keys {
						keys[i] = key
					}
					return got, lim.decide(ctx, keys, got)
				}
				for i := range got {
					if err := lim.decide(ctx, []string{key}, got[i:i+1]); err != nil {
						return nil, err
					}
				}
				return got, nil
			}
			for _, key := range []string{"user-000001", "user-000002"} {
				got, err := requests(key)
				if err != nil {
					t.Fatal(err)
				}
				want := make([]bool, n+5)
				for i := range n {
					want[i] = true
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("key %s: admissions %v, want %v", key, got, want)
				}
			}
			var mu sync.Mutex
			admitted := 0
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := requests("user-000003")
					if err != nil {
						t.Error(err)
						return
					}
					for _, ok := range got {
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
				t.Errorf("4 goroutines × %d requests of one key: %d admitted, want %d", n+5, admitted, n)
			}
		})
	}
}

// TestMemoryCases runs the memory measurement on a few keys: each limiter
// writes exactly the keys keysOf names, and they are still there.
func TestMemoryCases(t *testing.T) {
	srv, admin := server(t)
	ctx := context.Background()
	for _, mc := range memCases() {
		r, err := measureMemory(ctx, admin, srv.Addr, mc, 200, 10, 4)
		if err != nil {
			t.Fatal(err)
		}
		if r.usageAvg <= 0 || len(r.example) != r.keysPerLimited {
			t.Errorf("%s: %+v", mc.name, r)
		}
		t.Logf("%s: %.0f B (MEMORY USAGE), %.0f B (used_memory)\n\t%v", mc.name, r.usageAvg, r.usedPerKey, r.example)
	}
}

// TestLoadRuns runs every load contender briefly: no errors, no denials.
func TestLoadRuns(t *testing.T) {
	srv, admin := server(t)
	ctx := context.Background()
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = userKey(i)
	}
	for _, lib := range loadLibraries(16) {
		r, err := runLoad(ctx, admin, lib, loadConfig{addr: srv.Addr, redisPid: srv.Pid(), keys: keys, conc: 4,
			warmup: 50 * time.Millisecond, duration: 200 * time.Millisecond, poolSize: 8, prepConc: 4, seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.decisions == 0 {
			t.Errorf("%s: no decisions", lib.name)
		}
		t.Logf("%s: %.0f/s p50 %v p99 %v", lib.name, r.perSec, r.p50, r.p99)
	}
}

// TestCallRuns runs every per-call contender briefly: no errors, no
// denials, and each decision's command counted (floodgate's by FCALL).
func TestCallRuns(t *testing.T) {
	srv, admin := server(t)
	ctx := context.Background()
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = userKey(i)
	}
	rs, err := measureCalls(ctx, admin, srv.Addr, callCases("fcall"), keys, 1000, 4, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.usPerCall <= 0 {
			t.Errorf("%s: %v µs per %s", r.name, r.usPerCall, r.command)
		}
		t.Logf("%s: %.2f µs per %s (%s)", r.name, r.usPerCall, r.command, r.others)
	}
}

// TestSeriesBytes measures every series pattern on one key: the usage
// hash stays within 2× of the plain hash of its buckets (issue 13), and
// the day of dense minutes is a listpack (the packed layout at work).
func TestSeriesBytes(t *testing.T) {
	srv, admin := server(t)
	rs, err := measureSeries(context.Background(), admin, srv.Addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.usage <= 0 || r.plain <= 0 || r.usage > 2*r.plain {
			t.Errorf("%s: usage hash %.0f B, plain hash %.0f B: want within 2×", r.name, r.usage, r.plain)
		}
		if r.name == "dense: every minute" && (r.encoding != "listpack" || r.buckets != 1440) {
			t.Errorf("%s: %s of %d fields, %d buckets; want a listpack holding 1440", r.name, r.encoding, r.fields, r.buckets)
		}
		t.Logf("%s: %d buckets, %.0f B (%s, %d fields); plain %.0f B", r.name, r.buckets, r.usage, r.encoding, r.fields, r.plain)
	}
}
