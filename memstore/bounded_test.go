package memstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
)

// TestBoundedMemory pushes 1,000,000 distinct keys through a store limited
// to 10,000: 5,000 first under a policy whose state lasts the whole run,
// then the others under one whose state empties 2,000 keys later. The
// store never holds more than 10,000 entries; it takes every long key and
// keeps its count to the end (a live state is never forgotten, however
// many keys come after); it makes room from the emptied short keys (each
// new key is decided, or refused with ErrFull); and its heap after the
// first 200,000 keys does not grow through the other 800,000.
func TestBoundedMemory(t *testing.T) {
	const (
		maxKeys = 10_000
		longs   = 5_000
		total   = 1_000_000
		settle  = 200_000
	)
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock), memstore.WithMaxKeys(maxKeys), memstore.WithSweepInterval(time.Hour))
	// The clock moves a µs per key: long states live for the whole run,
	// short ones for 2,000 keys.
	long, err := floodgate.NewLimiter(s, floodgate.Policy{
		Name: "long", Algorithm: floodgate.SlidingWindow,
		Limits: []floodgate.Limit{{Max: 5, Window: time.Hour, Resolution: time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	short, err := floodgate.NewLimiter(s, floodgate.Policy{Name: "short", Algorithm: floodgate.GCRA, Max: 1, Window: 2 * time.Millisecond, Burst: 1})
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
	var longHeld []string
	refused := 0
	buf := make([]byte, 0, 16)
	for i := 0; i < total; i++ {
		clock.SetMicros(floodgatetest.BaseMicros + int64(i))
		buf = strconv.AppendInt(append(buf[:0], 'k'), int64(i), 10)
		if i < longs {
			// 5,000 keys in 64 shards of 156: no shard is full.
			if d, err := long.Allow(ctx, string(buf)); err != nil || d.Remaining != 4 {
				t.Fatalf("long key %d: %v, %v", i, d, err)
			}
			longHeld = append(longHeld, string(buf))
			continue
		}
		d, err := short.Allow(ctx, string(buf))
		switch {
		case err == nil && d.Allowed:
		case errors.Is(err, memstore.ErrFull):
			refused++
		default:
			t.Fatalf("short key %d: %v, %v", i, d, err)
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
	if st.Entries > maxKeys || st.Evictions != 0 || st.Refused != uint64(refused) ||
		st.Swept < uint64(total-longs-refused-maxKeys) {
		t.Errorf("Stats = %+v, %d refused: want ≤ %d entries, 0 evictions, the refusals counted, every short key but the last %d swept",
			st, refused, maxKeys, maxKeys)
	}
	for _, k := range longHeld {
		if d, _ := long.Peek(ctx, k, 1); d.Remaining != 3 {
			t.Fatalf("long key %s lost its count: %v", k, d)
		}
	}
	end := heap()
	t.Logf("live heap: %d KiB after %d keys, %d KiB after %d; %+v", atSettle>>10, settle, end>>10, total, st)
	// Flat: the last 800,000 keys may not add more than a tenth (and
	// 256 KiB of slack for the runtime's own bookkeeping). The live heap
	// after a GC (HeapAlloc) varies by about 1% between runs; the heap in
	// use (HeapInuse, spans) varied by a third and could not be held to
	// this.
	if end > atSettle+atSettle/10+256<<10 {
		t.Errorf("heap grew from %d KiB to %d KiB over the last %d keys", atSettle>>10, end>>10, total-settle)
	}
}
