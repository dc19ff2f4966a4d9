package memstore

import (
	"fmt"
	"slices"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/algo"
	"github.com/floodgatehq/floodgate/storekit"
)

// Budgets reports true: the store decides groups, partial grants,
// reservations, settles, refunds and calendar windows
// (storekit.BudgetStore).
func (s *Store) Budgets() bool { return true }

// member is one member of a budget request as takeBudget holds it.
type member struct {
	p      *floodgate.Policy // the request's
	pr     *prepared         // p as the store prepared it
	key    string
	h      uint64
	sh     *shard
	e      *entry       // nil until found or made
	fresh  bool         // e was made for this request
	live   bool         // e held anything before the operation (usage tracking)
	bounds *algo.Bounds // a calendar window's, else nil
}

// takeBudget decides a request with a group, a budget operation or a
// calendar window: it locks the shards of every member in increasing
// order (each once), finds or makes every member's entry, and calls the
// twin's group operation once, so the request is one atomic step over all
// members (SPEC.md, "Atomic groups").
func (s *Store) takeBudget(req *floodgate.Request) (floodgate.Decision, error) {
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	if err := storekit.CheckRequest(req, s.maxKeyLen); err != nil {
		return floodgate.Decision{}, err
	}
	// Room for small groups on the stack; larger ones allocate.
	var buf [4]member
	ms := buf[:]
	if n := len(req.Group) + 1; n <= len(buf) {
		ms = buf[:n]
	} else {
		ms = make([]member, n)
	}
	for i := range ms {
		p, key := req.Policy, req.Key
		if i > 0 {
			p, key = req.Group[i-1].Policy, req.Group[i-1].Key
		}
		h := s.hash(key)
		ms[i] = member{p: p, key: key, h: h, sh: s.shardOf(h)}
	}

	// Lock every member's shard once, in increasing index order. A
	// member whose entry was last decided under the request's own policy
	// value takes the entry's prepared policy; the others are prepared
	// (validated, the first time) with the locks released, then the
	// entries are looked up again.
	var order [storekit.MaxMembers]uint64
	locks := order[:0]
	for i := range ms {
		if idx := ms[i].h & s.mask; !slices.Contains(locks, idx) {
			locks = append(locks, idx)
		}
	}
	slices.Sort(locks)
	unlock := func() {
		for _, idx := range locks {
			s.shards[idx].mu.Unlock()
		}
	}
	for {
		for _, idx := range locks {
			s.shards[idx].mu.Lock()
		}
		missing := false
		for i := range ms {
			m := &ms[i]
			m.e = m.sh.find(m.h, m.p.Name, m.key)
			if m.pr == nil && m.e != nil && m.e.policy.Source == m.p {
				m.pr = m.e.policy
			}
			missing = missing || m.pr == nil
		}
		if !missing {
			break
		}
		unlock()
		for i := range ms {
			if m := &ms[i]; m.pr == nil {
				pr, err := s.policies.Get(m.p)
				if err != nil {
					return floodgate.Decision{}, err
				}
				m.pr = pr
			}
		}
	}
	defer unlock()
	now := s.now()
	if now < 0 || now > algo.MaxNow {
		return floodgate.Decision{}, errClock(now)
	}
	for i := range ms {
		if ms[i].pr.Value {
			b, err := storekit.CalendarBounds(&ms[i].pr.Policy, now)
			if err != nil {
				return floodgate.Decision{}, err
			}
			ms[i].bounds = (*algo.Bounds)(&b)
		}
	}

	// An add that may record makes an entry for every member that has
	// none, before deciding: if a shard has no room, nothing is decided.
	records := !req.Peek && !req.Refund && req.Settle == nil
	inserted := false
	for i := range ms {
		m := &ms[i]
		if m.e != nil {
			m.e.adopt(m.pr)
			continue
		}
		m.e, m.fresh = &entry{key: m.key, policy: m.pr}, true
		if records {
			if err := s.insert(m.sh, m.h, m.e, now); err != nil {
				s.dropFresh(ms[:i])
				s.refused.Add(1)
				return floodgate.Decision{}, err
			}
			inserted = true
		}
	}
	if inserted {
		// Making room for one member may have forgotten another's empty
		// entry: then the group does not fit.
		for i := range ms {
			if m := &ms[i]; !m.sh.holds(m.h, m.e) {
				s.dropFresh(ms)
				s.refused.Add(1)
				return floodgate.Decision{}, s.errFull
			}
		}
	}

	var amBuf [4]algo.Member
	var holdsBuf [4]algo.Hold
	ams, holds := amBuf[:], holdsBuf[:]
	if len(ms) > len(amBuf) {
		ams, holds = make([]algo.Member, len(ms)), make([]algo.Hold, len(ms))
	}
	ams = ams[:len(ms)]
	for i := range ms {
		m := &ms[i]
		ams[i] = algo.Member{Policy: &m.pr.Policy, State: &m.e.st, Born: &m.e.born, Bounds: m.bounds}
		m.live = m.e.keep(now)
	}
	var o algo.Outcome
	var err error
	switch {
	case req.AtMost:
		err = algo.AddAtMost(ams, now, req.N, req.Peek, &o)
	case req.Refund:
		err = algo.Refund(ams, now, req.N, &o)
	case req.Reserve != nil:
		err = algo.Reserve(ams, now, req.N, &o, holds)
	case req.Settle != nil:
		r := req.Settle
		for i := range ms {
			w := r.Holds[storekit.HoldWords*i:]
			holds[i] = algo.Hold{Granted: r.N, At: w[0], Born: w[1], TatA: w[2], TatB: w[3]}
		}
		err = algo.Settle(ams, now, holds[:len(ms)], r.N-req.N, &o)
	default:
		err = algo.Add(ams, now, req.N, req.Peek, &o)
	}
	if err != nil {
		s.dropFresh(ms)
		return floodgate.Decision{}, fmt.Errorf("%w: memstore: %v", floodgate.ErrUnavailable, err)
	}

	if records {
		// Usage: an add, a partial grant or a reservation is one add of
		// what it asked (1 when a partial grant had none) on every
		// tracked member.
		n := req.N
		if req.AtMost {
			n = max(o.Granted, 1)
		}
		for i := range ms {
			if m := &ms[i]; m.pr.Policy.Track {
				m.e.track(&m.pr.Policy, now, n, o.Allowed, m.live)
			}
		}
	}
	for i := range ms {
		m := &ms[i]
		// A settle or refund may move an expiry back.
		m.sh.nextEmpty = min(m.sh.nextEmpty, m.e.st.Expires)
	}
	s.dropFresh(ms)

	d := o.Decision
	d.Binding = storekit.FlatBinding(req, int(o.Member), o.Binding)
	d.Granted = o.Granted
	if r := req.Reserve; r != nil {
		r.Decision, r.Key, r.N = d, req.Key, req.N
		r.Names = make([]string, len(ms))
		r.GroupKeys = make([]string, len(ms)-1)
		r.Holds = make([]int64, storekit.HoldWords*len(ms))
		for i := range ms {
			r.Names[i] = ms[i].pr.Policy.Name
			if i > 0 {
				r.GroupKeys[i-1] = ms[i].key
			}
			h := &holds[i]
			copy(r.Holds[storekit.HoldWords*i:], []int64{h.At, h.Born, h.TatA, h.TatB})
		}
	}
	return d, nil
}

// dropFresh removes the entries made for a request that hold nothing
// after it (a denied add recording nothing). The shards must be locked.
func (s *Store) dropFresh(ms []member) {
	for i := range ms {
		m := &ms[i]
		if m.fresh && !m.e.st.Live() && m.e.use == nil && m.sh.holds(m.h, m.e) {
			m.sh.remove(m.h, m.e)
		}
	}
}
