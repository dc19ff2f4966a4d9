package service

import (
	"testing"
	"time"
)

// TestBatcherSaturated: requests in the queue are a wait behind the bound
// only when the next batch cannot carry them all (more queued than
// min(maxBatch, maxInflight)) or a batch of maxInflight is in flight with
// more waiting; requests the next batch carries whole, or that a batch is
// starting for, wait one round trip at most: a store call cut then is a
// store failure, not the service's saturation.
func TestBatcherSaturated(t *testing.T) {
	b := newBatcher(nil, "", batchConfig{maxBatch: 6, maxInflight: 8, maxQueue: 100, wait: time.Second, gauge: &queueGauge{}}) // batches of at most 6
	for _, tc := range []struct {
		queued, inflight int
		batches          int
		want             bool
	}{
		{0, 0, 0, false},
		{0, 8, 1, false}, // full, but nothing waits
		{1, 0, 1, false}, // a batch starting for the one queued
		{1, 1, 1, false}, // the next batch carries it
		{6, 7, 1, false}, // the next batch carries all 6
		{6, 2, 3, false}, // three batches in flight (a far store), the next carries all 6
		{7, 1, 1, true},  // more than a batch of 6 carries
		{7, 0, 0, true},
		{1, 8, 1, true}, // maxInflight in flight, one more waiting
		{1, 8, 4, true}, // the same, in four batches
	} {
		b.queued, b.inflight, b.batches = tc.queued, tc.inflight, tc.batches
		if got := b.saturated(); got != tc.want {
			t.Errorf("queued %d, in flight %d of 8 (%d batches), batches of 6: saturated %v, want %v", tc.queued, tc.inflight, tc.batches, got, tc.want)
		}
	}
}

// TestLinkObserve: the first round trip tells nothing; then the store is
// far from the first small batch whose round trip takes farRTT or more, stays far while the quickest of the current
// and the previous window does, and is near again once it falls below
// nearRTT; between the two it keeps what it was. A window's quickest
// counts until the window after it ends, and not at all after a gap of a
// whole window without a round trip.
func TestLinkObserve(t *testing.T) {
	var l link
	t0 := time.Unix(1_000_000, 0)
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	for i, step := range []struct {
		at   time.Duration // after t0
		rtt  time.Duration
		want bool // far
	}{
		{0, us(9000), false},                           // the first: a dial and a handshake, ignored
		{0, us(80), false},                             // a local Redis
		{time.Second, us(5000), false},                 // slower, but this window's quickest is 80 µs
		{linkWindow, us(400), false},                   // a new window: the one before still had 80 µs
		{2 * linkWindow, us(400), true},                // 80 µs is two windows old: 400 µs is the quickest
		{2*linkWindow + time.Second, us(200), true},    // between the two: stays far
		{2*linkWindow + 2*time.Second, us(120), false}, // below nearRTT: near
		{2*linkWindow + 3*time.Second, us(200), false}, // between the two: stays near
		{4 * linkWindow, farRTT, true},                 // exactly farRTT is far
	} {
		l.observe(t0.Add(step.at), step.rtt)
		if l.far != step.want {
			t.Errorf("step %d (%s after the start, round trip %s): far %v, want %v", i, step.at, step.rtt, l.far, step.want)
		}
	}
}

// TestLinkDue: a probe is due before any round trip told anything, and a
// window after the last one that did or the last probe; never while a
// probe is in flight.
func TestLinkDue(t *testing.T) {
	var l link
	t0 := time.Unix(1_000_000, 0)
	if !l.due(t0) {
		t.Error("no round trip yet: a probe is not due")
	}
	l.observe(t0, time.Millisecond) // the first, ignored
	if !l.due(t0) {
		t.Error("only the ignored first round trip: a probe is not due")
	}
	l.probing = true
	if l.due(t0) {
		t.Error("a probe is due while one is in flight")
	}
	l.observe(t0, 80*time.Microsecond)
	l.probed(t0)
	for _, c := range []struct {
		after time.Duration
		want  bool
	}{{0, false}, {linkWindow - 1, false}, {linkWindow, true}} {
		if got := l.due(t0.Add(c.after)); got != c.want {
			t.Errorf("%s after the last round trip: due %v, want %v", c.after, got, c.want)
		}
	}
	l.probed(t0.Add(linkWindow)) // a probe that told nothing (the store failed)
	if l.due(t0.Add(linkWindow + time.Second)) {
		t.Error("a probe is due again at once after one that told nothing")
	}
}

// TestFarBatches: to a far store at most 8 batches are in flight, no more
// than the decisions the bound lets through nor the connections of the
// pool (when known), and at least one.
func TestFarBatches(t *testing.T) {
	for _, c := range []struct{ maxInflight, pool, want int }{
		{256, 0, 8},
		{256, 20, 8},
		{256, 4, 4},
		{2, 0, 2},
		{2, 20, 2},
		{1, 1, 1},
	} {
		b := newBatcher(nil, "", batchConfig{maxBatch: 256, maxInflight: c.maxInflight, pool: c.pool, maxQueue: 100, wait: time.Second, gauge: &queueGauge{}})
		if b.farBatches != c.want {
			t.Errorf("max_inflight %d, pool %d: %d batches in flight to a far store, want %d", c.maxInflight, c.pool, b.farBatches, c.want)
		}
	}
}
