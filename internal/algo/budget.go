package algo

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// The operations of SPEC.md's "Atomic groups", "Reserve, settle, refund" and
// "Partial grants", on one (policy, key) or a group of them: a group is a
// slice of Members, a single policy a slice of one, and a group of one
// decides exactly as Step. Like Step, these functions do no I/O and take no
// locks: a store holds every member's lock around one call, which is what
// makes the call atomic.

// Member is one (policy, key) of an operation: its policy, its key's state
// and the state's birth, and for a calendar fixed_window (Window zero) the
// Bounds the caller drew around its clock. Policy must be valid and State
// written only under policies of the same shape (SameShape).
//
// Born is SPEC.md's born ("State birth"), kept by the store beside State:
// the operations here set it when an add creates the state, and Settle
// compares it with the reservation's. It lives outside State so that State
// stays the size stores are built around; a store that settles
// reservations keeps one more word per key. Born must not be nil.
type Member struct {
	Policy *floodgate.Policy
	State  *State
	Born   *int64
	Bounds *Bounds
}

// Outcome is the decision of an operation on members: the group's decision
// (Binding is the binding member's own binding limit), the binding member
// and the units granted (SPEC.md, "The decision").
type Outcome struct {
	floodgate.Decision
	Member  int32
	Granted int64
}

// Hold is one member's part of a reservation: what Settle needs to find the
// units it took. Granted is 0 for a denied reservation, which holds nothing.
type Hold struct {
	Granted int64
	At      int64 // the reserve's now after rule 1 (µs)
	Born    int64 // the state's birth after the reserve
	TatA    int64 // gcra: the tat after the reserve, TatA + TatB/count µs
	TatB    int64
}

// ErrClockSkew is returned, wrapped with the member's index, for a calendar
// member whose Bounds hold no window for the store's now: the caller's and
// the store's clocks are a period apart (SPEC.md, "Calendar windows").
var ErrClockSkew = errors.New("algo: calendar bounds do not cover the store's clock")

// checkBounds returns an error wrapping ErrClockSkew for the first calendar
// member whose bounds do not cover its now (after rule 1).
func checkBounds(ms []Member, now int64) error {
	for i := range ms {
		if b := ms[i].Bounds; b != nil {
			if _, _, ok := b.Window(effectiveNow(ms[i].State, now)); !ok {
				return fmt.Errorf("%w: member %d", ErrClockSkew, i)
			}
		}
	}
	return nil
}

// effectiveNow applies rule 1: a now before the state's t_last is t_last.
func effectiveNow(s *State, now int64) int64 {
	if s.Expires != 0 && now < s.TLast {
		return s.TLast
	}
	return now
}

// stepMember is Step for one member, calendar windows included. The
// member's bounds must cover its now (checkBounds).
func stepMember(m *Member, p *floodgate.Policy, now, n int64, peek bool, d *floodgate.Decision) {
	if m.Bounds == nil {
		Step(p, m.State, now, n, peek, d)
		return
	}
	now = effectiveNow(m.State, now)
	start, end, _ := m.Bounds.Window(now)
	calendarWindow(p, m.State, now, n, start, end, peek, d)
}

// Add decides add n (or, with peek, the decision add n would get) on the
// members as one group: allowed only if every member admits n, recording
// on every member when allowed and, when denied, only on members whose
// policies count denied requests. 1 ≤ n ≤ floodgate.MaxCost.
func Add(ms []Member, now, n int64, peek bool, o *Outcome) error {
	if err := checkBounds(ms, now); err != nil {
		return err
	}
	states := ms
	if peek {
		states = cloneMembers(ms) // decide on copies: the same code, nothing kept
	}
	// Room for small groups on the stack; larger ones allocate.
	var dsBuf [4]floodgate.Decision
	var waitsBuf [4]int64
	var verdictsBuf [4]bool
	ds, waits, verdicts := dsBuf[:], waitsBuf[:], verdictsBuf[:]
	if len(ms) > len(dsBuf) {
		ds, waits, verdicts = make([]floodgate.Decision, len(ms)), make([]int64, len(ms)), make([]bool, len(ms))
	}
	allowed := true
	for i := range states {
		var d floodgate.Decision
		stepMember(&states[i], states[i].Policy, now, n, true, &d)
		verdicts[i] = d.Allowed
		allowed = allowed && d.Allowed
	}
	for i := range states {
		m := &states[i]
		at := effectiveNow(m.State, now)
		wasLive := liveAt(m, at)
		switch {
		case allowed:
			stepMember(m, m.Policy, now, n, false, &ds[i])
		case storekit.CountsDenied(m.Policy):
			// Recorded as rule 5 says; an admitting member's own decision
			// then says allowed, but its wait is on the state after.
			stepMember(m, m.Policy, now, n, false, &ds[i])
			waits[i] = micros(ds[i].RetryAfter)
			if verdicts[i] {
				waits[i] = waitOn(m, now, n)
			}
		case !verdicts[i]:
			stepMember(m, m.Policy, now, n, false, &ds[i]) // records nothing
			waits[i] = micros(ds[i].RetryAfter)
		default:
			readMember(m, now, &ds[i]) // admits, records nothing: wait 0
		}
		if !wasLive && liveAt(m, at) {
			*m.Born = at // this add created the state
		}
	}
	combine(ds[:len(ms)], verdicts[:len(ms)], waits[:len(ms)], allowed, o)
	if allowed {
		o.Granted = n
	}
	return nil
}

// combine writes the group's decision from its members' (SPEC.md, "Atomic
// groups"): the binding member is the least remaining among those that
// deny (all when allowed), the first on ties.
func combine(ds []floodgate.Decision, verdicts []bool, waits []int64, allowed bool, o *Outcome) {
	*o = Outcome{Member: -1}
	o.Allowed = allowed
	var retry, reset int64
	for i := range ds {
		d := &ds[i]
		if i == 0 || d.Remaining < o.Remaining {
			o.Remaining = d.Remaining
		}
		if (allowed || !verdicts[i]) && (o.Member < 0 || d.Remaining < ds[o.Member].Remaining) {
			o.Member = int32(i)
		}
		reset = max(reset, micros(d.ResetAfter))
		if !allowed {
			retry = combineRetry(retry, waits[i])
		}
	}
	b := &ds[o.Member]
	o.Binding, o.Limit = b.Binding, b.Limit
	o.ResetAfter = toDuration(reset)
	o.RetryAfter = toDuration(retry)
	if retry < 0 {
		o.RetryAfter = floodgate.Never
	}
}

// micros converts a decision's duration to µs, -1 for Never.
func micros(d time.Duration) int64 {
	if d == floodgate.Never {
		return -1
	}
	return int64(d / time.Microsecond)
}

// waitOn returns the retry_after that a denied add n recording nothing
// would report on m's state: 0 when add n would pass.
func waitOn(m *Member, now, n int64) int64 {
	p := noCountDenied(m.Policy)
	var d floodgate.Decision
	stepMember(m, &p, now, n, true, &d)
	if d.Allowed {
		return 0
	}
	return micros(d.RetryAfter)
}

// readMember writes m's remaining, limit and reset_after on its state as
// it is, recording nothing: a peek of a cost no policy admits, that
// records nothing even where the policy counts denied requests.
func readMember(m *Member, now int64, d *floodgate.Decision) {
	p := noCountDenied(m.Policy)
	stepMember(m, &p, now, floodgate.MaxCost, true, d)
	d.Allowed, d.RetryAfter = true, 0
}

var no = false

// noCountDenied returns a copy of p that records no denied request.
func noCountDenied(p *floodgate.Policy) floodgate.Policy {
	q := *p
	q.CountDenied = &no
	return q
}

// cloneMembers returns ms with every state copied, buffers included.
func cloneMembers(ms []Member) []Member {
	out := make([]Member, len(ms))
	for i, m := range ms {
		s, born := m.State.clone(), *m.Born
		out[i] = Member{Policy: m.Policy, State: &s, Born: &born, Bounds: m.Bounds}
	}
	return out
}

// clone returns a deep copy of s.
func (s *State) clone() State {
	c := *s
	if s.X != nil {
		x := &Extra{AR: append([]ARCount(nil), s.X.AR...)}
		for _, l := range s.X.Logs {
			x.Logs = append(x.Logs, Log{e: append([]Entry(nil), l.e...), head: l.head, sum: l.sum, over: l.over})
		}
		c.X = x
	}
	return c
}

// AddAtMost decides add_at_most n (or peek_at_most with peek): the largest
// g ≤ n that add g would admit on every member, granted as add g; with none
// it is add 1, denied (SPEC.md, "Partial grants").
func AddAtMost(ms []Member, now, n int64, peek bool, o *Outcome) error {
	if err := checkBounds(ms, now); err != nil {
		return err
	}
	g := n
	for i := range ms {
		g = min(g, available(&ms[i], now, g))
	}
	if g == 0 {
		return Add(ms, now, 1, peek, o)
	}
	return Add(ms, now, g, peek, o)
}

// available returns the largest g in [0, limit] that add g would admit on
// m now. The closed forms of SPEC.md are all the member's remaining (but
// for sliding_log's min_interval and ar1's last ulp), so it starts there
// and lets peeks, which decide exactly as the add, settle the rest: add g
// passing is monotone in g.
func available(m *Member, now, limit int64) int64 {
	var d floodgate.Decision
	pass := func(g int64) bool {
		stepMember(m, m.Policy, now, g, true, &d)
		return d.Allowed
	}
	readMember(m, now, &d)
	g := min(limit, d.Remaining)
	switch {
	case g >= 1 && pass(g):
		for g < limit && pass(g+1) {
			g++
		}
		return g
	case g >= 2 && pass(g-1):
		return g - 1
	}
	// The largest passing g below g: pass(lo) holds (lo = 0 always
	// qualifies), pass(hi) fails.
	lo, hi := int64(0), g
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if pass(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Reserve decides reserve n: Add, and each member's Hold. A denied
// reservation's holds are zero.
func Reserve(ms []Member, now, n int64, o *Outcome, holds []Hold) error {
	if err := Add(ms, now, n, false, o); err != nil {
		return err
	}
	for i := range ms {
		holds[i] = Hold{}
		if !o.Allowed {
			continue
		}
		s := ms[i].State
		holds[i] = Hold{Granted: n, At: s.TLast, Born: *ms[i].Born, TatA: s.A, TatB: s.B}
	}
	return nil
}

// Settle gives back holds[i].Granted - used units of each member's part
// where they still count (SPEC.md, "Reserve, settle, refund"), then writes
// the decision peek 1 gets. 0 ≤ used ≤ every Granted; a denied part gives
// back nothing.
func Settle(ms []Member, now int64, holds []Hold, used int64, o *Outcome) error {
	if err := checkBounds(ms, now); err != nil {
		return err
	}
	for i := range ms {
		h := &holds[i]
		if x := h.Granted - used; h.Granted > 0 && x > 0 {
			giveBack(&ms[i], effectiveNow(ms[i].State, now), x, h)
		}
	}
	return Add(ms, now, 1, true, o)
}

// Refund gives back n units to each member's live state, newest first,
// then writes the decision peek 1 gets.
func Refund(ms []Member, now, n int64, o *Outcome) error {
	if err := checkBounds(ms, now); err != nil {
		return err
	}
	for i := range ms {
		giveBack(&ms[i], effectiveNow(ms[i].State, now), n, nil)
	}
	return Add(ms, now, 1, true, o)
}

// StepBorn is Step on a policy that is not a calendar window, keeping the
// state's born as Add does (SPEC.md, "State birth"): a recording add that
// finds no live state sets *born to its now after rule 1. It decides
// exactly as Add on one member, at Step's cost, for stores' plain adds.
func StepBorn(p *floodgate.Policy, s *State, born *int64, now, n int64, peek bool, d *floodgate.Decision) {
	if peek {
		Step(p, s, now, n, true, d)
		return
	}
	at := effectiveNow(s, now)
	m := Member{Policy: p, State: s}
	was := liveAt(&m, at)
	Step(p, s, now, n, false, d)
	if !was && liveAt(&m, at) {
		*born = at
	}
}
