package service_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
)

// batchMem is a memory store behind the batcher: its TakeBatch is one
// Take each, so that a benchmark measures the service's own way to a
// store (the queue, the hand-off to a batch, the wake-up of its callers),
// not a store's.
type batchMem struct{ floodgate.Store }

func (s batchMem) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	takeEach(ctx, s, reqs, out)
}

// BenchmarkBatchedCheck is one Check of one decision through the service's
// batcher, from 64 concurrent callers (b.SetParallelism(32) on 2 cores),
// on 1,000 keys of a memory store.
func BenchmarkBatchedCheck(b *testing.B) {
	m := newMem(b, storekit.SystemClock{})
	cfg := `
policies: {fw: "fixed_window 1000000000/1h"}
store: {batching: true, timeout: 1m}
`
	svc, err := service.New(mustParse(b, cfg), service.Options{Store: batchMem{m}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if service.BatcherQueued(svc) < 0 {
		b.Fatal("the service does not batch")
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			v, err := svc.Check(context.Background(), []service.Item{{Policy: "fw", Key: keys[i%len(keys)]}})
			if err != nil || !v.Items[0].Decision.Allowed {
				b.Errorf("%v, %v; want allowed", v, err)
				return
			}
		}
	})
}
