package redisstore

import (
	"hash/maphash"
	"sync"
)

// expiries remembers, per counter, when this store last set its TTL, so
// that an add sends PEXPIRE with its INCRBY at most once a second per
// counter instead of every time (SPEC.md, "Counters"): on a hot key that
// is most of what Redis spends on an add. Forgetting is always safe: a
// counter forgotten is sent its TTL again. So the memory is bounded by
// emptying a shard that is full, which costs one PEXPIRE per counter added
// to after it; it holds at most expiryShards × expiryShardSize keys.
//
// A nil *expiries remembers nothing: every add sends its PEXPIRE. The
// methods are safe for concurrent use.
type expiries struct {
	seed   maphash.Seed
	shards [expiryShards]expiryShard
}

type expiryShard struct {
	mu  sync.Mutex
	set map[string]int64 // counter key → when its TTL was set, µs of the caller's clock
}

const (
	expiryShards    = 16
	expiryShardSize = 4096
	// expiryFresh is how long (µs) a TTL the store set counts as set:
	// a TTL a failover lost (the PEXPIRE not yet on the replica that
	// took over) is set again at most this long after the next add.
	expiryFresh = 1_000_000
)

func newExpiries() *expiries {
	return &expiries{seed: maphash.MakeSeed()}
}

func (e *expiries) shard(key string) *expiryShard {
	return &e.shards[maphash.String(e.seed, key)%expiryShards]
}

// due reports whether an add at now (µs) to the counter key sends its TTL:
// the store has not set it within expiryFresh before now (or now is
// earlier than when it did: a clock stepped back).
func (e *expiries) due(key string, now int64) bool {
	if e == nil {
		return true
	}
	sh := e.shard(key)
	sh.mu.Lock()
	at, ok := sh.set[key]
	sh.mu.Unlock()
	return !ok || now < at || now-at >= expiryFresh
}

// set records that the store set key's TTL at now (µs).
func (e *expiries) set(key string, now int64) {
	if e == nil {
		return
	}
	sh := e.shard(key)
	sh.mu.Lock()
	if sh.set == nil || len(sh.set) >= expiryShardSize {
		if _, ok := sh.set[key]; !ok {
			sh.set = make(map[string]int64, 64)
		}
	}
	sh.set[key] = now
	sh.mu.Unlock()
}

// forget drops keys (counters the store deleted), so that the next add to
// them sends its TTL with its INCRBY.
func (e *expiries) forget(keys ...string) {
	if e == nil {
		return
	}
	for _, k := range keys {
		sh := e.shard(k)
		sh.mu.Lock()
		delete(sh.set, k)
		sh.mu.Unlock()
	}
}
