package service

import (
	"context"
	"sync"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/storekit"
)

// batcher turns concurrent decisions into pipelined TakeBatch calls on the
// guarded store, one batch in flight at a time, without waiting to fill a
// batch: a call that finds no batch in flight starts one at once with
// whatever is queued; calls arriving while one is in flight queue and
// leave together in the next, as soon as it returns. At low load every
// call goes alone (no added latency); under load, each round trip carries
// every decision that arrived during the one before. Decisions are
// unchanged: each request is still one atomic script, in arrival order
// within a batch.
//
// One batch in flight, not several: Redis then reads, parses and answers
// one pipelined request where it would read several small ones from
// several connections. On a 2-core VM under floodgate serve at 16 and 64
// concurrent clients this took 22-28 % off redis-server's CPU per decision
// (half with counters), with no fewer decisions a second and no higher
// latency, against the earlier rule of a quarter of maxInflight batches
// (BENCHMARKS.md, "One batch in flight"). The price is at most one round
// trip more for a decision that arrives while a batch is in flight, under
// load only; store.batching: false sends every decision at once instead.
//
// The batcher is the service's bound on store calls when batching is on:
// maxInflight (Overload.MaxInflight) bounds the decisions in the batch in
// flight, so that a decision's wait inside the store (behind the others
// in flight) stays what it would be without batching: an unbounded batch
// would let the whole queue wait inside Redis, where store.timeout runs.
// The queue holds at most maxQueue requests, each for at most wait; a
// request refused for either reason was never sent (errQueueFull,
// errQueueWait), so the store did not count it. The failure policy's
// timeout starts when a batch is sent, never while a request queues.
type batcher struct {
	store       *failure.Store
	maxBatch    int // requests in one batch
	maxInflight int // requests in flight
	maxQueue    int
	wait        time.Duration
	queuedGauge *queueGauge

	mu       sync.Mutex
	queue    []*pending
	queued   int  // requests in queue
	inflight int  // requests in flight
	running  bool // a runner: a batch in flight, or about to take one
}

// pending is one caller's requests, decided together in one batch (a batch
// is never split inside a caller's requests).
type pending struct {
	reqs []floodgate.Request
	out  []storekit.Outcome // the batch's to write until done is closed
	sent bool               // taken into a batch (under batcher.mu)
	done chan struct{}

	// The request and outcome of a caller of one (doOne), held here so
	// that its call is one allocation and a channel.
	oneReq [1]floodgate.Request
	oneOut [1]storekit.Outcome
}

func newBatcher(store *failure.Store, maxBatch, maxInflight, maxQueue int, wait time.Duration, g *queueGauge) *batcher {
	return &batcher{store: store, maxBatch: maxBatch, maxInflight: maxInflight,
		maxQueue: maxQueue, wait: wait, queuedGauge: g}
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
	start := !b.running
	if !start && b.queued > 0 && b.queued+len(reqs) > b.maxQueue {
		b.mu.Unlock()
		return errQueueFull
	}
	b.queue = append(b.queue, p)
	b.queued += len(reqs)
	b.queuedGauge.add(len(reqs))
	if start {
		b.running = true
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	t := time.NewTimer(b.wait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		if b.withdraw(p) {
			return errQueueWait
		}
		<-p.done // sent: bounded by the failure policy's timeout
	case <-ctx.Done():
		if b.withdraw(p) {
			return ctx.Err()
		}
		select {
		case <-p.done:
		default:
			return ctx.Err()
		}
	}
	return nil
}

// saturated reports whether requests wait behind the bound: more queue
// than the next batch can carry (room), or a batch of maxInflight
// requests is in flight with more waiting. Either
// way the service brings more decisions a round trip than the bound lets
// through, and a call cut then was as much the service's wait as the
// store's. Requests that the next batch carries whole wait one round trip
// at most: that is pipelining, not saturation, and a call cut meanwhile is
// the store's failure.
func (b *batcher) saturated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued > 0 && (b.inflight >= b.maxInflight || b.queued > b.room())
}

// room is how many requests one batch carries: maxBatch, within the
// bound of maxInflight (the one batch in flight holds them all).
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
// empty; it is the batcher's one runner (b.running) meanwhile.
func (b *batcher) run() {
	var reqs []floodgate.Request
	var out []storekit.Outcome
	var batch []*pending
	sent := 0
	for {
		b.mu.Lock()
		b.inflight -= sent // 0: the one runner's batch has returned
		room := b.room()
		n, k := 0, 0
		for k < len(b.queue) && n+len(b.queue[k].reqs) <= room {
			n += len(b.queue[k].reqs)
			k++
		}
		if k == 0 && len(b.queue) > 0 {
			// A request larger than the bound goes alone.
			n, k = len(b.queue[0].reqs), 1
		}
		if k == 0 {
			b.running = false
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
		b.store.TakeBatch(context.Background(), reqs, out)
		i := 0
		for _, p := range batch {
			i += copy(p.out, out[i:])
			close(p.done)
		}
		clear(batch)
	}
}
