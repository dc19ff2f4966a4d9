package storekit_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

func TestCountsDeniedDefaults(t *testing.T) {
	for _, a := range storekit.Algorithms() {
		p := floodgate.Policy{Algorithm: a}
		if got, want := storekit.CountsDenied(&p), a == floodgate.SlidingLog; got != want {
			t.Errorf("%s: CountsDenied = %v with CountDenied nil, want %v", a, got, want)
		}
		p.CountDenied = new(true)
		if !storekit.CountsDenied(&p) {
			t.Errorf("%s: CountDenied true is not on", a)
		}
		p.CountDenied = new(false)
		if storekit.CountsDenied(&p) {
			t.Errorf("%s: CountDenied false is not off", a)
		}
	}
}

// TestBoundsAgreeWithValidate: the bounds this package exports for store
// authors are the ones Policy.Validate enforces.
func TestBoundsAgreeWithValidate(t *testing.T) {
	limits := func(n int) floodgate.Policy {
		p := floodgate.Policy{Name: "p", Algorithm: floodgate.SlidingWindow}
		for range n {
			p.Limits = append(p.Limits, floodgate.Limit{Max: 1, Window: time.Second, Resolution: time.Second})
		}
		return p
	}
	named := func(n int) floodgate.Policy {
		return floodgate.Policy{Name: strings.Repeat("n", n), Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Second}
	}
	window := func(d time.Duration) floodgate.Policy {
		return floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 1, Window: d}
	}
	for _, c := range []struct {
		what string
		ok   floodgate.Policy
		bad  floodgate.Policy
	}{
		{"MaxLimits", limits(storekit.MaxLimits), limits(storekit.MaxLimits + 1)},
		{"MaxNameLen", named(storekit.MaxNameLen), named(storekit.MaxNameLen + 1)},
		{"MaxDuration", window(storekit.MaxDuration), window(storekit.MaxDuration + time.Microsecond)},
	} {
		if err := c.ok.Validate(); err != nil {
			t.Errorf("%s: the bound itself is refused: %v", c.what, err)
		}
		if err := c.bad.Validate(); !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("%s: one past the bound is accepted (%v)", c.what, err)
		}
	}
}

func TestCheckRequest(t *testing.T) {
	p := &floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1}
	for _, c := range []struct {
		req  floodgate.Request
		want error
	}{
		{floodgate.Request{Policy: p, Key: "k", N: 1}, nil},
		{floodgate.Request{Key: "k", N: 1}, floodgate.ErrInvalidPolicy},
		{floodgate.Request{Policy: p, N: 1}, floodgate.ErrInvalidKey},
		{floodgate.Request{Policy: p, Key: "toolong", N: 1}, floodgate.ErrInvalidKey},
		{floodgate.Request{Policy: p, Key: "k", N: 0}, floodgate.ErrInvalidCost},
		{floodgate.Request{Policy: p, Key: "k", N: floodgate.MaxCost + 1}, floodgate.ErrInvalidCost},
	} {
		err := storekit.CheckRequest(&c.req, 4)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("CheckRequest(%+v) = %v, want %v", c.req, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "toolong") {
			t.Errorf("CheckRequest's error names the key: %v", err)
		}
	}
}

// TestID: the identity is the name and the parameters, not the address.
func TestID(t *testing.T) {
	a, _ := floodgate.ParsePolicy("api", "gcra 10/1s burst 5")
	b, _ := floodgate.ParsePolicy("api", "10/s burst 5")
	c, _ := floodgate.ParsePolicy("api", "gcra 10/1s burst 6")
	d, _ := floodgate.ParsePolicy("web", "gcra 10/1s burst 5")
	if storekit.ID(&a) != storekit.ID(&b) {
		t.Errorf("one policy, two IDs: %s and %s", storekit.ID(&a), storekit.ID(&b))
	}
	if storekit.ID(&a) == storekit.ID(&c) || storekit.ID(&a) == storekit.ID(&d) {
		t.Errorf("different policies share an ID: %s %s %s", storekit.ID(&a), storekit.ID(&c), storekit.ID(&d))
	}
	if !strings.HasPrefix(storekit.ID(&a), "api@") {
		t.Errorf("ID %q does not start with the name", storekit.ID(&a))
	}
}

// TestCacheDerivesOnce: a policy is validated and derived once per
// address, its entry is the cache's own copy, and an invalid policy is an
// error.
func TestCacheDerivesOnce(t *testing.T) {
	var mu sync.Mutex
	derived := 0
	c := storekit.NewCache(0, func(p *floodgate.Policy) (string, error) {
		mu.Lock()
		derived++
		mu.Unlock()
		return p.String(), nil
	})
	p, _ := floodgate.ParsePolicy("api", "gcra 10/1s burst 5")
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				e, err := c.Get(&p)
				if err != nil || e.Value != "gcra 10/1s burst 5" || e.ID != storekit.ID(&p) {
					t.Errorf("Get = %+v, %v", e, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if derived > 16 || c.Len() != 1 {
		t.Errorf("derived %d times, %d entries; want one entry derived at most once per racing goroutine", derived, c.Len())
	}
	e, _ := c.Get(&p)
	p.Burst = 6 // the caller breaks the contract; the entry keeps what was validated
	if e.Policy.Burst != 5 {
		t.Errorf("the entry shares the caller's policy: burst %d", e.Policy.Burst)
	}
	bad := floodgate.Policy{Name: "bad", Algorithm: floodgate.GCRA}
	if _, err := c.Get(&bad); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("Get(invalid) = %v", err)
	}
}

// TestCacheBounded: minting policies without end (a reload a second for a
// year) never holds more than the cache's size.
func TestCacheBounded(t *testing.T) {
	c := storekit.NewCache(100, func(p *floodgate.Policy) (int, error) { return 0, nil })
	keep, _ := floodgate.ParsePolicy("keep", "gcra 10/1s")
	for i := range 10_000 {
		p, _ := floodgate.ParsePolicy(fmt.Sprintf("p%d", i), "gcra 10/1s")
		if _, err := c.Get(&p); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(&keep); err != nil {
			t.Fatal(err)
		}
		if n := c.Len(); n > 100 {
			t.Fatalf("after %d policies the cache holds %d, above its size 100", i+1, n)
		}
	}
}
