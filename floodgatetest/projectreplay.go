package floodgatetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// ReplayProjectVectors replays the project's vectors (ProjectVectors) on
// store, which must implement storekit.BudgetStore, through Store.Take and
// Store.Reset, moving clock to each step's time, and reports every mismatch
// with t.Errorf. Each vector runs under its own policy names (prefix, "v",
// its index, "m", the member's index). Usage queries (ops series and list)
// are left to ReplayUsageVectors. It returns the steps replayed and the
// mismatches.
//
// The steps become requests as docs/budgets.md says: a group's members are
// the request and its Group; add_at_most sets AtMost, reserve Reserve
// (kept under the step's id), settle Settle with N the reservation's
// granted units less used (a peek of 1 when that is 0), refund Refund, and
// reset resets every member. granted is checked against Decision.Granted
// and member against the member storekit.SplitBinding finds in
// Decision.Binding.
func ReplayProjectVectors(t testing.TB, store floodgate.Store, clock *ManualClock, prefix string, vs []ProjectVector) (steps, mismatches int) {
	t.Helper()
	ctx := context.Background()
	for i := range vs {
		v := &vs[i]
		ps := make([]floodgate.Policy, len(v.Members))
		for j, m := range v.Members {
			ps[j] = m.Policy
			ps[j].Name = vectorName(prefix, "v"+strconv.Itoa(i)+"m"+strconv.Itoa(j))
		}
		request := func(keys []string, n int64) floodgate.Request {
			req := floodgate.Request{Policy: &ps[0], Key: keys[0], N: n}
			for j := 1; j < len(keys); j++ {
				req.Group = append(req.Group, floodgate.Request{Policy: &ps[j], Key: keys[j]})
			}
			return req
		}
		reservations := map[string]*floodgate.Reservation{}
		reservedKeys := map[string][]string{}
		for j, s := range v.Steps {
			if s.Op == "series" || s.Op == "list" {
				continue
			}
			clock.SetMicros(s.At)
			steps++
			fail := func(format string, args ...any) {
				t.Errorf("%s %s step %d (%s n=%d at %s): %s", v.File, v.Name, j, s.Op, s.N,
					time.UnixMicro(s.At).UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
				mismatches++
			}
			if s.Op == "reset" {
				for k, key := range s.Keys {
					if err := store.Reset(ctx, &ps[k], key); err != nil {
						fail("reset: %v", err)
					}
				}
				continue
			}
			keys := s.Keys
			if s.Op == "settle" {
				keys = reservedKeys[s.ID]
			}
			req := request(keys, s.N)
			switch s.Op {
			case "peek":
				req.Peek = true
			case "add_at_most":
				req.AtMost = true
			case "peek_at_most":
				req.AtMost, req.Peek = true, true
			case "reserve":
				r := new(floodgate.Reservation)
				req.Reserve = r
				reservations[s.ID], reservedKeys[s.ID] = r, keys
			case "settle":
				r := reservations[s.ID]
				x := r.Decision.Granted - s.Used
				if x <= 0 {
					req.N, req.Peek = 1, true
				} else {
					req.N, req.Settle = x, r
				}
			case "refund":
				req.Refund = true
			}
			d, err := store.Take(ctx, req)
			if err != nil {
				fail("%v", err)
				continue
			}
			if msg := projectMismatch(s.Expect, &req, d); msg != "" {
				fail("%s", msg)
			}
		}
	}
	return steps, mismatches
}

// vectorName returns prefix + s, cut to a policy name's length.
func vectorName(prefix, s string) string {
	n := prefix + s
	if len(n) > storekit.MaxNameLen {
		n = n[len(n)-storekit.MaxNameLen:]
	}
	return n
}

// projectMismatch compares a store's decision with a project expectation.
func projectMismatch(e *ProjectExpect, req *floodgate.Request, d floodgate.Decision) string {
	if e == nil {
		return ""
	}
	msg := e.Expect.Mismatch(d)
	add := func(s string) {
		if msg != "" {
			msg += ", "
		}
		msg += s
	}
	if e.Granted != nil && *e.Granted != d.Granted {
		add(fmt.Sprintf("granted=%d want %d", d.Granted, *e.Granted))
	}
	if e.Member != nil {
		if m, _ := storekit.SplitBinding(req, d.Binding); int32(m) != *e.Member {
			add(fmt.Sprintf("member=%d (binding %d) want %d", m, d.Binding, *e.Member))
		}
	}
	return msg
}

// testProjectVectors replays ProjectVectors on a store with budgets; a
// store without them fails unless the harness says NoBudgets.
func (h *Harness) testProjectVectors(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	if !h.budgets(t, store) {
		return
	}
	vs, err := ProjectVectors()
	if err != nil {
		t.Fatal(err)
	}
	if h.Counters != nil {
		var kept []ProjectVector
		var left []string
		for _, v := range vs {
			if h.needsBudget(&v) {
				left = append(left, v.File+" "+v.Name)
				continue
			}
			kept = append(kept, v)
		}
		t.Logf("conformance: %d project vectors left out: they need a group, a reservation or a partial grant of a policy the store keeps as a counter (Harness.Counters): %s",
			len(left), strings.Join(left, ", "))
		vs = kept
	}
	steps, mismatches := ReplayProjectVectors(t, store, clock, h.Prefix, vs)
	t.Logf("conformance: project vectors (%s): %d vectors, %d steps replayed, %d mismatches", t.Name(), len(vs), steps, mismatches)
}

// needsBudget reports whether v decides a policy the store keeps as a
// counter in a group, a reservation, a settle or a partial grant.
func (h *Harness) needsBudget(v *ProjectVector) bool {
	counted := false
	for i := range v.Members {
		counted = counted || h.counted(&v.Members[i].Policy)
	}
	if !counted {
		return false
	}
	if v.Group {
		return true
	}
	for _, st := range v.Steps {
		switch st.Op {
		case "reserve", "settle", "add_at_most", "peek_at_most":
			return true
		}
	}
	return false
}

// budgets reports whether the budget checks apply to store: true for a
// storekit.BudgetStore whose Budgets reports true. Otherwise the test
// fails, unless the harness sets NoBudgets, when it is logged and skipped,
// so that no store passes them by silence.
func (h *Harness) budgets(t *testing.T, store floodgate.Store) bool {
	t.Helper()
	if storekit.HasBudgets(store) {
		return true
	}
	if !h.NoBudgets {
		t.Fatalf("%T does not implement storekit.BudgetStore (or its Budgets reports false); set Harness.NoBudgets to skip the budget checks", store)
	}
	t.Logf("conformance: %T has no budgets (Harness.NoBudgets): groups, reservations, refunds, partial grants and calendar windows NOT checked", store)
	t.Skip("Harness.NoBudgets")
	return false
}
