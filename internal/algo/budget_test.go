package algo

// Property tests of the budget operations (budget.go, refund.go) on random
// policies and sequences, in the style of the differential tests: the
// policies come from refGenPolicy, the seed from refSeed (FLOODGATE_SEED
// replays a run).

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// budgetOps is the number of operations per algorithm of each property.
func budgetOps() int {
	if testing.Short() {
		return 2_000
	}
	return 20_000
}

// budgetWalk drives random operations on one key of a random policy of
// alg, calling check before and after each one. The operations are add,
// peek, reserve, settle, refund, add_at_most and reset, at times that move
// forwards by small and large steps and now and then backwards.
type budgetWalk struct {
	c      refRand
	g      refGen
	m      Member
	now    int64
	holds  [][]Hold
	checks int
}

func newBudgetWalk(c refRand, alg floodgate.Algorithm) *budgetWalk {
	g := refGenPolicy(c, alg)
	return &budgetWalk{c: c, g: g, m: Member{Policy: g.p, State: &State{}, Born: new(int64)}, now: refBase + c.intn(g.d)}
}

func (w *budgetWalk) cost() int64 {
	switch r := w.c.intn(10); {
	case r < 5:
		return 1
	case r < 9:
		return 1 + w.c.intn(w.g.max+2)
	}
	return 1 + w.c.intn(3*w.g.max+10)
}

func (w *budgetWalk) tick() {
	switch r := w.c.intn(10); {
	case r < 3:
	case r < 6:
		w.now += 1 + w.c.intn(max(1, w.g.d/4))
	case r < 8:
		w.now += 1 + w.c.intn(2*w.g.d)
	case r < 9:
		w.now += w.g.d * (1 + w.c.intn(20))
	default:
		w.now -= 1 + w.c.intn(w.g.d) // rule 1
	}
}

// fullRemaining is what a key with no state has left: the most any state
// of p may report (SPEC.md: nothing goes above full).
func fullRemaining(p *floodgate.Policy) int64 {
	var d floodgate.Decision
	s := State{}
	readMember(&Member{Policy: p, State: &s, Born: new(int64)}, refBase, &d)
	return d.Remaining
}

// checkState fails when s holds less than nothing: a count, bucket or entry
// below 1, an ar1 count below 0, tokens above burst.
func checkState(p *floodgate.Policy, s *State) error {
	if s.Expires == 0 {
		return nil
	}
	switch p.Algorithm {
	case floodgate.FixedWindow:
		if s.B < 1 {
			return fmt.Errorf("fixed_window count %d in a live state", s.B)
		}
	case floodgate.TokenBucket:
		if s.B > p.Burst*us(p.Window) {
			return fmt.Errorf("token_bucket u = %d above burst·window %d", s.B, p.Burst*us(p.Window))
		}
	case floodgate.SlidingWindow, floodgate.SlidingLog:
		for i := range s.X.Logs {
			l := &s.X.Logs[i]
			var sum int64
			for j := 0; j < l.Len(); j++ {
				if l.At(j).N < 1 {
					return fmt.Errorf("log %d entry %d holds %d", i, j, l.At(j).N)
				}
				if j > 0 && l.At(j).T <= l.At(j-1).T {
					return fmt.Errorf("log %d entries out of order at %d", i, j)
				}
				sum += l.At(j).N
			}
			if !l.over && sum != l.sum {
				return fmt.Errorf("log %d sum %d, entries hold %d", i, l.sum, sum)
			}
		}
	case floodgate.AR1:
		for i, c := range s.X.AR {
			if c.Count < 0 {
				return fmt.Errorf("ar1 limit %d count %g", i, c.Count)
			}
		}
	}
	return nil
}

// liveNow reports whether s holds a live state at now (rule 1 applied).
func liveNow(s *State, now int64) bool {
	return s.Expires != 0 && effectiveNow(s, now) < s.Expires
}

// TestRefundBounds: whatever is reserved, settled, refunded or added, a
// key's state never holds less than nothing and never has more left than
// a key with no state; a refund or settle never creates a state, never
// extends one's life, and never leaves a key with less left than before it.
func TestRefundBounds(t *testing.T) {
	seed := refSeed(t)
	for i, alg := range storekit.Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			c := refRand{rand.New(rand.NewPCG(seed, uint64(i)))}
			ops := 0
			for ops < budgetOps() {
				w := newBudgetWalk(c, alg)
				full := fullRemaining(w.g.p)
				for k := 0; k < 200; k++ {
					ops++
					w.tick()
					ms := []Member{w.m}
					var o Outcome
					var before floodgate.Decision
					readMember(&w.m, w.now, &before)
					wasLive, expires := liveNow(w.m.State, w.now), w.m.State.Expires
					op := c.intn(8)
					switch op {
					case 0, 1:
						_ = Add(ms, w.now, w.cost(), false, &o)
					case 2:
						h := make([]Hold, 1)
						_ = Reserve(ms, w.now, w.cost(), &o, h)
						w.holds = append(w.holds, h)
					case 3, 4:
						if len(w.holds) == 0 {
							continue
						}
						j := int(c.intn(int64(len(w.holds))))
						h := w.holds[j]
						w.holds = append(w.holds[:j], w.holds[j+1:]...)
						_ = Settle(ms, w.now, h, c.intn(h[0].Granted+1), &o)
					case 5:
						_ = Refund(ms, w.now, w.cost(), &o)
					case 6:
						_ = AddAtMost(ms, w.now, w.cost(), false, &o)
					case 7:
						if c.intn(4) == 0 {
							w.m.State.Reset()
						}
						continue
					}
					if err := checkState(w.g.p, w.m.State); err != nil {
						t.Fatalf("seed %d, %s after op %d at %d: %v", seed, w.g.p, op, w.now, err)
					}
					var after floodgate.Decision
					readMember(&w.m, w.now, &after)
					if after.Remaining > full {
						t.Fatalf("seed %d, %s after op %d at %d: remaining %d above a fresh key's %d", seed, w.g.p, op, w.now, after.Remaining, full)
					}
					if op == 3 || op == 4 || op == 5 {
						if !wasLive && liveNow(w.m.State, w.now) {
							t.Fatalf("seed %d, %s: a refund created a state", seed, w.g.p)
						}
						if wasLive && w.m.State.Expires > expires {
							t.Fatalf("seed %d, %s: a refund at %d extended the state's life from %d to %d", seed, w.g.p, w.now, expires, w.m.State.Expires)
						}
						if after.Remaining < before.Remaining {
							t.Fatalf("seed %d, %s: a refund at %d left %d, less than the %d before", seed, w.g.p, w.now, after.Remaining, before.Remaining)
						}
					}
				}
			}
			t.Logf("%d operations", ops)
		})
	}
}

// TestReserveSettleUndoes: an allowed reserve settled at once for 0, or
// followed at once by a refund of its n, leaves every decision as it was (ar1 aside: C + n - n need not be C in float64),
// but that a token bucket the reserve created keeps its lifetime, so its
// reset_after is no longer 0 (SPEC.md: a refund never ends a bucket).
func TestReserveSettleUndoes(t *testing.T) {
	seed := refSeed(t)
	for i, alg := range storekit.Algorithms() {
		if alg == floodgate.AR1 {
			continue
		}
		t.Run(string(alg), func(t *testing.T) {
			c := refRand{rand.New(rand.NewPCG(seed, uint64(i)))}
			undone := 0
			for ops := 0; ops < budgetOps(); {
				w := newBudgetWalk(c, alg)
				for k := 0; k < 100; k++ {
					ops++
					w.tick()
					ms := []Member{w.m}
					var o Outcome
					if c.intn(3) > 0 {
						_ = Add(ms, w.now, w.cost(), false, &o)
						continue
					}
					n := w.cost()
					probe := []int64{1, n, 1 + c.intn(w.g.max+2)}
					var want [3]Outcome
					for j, q := range probe {
						_ = Add(ms, w.now, q, true, &want[j])
					}
					created := !liveNow(w.m.State, w.now) && alg == floodgate.TokenBucket
					h := make([]Hold, 1)
					_ = Reserve(ms, w.now, n, &o, h)
					if !o.Allowed {
						continue
					}
					if c.intn(2) == 0 {
						_ = Settle(ms, w.now, h, 0, &o)
					} else {
						_ = Refund(ms, w.now, n, &o) // the newest units are the reserve's
					}
					undone++
					for j, q := range probe {
						var got Outcome
						_ = Add(ms, w.now, q, true, &got)
						if created {
							want[j].ResetAfter = got.ResetAfter
							if !want[j].Allowed && want[j].RetryAfter != floodgate.Never {
								want[j].RetryAfter = got.RetryAfter // capped by the state's end
							}
						}
						if got != want[j] {
							t.Fatalf("seed %d, %s: reserve %d and settle 0 at %d: peek %d = %+v, was %+v", seed, w.g.p, n, w.now, q, got, want[j])
						}
					}
				}
			}
			t.Logf("%d reservations undone", undone)
		})
	}
}

// TestAtMostIsOneByOne: add_at_most n grants what n adds of 1 at the same
// now would admit one by one, for every algorithm but sliding_log with a
// min_interval (one request of g units passes the gap once) — ar1 included,
// on these policies — and its decision is add g's (add 1's when g is 0).
func TestAtMostIsOneByOne(t *testing.T) {
	seed := refSeed(t)
	for i, alg := range storekit.Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			c := refRand{rand.New(rand.NewPCG(seed, uint64(i)))}
			grants := map[bool]int{}
			for ops := 0; ops < budgetOps(); {
				w := newBudgetWalk(c, alg)
				for k := 0; k < 100; k++ {
					ops++
					w.tick()
					ms := []Member{w.m}
					var o Outcome
					if c.intn(2) == 0 {
						_ = Add(ms, w.now, w.cost(), false, &o)
						continue
					}
					n := min(w.cost(), 64)
					// One by one, on a copy.
					copies := cloneMembers(ms)
					ones := int64(0)
					for j := int64(0); j < n; j++ {
						_ = Add(copies, w.now, 1, false, &o)
						if o.Allowed {
							ones++
						}
					}
					// add g on another copy, then add_at_most on the key.
					g := ones
					other := cloneMembers(ms)
					var want Outcome
					_ = Add(other, w.now, max(g, 1), false, &want)
					_ = AddAtMost(ms, w.now, n, false, &o)
					if w.g.p.Algorithm == floodgate.SlidingLog && w.g.p.MinInterval > 0 {
						if o.Granted < ones {
							t.Fatalf("seed %d, %s: add_at_most %d granted %d, fewer than one by one (%d)", seed, w.g.p, n, o.Granted, ones)
						}
						continue
					}
					if o.Granted != g || o != want {
						t.Fatalf("seed %d, %s at %d: add_at_most %d = %+v; one by one admitted %d, add %d = %+v", seed, w.g.p, w.now, n, o, g, max(g, 1), want)
					}
					grants[g > 0]++
				}
			}
			t.Logf("grants: %d partial or whole, %d none", grants[true], grants[false])
		})
	}
}

// TestGroupOfOneIsStep: a group of one member decides exactly as Step,
// every field, and leaves the same state behind.
func TestGroupOfOneIsStep(t *testing.T) {
	seed := refSeed(t)
	for i, alg := range storekit.Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			c := refRand{rand.New(rand.NewPCG(seed, uint64(i)))}
			for ops := 0; ops < budgetOps(); {
				w := newBudgetWalk(c, alg)
				twin := w.m.State.clone()
				for k := 0; k < 100; k++ {
					ops++
					w.tick()
					n, peek := w.cost(), c.intn(4) == 0
					var o Outcome
					_ = Add([]Member{w.m}, w.now, n, peek, &o)
					var d floodgate.Decision
					Step(w.g.p, &twin, w.now, n, peek, &d)
					if o.Decision != d || o.Member != 0 || o.Granted != map[bool]int64{true: n}[d.Allowed] {
						t.Fatalf("seed %d, %s at %d: group of one = %+v, Step = %+v", seed, w.g.p, w.now, o, d)
					}
					var a, b floodgate.Decision
					readMember(&w.m, w.now, &a)
					readMember(&Member{Policy: w.g.p, State: &twin, Born: new(int64)}, w.now, &b)
					if a != b {
						t.Fatalf("seed %d, %s at %d: states differ after the step: %+v vs %+v", seed, w.g.p, w.now, a, b)
					}
				}
			}
		})
	}
}

// TestGroupAllOrNothing: on a group of two random policies over one key, an
// allowed add spends on both exactly as each add alone would; a denied add
// spends only where count_denied records it (exactly as that member's add
// alone would), and nowhere else.
func TestGroupAllOrNothing(t *testing.T) {
	seed := refSeed(t)
	c := refRand{rand.New(rand.NewPCG(seed, 99))}
	allowed, denied := 0, 0
	for ops := 0; ops < 3*budgetOps(); {
		a, b := newBudgetWalk(c, ""), refGenPolicy(c, "")
		b.p.Name = "q"
		ms := []Member{a.m, {Policy: b.p, State: &State{}, Born: new(int64)}}
		for k := 0; k < 100; k++ {
			ops++
			a.tick()
			n := 1 + c.intn(max(a.g.max, b.max)+2)
			alone := cloneMembers(ms)
			var want [2]floodgate.Decision
			var o Outcome
			_ = Add(ms, a.now, n, false, &o)
			for j := range alone {
				if o.Allowed || storekit.CountsDenied(alone[j].Policy) {
					stepMember(&alone[j], alone[j].Policy, a.now, n, false, &want[j])
				}
			}
			if o.Allowed {
				allowed++
			} else {
				denied++
			}
			for j := range ms {
				var got, exp floodgate.Decision
				readMember(&ms[j], a.now, &got)
				readMember(&alone[j], a.now, &exp)
				if got != exp {
					t.Fatalf("seed %d, group (%s, %s) add %d at %d (allowed %v): member %d left %+v, alone %+v", seed, ms[0].Policy, ms[1].Policy, n, a.now, o.Allowed, j, got, exp)
				}
			}
		}
	}
	t.Logf("%d allowed, %d denied group decisions", allowed, denied)
}
