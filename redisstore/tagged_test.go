package redisstore_test

import (
	"context"
	"regexp"
	"strings"
	"sync"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/redisstore"
)

// taggedStore decides groups over different keys on a Redis Cluster,
// where they must share a slot (SPEC.md, "Keys in Redis"): the policies it
// tags get hash_tag, and their keys one leading tag, so that their groups
// share a slot and the hash_tag layout is exercised too. It tags every
// policy with all, else those of the project's vectors (named v<i>m<j> by
// floodgatetest.ReplayProjectVectors). Reservations carry the caller's
// keys. Every other request, and every other method, is the Store's own.
type taggedStore struct {
	*redisstore.Store
	all      bool
	policies sync.Map // *floodgate.Policy -> *floodgate.Policy with HashTag
}

const tagPrefix = "{vectors}"

var vectorPolicy = regexp.MustCompile(`^v[0-9]+m[0-9]+$`)

func (s *taggedStore) tag(p *floodgate.Policy, key string) (*floodgate.Policy, string, bool) {
	if p == nil || !s.all && !vectorPolicy.MatchString(p.Name) {
		return p, key, false
	}
	q, ok := s.policies.Load(p)
	if !ok {
		c := *p
		c.HashTag = true
		q, _ = s.policies.LoadOrStore(p, &c)
	}
	return q.(*floodgate.Policy), tagPrefix + key, true
}

func (s *taggedStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	var tagged bool
	req.Policy, req.Key, tagged = s.tag(req.Policy, req.Key)
	if !tagged {
		return s.Store.Take(ctx, req)
	}
	if req.Group != nil {
		g := make([]floodgate.Request, len(req.Group))
		for i, m := range req.Group {
			m.Policy, m.Key, _ = s.tag(m.Policy, m.Key)
			g[i] = m
		}
		req.Group = g
	}
	if r := req.Settle; r != nil {
		keys := make([]string, len(r.GroupKeys))
		for i, k := range r.GroupKeys {
			keys[i] = tagPrefix + k
		}
		req.Settle = &floodgate.Reservation{Decision: r.Decision, Key: tagPrefix + r.Key, N: r.N, Names: r.Names, GroupKeys: keys, Holds: r.Holds}
	}
	d, err := s.Store.Take(ctx, req)
	if r := req.Reserve; r != nil && err == nil {
		r.Key = strings.TrimPrefix(r.Key, tagPrefix)
		for i, k := range r.GroupKeys {
			r.GroupKeys[i] = strings.TrimPrefix(k, tagPrefix)
		}
	}
	return d, err
}

func (s *taggedStore) Reset(ctx context.Context, p *floodgate.Policy, key string) error {
	p, key, _ = s.tag(p, key)
	return s.Store.Reset(ctx, p, key)
}
