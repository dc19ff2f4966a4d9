package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/algo"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// twinStore is the plainest store of budgets: one mutex, a map of states
// that are never forgotten, every request through the twin's group
// operations. memstore is compared with it.
type twinStore struct {
	mu     sync.Mutex
	clock  storekit.Clock
	states map[string]*twinEntry
}

type twinEntry struct {
	st   algo.State
	born int64
}

func (s *twinStore) Budgets() bool { return true }
func (s *twinStore) Close() error  { return nil }

func (s *twinStore) Reset(_ context.Context, p *floodgate.Policy, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.states, p.Name+"\x00"+key)
	return nil
}

func (s *twinStore) Take(_ context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if err := storekit.CheckRequest(&req, storekit.DefaultMaxKeyLen); err != nil {
		return floodgate.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now().UnixMicro()
	n := len(req.Group) + 1
	ms := make([]algo.Member, n)
	bounds := make([]algo.Bounds, n)
	for i := range ms {
		p, key := req.Policy, req.Key
		if i > 0 {
			p, key = req.Group[i-1].Policy, req.Group[i-1].Key
		}
		if err := p.Validate(); err != nil {
			return floodgate.Decision{}, err
		}
		e := s.states[p.Name+"\x00"+key]
		if e == nil {
			e = &twinEntry{}
			s.states[p.Name+"\x00"+key] = e
		}
		ms[i] = algo.Member{Policy: p, State: &e.st, Born: &e.born}
		if p.Align == "calendar" {
			b, err := storekit.CalendarBounds(p, now)
			if err != nil {
				return floodgate.Decision{}, err
			}
			bounds[i] = b
			ms[i].Bounds = &bounds[i]
		}
	}
	var o algo.Outcome
	var err error
	holds := make([]algo.Hold, n)
	switch {
	case req.AtMost:
		err = algo.AddAtMost(ms, now, req.N, req.Peek, &o)
	case req.Refund:
		err = algo.Refund(ms, now, req.N, &o)
	case req.Reserve != nil:
		err = algo.Reserve(ms, now, req.N, &o, holds)
	case req.Settle != nil:
		r := req.Settle
		for i := range holds {
			w := r.Holds[4*i:]
			holds[i] = algo.Hold{Granted: r.N, At: w[0], Born: w[1], TatA: w[2], TatB: w[3]}
		}
		err = algo.Settle(ms, now, holds, r.N-req.N, &o)
	default:
		err = algo.Add(ms, now, req.N, req.Peek, &o)
	}
	if err != nil {
		return floodgate.Decision{}, err
	}
	d := o.Decision
	d.Binding = storekit.FlatBinding(&req, int(o.Member), o.Binding)
	d.Granted = o.Granted
	if r := req.Reserve; r != nil {
		r.Decision, r.Key, r.N = d, req.Key, req.N
		r.Names, r.GroupKeys, r.Holds = nil, []string{}, nil
		for i := range ms {
			r.Names = append(r.Names, ms[i].Policy.Name)
			if i > 0 {
				r.GroupKeys = append(r.GroupKeys, req.Group[i-1].Key)
			}
			r.Holds = append(r.Holds, holds[i].At, holds[i].Born, holds[i].TatA, holds[i].TatB)
		}
	}
	return d, nil
}

// TestDifferentialBudgets compares memstore with the twin store on random
// groups and budget operations (floodgatetest.DifferentialBudgets), with
// one shard and with many, and a store small enough to make room.
func TestDifferentialBudgets(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	runs := 300
	if testing.Short() {
		runs = 50
	}
	total := 0
	for i := 0; i < runs; i++ {
		clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
		opts := []memstore.Option{memstore.WithClock(clock), memstore.WithSweepInterval(time.Hour)}
		if i%2 == 1 {
			opts = append(opts, memstore.WithShards(1))
		}
		mem := newStore(t, opts...)
		twin := &twinStore{clock: clock, states: map[string]*twinEntry{}}
		total += floodgatetest.Differential(t, floodgatetest.RandChooser{R: rng}, mem, twin, clock, fmt.Sprintf("diff%d", i), 200)
	}
	t.Logf("%d runs, %d operations: memstore and the twin agree", runs, total)
}
