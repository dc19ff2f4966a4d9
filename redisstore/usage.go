package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/usage"
)

// TopKeys lists up to limit keys of the named policy with tracked usage,
// in the order by (see usage.Lister). It scans every master for
// the policy's usage hashes (SCAN, so Redis keeps serving meanwhile), reads
// them in pipelined batches and keeps the best limit. Its cost grows with
// the number of keys in Redis; it is meant for an operator's query, not
// for every request. With WithHashedKeys the keys listed are the hashes.
func (s *Store) TopKeys(ctx context.Context, policy string, by usage.Order, limit int) ([]usage.Record, error) {
	if s.closed.Load() {
		return nil, floodgate.ErrClosed
	}
	if err := usage.CheckQuery(by, limit); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	probe := floodgate.Policy{Name: policy, Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1}
	if err := probe.Validate(); err != nil {
		return nil, err // the name cannot be one of ours
	}
	var now int64
	if s.clock != nil {
		now = s.clock.Now().UnixMicro()
	} else {
		t, err := s.b.time(ctx)
		if err != nil {
			return nil, classify(ctx, err)
		}
		now = t
	}
	head := s.prefix + ":{" + policy + ":"
	top := usage.NewTop(by, limit)
	err := s.b.scan(ctx, head+"*}:u", func(ctx context.Context, keys []string) error {
		rows, err := s.b.hmget(ctx, keys, "f", "l", "r", "d", "x")
		if err != nil {
			return err
		}
		for i, row := range rows {
			u, ok := parseUsage(keys[i], head, row, now)
			if !ok {
				continue
			}
			top.Add(u)
		}
		return nil
	})
	if err != nil {
		return nil, classify(ctx, err)
	}
	return top.Sorted(), nil
}

// parseUsage reads one usage hash; ok is false for a hash that vanished,
// has expired by the store's clock, or does not belong to the policy.
func parseUsage(redisKey, head string, row []any, now int64) (usage.Record, bool) {
	key, ok := strings.CutPrefix(redisKey, head)
	if !ok {
		return usage.Record{}, false
	}
	key, ok = strings.CutSuffix(key, "}:u")
	if !ok || key == "" || len(row) != 5 {
		return usage.Record{}, false
	}
	var v [5]int64
	for i, f := range row {
		s, ok := f.(string)
		if !ok {
			return usage.Record{}, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return usage.Record{}, false
		}
		v[i] = n
	}
	if v[4] <= now {
		return usage.Record{}, false
	}
	return usage.Record{
		Key:       key,
		FirstSeen: time.UnixMicro(v[0]),
		LastSeen:  time.UnixMicro(v[1]),
		Requests:  v[2],
		Denied:    v[3],
	}, true
}
