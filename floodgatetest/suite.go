// Package floodgatetest is the conformance suite of floodgate stores: any
// floodgate.Store, in this module or outside it, runs Run from a test and
// is checked against SPEC.md's vectors and the properties every store must
// have. It also holds ManualClock and the vector loader.
//
// A test of a store looks like this:
//
//	func TestConformance(t *testing.T) {
//		floodgatetest.Run(t, floodgatetest.Harness{
//			NewStore: func(t *testing.T, clock storekit.Clock) floodgate.Store {
//				s, err := mystore.New(mystore.WithClock(clock))
//				if err != nil {
//					t.Fatal(err)
//				}
//				return s
//			},
//		})
//	}
package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
)

// VectorsEnv names the environment variable that may point at a folder of
// extra vector files: Run replays every *.json in it after the public set.
const VectorsEnv = "FLOODGATE_VECTORS"

// Harness describes the store under test.
type Harness struct {
	// NewStore returns an empty store that reads the time from clock. The
	// suite closes every store it gets.
	NewStore func(t *testing.T, clock storekit.Clock) floodgate.Store

	// Prefix starts every policy name the suite uses, so that runs sharing
	// a backend never meet. Optional.
	Prefix string

	// MaxKeyLen is the longest key the store accepts; 0 means
	// storekit.DefaultMaxKeyLen.
	MaxKeyLen int

	// Goroutines is the number of goroutines of the concurrency checks;
	// 0 means 64.
	Goroutines int

	// Phases is the number of instants the concurrency checks hammer the
	// store at, per policy; 0 means 6. A store whose every call is a
	// network round trip may use fewer.
	Phases int

	// Keys, when set, returns how many (policy, key) states the store
	// holds, so the suite can check that peeks create none.
	Keys func(floodgate.Store) int

	// NoBudgets says that the store does not implement
	// storekit.BudgetStore: the checks of groups, partial grants,
	// reservations, refunds and calendar windows (ProjectVectors and the
	// budget properties) are skipped, which each logs. Without it those
	// checks fail on such a store.
	NoBudgets bool

	// Counters, when set, reports the policies the store keeps as counters
	// (SPEC.md, "Counters": a Redis store's native fixed windows), which
	// take adds, peeks, refunds and resets but no group, reservation,
	// settle or partial grant: the budget checks leave out the project
	// vectors and the pairs of policies that would need one, and log how
	// many. Nil means none.
	Counters func(p *floodgate.Policy) bool
}

// counted reports whether the store keeps p as a counter (Counters).
func (h *Harness) counted(p *floodgate.Policy) bool {
	return h.Counters != nil && h.Counters(p)
}

func (h *Harness) open(t *testing.T, clock storekit.Clock) floodgate.Store {
	t.Helper()
	s := h.NewStore(t, clock)
	if s == nil {
		t.Fatal("Harness.NewStore returned nil")
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (h *Harness) name(s string) string {
	n := h.Prefix + s
	if len(n) > storekit.MaxNameLen {
		n = n[:storekit.MaxNameLen]
	}
	return n
}

// RunVectors replays what Run replays, and nothing else: the public
// vectors, those of the folder named by FLOODGATE_VECTORS and, for a
// storekit.BudgetStore, the project's. It is for a second configuration
// of a store that Run checks in full with another (another way to reach
// its server, a Cluster), where the properties under concurrency would
// check the same code again.
func RunVectors(t *testing.T, h Harness) {
	if h.NewStore == nil {
		t.Fatal("floodgatetest: Harness.NewStore is nil")
	}
	t.Run("Vectors", func(t *testing.T) {
		vs, err := PublicVectors()
		if err != nil {
			t.Fatal(err)
		}
		h.replay(t, "public", vs)
	})
	if dir := os.Getenv(VectorsEnv); dir != "" {
		t.Run("ExtraVectors", func(t *testing.T) {
			vs, err := LoadVectorDir(dir)
			if err != nil {
				t.Fatalf("%s=%s: %v", VectorsEnv, dir, err)
			}
			if len(vs) == 0 {
				t.Fatalf("%s=%s: no *.json vector files", VectorsEnv, dir)
			}
			h.replay(t, dir, vs)
		})
	}
	t.Run("ProjectVectors", h.testProjectVectors)
}

// Run checks the store described by h against SPEC.md: every public vector
// and those of the folder named by FLOODGATE_VECTORS, then the properties
// of a store (peek, reset, independent keys, no over-admission under
// concurrency, bad requests, usage tracking, series and paged listings
// for a usage.Lister, Close). For a storekit.BudgetStore it also replays
// the project's vectors (groups, partial grants, reservations, refunds,
// calendar windows) and checks groups and reservations under concurrency;
// a store without budgets must set Harness.NoBudgets.
func Run(t *testing.T, h Harness) {
	RunVectors(t, h)
	t.Run("GroupConcurrency", h.testGroupConcurrency)
	t.Run("ReserveContention", h.testReserveContention)
	t.Run("BudgetInvalidRequests", h.testBudgetInvalid)
	t.Run("PeekIsTheAddsDecision", h.testPeek)
	t.Run("PeekCreatesNoState", h.testPeekCreatesNothing)
	t.Run("ResetRestoresInitialState", h.testReset)
	t.Run("IndependentKeys", h.testIndependentKeys)
	t.Run("Concurrency", h.testConcurrency)
	t.Run("InvalidRequests", h.testInvalid)
	t.Run("Usage", h.testUsage)
	t.Run("UsageExpiresWithState", h.testUsageExpires)
	t.Run("UsageVectors", h.testUsageVectors)
	t.Run("UsageSeries", h.testUsageSeries)
	t.Run("UsagePaging", h.testUsagePaging)
	t.Run("Close", h.testClose)
}

// replay runs vectors on one store and reports the count of steps.
func (h *Harness) replay(t *testing.T, set string, vs []Vector) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	steps, mismatches := ReplayVectors(t, store, clock, h.Prefix, vs)
	t.Logf("conformance: %s vectors (%s): %d vectors, %d steps replayed, %d mismatches", set, t.Name(), len(vs), steps, mismatches)
}

// ReplayVectors replays vectors on store, moving clock to BaseMicros plus
// each step's at_us, and reports every mismatch with t.Errorf. Each vector
// runs under its own policy name (prefix, its index, its name), so one
// store serves them all. It returns the steps replayed and the mismatches.
func ReplayVectors(t testing.TB, store floodgate.Store, clock *ManualClock, prefix string, vs []Vector) (steps, mismatches int) {
	t.Helper()
	ctx := context.Background()
	for i := range vs {
		v := &vs[i]
		p := v.Policy
		p.Name = v.PolicyName(prefix, i)
		for j, s := range v.Steps {
			clock.SetMicros(BaseMicros + s.AtMicros)
			steps++
			if s.Op == "reset" {
				if err := store.Reset(ctx, &p, s.Key); err != nil {
					t.Errorf("%s %s step %d: reset: %v", v.File, v.Name, j, err)
					mismatches++
				}
				continue
			}
			d, err := store.Take(ctx, floodgate.Request{Policy: &p, Key: s.Key, N: s.Cost(), Peek: s.Op == "peek"})
			if err != nil {
				t.Errorf("%s %s step %d: %s: %v", v.File, v.Name, j, s.Op, err)
				mismatches++
				continue
			}
			if msg := s.Expect.Mismatch(d); msg != "" {
				t.Errorf("%s %s step %d (%s key %q n=%d at_us=%d): %s", v.File, v.Name, j, s.Op, s.Key, s.Cost(), s.AtMicros, msg)
				mismatches++
			}
		}
	}
	return steps, mismatches
}

// PropertyPolicies returns policies covering every algorithm, with and
// without count_denied, with one and several limits, for property tests.
// Their names are empty.
func PropertyPolicies() []floodgate.Policy {
	texts := []string{
		"sliding_window 3/10s resolution 1s, 5/1m resolution 10s",
		"sliding_window 4/2s resolution 300ms count_denied",
		"ar1 3/1s decay 2, 5/10s decay 2",
		"ar1 2.5/500ms decay 1.5 count_denied",
		"fixed_window 3/10s",
		"fixed_window 3/5s align first",
		"fixed_window 2/10s count_denied",
		"token_bucket 5/10s burst 2",
		"token_bucket 4/3s burst 2 count_denied",
		"sliding_log 3/10s min_interval 1s",
		"sliding_log 4/5s count_denied false",
		"gcra 2/1s burst 3",
		"gcra 3/1s burst 2 count_denied",
	}
	ps := make([]floodgate.Policy, len(texts))
	for i, text := range texts {
		p, err := floodgate.ParsePolicy("p", text)
		if err != nil {
			panic(err) // a bug in this list
		}
		p.Name = ""
		ps[i] = p
	}
	return ps
}

// op is one generated operation.
type op struct {
	at   int64 // µs
	key  string
	n    int64
	peek bool
}

// randomOps returns count operations on keys, forwards in time (steps of
// 0 to 3 s, often 0), costs 1 to 3 with an occasional large one.
func randomOps(rng *rand.Rand, keys []string, count int) []op {
	ops := make([]op, count)
	at := BaseMicros
	for i := range ops {
		switch rng.IntN(4) {
		case 0: // same µs
		case 1:
			at += rng.Int64N(1000)
		default:
			at += rng.Int64N(3_000_000)
		}
		n := 1 + rng.Int64N(3)
		if rng.IntN(20) == 0 {
			n = 1 + rng.Int64N(20)
		}
		ops[i] = op{at: at, key: keys[rng.IntN(len(keys))], n: n, peek: rng.IntN(5) == 0}
	}
	return ops
}

func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed>>1|1))
}

func take(t *testing.T, s floodgate.Store, p *floodgate.Policy, key string, n int64, peek bool) floodgate.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), floodgate.Request{Policy: p, Key: key, N: n, Peek: peek})
	if err != nil {
		t.Fatalf("policy %s: Take(n=%d, peek=%v): %v", p.Name, n, peek, err)
	}
	return d
}

// testPeek: a peek returns exactly the decision the add at the same µs
// gets, and a second peek the same again (SPEC.md rule 2), including with
// the clock stepping backwards.
func (h *Harness) testPeek(t *testing.T) {
	rng := newRand(t)
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	for i, p := range PropertyPolicies() {
		p.Name = h.name(fmt.Sprintf("peek%d", i))
		ops := randomOps(rng, []string{"a", "b"}, 300)
		for j, o := range ops {
			at := o.at
			if j > 0 && rng.IntN(8) == 0 {
				at -= rng.Int64N(2_000_000) // the clock goes back
			}
			clock.SetMicros(at)
			peek1 := take(t, store, &p, o.key, o.n, true)
			peek2 := take(t, store, &p, o.key, o.n, true)
			add := take(t, store, &p, o.key, o.n, false)
			if peek1 != add || peek2 != add {
				t.Fatalf("%s (%s) op %d n=%d: peek %v, peek again %v, add %v", p.Name, p.String(), j, o.n, peek1, peek2, add)
			}
		}
	}
}

// testPeekCreatesNothing: peeks of every cost on a fresh key leave it
// fresh.
func (h *Harness) testPeekCreatesNothing(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros + 123_456))
	store := h.open(t, clock)
	for i, p := range PropertyPolicies() {
		p.Name = h.name(fmt.Sprintf("fresh%d", i))
		before := -1
		if h.Keys != nil {
			before = h.Keys(store)
		}
		for _, n := range []int64{1, 2, 5, 1000, floodgate.MaxCost} {
			take(t, store, &p, "peeked", n, true)
		}
		if h.Keys != nil {
			if after := h.Keys(store); after != before {
				t.Errorf("%s: peeks changed the store's key count from %d to %d", p.String(), before, after)
			}
		}
		got := take(t, store, &p, "peeked", 1, false)
		want := take(t, store, &p, "untouched", 1, false)
		if got != want {
			t.Errorf("%s: add after peeks: %v; on an untouched key: %v", p.String(), got, want)
		}
	}
}

// testReset: after Reset a key decides exactly like a key never seen.
func (h *Harness) testReset(t *testing.T) {
	rng := newRand(t)
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	ctx := context.Background()
	for i, p := range PropertyPolicies() {
		p.Name = h.name(fmt.Sprintf("reset%d", i))
		shadow := ""
		for j, o := range randomOps(rng, []string{"k"}, 200) {
			clock.SetMicros(o.at)
			if j%40 == 20 {
				if err := store.Reset(ctx, &p, "k"); err != nil {
					t.Fatalf("%s: Reset: %v", p.String(), err)
				}
				shadow = fmt.Sprintf("fresh-%d", j)
			}
			got := take(t, store, &p, "k", o.n, o.peek)
			if shadow == "" {
				continue
			}
			want := take(t, store, &p, shadow, o.n, o.peek)
			if got != want {
				t.Fatalf("%s op %d: after reset %v; on a fresh key %v", p.String(), j, got, want)
			}
		}
	}
}

// testIndependentKeys: keys interleaved under one policy decide as each
// alone under another; keys that look alike ("a", "{a}", "a}") are distinct.
func (h *Harness) testIndependentKeys(t *testing.T) {
	rng := newRand(t)
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	keys := []string{"a", "{a}", "a}", "{}", "a:b", "ü", strings.Repeat("x", 300)}
	for i, p := range PropertyPolicies() {
		mixed, alone := p, p
		mixed.Name = h.name(fmt.Sprintf("mixed%d", i))
		ops := randomOps(rng, keys, 400)
		got := make([]floodgate.Decision, len(ops))
		for j, o := range ops {
			clock.SetMicros(o.at)
			got[j] = take(t, store, &mixed, o.key, o.n, o.peek)
		}
		for ki, key := range keys {
			alone := alone // a policy must not change once a store has it
			alone.Name = h.name(fmt.Sprintf("alone%d-%d", i, ki))
			for j, o := range ops {
				if o.key != key {
					continue
				}
				clock.SetMicros(o.at)
				if want := take(t, store, &alone, "k", o.n, o.peek); got[j] != want {
					t.Fatalf("%s op %d key %q: interleaved %v; alone %v", p.String(), j, key, got[j], want)
				}
			}
		}
	}
}

// testConcurrency: many goroutines hammer one key and then 1,000 keys, in
// phases at fixed (manual) instants. Requests of cost 1 at one instant are
// interchangeable, so however they interleave, each key must admit exactly
// what the same number of requests admit one by one; and never more than
// MaxAdmitted over the whole run.
func (h *Harness) testConcurrency(t *testing.T) {
	goroutines, phases := h.Goroutines, h.Phases
	if goroutines == 0 {
		goroutines = 64
	}
	if phases == 0 {
		phases = 6
	}
	for _, nkeys := range []int{1, 1000} {
		t.Run(fmt.Sprintf("%dkeys", nkeys), func(t *testing.T) {
			rng := newRand(t)
			clock := NewManualClock(time.UnixMicro(BaseMicros))
			store := h.open(t, clock)
			perGoroutine := max(8, 5*nkeys/goroutines) // about 5 requests per key and phase
			for i, p := range PropertyPolicies() {
				conc, seq := p, p
				conc.Name = h.name(fmt.Sprintf("conc%d-%d", nkeys, i))
				seq.Name = h.name(fmt.Sprintf("seq%d-%d", nkeys, i))
				keys := make([]string, nkeys)
				for k := range keys {
					keys[k] = fmt.Sprintf("key%d", k)
				}
				keyOf := func(g, j int) int { return (g*perGoroutine + j) % nkeys }
				admitted := make([]int64, nkeys)
				histories := make([]string, nkeys) // each key's demand per phase so far
				shadows := map[string]string{}     // history -> the shadow key that has seen it
				at := BaseMicros
				first, last := at, at
				for phase := 0; phase < phases; phase++ {
					clock.SetMicros(at)
					last = at
					counts := make([]atomic.Int64, nkeys)
					errs := make(chan error, goroutines)
					var wg sync.WaitGroup
					for g := 0; g < goroutines; g++ {
						wg.Add(1)
						go func(g int) {
							defer wg.Done()
							for j := 0; j < perGoroutine; j++ {
								k := keyOf(g, j)
								d, err := store.Take(context.Background(), floodgate.Request{Policy: &conc, Key: keys[k], N: 1})
								if err != nil {
									errs <- err
									return
								}
								if d.Allowed {
									counts[k].Add(1)
								}
							}
						}(g)
					}
					wg.Wait()
					close(errs)
					if err := <-errs; err != nil {
						t.Fatalf("%s: Take: %v", p.String(), err)
					}
					// The same requests, one by one, on shadow keys: keys whose
					// demand has been the same in every phase so far share one
					// shadow, which has seen that same demand.
					demand := make([]int64, nkeys)
					for g := 0; g < goroutines; g++ {
						for j := 0; j < perGoroutine; j++ {
							demand[keyOf(g, j)]++
						}
					}
					want := map[string]int64{} // history -> admitted in this phase
					for k := range keys {
						past := histories[k]
						histories[k] += strconv.FormatInt(demand[k], 10) + ","
						h := histories[k]
						if _, done := want[h]; done {
							continue
						}
						shadow, ok := shadows[past]
						if !ok {
							shadow = "shadow-" + keys[k]
						}
						shadows[h] = shadow
						var n int64
						for x := int64(0); x < demand[k]; x++ {
							if take(t, store, &seq, shadow, 1, false).Allowed {
								n++
							}
						}
						want[h] = n
					}
					for k, key := range keys {
						if got, w := counts[k].Load(), want[histories[k]]; got != w {
							t.Fatalf("%s phase %d %s: %d goroutines admitted %d of %d; one by one %d", p.String(), phase, key, goroutines, got, demand[k], w)
						}
						admitted[k] += counts[k].Load()
					}
					at += rng.Int64N(4_000_000)
				}
				for k, n := range admitted {
					if bound := MaxAdmitted(&conc, 1, first, last); n > bound {
						t.Fatalf("%s %s: admitted %d from %d to %d µs; SPEC.md allows at most %d", p.String(), keys[k], n, first, last, bound)
					}
				}
			}
		})
	}
}

// testInvalid: bad requests get the documented errors, which never
// contain the key.
func (h *Harness) testInvalid(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	ctx := context.Background()
	maxLen := h.MaxKeyLen
	if maxLen == 0 {
		maxLen = storekit.DefaultMaxKeyLen
	}
	good := floodgate.Policy{Name: h.name("invalid"), Algorithm: floodgate.GCRA, Max: 10, Window: time.Second, Burst: 1}
	bad := floodgate.Policy{Name: h.name("invalid-bad"), Algorithm: floodgate.GCRA, Max: 10, Window: time.Second}
	secret := "secret-key-" + strings.Repeat("s", 20)
	cases := []struct {
		name string
		req  floodgate.Request
		want error
	}{
		{"empty key", floodgate.Request{Policy: &good, Key: "", N: 1}, floodgate.ErrInvalidKey},
		{"key too long", floodgate.Request{Policy: &good, Key: secret + strings.Repeat("k", maxLen), N: 1}, floodgate.ErrInvalidKey},
		{"key not UTF-8", floodgate.Request{Policy: &good, Key: secret + "\xff{", N: 1}, floodgate.ErrInvalidKey},
		{"key not UTF-8, peek", floodgate.Request{Policy: &good, Key: secret + "\xc3", N: 1, Peek: true}, floodgate.ErrInvalidKey},
		{"zero cost", floodgate.Request{Policy: &good, Key: secret, N: 0}, floodgate.ErrInvalidCost},
		{"negative cost", floodgate.Request{Policy: &good, Key: secret, N: -3}, floodgate.ErrInvalidCost},
		{"cost above MaxCost", floodgate.Request{Policy: &good, Key: secret, N: floodgate.MaxCost + 1}, floodgate.ErrInvalidCost},
		{"nil policy", floodgate.Request{Key: secret, N: 1}, floodgate.ErrInvalidPolicy},
		{"invalid policy", floodgate.Request{Policy: &bad, Key: secret, N: 1}, floodgate.ErrInvalidPolicy},
		{"invalid policy, peek", floodgate.Request{Policy: &bad, Key: secret, N: 1, Peek: true}, floodgate.ErrInvalidPolicy},
	}
	for _, c := range cases {
		_, err := store.Take(ctx, c.req)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Take error %v, want %v", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "secret-key") {
			t.Errorf("%s: error %q contains the key", c.name, err)
		}
	}
	longest := strings.Repeat("k", maxLen)
	if _, err := store.Take(ctx, floodgate.Request{Policy: &good, Key: longest, N: 1}); err != nil {
		t.Errorf("key of exactly %d bytes: %v", maxLen, err)
	}
	if err := store.Reset(ctx, &good, ""); !errors.Is(err, floodgate.ErrInvalidKey) {
		t.Errorf("Reset with an empty key: %v, want ErrInvalidKey", err)
	}
	if err := store.Reset(ctx, &good, secret+"\xff"); !errors.Is(err, floodgate.ErrInvalidKey) {
		t.Errorf("Reset with a key not UTF-8: %v, want ErrInvalidKey", err)
	}
}

// testUsage checks usage tracking when the store is a UsageLister.
func (h *Harness) testUsage(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	lister, ok := store.(usage.Lister)
	if !ok {
		t.Skip("store is not a usage.Lister")
	}
	ctx := context.Background()
	p, err := floodgate.ParsePolicy(h.name("usage"), "fixed_window 3/1m track retention 1h")
	if err != nil {
		t.Fatal(err)
	}
	untracked, _ := floodgate.ParsePolicy(h.name("usage-off"), "fixed_window 3/1m")
	// key a: 5 adds (3 allowed, 2 denied) at t0..t0+4s; b: 2 adds at
	// t0+10s with a peek; c: one add of 4 (denied) at t0+20s.
	t0 := BaseMicros
	for i := 0; i < 5; i++ {
		clock.SetMicros(t0 + int64(i)*1_000_000)
		take(t, store, &p, "a", 1, false)
		take(t, store, &untracked, "a", 1, false)
	}
	clock.SetMicros(t0 + 10_000_000)
	take(t, store, &p, "b", 1, false)
	take(t, store, &p, "b", 1, true)
	take(t, store, &p, "b", 1, false)
	clock.SetMicros(t0 + 20_000_000)
	take(t, store, &p, "c", 4, false)

	list := func(by usage.Order, limit int) string {
		us, err := lister.TopKeys(ctx, p.Name, by, limit)
		if err != nil {
			t.Fatalf("TopKeys(%v, %d): %v", by, limit, err)
		}
		var b strings.Builder
		for _, u := range us {
			fmt.Fprintf(&b, "%s:%d/%d@%d-%d ", u.Key, u.Requests, u.Denied,
				u.FirstSeen.UnixMicro()-t0, u.LastSeen.UnixMicro()-t0)
		}
		return strings.TrimSpace(b.String())
	}
	for _, c := range []struct {
		by    usage.Order
		limit int
		want  string
	}{
		{usage.ByRequests, 10, "a:5/2@0-4000000 c:4/4@20000000-20000000 b:2/0@10000000-10000000"},
		{usage.ByDenied, 10, "c:4/4@20000000-20000000 a:5/2@0-4000000 b:2/0@10000000-10000000"},
		{usage.ByLastSeen, 2, "c:4/4@20000000-20000000 b:2/0@10000000-10000000"},
		{usage.ByRequests, 1, "a:5/2@0-4000000"},
	} {
		if got := list(c.by, c.limit); got != c.want {
			t.Errorf("TopKeys(%v, %d) = %q, want %q", c.by, c.limit, got, c.want)
		}
	}
	if us, err := lister.TopKeys(ctx, untracked.Name, usage.ByRequests, 10); err != nil || len(us) != 0 {
		t.Errorf("TopKeys of an untracked policy = %v, %v; want none", us, err)
	}
	if err := store.Reset(ctx, &p, "a"); err != nil {
		t.Fatal(err)
	}
	if got, want := list(usage.ByRequests, 10), "c:4/4@20000000-20000000 b:2/0@10000000-10000000"; got != want {
		t.Errorf("after Reset(a): TopKeys = %q, want %q", got, want)
	}
	// The window's state is gone after a minute, usage stays for the
	// retention of an hour after the last add, then goes.
	clock.SetMicros(t0 + 10_000_000 + int64(time.Hour/time.Microsecond) - 1)
	if got, want := list(usage.ByRequests, 10), "c:4/4@20000000-20000000 b:2/0@10000000-10000000"; got != want {
		t.Errorf("within retention: TopKeys = %q, want %q", got, want)
	}
	clock.SetMicros(t0 + 20_000_000 + int64(time.Hour/time.Microsecond))
	if got := list(usage.ByRequests, 10); got != "" {
		t.Errorf("after retention: TopKeys = %q, want none", got)
	}
}

// testUsageExpires: usage expires with the key's state when the policy
// sets no retention (SPEC.md, per-key usage metadata), and an add after
// that starts it afresh instead of adding to the old totals: two adds, 1.3
// s of quiet under a 1 s window opened by the first, one add, and the key
// shows one request, first seen at that add.
func (h *Harness) testUsageExpires(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	lister, ok := store.(usage.Lister)
	if !ok {
		t.Skip("store is not a usage.Lister")
	}
	ctx := context.Background()
	p, err := floodgate.ParsePolicy(h.name("usage-expiry"), "fixed_window 100/1s align first track")
	if err != nil {
		t.Fatal(err)
	}
	list := func() string {
		us, err := lister.TopKeys(ctx, p.Name, usage.ByRequests, 10)
		if err != nil {
			t.Fatalf("TopKeys: %v", err)
		}
		var b strings.Builder
		for _, u := range us {
			fmt.Fprintf(&b, "%s:%d/%d@%d-%d ", u.Key, u.Requests, u.Denied,
				u.FirstSeen.UnixMicro()-BaseMicros, u.LastSeen.UnixMicro()-BaseMicros)
		}
		return strings.TrimSpace(b.String())
	}
	take(t, store, &p, "k", 1, false)
	clock.SetMicros(BaseMicros + 100_000)
	take(t, store, &p, "k", 1, false)
	if got, want := list(), "k:2/0@0-100000"; got != want {
		t.Errorf("after two adds: TopKeys = %q, want %q", got, want)
	}
	clock.SetMicros(BaseMicros + 1_000_000) // the window, and the usage, end
	if got := list(); got != "" {
		t.Errorf("at the window's end: TopKeys = %q, want none", got)
	}
	clock.SetMicros(BaseMicros + 1_300_000)
	if d := take(t, store, &p, "k", 1, false); !d.Allowed || d.Remaining != 99 {
		t.Errorf("the add after the window: %v, want allowed with 99 remaining", d)
	}
	if got, want := list(), "k:1/0@1300000-1300000"; got != want {
		t.Errorf("after the window and one more add: TopKeys = %q, want %q (expired usage revived)", got, want)
	}
}

// testClose: operations after Close fail with ErrClosed; Close is
// idempotent.
func (h *Harness) testClose(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.NewStore(t, clock)
	p := floodgate.Policy{Name: h.name("close"), Algorithm: floodgate.GCRA, Max: 10, Window: time.Second, Burst: 1}
	take(t, store, &p, "k", 1, false)
	if err := store.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := store.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ctx := context.Background()
	if _, err := store.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1}); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("Take after Close: %v, want ErrClosed", err)
	}
	if err := store.Reset(ctx, &p, "k"); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("Reset after Close: %v, want ErrClosed", err)
	}
}
