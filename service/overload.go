package service

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgatehq/floodgate/failure"
)

// ErrOverloaded is wrapped by the error of Check, Peek and Decide for a
// decision the service could not make because it was saturated, in
// overload mode backpressure: the store calls in flight were at their
// bound (overload.max_inflight) and the queue was full (overload.max_queue)
// or the decision's wait in it passed (overload.queue_wait) — such a
// decision was never sent to the store, nothing was counted — or its store
// call was sent but store.timeout cut it while decisions were queued
// behind the bound (the store may have counted it). Either way nothing was
// admitted. Transports answer it with HTTP 503 (or overload.status) and
// Retry-After, or gRPC RESOURCE_EXHAUSTED.
var ErrOverloaded = errors.New("service: overloaded")

// The causes of an ErrOverloaded.
var (
	errQueueFull = fmt.Errorf("%w: the queue of decisions waiting for a store call is full (overload.max_queue)", ErrOverloaded)
	errQueueWait = fmt.Errorf("%w: no store call came free within overload.queue_wait", ErrOverloaded)
	errCallCut   = fmt.Errorf("%w: store.timeout cut the store call while decisions were queued behind overload.max_inflight", ErrOverloaded)
)

// overloadReason is the metrics label of an ErrOverloaded: "queue_full",
// "queue_wait" or "store_timeout".
func overloadReason(err error) string {
	switch {
	case errors.Is(err, errQueueFull):
		return "queue_full"
	case errors.Is(err, errCallCut):
		return "store_timeout"
	}
	return "queue_wait"
}

// shed returns the overload error of a store call cut under saturation
// (an error wrapping failure.ErrSaturated), or nil for any other err.
func shed(err error) error {
	if !errors.Is(err, failure.ErrSaturated) {
		return nil
	}
	return errCallCut
}

// saturated reports whether decisions queue behind the current bound on
// store calls to node: the service takes more than the node answers, and a call
// that store.timeout cuts then was as much the service's own queue (and
// the machine under it) as the store. The failure policy asks it when
// store.timeout cuts a call (WithSaturation).
func (s *Service) saturated(node string) bool {
	st := s.state.Load()
	if st == nil || st.bounds == nil {
		return false
	}
	nb := st.bounds.lookup(node)
	return nb != nil && nb.saturated()
}

// OverloadObserver is implemented by an Observer that counts the
// decisions refused by the overload bound.
type OverloadObserver interface {
	// Overloaded reports decisions refused (n of them) for reason
	// "queue_full", "queue_wait" or "store_timeout", answered as the
	// overload mode says: "backpressure" or "failure_policy".
	Overloaded(reason, mode string, n int)
}

// queueGauge counts the requests waiting for a store call, across the
// bounds of successive configurations.
type queueGauge struct{ n atomic.Int64 }

func (g *queueGauge) add(d int) { g.n.Add(int64(d)) }

// gate bounds the store calls in flight when batching is off: a call takes
// a slot, or waits for one in a queue of at most maxQueue calls, for at
// most wait. The failure policy's timeout starts once a slot is taken.
type gate struct {
	slots    chan struct{}
	maxQueue int64
	wait     time.Duration
	queued   atomic.Int64
	gauge    *queueGauge
}

func newGate(maxInflight, maxQueue int, wait time.Duration, g *queueGauge) *gate {
	return &gate{slots: make(chan struct{}, maxInflight), maxQueue: int64(maxQueue), wait: wait, gauge: g}
}

// acquire takes a slot for n requests: nil, errQueueFull, errQueueWait,
// or ctx's error when the caller left first. A nil error must be followed
// by release.
func (g *gate) acquire(ctx context.Context, n int) error {
	select {
	case g.slots <- struct{}{}:
		return nil
	default:
	}
	if q := g.queued.Add(int64(n)); q > g.maxQueue && q != int64(n) {
		g.queued.Add(-int64(n))
		return errQueueFull
	}
	g.gauge.add(n)
	defer func() {
		g.queued.Add(-int64(n))
		g.gauge.add(-n)
	}()
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-t.C:
		return errQueueWait
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) release() { <-g.slots }

// saturated reports whether calls wait for a slot.
func (g *gate) saturated() bool { return g.queued.Load() > 0 }

// idle reports whether no call holds a slot or waits for one. It reads
// the queue first: a waiting call takes its slot before it leaves the
// queue, so it is seen in one or the other.
func (g *gate) idle() bool { return g.queued.Load() == 0 && len(g.slots) == 0 }
