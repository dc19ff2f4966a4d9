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
// guarded store, without waiting to fill a batch: a call that finds fewer
// than maxInflight batches in flight starts one at once with whatever is
// queued; calls arriving while all are in flight queue and leave together
// in the next. At low load every call goes alone (no added latency); under
// load, round trips carry many decisions. Decisions are unchanged: each
// request is still one atomic script, in arrival order within a batch.
//
// The batcher is the service's bound on store calls when batching is on:
// maxInflight is the overload bound (Overload.MaxInflight), and each batch
// in flight holds one of its slots. The queue holds at most maxQueue
// requests, each for at most wait; a request refused for either reason
// was never sent (errQueueFull, errQueueWait), so the store did not count
// it. The failure policy's timeout starts when a batch is sent, never
// while a request queues.
type batcher struct {
	store       *failure.Store
	maxBatch    int
	maxInflight int
	maxQueue    int
	wait        time.Duration
	queuedGauge *queueGauge

	mu       sync.Mutex
	queue    []*pending
	queued   int // requests in queue
	inflight int
}

// pending is one caller's requests, decided together in one batch (a batch
// is never split inside a caller's requests).
type pending struct {
	reqs []floodgate.Request
	out  []storekit.Outcome // the batch's to write until done is closed
	sent bool               // taken into a batch (under batcher.mu)
	done chan struct{}
}

func newBatcher(store *failure.Store, maxBatch, maxInflight, maxQueue int, wait time.Duration, g *queueGauge) *batcher {
	return &batcher{store: store, maxBatch: maxBatch, maxInflight: maxInflight, maxQueue: maxQueue, wait: wait, queuedGauge: g}
}

// do decides reqs into out (one outcome each) in the next batch. It
// returns nil when the outcomes are known; errQueueFull or errQueueWait
// when the requests were not sent (the store did not count them); ctx's
// error when the caller left first (the requests may still be decided
// then, as with any call cut short).
func (b *batcher) do(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) error {
	p := &pending{reqs: reqs, out: make([]storekit.Outcome, len(reqs)), done: make(chan struct{})}
	b.mu.Lock()
	start := b.inflight < b.maxInflight
	if !start && b.queued > 0 && b.queued+len(reqs) > b.maxQueue {
		b.mu.Unlock()
		return errQueueFull
	}
	b.queue = append(b.queue, p)
	b.queued += len(reqs)
	b.queuedGauge.add(len(reqs))
	if start {
		b.inflight++
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
	copy(out, p.out)
	return nil
}

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

// run sends queued requests in batches until the queue is empty; it holds
// one of the maxInflight slots meanwhile.
func (b *batcher) run() {
	var reqs []floodgate.Request
	var out []storekit.Outcome
	var batch []*pending
	for {
		b.mu.Lock()
		n, k := 0, 0
		for k < len(b.queue) && (k == 0 || n+len(b.queue[k].reqs) <= b.maxBatch) {
			n += len(b.queue[k].reqs)
			k++
		}
		if k == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
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
