package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
)

// TestMemoryPerKey measures the memory the store holds per key, for each
// algorithm: the live heap after a GC (HeapAlloc, stable to about 1%
// between runs) with 100,000 keys of 11 bytes ("user-000000"), less the
// heap before them, per key. It counts everything a key costs: the entry,
// its share of the shard's map, the key's bytes, the variable-size state
// of sliding_window, sliding_log and ar1, tracked usage. Each must fit in
// EntryBytes, what the default bound counts per key, after one request;
// the rows after ten show how logs grow. docs/operations.md ("The memory
// store's bound") has the table this prints (go test -run
// TestMemoryPerKey -v ./memstore).
func TestMemoryPerKey(t *testing.T) {
	keys := 100_000
	if raceEnabled {
		keys = 10_000 // the map's share differs a little; the check holds
	}
	rows := []struct {
		text     string
		requests int           // per key
		apart    time.Duration // between a key's requests
		within   bool          // must fit in EntryBytes
	}{
		{"sliding_window 100/1m resolution 1s", 1, 0, true},
		{"sliding_window 5/1m resolution 1s, 20/1h resolution 1m", 1, 0, true},
		{"ar1 10/1s decay 2", 1, 0, true},
		{"fixed_window 100/1m", 1, 0, true},
		{"token_bucket 100/1h burst 10", 1, 0, true},
		{"sliding_log 100/1m", 1, 0, true},
		{"gcra 10/1s burst 20", 1, 0, true},
		{"fixed_window 100/1m track", 1, 0, true},
		{"sliding_window 100/1m resolution 1s", 10, time.Second, false},
		{"sliding_log 100/1m", 10, time.Millisecond, false},
	}
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	ctx := context.Background()
	t.Logf("| policy | requests per key | bytes per key |")
	t.Logf("|---|---|---|")
	for _, r := range rows {
		clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
		s, err := memstore.New(memstore.WithClock(clock), memstore.WithUnbounded(), memstore.WithSweepInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		p, err := floodgate.ParsePolicy("size", r.text)
		if err != nil {
			t.Fatal(err)
		}
		lim, err := floodgate.NewLimiter(s, p)
		if err != nil {
			t.Fatal(err)
		}
		lim.Peek(ctx, "warm-up", 1) // the policy prepared
		names := make([]string, keys)
		before := heap()
		for j := 0; j < r.requests; j++ {
			for i := range names {
				if j == 0 {
					names[i] = fmt.Sprintf("user-%06d", i)
				}
				if d, err := lim.Allow(ctx, names[i]); err != nil || !d.Allowed {
					t.Fatalf("%s: %v, %v", r.text, d, err)
				}
			}
			clock.Advance(r.apart)
		}
		clear(names) // the store keeps the keys' bytes alive, and counts them
		after := heap()
		runtime.KeepAlive(names) // counted in before: must be in after too
		if n := s.Stats().Entries; n != keys {
			t.Fatalf("%s: %d entries, want %d", r.text, n, keys)
		}
		per := (after - before) / int64(keys)
		t.Logf("| `%s` | %d | %d |", r.text, r.requests, per)
		if r.within && per > memstore.EntryBytes {
			t.Errorf("%s: %d bytes per key, more than the %d the default bound counts", r.text, per, memstore.EntryBytes)
		}
		if per < 80 {
			t.Errorf("%s: %d bytes per key, less than an entry: the measure is broken", r.text, per)
		}
		s.Close()
		runtime.KeepAlive(s)
	}
}
