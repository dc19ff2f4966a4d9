package failure

import (
	"sync/atomic"
	"time"
)

// nBuckets is how many buckets a breaker's window is cut into: failures
// are counted per bucket, and the window slides a bucket at a time.
const nBuckets = 10

// breaker states.
const (
	closed int32 = iota
	open
	halfOpen // a probe is in flight
)

// breaker is one node's circuit breaker. It takes no lock: every request
// of the node passes through it. Counts are exact but for a bucket's
// rollover racing with a call, which may lose that call's count.
type breaker struct {
	node    string
	buckets [nBuckets]bucket

	state     atomic.Int32
	openUntil atomic.Int64 // ns, while open
	since     atomic.Int64 // ns: when the state last changed
	used      atomic.Int64 // ns: about when a call last asked for the node (to the second)
}

type bucket struct {
	epoch atomic.Int64 // the bucket's start, in bucket widths since the epoch
	calls atomic.Int64
	fails atomic.Int64
}

// admit reports whether a call may go to the store at now (ns), and
// whether it is the probe of an open breaker (whose outcome decides the
// breaker's state).
func (b *breaker) admit(now int64) (ok, probe bool) {
	if now-b.used.Load() > int64(time.Second) {
		b.used.Store(now) // one write a second, not one a call
	}
	switch b.state.Load() {
	case closed:
		return true, false
	case open:
		if now >= b.openUntil.Load() && b.state.CompareAndSwap(open, halfOpen) {
			return true, true
		}
	}
	return false, false
}

// record counts one call's outcome at now (ns) and returns the change of
// state it caused: +1 when the breaker opened, -1 when it closed, else 0.
func (b *breaker) record(now int64, cfg *Breaker, failed, probe bool) int {
	if probe {
		if failed {
			b.openUntil.Store(now + int64(cfg.OpenFor))
			b.state.Store(open)
			return 0
		}
		b.reset()
		b.since.Store(now)
		b.state.Store(closed)
		return -1
	}
	width := int64(cfg.Window) / nBuckets
	e := now / width
	bk := &b.buckets[e%nBuckets]
	if old := bk.epoch.Load(); old != e && bk.epoch.CompareAndSwap(old, e) {
		bk.calls.Store(0)
		bk.fails.Store(0)
	}
	bk.calls.Add(1)
	if !failed {
		return 0
	}
	bk.fails.Add(1)
	if b.state.Load() != closed {
		return 0
	}
	var calls, fails int64
	for i := range b.buckets {
		x := &b.buckets[i]
		if ep := x.epoch.Load(); ep > e-nBuckets && ep <= e {
			calls += x.calls.Load()
			fails += x.fails.Load()
		}
	}
	if calls < int64(cfg.MinCalls) || float64(fails) < cfg.FailureRatio*float64(calls) {
		return 0
	}
	b.openUntil.Store(now + int64(cfg.OpenFor))
	if !b.state.CompareAndSwap(closed, open) {
		return 0
	}
	b.since.Store(now)
	return +1
}

// reset forgets every count.
func (b *breaker) reset() {
	for i := range b.buckets {
		b.buckets[i].calls.Store(0)
		b.buckets[i].fails.Store(0)
	}
}

// BreakerState is the state of one node's breaker.
type BreakerState struct {
	Node  string    // the node's address; "" for a store without nodes
	Open  bool      // open (or probing): the node's requests are decided without it
	Since time.Time // when it last opened or closed; zero if it never did
}

func (b *breaker) snapshot() BreakerState {
	s := BreakerState{Node: b.node, Open: b.state.Load() != closed}
	if ns := b.since.Load(); ns != 0 {
		s.Since = time.Unix(0, ns)
	}
	return s
}
