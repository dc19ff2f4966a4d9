package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// atomicEnv is two rules on one memory store: wide (10 a minute per
// client address) first, narrow (2 a minute per user) second.
func atomicEnv(t *testing.T, atomic bool, store floodgate.Store) (http.Handler, *floodgate.Limiter) {
	t.Helper()
	wide, err := floodgate.NewLimiter(store, mustPolicy(t, "wide", "fixed_window 10/1m"))
	if err != nil {
		t.Fatal(err)
	}
	narrow, err := floodgate.NewLimiter(store, mustPolicy(t, "narrow", "fixed_window 2/1m"))
	if err != nil {
		t.Fatal(err)
	}
	limit, err := httplimit.New(httplimit.Config{
		Rules: []httplimit.Rule{
			{Limiter: wide, Key: httplimit.RemoteIP()},
			{Limiter: narrow, Key: httplimit.Header("X-User")},
		},
		Atomic: atomic, Store: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	return limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })), wide
}

func atomicGet(h http.Handler, user string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:5000"
	r.Header.Set("X-User", user)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestAtomicRules: with Atomic, a request the later rule denies spends
// nothing of the earlier rule's quota (without it, it does: the
// behaviour Atomic removes), and the response names the denying rule.
func TestAtomicRules(t *testing.T) {
	ctx := context.Background()
	for _, atomic := range []bool{false, true} {
		t.Run(fmt.Sprint("atomic=", atomic), func(t *testing.T) {
			clock := floodgatetest.NewManualClock(base)
			store, err := memstore.New(memstore.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			h, wide := atomicEnv(t, atomic, store)
			for i := range 5 {
				w := atomicGet(h, "alice")
				want := 204
				if i >= 2 {
					want = 429
				}
				if w.Code != want {
					t.Fatalf("request %d: %d, want %d", i, w.Code, want)
				}
				if i >= 2 && !strings.Contains(w.Header().Get("RateLimit"), `"narrow"`) {
					t.Errorf("request %d: RateLimit %q, want narrow's entry", i, w.Header().Get("RateLimit"))
				}
			}
			d, err := wide.Peek(ctx, "192.0.2.1/32", 1)
			if err != nil {
				t.Fatal(err)
			}
			used := 10 - (d.Remaining + 1)
			want := int64(5) // 2 allowed, 3 denied by narrow yet spent on wide
			if atomic {
				want = 2
			}
			if used != want {
				t.Errorf("wide spent %d after 2 allowed and 3 denied requests, want %d", used, want)
			}
			// Another user passes narrow: wide's quota is what is left.
			if w := atomicGet(h, "bob"); w.Code != 204 {
				t.Errorf("bob: %d", w.Code)
			}
		})
	}
}

// crossSlot refuses groups of different keys, as a Redis Cluster does
// for keys in different slots.
type crossSlot struct{ *memstore.Store }

func (s crossSlot) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	for _, m := range req.Group {
		if m.Key != req.Key {
			return floodgate.Decision{}, fmt.Errorf("test: %w", storekit.ErrCrossSlot)
		}
	}
	return s.Store.Take(ctx, req)
}

// TestAtomicCrossSlot: where the keys cannot share a slot, the rules are
// decided one after the other, as without Atomic.
func TestAtomicCrossSlot(t *testing.T) {
	// A manual clock: on the real one, a window boundary (wide's are
	// minutes of the epoch) passing between the requests, more likely on a
	// loaded machine, would reset what they spent.
	store, err := memstore.New(memstore.WithClock(floodgatetest.NewManualClock(base)))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h, wide := atomicEnv(t, true, crossSlot{store})
	for range 3 {
		atomicGet(h, "alice")
	}
	if d, _ := wide.Peek(context.Background(), "192.0.2.1/32", 1); d.Remaining != 6 {
		t.Errorf("wide: remaining %d after 3 requests decided in turn, want 6 (3 spent)", d.Remaining)
	}
}

// TestAtomicConfig: Atomic needs a Store with budgets.
func TestAtomicConfig(t *testing.T) {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lim, err := floodgate.NewLimiter(store, mustPolicy(t, "p", "fixed_window 1/1m"))
	if err != nil {
		t.Fatal(err)
	}
	rules := []httplimit.Rule{{Limiter: lim, Key: httplimit.RemoteIP()}}
	for _, c := range []struct {
		store floodgate.Store
		says  string
	}{
		{nil, "Store = nil: the store of the rules' limiters, required with Atomic"},
		{plainStore{store}, "storekit.BudgetStore"},
	} {
		_, err := httplimit.New(httplimit.Config{Rules: rules, Atomic: true, Store: c.store})
		if !errors.Is(err, httplimit.ErrInvalidConfig) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Store %T: %v, want %q", c.store, err, c.says)
		}
	}
}

// plainStore hides memstore's budgets.
type plainStore struct{ floodgate.Store }
