package failure_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// plain hides every method of a store but floodgate.Store's.
type plain struct{ floodgate.Store }

var (
	perUser = floodgate.Policy{Name: "user", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour}
	perDay  = floodgate.Policy{Name: "day", Algorithm: floodgate.FixedWindow, Max: 100, Align: "calendar", Period: "day", TZ: "Europe/Paris"}
)

func quiet() failure.Option {
	return failure.WithLogger(slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
}

// TestBudgetsForwarded: the wrapper reports the wrapped store's Budgets,
// and replays the project's vectors on memstore as memstore does.
func TestBudgetsForwarded(t *testing.T) {
	clock := floodgatetest.NewManualClock(epoch)
	m, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := failure.Wrap(m, failure.Policy{Timeout: -1}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if !storekit.HasBudgets(s) {
		t.Error("a wrapped memstore has no budgets")
	}
	if p, _ := failure.Wrap(plain{m}, failure.Policy{}, quiet()); storekit.HasBudgets(p) {
		t.Error("a wrapped store without Budgets reports budgets")
	}
	if _, err := floodgate.NewLimiter(s, perUser, perDay); err != nil {
		t.Errorf("NewLimiter(group) on a wrapped memstore: %v", err)
	}
	vs, err := floodgatetest.ProjectVectors()
	if err != nil {
		t.Fatal(err)
	}
	steps, mismatches := floodgatetest.ReplayProjectVectors(t, s, clock, "", vs)
	t.Logf("project vectors through the failure wrapper: %d steps, %d mismatches", steps, mismatches)
}

// TestDegradedGroup: when the store fails, a group is one call and one
// decision, whatever the mode; an open one is granted in full, a degraded
// reservation holds nothing and settles as a peek; a fallback store
// decides the group with its numbers, and one without budgets fails open.
func TestDegradedGroup(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		mode    failure.Mode
		fb      func(floodgate.Store) floodgate.Store
		allowed bool
		limit   int64 // 0: no numbers
	}{
		{"open", failure.Open, nil, true, 0},
		{"closed", failure.Closed, nil, false, 0},
		{"fallback", failure.Fallback, func(m floodgate.Store) floodgate.Store { return m }, true, 10},
		{"fallback without budgets", failure.Fallback, func(m floodgate.Store) floodgate.Store { return plain{m} }, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := floodgatetest.NewManualClock(epoch)
			inner := newSharded(t, clock)
			inner.down.Store("B", true)
			p := failure.Policy{Mode: c.mode, Breaker: failure.Breaker{Disabled: true}}
			if c.fb != nil {
				fb, err := memstore.New(memstore.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				defer fb.Close()
				p.Fallback = c.fb(fb)
			}
			s, err := failure.Wrap(inner, p, failure.WithClock(clock), quiet())
			if err != nil {
				t.Fatal(err)
			}
			lim, err := floodgate.NewLimiter(s, perUser, perDay)
			if err != nil {
				t.Fatal(err)
			}
			before := inner.calls.Load()
			d, err := lim.AllowN(ctx, "bob", 3)
			if err != nil {
				t.Fatal(err)
			}
			if calls := inner.calls.Load() - before; calls != 1 {
				t.Errorf("%d store calls for a group of two, want 1", calls)
			}
			if !d.Degraded || d.Allowed != c.allowed || d.Limit != c.limit || c.allowed && d.Granted != 3 || !c.allowed && d.Granted != 0 {
				t.Errorf("AllowN(3): %+v; want degraded, allowed %t, limit %d, granted 3 when allowed", d, c.allowed, c.limit)
			}
			d, err = lim.AllowAtMost(ctx, "bob", 4)
			if err != nil || !d.Degraded || c.allowed && d.Granted != 4 {
				t.Errorf("AllowAtMost(4): %+v, %v; want degraded, granted 4 when allowed", d, err)
			}
			r, err := lim.Reserve(ctx, "bob", 2)
			if err != nil || !r.Decision.Degraded {
				t.Fatalf("Reserve: %+v, %v", r, err)
			}
			if _, err := lim.Settle(ctx, r, 0); err != nil {
				t.Errorf("Settle of a degraded reservation: %v", err)
			}
			if c.limit != 0 {
				// The fallback holds the reservation: 10 - 3 - 4 - 2 + 2, peek 1.
				if d, _ := lim.Peek(ctx, "bob", 1); d.Remaining != 2 {
					t.Errorf("fallback after the settle: %+v, want 2 remaining", d)
				}
			}
		})
	}
}
