package redisstore

import (
	"strconv"
	"testing"
)

// TestExpiriesBounded: the memory of TTLs set holds at most
// expiryShards × expiryShardSize counters however many are added to, and
// what it forgets is due again (sent its TTL), never the other way round.
func TestExpiriesBounded(t *testing.T) {
	e := newExpiries()
	const n = 10 * expiryShards * expiryShardSize
	for i := range n {
		e.set("fg:p:{k"+strconv.Itoa(i)+"}:c1", 5)
	}
	held := 0
	for i := range e.shards {
		if l := len(e.shards[i].set); l > expiryShardSize {
			t.Errorf("shard %d holds %d keys, want at most %d", i, l, expiryShardSize)
		}
		held += len(e.shards[i].set)
	}
	if held == 0 {
		t.Fatal("the memory holds nothing")
	}
	due := 0
	for i := range n {
		if e.due("fg:p:{k"+strconv.Itoa(i)+"}:c1", 5) {
			due++
		}
	}
	if due != n-held {
		t.Errorf("%d of %d keys due, want the %d the memory forgot", due, n, n-held)
	}
	var none *expiries
	none.set("k", 1)
	none.forget("k")
	if !none.due("k", 1) {
		t.Error("a nil memory took a TTL for set")
	}
}
