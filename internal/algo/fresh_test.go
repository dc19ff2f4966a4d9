package algo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// Stores forget a state once it is Empty (memstore's sweeper and eviction,
// Redis's TTLs), and memstore forgets nothing else: so Empty must be
// exactly "equivalent to no state". These tests check both directions
// against Step on random policies and histories:
//
//   - a state Empty at t0 decides every later request (adds and peeks,
//     any cost, at any times from t0 on) exactly as no state does, every
//     field of every decision;
//   - a state not Empty at t0 is told apart from no state by some requests
//     from t0 on, so no store may forget it without changing a decision.
//
// Along the way they check what memstore's bookkeeping relies on: a step
// under the same policy never moves a live state's Expires back.

// cloneState returns a deep copy of s.
func cloneState(s *State) State {
	c := *s
	if s.X != nil {
		x := &Extra{AR: slices.Clone(s.X.AR)}
		for _, l := range s.X.Logs {
			l.e = slices.Clone(l.e)
			x.Logs = append(x.Logs, l)
		}
		c.X = x
	}
	return c
}

// freshOp is a request of the generated histories.
type freshOp struct {
	at   int64
	n    int64
	peek bool
}

func (o freshOp) String() string {
	kind := "add"
	if o.peek {
		kind = "peek"
	}
	return fmt.Sprintf("%s %d at base%+d", kind, o.n, o.at-refBase)
}

// freshGen draws times and costs for a generated policy.
type freshGen struct {
	c refChooser
	g refGen
}

func (f freshGen) cost() int64 {
	c, g := f.c, f.g
	switch r := c.intn(100); {
	case r < 45:
		return 1
	case r < 75:
		return 1 + c.intn(max(1, g.min))
	case r < 93:
		return 1 + c.intn(g.max+2)
	case r < 98:
		return max(1, refPick(c, g.max, g.max+1, 2*g.max+1))
	}
	return refPick[int64](c, 100, 1<<20, 1<<40, floodgate.MaxCost)
}

// next returns a time after now (or, rarely, before it).
func (f freshGen) next(now int64) int64 {
	c, g := f.c, f.g
	D := g.d
	switch r := c.intn(100); {
	case r < 25:
		return now
	case r < 40:
		return now + 1 + c.intn(3)
	case r < 60:
		return now + 1 + c.intn(max(1, D/4))
	case r < 80:
		return now + 1 + c.intn(2*D)
	case r < 90:
		u := max(1, refPick(c, g.units...))
		return (now/u+1+c.intn(3))*u + c.intn(3) - 1
	case r < 95:
		return now + D + c.intn(100*D)
	}
	return now - 1 - c.intn(D) // the clock goes backwards
}

func (f freshGen) op(now int64) freshOp {
	return freshOp{at: now, n: f.cost(), peek: f.c.intn(5) == 0}
}

// apply steps s by op and returns the decision; it fails t when a live
// state's expiry moves back.
func freshApply(t *testing.T, p *floodgate.Policy, s *State, op freshOp, history []freshOp) Result {
	t.Helper()
	before := *s
	var r Result
	StepResult(p, s, op.at, op.n, op.peek, &r)
	now := max(op.at, before.TLast)
	if before.Expires != 0 && now < before.Expires && s.Expires < before.Expires {
		t.Fatalf("%s: Expires moved back from base%+d to base%+d after %v then %v",
			p.String(), before.Expires-refBase, s.Expires-refBase, history, op)
	}
	return r
}

func TestEmptyIsFresh(t *testing.T) {
	seed := refSeed(t)
	histories := 3000
	if testing.Short() {
		histories = 600
	}
	for i, alg := range storekit.Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			c := refRand{rand.New(rand.NewPCG(seed, uint64(i)))}
			empty, live, alike := 0, 0, 0
			for range histories {
				f := freshGen{c: c, g: refGenPolicy(c, alg)}
				p := f.g.p
				var s State
				var history []freshOp
				now := refBase + c.intn(f.g.d)
				for range 1 + c.intn(30) {
					now = min(max(refBase, f.next(now)), MaxNow)
					op := f.op(now)
					freshApply(t, p, &s, op, history)
					history = append(history, op)
				}
				// t0: around the state's expiry, or anywhere later.
				t0 := now
				switch c.intn(4) {
				case 0:
					if s.Expires > 0 {
						t0 = max(now, s.Expires+c.intn(3)-1)
					}
				case 1:
					t0 = now + c.intn(2*f.g.d)
				}
				t0 = min(t0, MaxNow)
				if s.Empty(t0) {
					empty++
					checkFresh(t, f, &s, t0, history)
					continue
				}
				live++
				if why := distinguish(f, &s, t0); why == "" {
					if !degenerate(p) {
						t.Fatalf("%s: state after %v, live at base%+d (expires base%+d), decides every probe as no state",
							p.String(), history, t0-refBase, s.Expires-refBase)
					}
					alike++
				}
			}
			t.Logf("%d histories empty at t0, %d live (%d of them, all of degenerate policies, decided alike by every probe)", empty, live, alike)
			if empty == 0 || live == 0 {
				t.Errorf("generated %d empty and %d live states: want both", empty, live)
			}
		})
	}
}

// checkFresh runs random requests from t0 on a copy of s, Empty at t0, and
// on no state: every decision must match.
func checkFresh(t *testing.T, f freshGen, s *State, t0 int64, history []freshOp) {
	t.Helper()
	p := f.g.p
	kept := cloneState(s)
	var fresh State
	now := t0
	var suffix []freshOp
	for range 1 + f.c.intn(40) {
		now = min(max(t0, f.next(now)), MaxNow)
		op := f.op(now)
		suffix = append(suffix, op)
		a := freshApply(t, p, &kept, op, history)
		b := freshApply(t, p, &fresh, op, nil)
		if a != b {
			t.Fatalf("%s: state after %v is empty at base%+d, but then %v decides\n  kept:  %s\n  fresh: %s",
				p.String(), history, t0-refBase, suffix, refFmt(a), refFmt(b))
		}
	}
}

// distinguish looks for requests from t0 that s, live at t0, decides
// otherwise than no state, and describes the first it finds ("" if none):
// peeks of every cost up to past the policy's max, then adds of cost 1,
// and of the largest cost admitted at once, repeated at the state's own
// time scales until its expiry.
func distinguish(f freshGen, s *State, t0 int64) string {
	p := f.g.p
	for n := int64(1); n <= f.g.max+2; n++ {
		kept, fresh := cloneState(s), State{}
		var a, b Result
		StepResult(p, &kept, t0, n, true, &a)
		StepResult(p, &fresh, t0, n, true, &b)
		if a != b {
			return fmt.Sprintf("peek %d: %s / %s", n, refFmt(a), refFmt(b))
		}
	}
	steps := slices.Concat([]int64{1}, f.g.units)
	for _, n := range []int64{1, max(1, f.g.min), max(1, f.g.max)} {
		for _, step := range steps {
			kept, fresh := cloneState(s), State{}
			var log strings.Builder
			for at := t0; at <= s.Expires+step; at += max(1, step) {
				var a, b Result
				StepResult(p, &kept, at, n, false, &a)
				StepResult(p, &fresh, at, n, false, &b)
				fmt.Fprintf(&log, "add %d at base%+d; ", n, at-refBase)
				if a != b {
					return fmt.Sprintf("%s %s / %s", log.String(), refFmt(a), refFmt(b))
				}
				if log.Len() > 1<<16 {
					break
				}
			}
		}
	}
	return ""
}

// degenerate reports whether p may have live states that decide every
// request as no state does, yet are not Empty: a limit dominated by
// another until it expires (several limits); with count_denied, a window
// that only ever denies (a max below 1); an ar1 count decayed to just
// above 10^-6, which only costs tuned to land a sum within that much of a
// threshold could tell (the probes of distinguish do not look for them).
// Stores keep such states until they empty: memory, never a decision.
func degenerate(p *floodgate.Policy) bool {
	switch p.Algorithm {
	case floodgate.AR1:
		return true
	case floodgate.SlidingWindow:
		return len(p.Limits) > 1 || p.Limits[0].Max < 1
	case floodgate.FixedWindow:
		return p.Max < 1
	}
	return false
}
