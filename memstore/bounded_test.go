package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
)

// TestBoundedMemory pushes 1,000,000 distinct keys through a store limited
// to 10,000: it never holds more than 10,000, and its heap after the first
// 200,000 keys (when eviction is long under way) does not grow through the
// other 800,000.
func TestBoundedMemory(t *testing.T) {
	const (
		maxKeys = 10_000
		total   = 1_000_000
		settle  = 200_000
	)
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithMaxKeys(maxKeys), memstore.WithSweepInterval(time.Hour))
	// Live state for the whole run (an hour's window, the clock moving a
	// µs per key), so that every insertion past the limit evicts.
	lim, err := floodgate.NewLimiter(s, floodgate.Policy{
		Name: "bounded", Algorithm: floodgate.SlidingWindow,
		Limits: []floodgate.Limit{{Max: 5, Window: time.Hour, Resolution: time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var atSettle uint64
	buf := make([]byte, 0, 16)
	for i := 0; i < total; i++ {
		clock.SetMicros(floodgatetest.BaseMicros + int64(i))
		buf = strconv.AppendInt(append(buf[:0], 'k'), int64(i), 10)
		if _, err := lim.Allow(ctx, string(buf)); err != nil {
			t.Fatal(err)
		}
		if i%50_000 == 0 {
			if n := s.Stats().Entries; n > maxKeys {
				t.Fatalf("after %d keys the store holds %d, want ≤ %d", i+1, n, maxKeys)
			}
		}
		if i+1 == settle {
			atSettle = heap()
		}
	}
	st := s.Stats()
	if st.Entries > maxKeys || st.Evictions < total-maxKeys {
		t.Errorf("Stats = %+v: want ≤ %d entries and ≥ %d evictions", st, maxKeys, total-maxKeys)
	}
	end := heap()
	t.Logf("live heap: %d KiB after %d keys, %d KiB after %d; %d entries, %d evicted",
		atSettle>>10, settle, end>>10, total, st.Entries, st.Evictions)
	// Flat: the last 800,000 keys may not add more than a tenth (and
	// 256 KiB of slack for the runtime's own bookkeeping). The live heap
	// after a GC (HeapAlloc) varies by about 1% between runs; the heap in
	// use (HeapInuse, spans) varied by a third and could not be held to
	// this.
	if end > atSettle+atSettle/10+256<<10 {
		t.Errorf("heap grew from %d KiB to %d KiB over the last %d keys", atSettle>>10, end>>10, total-settle)
	}
}
