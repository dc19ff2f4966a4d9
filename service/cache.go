package service

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/floodgatehq/floodgate"
)

// overLimitCache remembers keys whose fixed window is exhausted, until
// the window ends, and answers their requests without the store.
//
// It is exact: once a fixed window's count has reached its max (a denial
// with nothing remaining), every request of any cost is denied until the
// window ends, with remaining 0 and the window's end as retry and reset
// (Never for a cost above the max); a denied request of a policy without
// count_denied changes nothing, and one with count_denied only grows a
// count that no decision of this window can tell apart. Policies of one
// name may differ in max alone and share a count (Envoy's limit overrides,
// package rls): an entry holds the max the count reached, and answers only
// policies of that max or less. A refund (Request.Refund) is never
// answered here and drops its key's entry. Tracked policies
// are not cached (usage would miss the denials), nor other algorithms,
// whose waits depend on the cost and on other keys' requests. A reset
// clears the entry on this process; a reset sent to another replica
// sharing the store is seen here when the window ends.
type overLimitCache struct {
	seed   maphash.Seed
	max    int
	shards [16]cacheShard
}

type cacheShard struct {
	mu sync.Mutex
	m  map[cacheKey]exhausted
}

// exhausted is a cache entry: the count reached max, until end (on the
// local monotonic clock).
type exhausted struct {
	end time.Time
	max int64
}

type cacheKey struct {
	policy, key string
}

func newOverLimitCache(max int) *overLimitCache {
	c := &overLimitCache{seed: maphash.MakeSeed(), max: max / 16}
	for i := range c.shards {
		c.shards[i].m = make(map[cacheKey]exhausted)
	}
	return c
}

func (c *overLimitCache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)&15]
}

func cacheable(p *floodgate.Policy) bool {
	return p.Algorithm == floodgate.FixedWindow && !p.Track
}

// put remembers a denial that exhausted its window.
func (c *overLimitCache) put(p *floodgate.Policy, key string, d floodgate.Decision, now time.Time) {
	if !cacheable(p) || d.Allowed || d.Remaining != 0 || d.ResetAfter <= 0 {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	if len(sh.m) >= c.max {
		for k := range sh.m { // drop one at random
			delete(sh.m, k)
			break
		}
	}
	sh.m[cacheKey{p.Name, key}] = exhausted{end: now.Add(d.ResetAfter), max: p.Max}
	sh.mu.Unlock()
}

// get answers a request from the cache when its window is still exhausted.
func (c *overLimitCache) get(p *floodgate.Policy, key string, n int64, now time.Time) (floodgate.Decision, bool) {
	if !cacheable(p) {
		return floodgate.Decision{}, false
	}
	sh := c.shard(key)
	k := cacheKey{p.Name, key}
	sh.mu.Lock()
	x, ok := sh.m[k]
	if ok && !now.Before(x.end) {
		delete(sh.m, k)
		ok = false
	}
	sh.mu.Unlock()
	end := x.end
	if !ok || n < 1 || p.Max > x.max {
		return floodgate.Decision{}, false
	}
	left := end.Sub(now).Round(time.Microsecond)
	if left <= 0 {
		return floodgate.Decision{}, false
	}
	d := floodgate.Decision{Limit: p.Max, RetryAfter: left, ResetAfter: left}
	if n > p.Max {
		d.RetryAfter = floodgate.Never
	}
	return d, true
}

func (c *overLimitCache) drop(p *floodgate.Policy, key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, cacheKey{p.Name, key})
	sh.mu.Unlock()
}

func (c *overLimitCache) clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
}
