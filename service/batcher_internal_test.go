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
	b := newBatcher(nil, 6, 8, 100, time.Second, &queueGauge{}) // batches of at most 6
	for _, tc := range []struct {
		queued, inflight int
		running          bool
		want             bool
	}{
		{0, 0, false, false},
		{0, 8, true, false}, // full, but nothing waits
		{1, 0, true, false}, // a batch starting for the one queued
		{1, 1, true, false}, // the next batch carries it
		{6, 7, true, false}, // the next batch carries all 6
		{7, 1, true, true},  // more than a batch of 6 carries
		{7, 0, false, true},
		{1, 8, true, true}, // maxInflight in flight, one more waiting
	} {
		b.queued, b.inflight, b.running = tc.queued, tc.inflight, tc.running
		if got := b.saturated(); got != tc.want {
			t.Errorf("queued %d, in flight %d of 8 (running %v), batches of 6: saturated %v, want %v", tc.queued, tc.inflight, tc.running, got, tc.want)
		}
	}
}
