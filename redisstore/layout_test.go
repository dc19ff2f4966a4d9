package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// layoutPolicies: one tracked policy per algorithm, so that every kind of
// key a decision can write is written. Their states expire within
// seconds, as a workload's do; longLived are the same shapes living for
// hours, for a test that counts keys and must not see one expire.
func layoutPolicies(t *testing.T) []floodgate.Policy {
	return parsePolicies(t, []string{
		"sliding_window 3/2s resolution 500ms, 5/10s resolution 1s track",
		"ar1 3/1s decay 2 track",
		"fixed_window 3/2s track",
		"token_bucket 4/2s burst 2 track",
		"sliding_log 3/2s min_interval 10ms track",
		"gcra 4/1s burst 2 track retention 5s",
	})
}

func longLived(t *testing.T) []floodgate.Policy {
	return parsePolicies(t, []string{
		"sliding_window 3/2h resolution 30m, 5/10h resolution 1h track",
		"ar1 3/1h decay 2 track",
		"fixed_window 3/2h align first track", // aligned to the clock, a window ends every 2 h
		"token_bucket 4/2h burst 2 track",
		"sliding_log 3/2h min_interval 10ms track",
		"gcra 4/1h burst 2 track retention 5h",
	})
}

func parsePolicies(t *testing.T, texts []string) []floodgate.Policy {
	var ps []floodgate.Policy
	for i, text := range texts {
		p, err := floodgate.ParsePolicy(fmt.Sprintf("lay%d", i), text)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// nastyKeys are keys that a hash tag could trip on: braces anywhere, tag-like
// keys, control and multi-byte characters, the longest key allowed. (Keys
// are valid UTF-8: stores refuse others: floodgatetest.Run, "InvalidRequests".)
func nastyKeys(rng *rand.Rand) []string {
	keys := []string{"{", "}", "{}", "}{", "{{}}", "a{b}c", "{a}", "a}", "{a", "x}:u", ":", "::{}::",
		"\x00", "\u00ff\u00fe\x00{", "ü}", "\U0001F600{}", strings.Repeat("{", 50), strings.Repeat("k", storekit.DefaultMaxKeyLen)}
	for i := 0; i < 40; i++ {
		var b strings.Builder
		for j := 1 + rng.IntN(40); j > 0; j-- {
			if rng.IntN(4) == 0 {
				b.WriteByte("{}:"[rng.IntN(3)])
			} else {
				b.WriteRune(rune(rng.IntN(0xD800)))
			}
		}
		if k := b.String(); !slices.Contains(keys, k) { // "{" or "}" again, say
			keys = append(keys, k)
		}
	}
	return keys
}

// parts are the key parts each algorithm writes besides the usage hash "u".
var parts = map[floodgate.Algorithm][]string{
	floodgate.SlidingWindow: {"sw", "sw1", "sw2"},
	floodgate.AR1:           {"ar"},
	floodgate.FixedWindow:   {"fw"},
	floodgate.TokenBucket:   {"tb"},
	floodgate.SlidingLog:    {"sl", "sl1"},
	floodgate.GCRA:          {"gc"},
}

// TestKeyLayout: every key one decision writes lies in one cluster slot,
// whatever bytes the key holds, and the store writes no other key.
func TestKeyLayout(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, clusterClient(t, cl))
	rng := rand.New(rand.NewPCG(7, 7))
	ctx := context.Background()
	node := cl.Nodes[0]
	want := 0
	for _, p := range longLived(t) {
		for _, key := range nastyKeys(rng) {
			d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: key, N: 1})
			if err != nil || !d.Allowed {
				t.Fatalf("%s key %q: %v, %v", p.Name, key, d, err)
			}
			// The key's braces (and %) are escaped inside the tag, so the
			// whole key, and only the key, chooses the slot.
			escaped := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(key)
			tag := "fg:" + p.Name + ":{" + escaped + "}:"
			whole, err := node.Do(t, "CLUSTER", "KEYSLOT", escaped)
			if err != nil {
				t.Fatal(err)
			}
			slot := whole.(int64)
			for _, part := range append([]string{"u"}, parts[p.Algorithm]...) {
				reply, err := node.Do(t, "CLUSTER", "KEYSLOT", tag+part)
				if err != nil {
					t.Fatal(err)
				}
				if reply.(int64) != slot {
					t.Fatalf("%s key %q: %s is in slot %d; the whole key hashes to %d", p.Name, key, part, reply, slot)
				}
				want++
			}
		}
	}
	if got := dbsize(t, cl.Nodes...)(); got != want {
		t.Errorf("the cluster holds %d keys; the decisions' own keys are %d", got, want)
	}
}

// TestKeysCannotSteer: keys containing "}" (which would end an unescaped
// hash tag early, putting them all in one slot) spread over the masters
// like plain keys, and keys that differ only in escaped bytes keep
// separate counters.
func TestKeysCannotSteer(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, clusterClient(t, cl))
	ctx := context.Background()
	p := floodgate.Policy{Name: "steer", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour}
	const n = 3000
	spread := func(format string) []int {
		t.Helper()
		before := make([]int, len(cl.Nodes))
		for i, node := range cl.Nodes {
			before[i] = dbsize(t, node)()
		}
		for i := range n {
			if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: fmt.Sprintf(format, i), N: 1}); err != nil {
				t.Fatal(err)
			}
		}
		out := make([]int, len(cl.Nodes))
		for i, node := range cl.Nodes {
			out[i] = dbsize(t, node)() - before[i]
		}
		return out
	}
	plain, braced := spread("user%d"), spread("x}user%d")
	t.Logf("keys per master: plain %v, with \"}\" %v", plain, braced)
	for i := range cl.Nodes {
		// A third each, within a generous margin (3,000 keys: the
		// standard deviation of a master's share is about 26).
		if braced[i] < n/3-200 || braced[i] > n/3+200 {
			t.Errorf("master %d holds %d of %d keys containing \"}\" (plain keys: %v): the key steers the slot", i, braced[i], n, plain)
		}
	}
	for _, pair := range [][2]string{{"a}b", "a%7Db"}, {"a{b", "a%7Bb"}, {"a%b", "a%25b"}} {
		for _, key := range pair {
			if d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: key, N: 1}); err != nil || !d.Allowed {
				t.Errorf("key %q, first request: %+v, %v: it shares a counter with another key", key, d, err)
			}
		}
	}
}

// TestNode: the store names the master that owns a key's slot; without a
// cluster, none.
func TestNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, clusterClient(t, cl))
	ctx := context.Background()
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	p := floodgate.Policy{Name: "node", Algorithm: floodgate.GCRA, Max: 10, Window: time.Second, Burst: 1}
	seen := map[string]bool{}
	for i := range 60 {
		key := fmt.Sprintf("k}%d", i)
		node := s.Node(ctx, &p, key)
		escaped := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(key)
		reply, err := cl.Nodes[0].Do(t, "CLUSTER", "KEYSLOT", escaped)
		if err != nil {
			t.Fatal(err)
		}
		slot := int(reply.(int64))
		owner := 0 // StartCluster gives master i the slots from i*16384/masters
		for i := range cl.Nodes {
			if slot >= i*16384/len(cl.Nodes) {
				owner = i
			}
		}
		want := cl.Addrs[owner]
		if node != want {
			t.Errorf("key %q (slot %d): Node %q, want %q", key, slot, node, want)
		}
		seen[node] = true
	}
	if len(seen) != 3 {
		t.Errorf("60 keys named %d masters", len(seen))
	}
	// With hash_tag, a key's leading {tag} alone chooses the slot: Node
	// names the master of the decision's keys.
	tagged := floodgate.Policy{Name: "tagged", Algorithm: floodgate.SlidingWindow, HashTag: true,
		Limits: []floodgate.Limit{{Max: 10, Window: time.Minute, Resolution: time.Second}}, Track: true}
	for i := range 20 {
		key := fmt.Sprintf("{t%d}rest", i)
		slot := redisstore.KeySlot(redisstore.DecisionKeys(s, &tagged, key)[0])
		if got, want := s.Node(ctx, &tagged, key), cl.Addrs[firstOwner(cl, slot)]; got != want {
			t.Errorf("hash_tag key %q (slot %d): Node %q, want %q", key, slot, got, want)
		}
	}
	standalone := newStore(t, client(t, redistest.StartServer(t)))
	if got := standalone.Node(ctx, &p, "k"); got != "" {
		t.Errorf("standalone Node = %q, want \"\"", got)
	}
}

// TestEveryKeyHasATTL: after a mixed workload (every algorithm, adds,
// denials, peeks, resets, usage tracking), no key is left without a TTL,
// and no state key outlives its state's horizon.
func TestEveryKeyHasATTL(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(8, 8))
	type last struct {
		at    time.Time
		reset time.Duration
	}
	horizon := map[string]last{} // state key tag -> the last recording add
	policies := layoutPolicies(t)
	for i := 0; i < 3000; i++ {
		p := &policies[rng.IntN(len(policies))]
		key := fmt.Sprintf("k%d", rng.IntN(30))
		if rng.IntN(20) == 0 {
			if err := s.Reset(ctx, p, key); err != nil {
				t.Fatal(err)
			}
			delete(horizon, p.Name+":"+key)
			continue
		}
		req := floodgate.Request{Policy: p, Key: key, N: 1 + rng.Int64N(3), Peek: rng.IntN(5) == 0}
		d, err := s.Take(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !req.Peek && (d.Allowed || storekit.CountsDenied(p)) {
			horizon[p.Name+":"+key] = last{time.Now(), d.ResetAfter}
		}
		if rng.IntN(200) == 0 {
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		}
	}
	keys, err := srv.Do(t, "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.([]any)) == 0 {
		t.Fatal("the workload left no key at all")
	}
	for _, k := range keys.([]any) {
		name := k.(string)
		asked := time.Now() // before Redis reads the TTL: a stall after it must not count
		pttl, err := srv.Do(t, "PTTL", name)
		if err != nil {
			t.Fatal(err)
		}
		ms := pttl.(int64)
		if ms == -2 {
			continue // expired since KEYS listed it
		}
		if ms == -1 {
			t.Errorf("key %q has no TTL", name)
			continue
		}
		if strings.HasSuffix(name, "}:u") {
			continue // usage: the state's horizon or the retention, whichever is longer
		}
		pol, key, _ := strings.Cut(strings.TrimPrefix(name[:strings.LastIndex(name, "}:")], "fg:"), ":{")
		tag := pol + ":" + key
		l, ok := horizon[tag]
		if !ok {
			t.Errorf("state key %q exists, but no add recorded it", name)
			continue
		}
		// The TTL was set to the state's reset_after, rounded up to the ms.
		limit := (l.reset+time.Millisecond-1)/time.Millisecond - asked.Sub(l.at)/time.Millisecond + 1
		if time.Duration(ms) > limit {
			t.Errorf("key %q: PTTL %d ms, beyond its state's horizon (%v at its last add)", name, ms, l.reset)
		}
	}
}

// TestMaxKeyLen: keys up to the maximum work, longer ones are refused with
// an error that does not contain them.
func TestMaxKeyLen(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv), redisstore.WithMaxKeyLen(64))
	p := floodgate.Policy{Name: "len", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Second}
	ctx := context.Background()
	if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: strings.Repeat("a", 64), N: 1}); err != nil {
		t.Errorf("a key of 64 bytes: %v", err)
	}
	_, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: strings.Repeat("b", 65), N: 1})
	if err == nil || !strings.Contains(err.Error(), "65 bytes exceeds the maximum of 64") || strings.Contains(err.Error(), "bbbb") {
		t.Errorf("a key of 65 bytes: %v", err)
	}
}

// TestStateEncoding: each one-string algorithm keeps one encoding, fixed
// fields of one size whatever the state (common.lua and each algorithm's
// file describe it), stored as an embstr: one allocation of the object
// header and the bytes (Redis keeps strings of up to 44 bytes that way),
// 48 bytes for gcra and fixed_window, 64 for token_bucket. Each state
// holds its born (SPEC.md, "State birth"). That the states decide as memstore's
// do is the differential tests' to check; this test pins the bytes.
func TestStateEncoding(t *testing.T) {
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros + 123_456))
			s := newStore(t, client(t, srv), append(path.opts, redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour))...)
			ctx := context.Background()
			for _, tc := range []struct {
				policy string
				part   string
				length int64
				steps  []int64 // clock steps before each add of 1, µs
			}{
				{"gcra 10/1h burst 1000000", "gc", 35, []int64{0, 5, 800_000_000}},
				{"gcra 3/1s burst 5", "gc", 35, []int64{0, 1, 1}}, // T is not whole µs
				{"fixed_window 1000000000/1h align first", "fw", 32, []int64{0, 7, 3_600_000_000}},
				{"fixed_window 1000000000/1h", "fw", 32, []int64{0, 7}},
				{"token_bucket 100/1h burst 10", "tb", 42, []int64{0, 7, 3_600_000_000}},
				{"ar1 10/1s decay 2", "ar", 40, []int64{0, 7, 3_000_000}},
				{"ar1 10/1s decay 2, 100/1m decay 1.5", "ar", 64, []int64{0, 7}},
			} {
				p, err := floodgate.ParsePolicy("c", tc.policy)
				if err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("k%d", len(tc.policy))
				redisKey := "fg:c:{" + key + "}:" + tc.part
				for i, dus := range tc.steps {
					clock.Advance(time.Duration(dus) * time.Microsecond)
					if d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: key, N: 1}); err != nil || !d.Allowed {
						t.Fatalf("%s step %d: %v, %v", tc.policy, i, d, err)
					}
					enc, err := srv.Do(t, "OBJECT", "ENCODING", redisKey)
					if err != nil {
						t.Fatal(err)
					}
					length, err := srv.Do(t, "STRLEN", redisKey)
					if err != nil {
						t.Fatal(err)
					}
					want := "embstr"
					if tc.length > 44 {
						want = "raw"
					}
					if enc != want || length != tc.length {
						t.Errorf("%s step %d: stored as %v of %v bytes, want %s of %d", tc.policy, i, enc, length, want, tc.length)
					}
				}
				if err := s.Reset(ctx, &p, key); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
