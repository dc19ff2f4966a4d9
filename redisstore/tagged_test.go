package redisstore_test

import (
	"context"
	"regexp"
	"sync"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/redisstore"
)

// taggedStore replays the project's vectors on a Redis Cluster, where a
// group over different keys must share a slot (SPEC.md, "Keys in Redis"):
// the policies of the vectors (named v<i>m<j> by
// floodgatetest.ReplayProjectVectors) get hash_tag, and their keys one
// leading tag, so that their groups share a slot and the hash_tag layout
// is replayed too. Every other request, and every other method, is the
// Store's own.
type taggedStore struct {
	*redisstore.Store
	policies sync.Map // *floodgate.Policy -> *floodgate.Policy with HashTag
}

var vectorPolicy = regexp.MustCompile(`^v[0-9]+m[0-9]+$`)

func (s *taggedStore) tag(p *floodgate.Policy, key string) (*floodgate.Policy, string) {
	if p == nil || !vectorPolicy.MatchString(p.Name) {
		return p, key
	}
	q, ok := s.policies.Load(p)
	if !ok {
		c := *p
		c.HashTag = true
		q, _ = s.policies.LoadOrStore(p, &c)
	}
	return q.(*floodgate.Policy), "{vectors}" + key
}

func (s *taggedStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	req.Policy, req.Key = s.tag(req.Policy, req.Key)
	if req.Group != nil {
		g := make([]floodgate.Request, len(req.Group))
		for i, m := range req.Group {
			m.Policy, m.Key = s.tag(m.Policy, m.Key)
			g[i] = m
		}
		req.Group = g
	}
	return s.Store.Take(ctx, req)
}

func (s *taggedStore) Reset(ctx context.Context, p *floodgate.Policy, key string) error {
	p, key = s.tag(p, key)
	return s.Store.Reset(ctx, p, key)
}
