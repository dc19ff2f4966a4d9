package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/usage"
)

// TopKeys lists up to limit keys of the named policy with tracked usage,
// in the order by (see usage.Lister). It walks every shard, one at
// a time, so it costs time in proportion to the keys held; decisions on
// other shards go on meanwhile.
func (s *Store) TopKeys(ctx context.Context, policy string, by usage.Order, limit int) ([]usage.Record, error) {
	if s.closed.Load() {
		return nil, floodgate.ErrClosed
	}
	if err := usage.CheckQuery(by, limit); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	top := usage.NewTop(by, limit)
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sh := &s.shards[i]
		now := s.now()
		sh.mu.Lock()
		for _, head := range sh.m {
			for e := head; e != nil; e = e.next {
				if e.policy.Policy.Name != policy || e.use == nil || !e.keep(now) {
					continue
				}
				u := usage.Record{
					Key:       e.key,
					FirstSeen: time.UnixMicro(e.use.first),
					LastSeen:  time.UnixMicro(e.use.last),
					Requests:  e.use.requests,
					Denied:    e.use.denied,
				}
				top.Add(u)
			}
		}
		sh.mu.Unlock()
	}
	return top.Sorted(), nil
}
