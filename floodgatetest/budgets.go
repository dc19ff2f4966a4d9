package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// groupRequest returns a request of n on key for every policy of ps.
func groupRequest(ps []floodgate.Policy, key string, n int64) floodgate.Request {
	req := floodgate.Request{Policy: &ps[0], Key: key, N: n}
	for i := 1; i < len(ps); i++ {
		req.Group = append(req.Group, floodgate.Request{Policy: &ps[i], Key: key})
	}
	return req
}

// testGroupConcurrency: goroutines deciding under a group of two policies
// grant exactly what the same requests grant one by one, and leave the
// policies' states exactly as they do: never one spent without the other.
// Every phase is at one instant and its requests are alike (adds of 1, or
// partial grants of at most 3), so the one-by-one answer does not depend
// on their order. The requests one by one go to shadow keys under the same
// policies.
//
// OneKey decides one key under both policies, as a Limiter over two
// policies does. UsersAndOrg decides eight user keys under the first
// policy, each with one organisation key under the second ("{conc}u3" and
// "{conc}org", policies with HashTag, which a Cluster store needs to
// decide them in one step): the organisation's state, and the units
// granted in all, do not depend on the order either, for policies that
// count no denied request.
func (h *Harness) testGroupConcurrency(t *testing.T) {
	t.Run("OneKey", func(t *testing.T) { h.groupConcurrency(t, false) })
	t.Run("UsersAndOrg", func(t *testing.T) { h.groupConcurrency(t, true) })
}

func (h *Harness) groupConcurrency(t *testing.T, users bool) {
	goroutines, phases := h.Goroutines, h.Phases
	if goroutines == 0 {
		goroutines = 64
	}
	if phases == 0 {
		phases = 6
	}
	rng := newRand(t)
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	if !h.budgets(t, store) {
		return
	}
	ctx := context.Background()
	// keys returns the members' keys of goroutine g's requests, for the
	// goroutines (base "conc") or one by one (base "seq").
	keys := func(base string, g int) [2]string {
		if !users {
			return [2]string{base, base}
		}
		return [2]string{fmt.Sprintf("{%s}u%d", base, g%8), "{" + base + "}org"}
	}
	request := func(ps []floodgate.Policy, k [2]string, n int64, atMost bool) floodgate.Request {
		return floodgate.Request{Policy: &ps[0], Key: k[0], N: n, AtMost: atMost,
			Group: []floodgate.Request{{Policy: &ps[1], Key: k[1]}}}
	}
	pp := PropertyPolicies()
	const perGoroutine = 4
	for i := range pp {
		ps := []floodgate.Policy{pp[i], pp[(i+5)%len(pp)]} // mixed algorithms
		if users && (storekit.CountsDenied(&ps[0]) || storekit.CountsDenied(&ps[1])) {
			continue
		}
		if h.counted(&ps[0]) || h.counted(&ps[1]) {
			t.Logf("%s + %s: left out: a group of a policy the store keeps as a counter (Harness.Counters)", ps[0].String(), ps[1].String())
			continue
		}
		for k := range ps {
			ps[k].Name = h.name(fmt.Sprintf("grp%d-%t-%d", i, users, k))
			ps[k].HashTag = users
		}
		desc := ps[0].String() + " + " + ps[1].String()
		at := BaseMicros + rng.Int64N(1_000_000)
		for phase := 0; phase < phases; phase++ {
			clock.SetMicros(at)
			atMost := phase%2 == 1
			n := int64(1)
			if atMost {
				n = 3
			}
			var granted atomic.Int64
			errs := make(chan error, goroutines)
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Go(func() {
					for j := 0; j < perGoroutine; j++ {
						d, err := store.Take(ctx, request(ps, keys("conc", g), n, atMost))
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed != (d.Granted > 0) || d.Granted > n {
							errs <- fmt.Errorf("decision %+v of a request of %d", d, n)
							return
						}
						granted.Add(d.Granted)
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", desc, err)
			}
			var want int64
			for g := 0; g < goroutines; g++ {
				for j := 0; j < perGoroutine; j++ {
					d, err := store.Take(ctx, request(ps, keys("seq", g), n, atMost))
					if err != nil {
						t.Fatalf("%s: %v", desc, err)
					}
					want += d.Granted
				}
			}
			if got := granted.Load(); got != want {
				t.Fatalf("%s phase %d (at most %t): %d goroutines were granted %d units; one by one %d", desc, phase, atMost, goroutines, got, want)
			}
			// Each policy alone sees the same state under both keys (with
			// users, which user got the organisation's last units depends
			// on the order: only the organisation is compared).
			for k := range ps {
				if users && k == 0 {
					continue
				}
				for _, m := range []int64{1, 2} {
					c, s := take(t, store, &ps[k], keys("conc", 0)[k], m, true), take(t, store, &ps[k], keys("seq", 0)[k], m, true)
					if c != s {
						t.Fatalf("%s phase %d: policy %s alone peeks %+v after the goroutines, %+v one by one", desc, phase, ps[k].String(), c, s)
					}
				}
			}
			at += rng.Int64N(3_000_000)
		}
	}
}

// testReserveContention: goroutines reserving and settling on one key
// under a group never take the budget below empty or above full: at one
// instant, every reservation a goroutine keeps (used) stays spent and
// every unused unit comes back, so each policy ends with exactly its
// capacity less the units used, and never granted more than it holds.
func (h *Harness) testReserveContention(t *testing.T) {
	goroutines := h.Goroutines
	if goroutines == 0 {
		goroutines = 64
	}
	rng := newRand(t)
	clock := NewManualClock(time.UnixMicro(BaseMicros + rng.Int64N(1_000_000)))
	store := h.open(t, clock)
	if !h.budgets(t, store) {
		return
	}
	ctx := context.Background()
	var ps []floodgate.Policy
	for i, text := range []string{"fixed_window 400/1h", "gcra 1/1s burst 300", "token_bucket 500/1h burst 250", "sliding_window 350/1h resolution 1m"} {
		p, err := floodgate.ParsePolicy(h.name(fmt.Sprintf("rsv%d", i)), text)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	capacity := []int64{400, 300, 250, 350}
	var used atomic.Int64
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		seed := rng.Uint64()
		wg.Go(func() {
			x := seed
			next := func(n int64) int64 { x = x*6364136223846793005 + 1442695040888963407; return int64(x>>33) % n }
			for j := 0; j < 12; j++ {
				n := 1 + next(5)
				r := new(floodgate.Reservation)
				req := groupRequest(ps, "k", n)
				req.Reserve = r
				d, err := store.Take(ctx, req)
				if err != nil {
					errs <- err
					return
				}
				if d.Remaining > 250 || d.Allowed != (d.Granted == n) || !d.Allowed && d.Granted != 0 {
					errs <- fmt.Errorf("reserve %d: %+v", n, d)
					return
				}
				if !d.Allowed {
					continue
				}
				u := next(n + 1)
				used.Add(u)
				if u == n {
					continue
				}
				req = groupRequest(ps, "k", n-u)
				req.Settle = r
				if d, err = store.Take(ctx, req); err != nil {
					errs <- fmt.Errorf("settle: %w", err)
					return
				}
				if d.Remaining > 250 {
					errs <- fmt.Errorf("settle %d of %d: %+v", n-u, n, d)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	u := used.Load()
	if u > 250 {
		t.Fatalf("%d units used, more than the group's 250", u)
	}
	for i := range ps {
		// A peek of 1 reports what remains after that 1.
		d := take(t, store, &ps[i], "k", 1, true)
		if want := max(capacity[i]-u-1, 0); d.Remaining != want {
			t.Errorf("%s: peek 1 leaves %d after %d units used, want %d", ps[i].String(), d.Remaining, u, want)
		}
	}
	t.Logf("%d goroutines: %d units used of the group's 250", goroutines, u)
}

// testBudgetInvalid: malformed group and budget requests get
// storekit.ErrInvalidRequest (or the sentinel of their field) and decide
// nothing; the errors never contain a key.
func (h *Harness) testBudgetInvalid(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	if !h.budgets(t, store) {
		return
	}
	ctx := context.Background()
	p, err := floodgate.ParsePolicy(h.name("binv"), "fixed_window 5/1m")
	if err != nil {
		t.Fatal(err)
	}
	q := p
	q.Name = h.name("binv2")
	secret := "secret-key-" + strings.Repeat("s", 8)
	ps := []floodgate.Policy{p, q}
	r := new(floodgate.Reservation)
	res := groupRequest(ps, secret, 2)
	res.Reserve = r
	if d, err := store.Take(ctx, res); err != nil || !d.Allowed || d.Granted != 2 {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	mk := func(f func(*floodgate.Request)) floodgate.Request {
		req := groupRequest(ps, secret, 1)
		f(&req)
		return req
	}
	for _, c := range []struct {
		name string
		req  floodgate.Request
		want error
	}{
		{"repeated member", mk(func(r *floodgate.Request) { r.Group[0].Policy = &ps[0] }), storekit.ErrInvalidRequest},
		{"member with a cost", mk(func(r *floodgate.Request) { r.Group[0].N = 1 }), storekit.ErrInvalidRequest},
		{"member without a policy", mk(func(r *floodgate.Request) { r.Group[0].Policy = nil }), floodgate.ErrInvalidPolicy},
		{"member without a key", mk(func(r *floodgate.Request) { r.Group[0].Key = "" }), floodgate.ErrInvalidKey},
		{"two operations", mk(func(r *floodgate.Request) { r.AtMost, r.Refund = true, true }), storekit.ErrInvalidRequest},
		{"peek refund", mk(func(r *floodgate.Request) { r.Peek, r.Refund = true, true }), storekit.ErrInvalidRequest},
		{"settle more than reserved", mk(func(q *floodgate.Request) { q.Settle, q.N = r, 3 }), floodgate.ErrInvalidCost},
		{"settle on other members", floodgate.Request{Policy: &ps[0], Key: secret, N: 1, Settle: r}, storekit.ErrInvalidRequest},
		{"settle on another key", func() floodgate.Request {
			q := groupRequest(ps, secret+"x", 1)
			q.Settle = r
			return q
		}(), storekit.ErrInvalidRequest},
	} {
		_, err := store.Take(ctx, c.req)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		} else if strings.Contains(err.Error(), "secret-key") {
			t.Errorf("%s: error %q contains the key", c.name, err)
		}
	}
	for i := range ps {
		if d := take(t, store, &ps[i], secret, 1, true); d.Remaining != 2 {
			t.Errorf("%s: peek 1 leaves %d after the bad requests, want 2 (nothing decided)", ps[i].Name, d.Remaining)
		}
	}
}
