package floodgate_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/floodgatehq/floodgate"
)

// recordStore records the requests it is given and allows each with
// Granted N; budgets says what its Budgets reports.
type recordStore struct {
	mu      sync.Mutex
	reqs    []floodgate.Request
	budgets bool
}

func (s *recordStore) Take(_ context.Context, req floodgate.Request) (floodgate.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Group = slices.Clone(req.Group) // the Limiter reuses it
	s.reqs = append(s.reqs, req)
	if req.Reserve != nil {
		req.Reserve.Key, req.Reserve.N = req.Key, req.N
		req.Reserve.Holds = make([]int64, 4*(len(req.Group)+1))
	}
	return floodgate.Decision{Allowed: true, Granted: req.N}, nil
}
func (s *recordStore) Reset(context.Context, *floodgate.Policy, string) error { return nil }
func (s *recordStore) Close() error                                           { return nil }
func (s *recordStore) Budgets() bool                                          { return s.budgets }

// TestLimiterNeedsBudgets: groups, calendar windows and the budget methods
// need a store whose Budgets reports true; with any other every one is an
// error wrapping errors.ErrUnsupported and nothing reaches the store.
func TestLimiterNeedsBudgets(t *testing.T) {
	ctx := context.Background()
	a, b := mustParse(t, "gcra 5/1s"), mustParse(t, "fixed_window 10/1m")
	b.Name = "b"
	cal := floodgate.Policy{Name: "c", Algorithm: floodgate.FixedWindow, Max: 5, Align: "calendar", Period: "day"}
	for _, store := range []floodgate.Store{&recordStore{budgets: false}, plainStore{&recordStore{}}} {
		if _, err := floodgate.NewLimiter(store, a, b); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("NewLimiter(group) on a store without budgets: %v", err)
		}
		if _, err := floodgate.NewLimiter(store, cal); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("NewLimiter(calendar) on a store without budgets: %v", err)
		}
		lim, err := floodgate.NewLimiter(store, a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lim.AllowAtMost(ctx, "k", 3); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("AllowAtMost: %v", err)
		}
		if _, err := lim.Reserve(ctx, "k", 3); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Reserve: %v", err)
		}
		if _, err := lim.Refund(ctx, "k", 3); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Refund: %v", err)
		}
	}
}

// plainStore hides every method but the Store interface's.
type plainStore struct{ floodgate.Store }

// TestLimiterGroupRequests: a Limiter over several policies hands the store
// one request naming every member, with the operation's field set.
func TestLimiterGroupRequests(t *testing.T) {
	ctx := context.Background()
	store := &recordStore{budgets: true}
	a, b := mustParse(t, "gcra 5/1s"), mustParse(t, "fixed_window 10/1m")
	b.Name = "b"
	if _, err := floodgate.NewLimiter(store, a, a); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("NewLimiter(p, p): %v, want ErrInvalidPolicy (one name twice)", err)
	}
	lim, err := floodgate.NewLimiter(store, a, b)
	if err != nil {
		t.Fatal(err)
	}
	lim.Allow(ctx, "k")
	lim.Peek(ctx, "k", 2)
	lim.AllowAtMost(ctx, "k", 3)
	lim.Refund(ctx, "k", 4)
	r, err := lim.Reserve(ctx, "k", 5)
	if err != nil || !r.Decision.Allowed {
		t.Fatalf("Reserve: %+v, %v", r, err)
	}
	lim.Settle(ctx, r, 2)
	want := []struct {
		n                                 int64
		peek, atMost, refund, res, settle bool
	}{{1, false, false, false, false, false}, {2, true, false, false, false, false}, {3, false, true, false, false, false},
		{4, false, false, true, false, false}, {5, false, false, false, true, false}, {3, false, false, false, false, true}}
	if len(store.reqs) != len(want) {
		t.Fatalf("%d requests, want %d", len(store.reqs), len(want))
	}
	for i, w := range want {
		q := store.reqs[i]
		if q.Policy.Name != "p" || q.Key != "k" || len(q.Group) != 1 || q.Group[0].Policy.Name != "b" || q.Group[0].Key != "k" {
			t.Errorf("request %d: members %+v", i, q)
		}
		if q.N != w.n || q.Peek != w.peek || q.AtMost != w.atMost || q.Refund != w.refund || (q.Reserve != nil) != w.res || (q.Settle != nil) != w.settle {
			t.Errorf("request %d: %+v, want %+v", i, q, w)
		}
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Error(err)
	}
}

// TestSettleOnce: of many goroutines settling one reservation, exactly one
// reaches the store; the others get ErrSettled. used is checked.
func TestSettleOnce(t *testing.T) {
	ctx := context.Background()
	store := &recordStore{budgets: true}
	lim, err := floodgate.NewLimiter(store, mustParse(t, "gcra 5/1s"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.Reserve(ctx, "k", 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Settle(ctx, r, 6); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("Settle(used > n): %v", err)
	}
	if _, err := lim.Settle(ctx, r, -1); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("Settle(used < 0): %v", err)
	}
	other, _ := floodgate.NewLimiter(store, mustParse(t, "gcra 5/1s"))
	if _, err := other.Settle(ctx, r, 1); err == nil {
		t.Error("Settle on another Limiter succeeded")
	}
	if _, err := lim.Settle(ctx, nil, 1); err == nil {
		t.Error("Settle(nil) succeeded")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	oks, settled := 0, 0
	for range 16 {
		wg.Go(func() {
			_, err := lim.Settle(ctx, r, 1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				oks++
			case errors.Is(err, floodgate.ErrSettled):
				settled++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if oks != 1 || settled != 15 || len(store.reqs) != 2 {
		t.Errorf("%d settles succeeded, %d ErrSettled, %d requests; want 1, 15, 2", oks, settled, len(store.reqs))
	}
}
