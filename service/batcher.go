package service

import (
	"context"
	"sync"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// batcher turns concurrent Take calls into pipelined TakeBatch calls on a
// BatchStore, without waiting to fill a batch: a call that finds fewer
// than maxInflight batches in flight starts one at once with whatever is
// queued; calls arriving while all are in flight queue and leave together
// in the next. At low load every call goes alone (no added latency); under
// load, round trips carry many decisions. Decisions are unchanged: each
// request is still one atomic script, in arrival order within a batch.
type batcher struct {
	store       storekit.BatchStore
	maxBatch    int
	maxInflight int
	timeout     time.Duration // of one TakeBatch

	mu       sync.Mutex
	queue    []*pending
	inflight int
}

type pending struct {
	req  floodgate.Request
	done chan storekit.Outcome // buffered: the batch never blocks on a caller gone
}

func newBatcher(store storekit.BatchStore, maxBatch, maxInflight int, timeout time.Duration) *batcher {
	return &batcher{store: store, maxBatch: maxBatch, maxInflight: maxInflight, timeout: timeout}
}

// Take decides req in the next batch. It returns when its decision is
// known or ctx is done; a request whose caller left may still be decided
// (its outcome is then unknown to the caller, as with any call cut short).
func (b *batcher) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	p := &pending{req: req, done: make(chan storekit.Outcome, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	start := b.inflight < b.maxInflight
	if start {
		b.inflight++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case r := <-p.done:
		return r.Decision, r.Err
	case <-ctx.Done():
		return floodgate.Decision{}, ctx.Err()
	}
}

// run sends queued requests in batches until the queue is empty.
func (b *batcher) run() {
	var reqs []floodgate.Request
	var out []storekit.Outcome
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		if n == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch := make([]*pending, n)
		copy(batch, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()

		reqs, out = reqs[:0], out[:0]
		for _, p := range batch {
			reqs = append(reqs, p.req)
			out = append(out, storekit.Outcome{})
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		b.store.TakeBatch(ctx, reqs, out)
		cancel()
		for i, p := range batch {
			p.done <- out[i]
		}
	}
}
