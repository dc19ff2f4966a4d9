package bench

import (
	"math"
	"slices"
	"sync"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/algo"
	"github.com/floodgatehq/floodgate/storekit"
)

// Accuracy compares what the target admitted with what SPEC.md allows
// (see the package documentation). Costs are in the units of the
// requests' cost.
type Accuracy struct {
	// Ratio is Admitted / Ideal: 1 for an exact limiter, above 1 when it
	// admitted more than SPEC.md allows, below when less. It is nil when
	// Ideal is 0 and something was admitted.
	Ratio *float64 `json:"ratio"`

	// Admitted is the cost the target admitted.
	Admitted int64 `json:"admitted"`

	// Ideal is the cost an exact limiter admits for the same requests:
	// Admitted − OverAdmitted + UnderAdmitted.
	Ideal int64 `json:"ideal"`

	// Bound is the most an exact limiter could admit to the keys used,
	// given when each was first sent to and last answered, whatever the
	// demand: the sum of Bound over keys.
	Bound int64 `json:"bound"`

	// Keys is how many keys received requests that were answered.
	Keys int `json:"keys"`

	// OverAdmitted is the cost of the admissions that no timing and no
	// order of the requests can reconcile with SPEC.md, on OverKeys keys.
	// Anything above 0 is over-admission.
	OverAdmitted int64 `json:"over_admitted"`
	OverKeys     int   `json:"over_keys"`

	// UnderAdmitted is the cost of the denials SPEC.md forbids (an exact
	// limiter would have admitted them), on UnderKeys keys.
	UnderAdmitted int64 `json:"under_admitted"`
	UnderKeys     int   `json:"under_keys"`

	// BeyondBound is the cost admitted above Bound, summed over keys: the
	// plainest over-admission, beyond what any demand could get.
	BeyondBound int64 `json:"beyond_bound"`
}

// Over reports whether the target certainly admitted more than SPEC.md
// allows: more than Bound on some key, which no timing and no order of its
// requests can explain. OverAdmitted alone is the twins' finding, exact
// for keys with one request in flight at a time and an estimate otherwise
// (see the package documentation), so it does not make Over true.
func (a *Accuracy) Over() bool { return a.BeyondBound > 0 }

// slackUS widens every request's span by this many µs on each side: the
// limiter's clock and the bench's are the same clock, but each truncates
// to the µs from its own starting point.
const slackUS = 2

// ledger replays, per key, the target's answers through the policy's exact
// twin (internal/algo's step functions, which every store is checked
// against), to find the answers SPEC.md cannot explain. It knows of each
// request only that the limiter decided it somewhere between its send and
// its answer, and that requests in flight together on a key were decided
// in some order; it gives the limiter the benefit of that doubt.
//
// Two twins replay every answer as the limiter gave it. The early twin
// replays each at the earliest moment of its span at which the policy
// agrees with it: its state is never fuller than the limiter's was, so an
// admission it cannot agree with at any moment of the span is
// over-admission. The late twin replays each as late as the other
// requests' spans allow: its state is never emptier than the limiter's, so
// a denial it cannot agree with is under-admission. Among requests that
// overlap, each twin replays first the one it agrees with at the earliest
// moment (see drain).
type ledger struct {
	policy *floodgate.Policy
	force  *floodgate.Policy // the policy with count_denied: records any add
	cost   int64
	keys   []keyLedger
}

type keyLedger struct {
	mu          sync.Mutex
	used        bool
	inflight    []int64 // send µs of the requests in flight
	early, late twin
	admitted    int64 // cost
	first       int64 // µs: the first send
	last        int64 // µs: the last answer
}

// twin is one replay of a key's answers.
type twin struct {
	late    bool // replay as late as possible, and judge denials
	st      algo.State
	tlast   int64    // µs of the last replayed step
	pending []answer // answered, not replayed yet
	events  int64    // cost of the answers it cannot agree with
}

// answer is a request answered but not replayed yet: sent at s, answered at
// r (µs, widened by slackUS).
type answer struct {
	s, r    int64
	allowed bool
}

func newLedger(p *floodgate.Policy, cost int64, keys int) *ledger {
	force := *p
	force.CountDenied = new(true)
	l := &ledger{policy: p, force: &force, cost: cost, keys: make([]keyLedger, keys)}
	for i := range l.keys {
		l.keys[i].late.late = true
	}
	return l
}

// begin records that a request to key k is sent at µs s.
func (l *ledger) begin(k int, s int64) {
	kl := &l.keys[k]
	kl.mu.Lock()
	kl.inflight = append(kl.inflight, s)
	kl.mu.Unlock()
}

// end records the answer to the request to key k sent at µs s, answered at
// µs r; ok is false when the request failed (its outcome is unknown: it is
// left out).
func (l *ledger) end(k int, s, r int64, allowed, ok bool) {
	kl := &l.keys[k]
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if i := slices.Index(kl.inflight, s); i >= 0 {
		kl.inflight[i] = kl.inflight[len(kl.inflight)-1]
		kl.inflight = kl.inflight[:len(kl.inflight)-1]
	}
	if ok {
		if !kl.used {
			kl.used, kl.first, kl.last = true, s, r
		}
		kl.first, kl.last = min(kl.first, s), max(kl.last, r)
		if allowed {
			kl.admitted += l.cost
		}
		a := answer{s: max(s-slackUS, 0), r: r + slackUS, allowed: allowed}
		kl.early.pending = append(kl.early.pending, a)
		kl.late.pending = append(kl.late.pending, a)
	}
	l.drain(&kl.early, kl.inflight, false)
	l.drain(&kl.late, kl.inflight, false)
}

// drain replays the pending answers of tw that can be replayed: those that
// could have been decided before the earliest-answered pending one, once
// no request still in flight could have been decided before it either.
//
// Among them it replays one it agrees with. The early twin takes the one
// answered first (earliest deadline first, which never spends the
// policy's room on a request that could have waited), at the earliest
// moment it agrees with it. The late twin takes the one it agrees with at
// the earliest moment (an admission first at the same moment), and
// replays it as late as the other requests' spans allow. When it agrees
// with none, it takes the earliest-answered one and counts it if it is
// the kind of answer it judges: the early twin judges admissions, the
// late twin denials. The early twin then records nothing (it stays as
// SPEC.md had it: each later admission is judged against what the policy
// allows, not against the limiter's excess); the late twin records the
// answer as an admission (so an under-admission counts what an exact
// limiter would have admitted, no more). A denial the twin agrees with is
// recorded only when the policy counts denials.
//
// The late twin keeps the last pending answer of a key with nothing in
// flight until the key's next request is sent (or final is set): how late
// that answer may go depends on when the next one starts, and replaying it
// at its answer's µs plus the slack could put it past the next request's
// decision (say, into the next fixed window) and make a denial there look
// like under-admission.
func (l *ledger) drain(tw *twin, inflight []int64, final bool) {
	for len(tw.pending) > 0 {
		if tw.late && !final && len(tw.pending) == 1 && len(inflight) == 0 {
			return // the key's next request bounds how late this one may go
		}
		rmin, first := int64(math.MaxInt64), 0
		for i, a := range tw.pending {
			if a.r < rmin {
				rmin, first = a.r, i
			}
		}
		for _, s := range inflight {
			if s-slackUS <= rmin {
				return // that one may have been decided first: wait for it
			}
		}
		best, bestAt := -1, int64(0)
		for i, a := range tw.pending {
			if a.s > rmin {
				continue // decided after the earliest-answered one
			}
			at, ok := l.agree(tw, a)
			if !ok {
				continue
			}
			if best < 0 {
				best, bestAt = i, at
				continue
			}
			b := tw.pending[best]
			var better bool
			if tw.late {
				better = at < bestAt || at == bestAt && a.allowed && !b.allowed
			} else {
				better = a.r < b.r || a.r == b.r && at < bestAt
			}
			if better {
				best, bestAt = i, at
			}
		}
		record, disagreed := true, false
		if best < 0 {
			best, bestAt = first, max(tw.pending[first].s, tw.tlast)
			a := tw.pending[first]
			if a.allowed != tw.late {
				tw.events += l.cost
			}
			record, disagreed = tw.late, true
		}
		a := tw.pending[best]
		tw.pending[best] = tw.pending[len(tw.pending)-1]
		tw.pending = tw.pending[:len(tw.pending)-1]
		at := bestAt
		if tw.late {
			// As late as the span allows, but not past the start of any
			// other request's span: each must still be judged within its
			// own.
			next := a.r
			for _, o := range tw.pending {
				next = min(next, o.s)
			}
			for _, s := range inflight {
				next = min(next, s-slackUS)
			}
			at = max(at, next)
		}
		if record && (a.allowed || storekit.CountsDenied(l.policy) || disagreed) {
			var d floodgate.Decision
			algo.Step(l.force, &tw.st, at, l.cost, false, &d)
			tw.tlast = max(tw.tlast, at)
		}
	}
}

// agree returns the earliest µs in a's span (and not before tw's last
// step) at which the policy answers as the limiter did. Admission only
// gets easier as time passes, so a denial is possible only at the start,
// and an admission from some moment to the end of the span.
func (l *ledger) agree(tw *twin, a answer) (int64, bool) {
	lo, hi := max(a.s, tw.tlast), a.r
	if lo > hi {
		return 0, false
	}
	if !a.allowed {
		return lo, !l.allows(tw, lo)
	}
	if l.allows(tw, lo) {
		return lo, true
	}
	if !l.allows(tw, hi) {
		return 0, false
	}
	for hi-lo > 1 { // allowed at hi, not at lo
		mid := lo + (hi-lo)/2
		if l.allows(tw, mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

// allows reports whether tw's policy admits the cost at µs t, recording
// nothing.
func (l *ledger) allows(tw *twin, t int64) bool {
	var d floodgate.Decision
	algo.Step(l.policy, &tw.st, t, l.cost, true, &d)
	return d.Allowed
}

// accuracy sums the keys. Every request must have ended.
func (l *ledger) accuracy() *Accuracy {
	a := &Accuracy{}
	for i := range l.keys {
		kl := &l.keys[i]
		kl.mu.Lock()
		l.drain(&kl.early, kl.inflight, true)
		l.drain(&kl.late, kl.inflight, true)
		used, over, under := kl.used, kl.early.events, kl.late.events
		kl.mu.Unlock()
		if !used {
			continue
		}
		a.Keys++
		bound := algo.Bound(l.policy, l.cost, kl.first, kl.last)
		// No exact limiter admits more than the bound: an under-admission
		// that would lift the ideal above it is the twins' misjudgement.
		under = max(0, min(under, bound-(kl.admitted-over)))
		a.Admitted += kl.admitted
		a.Ideal += kl.admitted - over + under
		a.Bound = min(a.Bound, math.MaxInt64-bound) + bound // saturating
		if over > 0 {
			a.OverAdmitted += over
			a.OverKeys++
		}
		if under > 0 {
			a.UnderAdmitted += under
			a.UnderKeys++
		}
		if beyond := kl.admitted - bound; beyond > 0 {
			a.BeyondBound += beyond
		}
	}
	switch {
	case a.Ideal > 0:
		r := float64(a.Admitted) / float64(a.Ideal)
		a.Ratio = &r
	case a.Admitted == 0:
		r := 1.0
		a.Ratio = &r
	}
	return a
}
