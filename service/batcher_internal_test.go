package service

import (
	"testing"
	"time"
)

// TestBatcherSaturated: requests in the queue are a wait behind the bound
// only while the bound is full (every batch slot taken, or maxInflight
// requests in flight), not while a batch is starting for them: a store
// call cut then is a store failure, not the service's saturation.
func TestBatcherSaturated(t *testing.T) {
	b := newBatcher(nil, 256, 8, 100, time.Second, &queueGauge{})
	b.maxBatches = 2 // the rule for any number of batch slots
	for _, tc := range []struct {
		queued, batches, inflight int
		want                      bool
	}{
		{0, 0, 0, false},
		{0, 2, 8, false}, // full, but nothing waits
		{1, 1, 1, false}, // a batch starting for the one queued
		{3, 1, 7, false},
		{1, 2, 2, true}, // every batch slot taken
		{1, 1, 8, true}, // maxInflight in flight
	} {
		b.queued, b.batches, b.inflight = tc.queued, tc.batches, tc.inflight
		if got := b.saturated(); got != tc.want {
			t.Errorf("queued %d, batches %d of 2, in flight %d of 8: saturated %v, want %v", tc.queued, tc.batches, tc.inflight, got, tc.want)
		}
	}
}
