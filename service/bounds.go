package service

import (
	"context"
	"sync"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// bounds is a state's bound on store calls, one per store node: each node
// the store routes keys to (storekit.Router: a Redis Cluster's masters;
// the one node "" of any other store) has a batcher (batching) or a gate
// (not) of its own, made the first time a decision goes there. A node that
// stalls fills its own bound only: decisions for the other nodes neither
// wait behind its calls nor are refused for them. The nodes of a state are
// the masters it has seen, a set as small as the Cluster.
type bounds struct {
	newBound func(node string) *nodeBound
	m        sync.Map // node -> *nodeBound
}

// nodeBound is one node's bound: exactly one of batch and gate is set.
type nodeBound struct {
	batch *batcher
	gate  *gate
}

// of returns node's bound, making it on first use.
func (b *bounds) of(node string) *nodeBound {
	if nb, ok := b.m.Load(node); ok {
		return nb.(*nodeBound)
	}
	nb, _ := b.m.LoadOrStore(node, b.newBound(node))
	return nb.(*nodeBound)
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
