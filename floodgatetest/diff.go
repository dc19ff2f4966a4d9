package floodgatetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// A Chooser supplies the choices of a differential run: a seeded random
// source (RandChooser) or the bytes of a fuzz input (ByteChooser).
type Chooser interface {
	// IntN returns a choice in [0, n); 0 when n ≤ 1.
	IntN(n int64) int64
	// Done reports that a byte chooser has run out of input.
	Done() bool
}

// RandChooser makes choices from a seeded generator.
type RandChooser struct{ R *rand.Rand }

func (c RandChooser) IntN(n int64) int64 {
	if n <= 1 {
		return 0
	}
	return c.R.Int64N(n)
}

func (RandChooser) Done() bool { return false }

// ByteChooser makes choices from fuzz input, two bytes at a time; when the
// input runs out every choice is 0 and Done reports true.
type ByteChooser struct {
	B []byte
	i int
}

func (c *ByteChooser) IntN(n int64) int64 {
	if n <= 1 {
		return 0
	}
	if c.i+1 >= len(c.B) {
		c.i = len(c.B)
		return 0
	}
	v := int64(c.B[c.i])<<8 | int64(c.B[c.i+1])
	c.i += 2
	return v % n
}

func (c *ByteChooser) Done() bool { return c.i >= len(c.B) }

func pick[T any](c Chooser, xs ...T) T { return xs[c.IntN(int64(len(xs)))] }

// RandomPolicy returns a valid policy of any algorithm with small,
// varied parameters (maxima from 0, several limits, resolutions that do or
// do not divide windows, fractional AR(1) maxima, count_denied on and off),
// named name.
func RandomPolicy(c Chooser, name string) floodgate.Policy {
	dur := func() time.Duration {
		return pick(c, time.Millisecond, 3*time.Millisecond, 10*time.Millisecond, 100*time.Millisecond,
			250*time.Millisecond, time.Second, 3*time.Second, 10*time.Second, time.Minute)
	}
	p := floodgate.Policy{Name: name}
	switch pick(c, storekit.Algorithms()...) {
	case floodgate.SlidingWindow:
		p.Algorithm = floodgate.SlidingWindow
		for i := int64(0); i <= c.IntN(3); i++ {
			w := dur()
			res := w / time.Duration(pick[int64](c, 1, 2, 3, 4, 10))
			res -= res % time.Microsecond
			if res <= 0 {
				res = w
			}
			p.Limits = append(p.Limits, floodgate.Limit{Max: float64(c.IntN(7)), Window: w, Resolution: res})
		}
	case floodgate.AR1:
		p.Algorithm = floodgate.AR1
		for i := int64(0); i <= c.IntN(3); i++ {
			p.Limits = append(p.Limits, floodgate.Limit{
				Max:        pick(c, 0, 1, 1.2, 2, 2.5, 3, 5, 10),
				Resolution: dur(),
				Decay:      pick(c, 1.1, 1.5, 2, 4),
			})
		}
	case floodgate.FixedWindow:
		p.Algorithm = floodgate.FixedWindow
		p.Max, p.Window = c.IntN(7), dur()
		p.Align = pick(c, floodgate.AlignEpoch, floodgate.AlignFirst)
	case floodgate.TokenBucket:
		p.Algorithm = floodgate.TokenBucket
		p.Max = 1 + c.IntN(8)
		p.Burst = 1 + c.IntN(p.Max)
		p.Window = dur()
	case floodgate.SlidingLog:
		p.Algorithm = floodgate.SlidingLog
		p.Max, p.Window = 1+c.IntN(6), dur()
		p.MinInterval = pick(c, 0, 0, p.Window/10, p.Window/3, p.Window)
		p.MinInterval -= p.MinInterval % time.Microsecond
	case floodgate.GCRA:
		p.Algorithm = floodgate.GCRA
		count := 1 + c.IntN(7)
		period := max(dur(), time.Duration(count)*time.Microsecond)
		p.Max, p.Window = count, period
		p.Burst = 1 + c.IntN(5)
	}
	p.CountDenied = pick(c, nil, new(true), new(false))
	return p
}

// Op is one operation of a differential run.
type Op struct {
	AtMicros int64
	Key      string
	N        int64
	Kind     string // "add", "peek" or "reset"
}

func (o Op) String() string {
	if o.Kind == "reset" {
		return fmt.Sprintf("at %d reset %q", o.AtMicros, o.Key)
	}
	return fmt.Sprintf("at %d %s %q n=%d", o.AtMicros, o.Kind, o.Key, o.N)
}

// DiffKeys are the keys of differential runs: look-alikes that must stay
// independent, and bytes a hash tag could trip on.
var DiffKeys = []string{"a", "{a}", "a}", "{}", "}{", "a:b", "ü", "\x00\xff", strings.Repeat("k", 300)}

// diffKey tracks what the driver knows of one key: the clock may go back
// only while its state has not been seen empty (SPEC.md rule 1 lets stores
// differ past that moment).
type diffKey struct {
	recorded bool
	tlast    int64 // the effective time of the last recording add
	expires  int64 // when its state empties
}

// Differential applies the same random operations to two stores that share
// clock and fails at the first decision on which they disagree, reporting
// the policy and the key's history. It steps the clock forwards (0, tiny,
// across windows) and backwards (only where rule 1 makes the answer
// defined), peeks, resets and adds costs from 1 to beyond the max. It
// returns the number of operations run.
//
// When both stores implement storekit.BudgetStore, it runs
// DifferentialBudgets instead; otherwise Decision.Granted, which only
// stores with budgets set, is not compared.
func Differential(t testing.TB, c Chooser, a, b floodgate.Store, clock *ManualClock, name string, ops int) int {
	t.Helper()
	if storekit.HasBudgets(a) && storekit.HasBudgets(b) {
		return DifferentialBudgets(t, c, a, b, clock, name, ops)
	}
	ctx := context.Background()
	p := RandomPolicy(c, name)
	if err := p.Validate(); err != nil {
		t.Fatalf("RandomPolicy made an invalid policy: %v", err)
	}
	keys := map[string]*diffKey{}
	var history []Op
	now := BaseMicros + c.IntN(1_000_000_000)
	seen := now
	ran := 0
	for i := 0; i < ops && !c.Done(); i++ {
		key := pick(c, DiffKeys[:1+c.IntN(int64(len(DiffKeys)))]...)
		k := keys[key]
		if k == nil {
			k = &diffKey{}
			keys[key] = k
		}
		switch c.IntN(10) {
		case 0, 1, 2: // same µs
		case 3, 4:
			now += c.IntN(1000)
		case 5, 6, 7:
			now += c.IntN(3_000_000)
		case 8:
			now += c.IntN(200_000_000)
		case 9:
			now -= c.IntN(2_000_000)
		}
		// The clock is shared: it may be behind from another key's step.
		// This key may step back only while its state has not been seen
		// empty (stores may have forgotten it since, rule 1).
		if now < seen && k.recorded && seen >= k.expires {
			now = seen
		}
		if now > seen {
			seen = now
		}
		clock.SetMicros(now)
		op := Op{AtMicros: now, Key: key, Kind: pick(c, "add", "add", "add", "add", "peek", "reset")}
		op.N = pick(c, 1, 1, 1, 2, 3, 1+c.IntN(12), floodgate.MaxCost)
		history = append(history, op)
		ran++
		if op.Kind == "reset" {
			for _, s := range []floodgate.Store{a, b} {
				if err := s.Reset(ctx, &p, key); err != nil {
					t.Fatalf("%s: Reset: %v", p.String(), err)
				}
			}
			*k = diffKey{}
			continue
		}
		req := floodgate.Request{Policy: &p, Key: key, N: op.N, Peek: op.Kind == "peek"}
		da, errA := a.Take(ctx, req)
		db, errB := b.Take(ctx, req)
		// Granted is set by stores with budgets only.
		da.Granted, db.Granted = 0, 0
		if errA != nil || errB != nil || da != db {
			t.Fatalf("stores disagree on %s (count_denied %v), key %q:\n%s  first:  %v (err %v)\n  second: %v (err %v)",
				p.String(), storekit.CountsDenied(&p), key, describe(history, key), da, errA, db, errB)
		}
		if !req.Peek && (da.Allowed || storekit.CountsDenied(&p)) {
			eff := now // rule 1: a step before t_last happens at t_last
			if k.recorded && k.tlast > now {
				eff = k.tlast
			}
			*k = diffKey{recorded: true, tlast: eff, expires: eff + int64(da.ResetAfter/time.Microsecond)}
		}
	}
	return ran
}

func describe(history []Op, key string) string {
	var b strings.Builder
	for _, op := range history {
		if op.Key == key {
			fmt.Fprintf(&b, "  %v\n", op)
		}
	}
	return b.String()
}

// DifferentialBudgets is Differential over the operations of groups and
// budgets: a group of one to three random policies (calendar windows among
// them) on one key or a key per member, and adds, peeks, partial grants
// and their peeks, reservations, settles of earlier reservations, refunds
// and resets, with the clock moving forwards only. It compares every
// decision, Granted and Binding included, and every reservation's holds.
// Both stores must implement storekit.BudgetStore.
func DifferentialBudgets(t testing.TB, c Chooser, a, b floodgate.Store, clock *ManualClock, name string, ops int) int {
	t.Helper()
	ctx := context.Background()
	ps := make([]floodgate.Policy, 1+c.IntN(3))
	for i := range ps {
		ps[i] = RandomPolicy(c, name+"-"+string(rune('a'+i)))
		if c.IntN(6) == 0 {
			ps[i] = floodgate.Policy{Name: ps[i].Name, Algorithm: floodgate.FixedWindow, Max: c.IntN(7),
				Align: "calendar", Period: pick(c, "day", "week", "month"), TZ: pick(c, "", "America/New_York", "Europe/Paris", "Australia/Lord_Howe")}
		}
		if err := ps[i].Validate(); err != nil {
			t.Fatalf("an invalid policy: %v", err)
		}
	}
	desc := make([]string, len(ps))
	for i := range ps {
		desc[i] = ps[i].String()
	}
	shared := c.IntN(2) == 0 // one key for every member
	type reservation struct {
		a, b *floodgate.Reservation
		keys []string
	}
	var reservations []reservation
	var history []string
	now := BaseMicros + c.IntN(1_000_000_000)
	ran := 0
	for i := 0; i < ops && !c.Done(); i++ {
		switch c.IntN(10) {
		case 0, 1, 2:
		case 3, 4:
			now += c.IntN(1000)
		case 5, 6, 7:
			now += c.IntN(3_000_000)
		case 8:
			now += c.IntN(200_000_000)
		case 9:
			now += c.IntN(40 * 86_400_000_000) // across calendar periods
		}
		clock.SetMicros(now)
		keys := make([]string, len(ps))
		for k := range keys {
			if k == 0 || !shared {
				keys[k] = pick(c, DiffKeys[:3]...)
			} else {
				keys[k] = keys[0]
			}
		}
		op := pick(c, "add", "add", "add", "peek", "add_at_most", "peek_at_most", "reserve", "reserve", "settle", "settle", "refund", "reset")
		n := pick(c, 1, 1, 2, 3, 1+c.IntN(12), floodgate.MaxCost)
		if op == "settle" && len(reservations) == 0 {
			op = "add"
		}
		var r reservation
		if op == "settle" {
			r = reservations[c.IntN(int64(len(reservations)))]
			keys = r.keys
		}
		history = append(history, fmt.Sprintf("at %d %s %q n=%d", now, op, keys, n))
		ran++
		if op == "reset" {
			for _, s := range []floodgate.Store{a, b} {
				for k := range ps {
					if err := s.Reset(ctx, &ps[k], keys[k]); err != nil {
						t.Fatalf("%v: Reset: %v", desc, err)
					}
				}
			}
			continue
		}
		req := floodgate.Request{Policy: &ps[0], Key: keys[0], N: n}
		for k := 1; k < len(ps); k++ {
			req.Group = append(req.Group, floodgate.Request{Policy: &ps[k], Key: keys[k]})
		}
		reqA, reqB := req, req
		switch op {
		case "peek":
			reqA.Peek, reqB.Peek = true, true
		case "add_at_most", "peek_at_most":
			reqA.AtMost, reqB.AtMost = true, true
			reqA.Peek, reqB.Peek = op == "peek_at_most", op == "peek_at_most"
		case "reserve":
			r = reservation{a: new(floodgate.Reservation), b: new(floodgate.Reservation), keys: keys}
			reqA.Reserve, reqB.Reserve = r.a, r.b
		case "settle":
			if !r.a.Decision.Allowed {
				reqA.Peek, reqB.Peek, reqA.N, reqB.N = true, true, 1, 1
				break
			}
			x := 1 + c.IntN(r.a.N)
			reqA.Settle, reqB.Settle, reqA.N, reqB.N = r.a, r.b, x, x
		case "refund":
			reqA.Refund, reqB.Refund = true, true
		}
		da, errA := a.Take(ctx, reqA)
		db, errB := b.Take(ctx, reqB)
		if errA != nil || errB != nil || da != db {
			t.Fatalf("stores disagree on %v (shared key %t):\n  %s\n  first:  %+v (err %v)\n  second: %+v (err %v)",
				desc, shared, strings.Join(history, "\n  "), da, errA, db, errB)
		}
		if op == "reserve" {
			if !slices.Equal(r.a.Holds, r.b.Holds) || r.a.Decision != r.b.Decision {
				t.Fatalf("stores disagree on a reservation of %v:\n  %s\n  first:  %+v\n  second: %+v", desc, strings.Join(history, "\n  "), r.a, r.b)
			}
			reservations = append(reservations, r)
		}
	}
	return ran
}
