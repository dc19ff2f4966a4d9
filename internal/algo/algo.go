// Package algo holds the algorithms of SPEC.md as pure step functions on
// integer microseconds: given a key's state, the time and a cost, decide,
// and (for a recording add) update the state in place. No I/O, no clock, no
// locks: stores supply those. Each function is the Go twin of a Lua script
// of the Redis store, and the conformance vectors check both.
package algo

import (
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// Result is a decision in SPEC.md's units, as the vectors and the
// differential tests state it: durations in whole µs, -1 for a retry that
// can never succeed.
type Result struct {
	Allowed    bool
	Binding    int32 // index of the binding limit (SlidingWindow, AR1)
	Limit      int64
	Remaining  int64
	RetryAfter int64 // µs; -1: never
	ResetAfter int64 // µs
}

// Result returns d in SPEC.md's units: durations in whole µs, -1 for
// Never.
func ResultOf(d *floodgate.Decision) Result {
	r := Result{
		Allowed: d.Allowed, Binding: d.Binding, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: int64(d.RetryAfter / time.Microsecond), ResetAfter: int64(d.ResetAfter / time.Microsecond),
	}
	if d.RetryAfter == floodgate.Never {
		r.RetryAfter = -1
	}
	return r
}

// decide writes a decision: retry and reset in µs (retry -1 for never),
// remaining clamped at 0.
func decide(d *floodgate.Decision, allowed bool, binding int32, limit, remaining, retry, reset int64) {
	d.Allowed, d.Degraded, d.Binding, d.Limit, d.Remaining = allowed, false, binding, limit, max(remaining, 0)
	d.RetryAfter, d.ResetAfter = toDuration(retry), toDuration(reset)
	if retry < 0 {
		d.RetryAfter = floodgate.Never
	}
}

// toDuration converts µs to a Duration, saturating just below Never (waits
// that long arise only from absurd costs recorded with count_denied).
func toDuration(us int64) time.Duration {
	const max = (1<<63 - 2) / int64(time.Microsecond)
	if us > max {
		return floodgate.Never - 1
	}
	return time.Duration(us) * time.Microsecond
}

// State is the state of one (policy, key), for every algorithm, in five
// words: small, because a store keeps one per key. The zero value is "no
// state". A State is not safe for concurrent use; stores lock around Step.
type State struct {
	// TLast is the µs of the last recording add (SPEC.md rule 1): a step
	// stamped earlier is evaluated as if at TLast.
	TLast int64

	// Expires is the µs at which the state is empty again (TLast plus the
	// reset_after of the last recording add), 0 when there is no state
	// (times are never negative, so a live state's expiry is positive).
	// Stores use it for expiry, sweeping and Redis TTLs.
	Expires int64

	// A and B are the numbers of the fixed-size algorithms:
	//   fixed_window: A the window's start (µs), B the count;
	//   token_bucket: A the creation time (µs), B = tokens × window in µs
	//                 (exact, and negative with count_denied);
	//   gcra:         the theoretical arrival time is A + B/count µs, with
	//                 0 ≤ B < count.
	A, B int64

	// X holds the state of the variable-size algorithms: sliding_window
	// (one Log of buckets per limit), sliding_log (one Log of entries) and
	// ar1 (one count per limit). It is kept across Reset for reuse.
	X *Extra
}

// Extra is the variable-size part of a State.
type Extra struct {
	Logs []Log
	AR   []ARCount
}

// ARCount is the state of one AR(1) limit: Count at slot Slot.
type ARCount struct {
	Slot  int64
	Count float64
}

// Live reports whether s holds a state (it may still be empty by now).
func (s *State) Live() bool { return s.Expires != 0 }

// Reset empties s, keeping its buffers for reuse.
func (s *State) Reset() {
	if x := s.X; x != nil {
		for i := range x.Logs {
			x.Logs[i].Clear()
		}
		clear(x.AR)
	}
	s.TLast, s.Expires, s.A, s.B = 0, 0, 0, 0
}

// extra returns s.X, allocating it the first time.
func (s *State) extra() *Extra {
	if s.X == nil {
		s.X = new(Extra)
	}
	return s.X
}

// Step decides an add of cost n at time now (µs) for policy p, whose state
// is s, or a peek when peek is set, and writes the decision to d. A
// recording add (allowed, or denied with count_denied) updates s; a peek or
// an unrecorded denial leaves it untouched. p must be valid, 1 ≤ n ≤
// floodgate.MaxCost and 0 ≤ now ≤ MaxNow; s must have been written only
// under policies of the same shape as p (SameShape). The decision is
// written through d rather than returned, so that no copy of it is made on
// the way: this is the hot path of every in-process store.
func Step(p *floodgate.Policy, s *State, now, n int64, peek bool, d *floodgate.Decision) {
	if s.Expires != 0 && now < s.TLast {
		now = s.TLast // the clock went backwards: SPEC.md rule 1
	}
	switch p.Algorithm {
	case floodgate.SlidingWindow:
		slidingWindow(p, s, now, n, peek, d)
	case floodgate.AR1:
		ar1(p, s, now, n, peek, d)
	case floodgate.FixedWindow:
		fixedWindow(p, s, now, n, peek, d)
	case floodgate.TokenBucket:
		tokenBucket(p, s, now, n, peek, d)
	case floodgate.SlidingLog:
		slidingLog(p, s, now, n, peek, d)
	case floodgate.GCRA:
		gcra(p, s, now, n, peek, d)
	default:
		// Validate rules this out; deny rather than guess.
		*d = floodgate.Decision{RetryAfter: floodgate.Never}
	}
}

// StepResult is Step with the decision in SPEC.md's units (µs, -1 for
// never), as the vectors and the differential tests state it.
func StepResult(p *floodgate.Policy, s *State, now, n int64, peek bool, r *Result) {
	var d floodgate.Decision
	Step(p, s, now, n, peek, &d)
	*r = ResultOf(&d)
}

// Empty reports whether s holds nothing at time now: a store may forget it.
func (s *State) Empty(now int64) bool {
	return now >= s.Expires
}

// SameShape reports whether state written under policy a means the same
// under policy b: same algorithm, and for SlidingWindow and AR1 the same
// number of limits with the same windows and resolutions (their buckets and
// slots are indexed by them). Other parameters (max, burst, decay) may
// change and the state carries over, so reloading a policy with a new max
// keeps every key's count.
func SameShape(a, b *floodgate.Policy) bool {
	if a == b {
		return true
	}
	if a.Algorithm != b.Algorithm {
		return false
	}
	switch a.Algorithm {
	case floodgate.SlidingWindow, floodgate.AR1:
		if len(a.Limits) != len(b.Limits) {
			return false
		}
		for i := range a.Limits {
			if a.Limits[i].Window != b.Limits[i].Window || a.Limits[i].Resolution != b.Limits[i].Resolution {
				return false
			}
		}
	case floodgate.GCRA:
		// TATFrac is in units of 1/count µs.
		return a.Max == b.Max
	case floodgate.TokenBucket:
		// U is in units of token·window.
		return a.Window == b.Window
	}
	return true
}

// us converts a duration to whole µs.
func us(d time.Duration) int64 { return int64(d / time.Microsecond) }

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// SatAdd returns a+b for a, b ≥ 0, saturating at 2^53-1 as every count
// of the algorithms does (and the Lua twins, whose numbers are doubles).
func SatAdd(a, b int64) int64 { return satAdd(a, b) }

// satAdd returns a+b for a, b ≥ 0, saturating at satMax.
func satAdd(a, b int64) int64 {
	if a > satMax-b {
		return satMax
	}
	return a + b
}

// MaxNow is the latest time (µs since the Unix epoch, the year 2155) at
// which Step's arithmetic is exact: satMax less the longest duration a
// policy may have. Stores refuse to decide with a clock outside 0 to
// MaxNow.
const MaxNow = satMax - int64(storekit.MaxDuration/time.Microsecond)

// satMax bounds counts and times that only absurd costs recorded with
// count_denied can push beyond any real value (2^53 µs is 285 years). It is
// the largest integer a float64 holds exactly, so the Lua twins, whose
// numbers are doubles, saturate at the same value.
const satMax = 1<<53 - 1

// better reports whether limit i's remaining ri beats the binding limit
// so far (rb at index b, b < 0 for none): least remaining, first on ties
// (SPEC.md rule 3).
func better(ri, rb int64, b int32) bool { return b < 0 || ri < rb }

// combineRetry folds a limit's retry into the decision's (SPEC.md rule 4):
// -1 if any is -1, else the largest.
func combineRetry(acc, r int64) int64 {
	if acc < 0 || r < 0 {
		return -1
	}
	return max(acc, r)
}
