package service

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/storekit"
)

// batcher turns concurrent decisions into pipelined TakeBatch calls on the
// guarded store, without waiting to fill a batch: a call that finds no
// batch in flight starts one at once with whatever is queued. What a call
// that finds a batch in flight does depends on how far the store is:
//
//   - near (a small batch's round trip, at its quickest lately, under
//     nearRTT; a Redis on the same host or rack): it queues, and every call
//     that arrived meanwhile leaves together in the next batch as soon as
//     the one in flight returns. Redis then reads, parses and answers one
//     pipelined request where it would read several small ones: on a
//     2-core VM under floodgate serve at 16 and 64 concurrent clients this
//     took 22-28 % off redis-server's CPU per decision (half with
//     counters), with no fewer decisions a second (BENCHMARKS.md, "One
//     batch in flight"). The price, at most one round trip more under
//     load, is small when the round trip is;
//   - far (farRTT or more, a Redis across a network): it starts another
//     batch at once, up to farBatches in flight, since waiting for a
//     round trip that is mostly the network's would cost more latency and
//     throughput than the pipelining saves (with 0.25 ms each way, one
//     batch at a time lost 35 % of the decisions a second at 16 clients;
//     BENCHMARKS.md, "A remote Redis").
//
// A store starts near; its first small batches tell (not the very first,
// which dials), and under load a probe every 10 seconds keeps telling (see
// link). At low load every call goes alone either way (no added
// latency). Decisions are unchanged: each request is still one atomic
// script, in arrival order within a batch.
//
// The batcher is the service's bound on store calls when batching is on:
// maxInflight (Overload.MaxInflight) bounds the decisions in flight in
// all its batches, so that a decision's wait inside the store (behind the
// others in flight) stays bounded: an unbounded batch would let the whole
// queue wait inside Redis, where store.timeout runs. The queue holds at
// most maxQueue requests, each for at most wait; a request refused for
// either reason was never sent (errQueueFull, errQueueWait), so the store
// did not count it. The failure policy's timeout starts when a batch is
// sent, never while a request queues. One timer per batcher (expire), not
// one per request, ends the waits that pass: the queue is in arrival
// order, so the request at its head is always the first whose wait ends.
type batcher struct {
	store       *failure.Store
	node        string // the store node ("": the store's one)
	maxBatch    int    // requests in one batch
	maxInflight int    // requests in flight
	farBatches  int    // batches in flight at once when the store is far (see newBatcher)
	maxQueue    int
	wait        time.Duration
	queuedGauge *queueGauge
	log         *slog.Logger // told when the store turns far or near; nil: not

	mu       sync.Mutex
	queue    []*pending  // in arrival order, so by deadline
	sweep    *time.Timer // runs expire; nil until a request first queues
	armed    bool        // sweep is set to fire
	queued   int         // requests in queue
	inflight int         // requests in flight
	batches  int         // runners: each a batch in flight, or about to take one
	link     link
}

// Round trips that tell a near store from a far one (see batcher). Only
// batches of at most smallBatch requests count, whose own work inside the
// store is too small to matter, and only those that every request left
// without an error or a degraded answer: a store that fails is not far,
// and more batches in flight would not help it. The window is how long a
// quickest round trip is remembered: between one and two windows.
const (
	farRTT     = 250 * time.Microsecond
	nearRTT    = 150 * time.Microsecond
	linkWindow = 10 * time.Second
	smallBatch = 2
	maxFar     = 8 // farBatches at most
)

// link estimates how far the store is from the quickest round trip of a
// small batch in the current window and the one just before it, with
// hysteresis: far from farRTT on, near again below nearRTT. The zero
// value is a near store with no round trip seen. It is the batcher's,
// under its mutex.
//
// Under load a near store's batches are large and tell nothing, so that
// a store that is far but busy from the start (a replica started under
// traffic) would never show it: when no round trip told anything for a
// window (or ever), the next batch is a probe, the first queued caller's
// requests alone, the rest following as soon as it returns (due, and
// batcher.run).
type link struct {
	cur, prev time.Duration // the quickest of this window, of the one before; 0: none
	end       time.Time     // when this window ends
	last      time.Time     // when the last round trip that tells came, or a probe ended; zero: never
	far       bool
	judged    time.Duration // the quickest round trip far was last judged on; 0: none yet
	seen      bool          // a round trip came, the first, which tells nothing
	probing   bool          // a probe is in flight
}

// observe takes one small batch's round trip d, ended at now. The first
// is ignored: it pays for dialing a connection and for what the store
// does once (loading the function library), not for the distance.
func (l *link) observe(now time.Time, d time.Duration) {
	if !l.seen {
		l.seen = true
		return
	}
	l.last = now
	d = max(d, 1)
	if !now.Before(l.end) { // a new window; the one before is this one if it just ended
		l.prev = 0
		if now.Before(l.end.Add(linkWindow)) {
			l.prev = l.cur
		}
		l.cur, l.end = 0, now.Add(linkWindow)
	}
	if l.cur == 0 || d < l.cur {
		l.cur = d
	}
	q := l.cur
	if l.prev > 0 && l.prev < q {
		q = l.prev
	}
	l.judged = q
	switch {
	case q >= farRTT:
		l.far = true
	case q < nearRTT:
		l.far = false
	}
}

// due reports whether the next batch should be a probe: none is in
// flight, and no round trip told anything for a window, or ever.
func (l *link) due(now time.Time) bool {
	return !l.probing && (l.last.IsZero() || now.Sub(l.last) >= linkWindow)
}

// probed ends a probe at now, whether or not its round trip told anything
// (a store that fails is probed again a window later, not at once).
func (l *link) probed(now time.Time) {
	l.probing = false
	l.last = now
}

// pending is one caller's requests, decided together in one batch (a batch
// is never split inside a caller's requests).
type pending struct {
	reqs     []floodgate.Request
	out      []storekit.Outcome // the batch's to write until done is closed
	sent     bool               // taken out of the queue, into a batch or by expire (under batcher.mu)
	deadline time.Time          // when its wait in the queue ends (overload.queue_wait)
	err      error              // errQueueWait when expire took it, read once done is closed
	done     chan struct{}

	// The request and outcome of a caller of one (doOne), held here so
	// that its call is one allocation and a channel.
	oneReq [1]floodgate.Request
	oneOut [1]storekit.Outcome
}

// batchConfig is what the batchers of a configuration are made with,
// the same for every store node.
type batchConfig struct {
	maxBatch    int // requests in one batch
	maxInflight int // requests in flight at the node
	// pool is the store's connections per node (0: unknown): each batch in
	// flight holds one, so that a far store has at most that many batches
	// in flight, lest the others wait for a connection inside the store
	// call, where the timeout runs.
	pool     int
	maxQueue int           // requests queued at the node
	wait     time.Duration // how long a request may queue
	gauge    *queueGauge   // counts the queued requests, with every node's
	log      *slog.Logger  // told when the store turns far or near; nil: not
}

// newBatcher returns a batcher for store node node ("": a store on one
// node).
func newBatcher(store *failure.Store, node string, c batchConfig) *batcher {
	far := min(maxFar, c.maxInflight)
	if c.pool > 0 {
		far = min(far, c.pool)
	}
	return &batcher{store: store, node: node, maxBatch: c.maxBatch, maxInflight: c.maxInflight,
		farBatches: max(1, far), maxQueue: c.maxQueue, wait: c.wait, queuedGauge: c.gauge, log: c.log}
}

// do decides reqs into out (one outcome each) in the next batch. It
// returns nil when the outcomes are known; errQueueFull or errQueueWait
// when the requests were not sent (the store did not count them); ctx's
// error when the caller left first (the requests may still be decided
// then, as with any call cut short).
func (b *batcher) do(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) error {
	p := &pending{reqs: reqs, out: make([]storekit.Outcome, len(reqs)), done: make(chan struct{})}
	if err := b.await(ctx, p); err != nil {
		return err
	}
	copy(out, p.out)
	return nil
}

// doOne is do for one request.
func (b *batcher) doOne(ctx context.Context, req floodgate.Request) (storekit.Outcome, error) {
	p := &pending{done: make(chan struct{})}
	p.oneReq[0] = req
	p.reqs, p.out = p.oneReq[:], p.oneOut[:]
	if err := b.await(ctx, p); err != nil {
		return storekit.Outcome{}, err
	}
	return p.oneOut[0], nil
}

// await queues p and waits for its outcomes (p.out, once it returns nil),
// with do's errors.
func (b *batcher) await(ctx context.Context, p *pending) error {
	reqs := p.reqs
	b.mu.Lock()
	start := b.batches == 0 ||
		b.link.far && b.batches < b.farBatches && b.inflight < b.maxInflight
	if !start && b.queued > 0 && b.queued+len(reqs) > b.maxQueue {
		b.mu.Unlock()
		return errQueueFull
	}
	p.deadline = time.Now().Add(b.wait)
	b.queue = append(b.queue, p)
	b.queued += len(reqs)
	b.queuedGauge.add(len(reqs))
	if !b.armed {
		b.arm(b.wait)
	}
	if start {
		b.batches++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case <-p.done: // sent and answered, or expired
		return p.err
	case <-ctx.Done():
		if b.withdraw(p) {
			return ctx.Err()
		}
		select {
		case <-p.done:
			return p.err
		default:
			return ctx.Err()
		}
	}
}

// arm sets b's sweep to run expire after d; b.mu is held.
func (b *batcher) arm(d time.Duration) {
	b.armed = true
	if b.sweep == nil {
		b.sweep = time.AfterFunc(d, b.expire)
		return
	}
	b.sweep.Reset(d)
}

// expire ends the waits that passed: the requests at the head of the
// queue whose deadline came are taken out of it, never sent, and told
// errQueueWait. It sets the sweep again for the new head, if any. A
// request a batch took meanwhile is no longer in the queue, so that a
// sweep set for it finds a later head and only sets itself again.
func (b *batcher) expire() {
	b.mu.Lock()
	b.armed = false
	now := time.Now()
	k := 0
	for k < len(b.queue) && !now.Before(b.queue[k].deadline) {
		k++
	}
	gone := make([]*pending, k)
	copy(gone, b.queue[:k])
	n := 0
	for _, p := range gone {
		p.sent, p.err = true, errQueueWait
		n += len(p.reqs)
	}
	b.queue = append(b.queue[:0], b.queue[k:]...)
	b.queued -= n
	b.queuedGauge.add(-n)
	if len(b.queue) > 0 {
		b.arm(b.queue[0].deadline.Sub(now))
	}
	b.mu.Unlock()
	for _, p := range gone {
		close(p.done)
	}
}

// saturated reports whether requests wait behind the bound: more queue
// than the next batch can carry (room), or maxInflight requests are in
// flight with more waiting. Either way the service brings more decisions
// a round trip than the bound lets through, and a call cut then was as
// much the service's wait as the store's. Requests that the next batch
// carries whole wait one round trip at most: that is pipelining, not
// saturation, and a call cut meanwhile is the store's failure.
func (b *batcher) saturated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued > 0 && (b.inflight >= b.maxInflight || b.queued > b.room())
}

// room is how many requests one batch carries at most: maxBatch, within
// the bound of maxInflight.
func (b *batcher) room() int { return min(b.maxBatch, b.maxInflight) }

// withdraw takes p out of the queue if no batch took it yet, and reports
// whether it did.
func (b *batcher) withdraw(p *pending) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.sent {
		return false
	}
	for i, q := range b.queue {
		if q == p {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			break
		}
	}
	b.queued -= len(p.reqs)
	b.queuedGauge.add(-len(p.reqs))
	return true
}

// run sends queued requests in batches, one at a time, until the queue is
// empty or the bound is full (then the batches in flight take the rest as
// they return); it is one of b.batches meanwhile.
func (b *batcher) run() {
	var reqs []floodgate.Request
	var out []storekit.Outcome
	var batch []*pending
	sent := 0
	for {
		b.mu.Lock()
		b.inflight -= sent
		room := min(b.maxBatch, b.maxInflight-b.inflight)
		probe := len(b.queue) > 1 && len(b.queue[0].reqs) <= min(smallBatch, room) && b.link.due(time.Now())
		if probe {
			room = len(b.queue[0].reqs)
			b.link.probing = true
		}
		n, k := 0, 0
		for k < len(b.queue) && n+len(b.queue[k].reqs) <= room {
			n += len(b.queue[k].reqs)
			k++
		}
		if k == 0 && len(b.queue) > 0 && b.inflight == 0 {
			// A request larger than the bound goes alone.
			n, k = len(b.queue[0].reqs), 1
		}
		if k == 0 {
			b.batches--
			b.mu.Unlock()
			return
		}
		b.inflight += n
		sent = n
		batch = append(batch[:0], b.queue[:k]...)
		for _, p := range batch {
			p.sent = true
		}
		b.queue = append(b.queue[:0], b.queue[k:]...)
		b.queued -= n
		b.queuedGauge.add(-n)
		b.mu.Unlock()

		reqs, out = reqs[:0], out[:0]
		for _, p := range batch {
			reqs = append(reqs, p.reqs...)
		}
		out = append(out, make([]storekit.Outcome, len(reqs))...)
		// The failure policy's timeout starts here, as the batch is sent.
		t0 := time.Now()
		b.store.TakeBatch(context.Background(), reqs, out)
		if tells := n <= smallBatch && answered(out); tells || probe {
			// Before its callers are told, so that their next calls see it.
			now := time.Now()
			rtt := now.Sub(t0)
			b.mu.Lock()
			was := b.link.far
			if tells {
				b.link.observe(now, rtt)
			}
			if probe {
				b.link.probed(now)
			}
			far := b.link.far
			b.mu.Unlock()
			if far != was {
				b.logLink(far, rtt)
			}
		}
		i := 0
		for _, p := range batch {
			i += copy(p.out, out[i:])
			close(p.done)
		}
		clear(batch)
	}
}

// logLink tells the log, at level debug, that the store turned far or
// near on the round trip rtt. Debug, not info: a burst of load on a small
// machine can slow the first round trips of a near store past farRTT for
// the few milliseconds until a quick one turns it back.
func (b *batcher) logLink(far bool, rtt time.Duration) {
	if b.log == nil {
		return
	}
	node := b.node
	if node == "" {
		node = "the store"
	}
	if far {
		b.log.Debug("store is far: batches go without waiting for the one in flight", "node", node,
			"round_trip", rtt.String(), "batches_in_flight_max", b.farBatches)
		return
	}
	b.log.Debug("store is near: one batch in flight, the next carrying what arrives meanwhile", "node", node,
		"round_trip", rtt.String())
}

// state returns what b knows of the way to its node.
func (b *batcher) state() Link {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Link{Node: b.node, Far: b.link.far, RoundTrip: b.link.judged, Batches: b.batches}
}

// idle reports whether b has no batch in flight and nothing queued.
func (b *batcher) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.batches == 0 && len(b.queue) == 0
}

// answered reports whether the store answered every outcome itself: no
// error and no answer of the failure policy.
func answered(out []storekit.Outcome) bool {
	for _, o := range out {
		if o.Err != nil || o.Decision.Degraded {
			return false
		}
	}
	return true
}
