package service

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// bounds is a state's bound on store calls, one per store node: each node
// the store routes keys to (storekit.Router: a Redis Cluster's masters;
// the one node "" of any other store) has a batcher (batching) or a gate
// (not) of its own, made the first time a decision goes there. A node that
// stalls fills its own bound only: decisions for the other nodes neither
// wait behind its calls nor are refused for them.
//
// The nodes of a state are the masters it has seen lately, a set as small
// as the Cluster: a node's bound is forgotten when no decision went to it
// for forgetAfter and none is in flight or queued there (a master that
// failed over, or whose slots moved away), so that neither the bounds nor
// the metrics of Service.Links keep it. Forgetting is checked when a new
// node shows up and when Links is read. A decision that comes back to a
// forgotten node makes its bound anew, as the first one did. A decision
// that fetched a node's bound just as a sweep forgot it (the node idle
// for a minute until then) still uses the old one, so that for that
// moment two bounds cover the node; forgetting is not worth a lock on
// every decision's way.
type bounds struct {
	newBound func(node string) *nodeBound
	now      func() time.Time // nil: time.Now
	m        sync.Map         // node -> *nodeBound
	sweepMu  sync.Mutex       // one sweep at a time
}

// forgetAfter is how long a node's bound is kept while no decision goes to
// it, about as long as the failure policy keeps its breaker.
const forgetAfter = time.Minute

// nodeBound is one node's bound: exactly one of batch and gate is set.
type nodeBound struct {
	batch *batcher
	gate  *gate

	used atomic.Bool // a decision asked for it since the last sweep
	seen time.Time   // when it was made, or a sweep last found it used (under bounds.sweepMu)
}

// of returns node's bound, making it on first use.
func (b *bounds) of(node string) *nodeBound {
	if v, ok := b.m.Load(node); ok {
		nb := v.(*nodeBound)
		if !nb.used.Load() {
			nb.used.Store(true) // once a sweep, not once a decision
		}
		return nb
	}
	now := b.clock()
	b.sweep(now) // a new node: one may have left (a Cluster failover)
	made := b.newBound(node)
	made.seen = now
	v, _ := b.m.LoadOrStore(node, made)
	nb := v.(*nodeBound)
	nb.used.Store(true)
	return nb
}

// clock reads b.now.
func (b *bounds) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

// sweep forgets, as of now, the bounds of nodes that no decision asked for
// in forgetAfter and that have nothing in flight or queued. The store's one
// node "" is never forgotten: it is the only one there is.
func (b *bounds) sweep(now time.Time) {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	b.m.Range(func(k, v any) bool {
		nb := v.(*nodeBound)
		switch {
		case nb.used.Swap(false):
			nb.seen = now
		case k != "" && now.Sub(nb.seen) >= forgetAfter && nb.idle():
			b.m.Delete(k)
		}
		return true
	})
}

// lookup returns node's bound, or nil when no decision went there yet.
func (b *bounds) lookup(node string) *nodeBound {
	if nb, ok := b.m.Load(node); ok {
		return nb.(*nodeBound)
	}
	return nil
}

// each calls f with every node's bound.
func (b *bounds) each(f func(*nodeBound)) {
	b.m.Range(func(_, v any) bool {
		f(v.(*nodeBound))
		return true
	})
}

// idle reports whether nothing is in flight or queued under the bound.
func (nb *nodeBound) idle() bool {
	if nb.batch != nil {
		return nb.batch.idle()
	}
	return nb.gate.idle()
}

// saturated reports whether requests wait behind the bound.
func (nb *nodeBound) saturated() bool {
	if nb.batch != nil {
		return nb.batch.saturated()
	}
	return nb.gate.saturated()
}

// nodeOf returns the store node req goes to ("" for a store without
// nodes), as the failure policy's breakers see it.
func (s *Service) nodeOf(ctx context.Context, req *floodgate.Request) string {
	r, ok := s.raw.(storekit.Router)
	if !ok || req.Policy == nil {
		return ""
	}
	return r.Node(ctx, req.Policy, req.Key)
}

// byNode splits reqs by the node each goes to: the bound of each node and
// the indexes of its requests, in order. Most calls have one node.
func (s *Service) byNode(ctx context.Context, st *state, reqs []floodgate.Request) ([]*nodeBound, [][]int) {
	first := s.nodeOf(ctx, &reqs[0])
	var nodes []string
	var idx [][]int
	for i := 1; i < len(reqs); i++ {
		n := s.nodeOf(ctx, &reqs[i])
		if n == first && nodes == nil {
			continue
		}
		if nodes == nil {
			nodes = []string{first}
			all := make([]int, i)
			for j := range all {
				all[j] = j
			}
			idx = [][]int{all}
		}
		k := 0
		for k < len(nodes) && nodes[k] != n {
			k++
		}
		if k == len(nodes) {
			nodes = append(nodes, n)
			idx = append(idx, nil)
		}
		idx[k] = append(idx[k], i)
	}
	if nodes == nil {
		return []*nodeBound{st.bounds.of(first)}, nil
	}
	nbs := make([]*nodeBound, len(nodes))
	for k, n := range nodes {
		nbs[k] = st.bounds.of(n)
	}
	return nbs, idx
}
