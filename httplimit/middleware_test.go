package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/internal/rlheadertest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rlheader"
)

// do serves req with h and checks every header field of the response as a
// Structured Field.
var do = rlheadertest.Serve

func mustPolicy(t testing.TB, name, text string) floodgate.Policy {
	t.Helper()
	p, err := floodgate.ParsePolicy(name, text)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// base is the tests' start instant: a whole hour, so that fixed windows
// aligned to the epoch start with it.
var base = time.Unix(1_700_000_000-1_700_000_000%3600, 0)

// env is a memory store on a manual clock, for middleware tests.
type env struct {
	t     *testing.T
	clock *floodgatetest.ManualClock
	store *memstore.Store
}

func newEnv(t *testing.T, opts ...memstore.Option) *env {
	t.Helper()
	clock := floodgatetest.NewManualClock(base)
	s, err := memstore.New(append([]memstore.Option{memstore.WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &env{t: t, clock: clock, store: s}
}

func (e *env) limiter(name, text string) *floodgate.Limiter {
	e.t.Helper()
	return newLimiter(e.t, e.store, name, text)
}

func newLimiter(t testing.TB, s floodgate.Store, name, text string) *floodgate.Limiter {
	t.Helper()
	lim, err := floodgate.NewLimiter(s, mustPolicy(t, name, text))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// clientKey keys requests by their X-Client field.
var clientKey = httplimit.Header("X-Client")

// ok is the handler behind the middleware.
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, "ok")
})

func wrap(t testing.TB, c httplimit.Config) http.Handler {
	t.Helper()
	mw, err := httplimit.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return mw(ok)
}

func get(client string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	return r
}

// problem decodes a problem+json response body.
func problem(t testing.TB, rec *httptest.ResponseRecorder) httplimit.Problem {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p httplimit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if p.Status != rec.Code {
		t.Errorf("problem status %d, response %d", p.Status, rec.Code)
	}
	return p
}

func wantStatus(t testing.TB, rec *httptest.ResponseRecorder, code int) {
	t.Helper()
	if rec.Code != code {
		t.Fatalf("status %d, want %d; headers %v; body %s", rec.Code, code, rec.Header(), rec.Body)
	}
}

func wantHeader(t testing.TB, rec *httptest.ResponseRecorder, name, want string) {
	t.Helper()
	if got := rec.Header().Values(name); want == "" && len(got) != 0 || want != "" && !slices.Equal(got, []string{want}) {
		t.Errorf("%s = %q, want %q", name, got, want)
	}
}

func TestAllowedAndDenied(t *testing.T) {
	e := newEnv(t)
	h := wrap(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("api", "fixed_window 2/1m"), Key: clientKey}}})

	rec := do(t, h, get("a"))
	wantStatus(t, rec, 200)
	if rec.Body.String() != "ok" {
		t.Errorf("body %q", rec.Body)
	}
	wantHeader(t, rec, "RateLimit-Policy", `"api";q=2;w=60`)
	wantHeader(t, rec, "RateLimit", `"api";r=1;t=60`)
	wantHeader(t, rec, "Retry-After", "")

	e.clock.Advance(15*time.Second + 300*time.Millisecond)
	rec = do(t, h, get("a"))
	wantStatus(t, rec, 200)
	wantHeader(t, rec, "RateLimit", `"api";r=0;t=45`) // 44.7 s rounded up

	rec = do(t, h, get("a"))
	wantStatus(t, rec, http.StatusTooManyRequests)
	wantHeader(t, rec, "RateLimit-Policy", `"api";q=2;w=60`)
	wantHeader(t, rec, "RateLimit", `"api";r=0;t=45`)
	wantHeader(t, rec, "Retry-After", "45")
	p := problem(t, rec)
	want := httplimit.Problem{
		Type:             "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title:            "Too Many Requests",
		Status:           429,
		Detail:           "The request exceeds the rate limit: retry in 45 s.",
		ViolatedPolicies: []string{"api"},
	}
	if !equalProblem(p, want) {
		t.Errorf("problem %+v, want %+v", p, want)
	}
	// The raw body uses the draft's member name.
	if !strings.Contains(rec.Body.String(), `"violated-policies":["api"]`) {
		t.Errorf("body %s", rec.Body)
	}

	// Another key has its own quota.
	wantStatus(t, do(t, h, get("b")), 200)
	// After Retry-After, the same client passes again.
	e.clock.Advance(45 * time.Second)
	wantStatus(t, do(t, h, get("a")), 200)
}

func equalProblem(a, b httplimit.Problem) bool {
	return a.Type == b.Type && a.Title == b.Title && a.Status == b.Status && a.Detail == b.Detail &&
		slices.Equal(a.ViolatedPolicies, b.ViolatedPolicies)
}

// TestNeverAllowed is SPEC.md rule 14: a cost the policy can never admit
// gives a 429 without Retry-After, and RateLimit without t.
func TestNeverAllowed(t *testing.T) {
	e := newEnv(t)
	h := wrap(t, httplimit.Config{
		Rules:   []httplimit.Rule{{Limiter: e.limiter("closed", "fixed_window 0/1m"), Key: clientKey}},
		Headers: rlheader.IETF | rlheader.XRateLimit | rlheader.RetryAfter,
	})
	rec := do(t, h, get("a"))
	wantStatus(t, rec, 429)
	wantHeader(t, rec, "Retry-After", "")
	wantHeader(t, rec, "RateLimit", `"closed";r=0`)
	wantHeader(t, rec, "X-RateLimit-Limit", "0")
	wantHeader(t, rec, "X-RateLimit-Reset", "0")
	if p := problem(t, rec); !strings.Contains(p.Detail, "retrying will not help") {
		t.Errorf("detail %q", p.Detail)
	}
}

func TestXRateLimitHeaders(t *testing.T) {
	e := newEnv(t)
	lim := e.limiter("api", "gcra 10/1s burst 5")
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		sel       rlheader.Fields
		wantReset string
	}{
		{rlheader.XRateLimit, "1"},
		{rlheader.XRateLimit | rlheader.XRateLimitResetUnix, "1800000001"},
	} {
		h := wrap(t, httplimit.Config{
			Rules: []httplimit.Rule{{Limiter: lim, Key: clientKey}}, Headers: c.sel,
			Now: func() time.Time { return now },
		})
		rec := do(t, h, get(c.sel.String()))
		wantStatus(t, rec, 200)
		wantHeader(t, rec, "X-RateLimit-Limit", "10")
		wantHeader(t, rec, "X-RateLimit-Remaining", "4")
		wantHeader(t, rec, "X-RateLimit-Reset", c.wantReset) // 100ms rounded up
		wantHeader(t, rec, "RateLimit", "")
		wantHeader(t, rec, "RateLimit-Policy", "")
	}
	h := wrap(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Key: clientKey}}, Headers: rlheader.None})
	rec := do(t, h, get("none"))
	if len(rec.Header()) != 1 { // Content-Type of the handler
		t.Errorf("None: %v", rec.Header())
	}
}

// TestSeveralPolicies checks the binding policy and what a denied request
// consumes: the rules before the one that denied, not the ones after it.
func TestSeveralPolicies(t *testing.T) {
	e := newEnv(t)
	wide := e.limiter("wide", "fixed_window 3/1m")
	narrow := e.limiter("narrow", "fixed_window 1/1h")
	remaining := func(lim *floodgate.Limiter, key string) int64 {
		d, err := lim.Peek(context.Background(), key, 1)
		if err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		return d.Remaining + 1 // a peek tells what remains after the add it previews
	}

	// wide first: a request denied by narrow still consumed from wide.
	h := wrap(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: wide, Key: clientKey}, {Limiter: narrow, Key: clientKey}}})
	rec := do(t, h, get("a"))
	wantStatus(t, rec, 200)
	wantHeader(t, rec, "RateLimit-Policy", `"wide";q=3;w=60, "narrow";q=1;w=3600`)
	wantHeader(t, rec, "RateLimit", `"narrow";r=0;t=3600`) // the least remaining
	rec = do(t, h, get("a"))
	wantStatus(t, rec, 429)
	wantHeader(t, rec, "RateLimit", `"narrow";r=0;t=3600`)
	if got := remaining(wide, "a"); got != 1 {
		t.Errorf("wide remaining %d after a denied request, want 1 (consumed)", got)
	}

	// narrow first: a request it denies consumes nothing from wide.
	h = wrap(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: narrow, Key: clientKey}, {Limiter: wide, Key: clientKey}}})
	wantStatus(t, do(t, h, get("b")), 200)
	for range 3 {
		wantStatus(t, do(t, h, get("b")), 429)
	}
	if got := remaining(wide, "b"); got != 2 {
		t.Errorf("wide remaining %d after denied requests, want 2 (peeked only)", got)
	}

	// When several deny, the binding one is the longest wait, and every
	// denying policy is violated.
	e2 := newEnv(t)
	minute, hour := e2.limiter("minute", "fixed_window 1/1m"), e2.limiter("hour", "fixed_window 1/1h")
	h = wrap(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: minute, Key: clientKey}, {Limiter: hour, Key: clientKey}}})
	wantStatus(t, do(t, h, get("d")), 200)
	e2.clock.Advance(10 * time.Second)
	rec = do(t, h, get("d"))
	wantStatus(t, rec, 429)
	wantHeader(t, rec, "Retry-After", "3590")
	wantHeader(t, rec, "RateLimit", `"hour";r=0;t=3590`)
	if p := problem(t, rec); !slices.Equal(p.ViolatedPolicies, []string{"minute", "hour"}) {
		t.Errorf("violated-policies %q", p.ViolatedPolicies)
	}
}

// TestMultiLimitPolicy checks the item names of a policy with several
// limits.
func TestMultiLimitPolicy(t *testing.T) {
	e := newEnv(t)
	h := wrap(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("login", "sliding_window 1/5s resolution 1s, 3/1h resolution 10m"), Key: clientKey}}})
	rec := do(t, h, get("a"))
	wantStatus(t, rec, 200)
	wantHeader(t, rec, "RateLimit-Policy", `"login/0";q=1;w=5, "login/1";q=3;w=3600`)
	wantHeader(t, rec, "RateLimit", `"login/0";r=0;t=5`)
	rec = do(t, h, get("a"))
	wantStatus(t, rec, 429)
	wantHeader(t, rec, "Retry-After", "5")
	if p := problem(t, rec); !slices.Equal(p.ViolatedPolicies, []string{"login/0"}) {
		t.Errorf("violated-policies %q", p.ViolatedPolicies)
	}
}

func TestShadow(t *testing.T) {
	e := newEnv(t)
	var seen [][]httplimit.RuleDecision
	h := wrap(t, httplimit.Config{
		Rules:      []httplimit.Rule{{Limiter: e.limiter("api", "fixed_window 1/1m"), Key: clientKey}},
		Shadow:     true,
		OnDecision: func(r *http.Request, res []httplimit.RuleDecision) { seen = append(seen, res) },
	})
	wantStatus(t, do(t, h, get("a")), 200)
	rec := do(t, h, get("a"))
	wantStatus(t, rec, 200) // denied, but shadow mode never blocks
	wantHeader(t, rec, "RateLimit", `"api";r=0;t=60`)
	wantHeader(t, rec, "Retry-After", "")
	rec = do(t, h, get("")) // no key: reported, not blocked
	wantStatus(t, rec, 200)
	if len(seen) != 3 || !seen[0][0].Decision.Allowed || seen[1][0].Decision.Allowed || !errors.Is(seen[2][0].Err, httplimit.ErrKey) {
		t.Errorf("hook saw %+v", seen)
	}
}

func TestCustomDenied(t *testing.T) {
	e := newEnv(t)
	h := wrap(t, httplimit.Config{
		Rules: []httplimit.Rule{{Limiter: e.limiter("api", "fixed_window 0/1m"), Key: clientKey}},
		Denied: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res := httplimit.Decisions(r.Context())
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprintf(w, "%d %s %v", len(res), res[0].Policy.Name, res[0].Decision.Allowed)
		}),
	})
	rec := do(t, h, get("a"))
	wantStatus(t, rec, http.StatusTeapot)
	if rec.Body.String() != "1 api false" {
		t.Errorf("body %q", rec.Body)
	}
	wantHeader(t, rec, "RateLimit", `"api";r=0`)
	if got := httplimit.Decisions(context.Background()); got != nil {
		t.Errorf("Decisions of a bare context = %v", got)
	}
}

func TestKeyErrors(t *testing.T) {
	e := newEnv(t, memstore.WithMaxKeyLen(8))
	first := e.limiter("first", "fixed_window 5/1m")
	var hooked []httplimit.RuleDecision
	for _, status := range []int{0, 400, 500} {
		h := wrap(t, httplimit.Config{
			Rules: []httplimit.Rule{
				{Limiter: first, Key: httplimit.Header("X-Other")},
				{Limiter: e.limiter("second", "fixed_window 5/1m"), Key: clientKey},
			},
			KeyErrorStatus: status,
			OnDecision:     func(r *http.Request, res []httplimit.RuleDecision) { hooked = res },
		})
		want := max(status, 400)
		for _, c := range []struct {
			name   string
			req    *http.Request
			failed []bool
		}{
			{"missing key", get(""), []bool{true, true}},
			{"overlong key", func() *http.Request { r := get("too-long-key"); r.Header.Set("X-Other", "o"); return r }(), []bool{false, true}},
			{"key not UTF-8", func() *http.Request { r := get("ok"); r.Header.Set("X-Other", "o\xff"); return r }(), []bool{true, false}},
		} {
			rec := do(t, h, c.req)
			wantStatus(t, rec, want)
			if p := problem(t, rec); p.Type != httplimit.BlankType || p.Title != http.StatusText(want) {
				t.Errorf("%s: problem %+v", c.name, p)
			}
			if strings.Contains(rec.Body.String(), "too-long-key") {
				t.Errorf("%s: body %s contains the key", c.name, rec.Body)
			}
			for i, f := range c.failed {
				if got := errors.Is(hooked[i].Err, httplimit.ErrKey); got != f {
					t.Errorf("%s: rule %d: key error %v, want %v", c.name, i, hooked[i].Err, f)
				}
			}
		}
	}
	// The overlong keys were found after the first rule had consumed: one
	// unit per request (of three); a missing key consumed nothing.
	if d, _ := first.Peek(context.Background(), "o", 1); d.Remaining != 1 {
		t.Errorf("first rule: a peek has %d remaining, want 1 (3 of 5 consumed)", d.Remaining)
	}
}

func TestConfigErrors(t *testing.T) {
	e := newEnv(t)
	lim := e.limiter("api", "gcra 1/1s")
	rules := []httplimit.Rule{{Limiter: lim, Key: clientKey}}
	for _, c := range []struct {
		cfg  httplimit.Config
		want []string
	}{
		{httplimit.Config{}, []string{"Rules = []: at least one rule"}},
		{httplimit.Config{Rules: []httplimit.Rule{{Key: clientKey}}}, []string{"Rules[0].Limiter = nil"}},
		{httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim}}}, []string{"Rules[0].Key = nil"}},
		{httplimit.Config{Rules: rules, KeyErrorStatus: 403}, []string{"KeyErrorStatus = 403: 0 (meaning 400), 400 or 500"}},
		{httplimit.Config{Rules: rules, Headers: rlheader.None | rlheader.IETF}, []string{"Headers = IETF|None"}},
		{httplimit.Config{Rules: rules, Headers: rlheader.XRateLimitResetUnix}, []string{"XRateLimitResetUnix together with XRateLimit"}},
		{httplimit.Config{Rules: rules, Headers: 0x40}, []string{"Headers = Fields(0x40)"}},
		{httplimit.Config{Rules: []httplimit.Rule{{}, {}}, KeyErrorStatus: 1}, []string{"Rules[0].Limiter", "Rules[1].Limiter", "KeyErrorStatus = 1"}},
	} {
		_, err := httplimit.New(c.cfg)
		if !errors.Is(err, httplimit.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c.cfg, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New: %q does not contain %q", err, w)
			}
		}
	}
}

// flakyStore is a store that can be made to fail or to hang until its
// context is done.
type flakyStore struct {
	floodgate.Store
	fail, hang atomic.Bool
	calls      atomic.Int64
}

func (s *flakyStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	s.calls.Add(1)
	switch {
	case s.hang.Load():
		<-ctx.Done()
		return floodgate.Decision{}, fmt.Errorf("%w: flaky: %w", floodgate.ErrUnavailable, ctx.Err())
	case s.fail.Load():
		return floodgate.Decision{}, fmt.Errorf("%w: flaky: down", floodgate.ErrUnavailable)
	}
	return s.Store.Take(ctx, req)
}

// TestFailureModes: a store under a failure policy (package failure)
// fails open, closed or to a fallback store, and the middleware answers
// each as documented; an unwrapped store's error is a 503.
func TestFailureModes(t *testing.T) {
	e := newEnv(t)
	flaky := &flakyStore{Store: e.store}
	local := newEnv(t) // the fallback: a store of its own
	var mu sync.Mutex
	var last []httplimit.RuleDecision
	hook := func(r *http.Request, res []httplimit.RuleDecision) { mu.Lock(); last = res; mu.Unlock() }
	newH := func(p failure.Policy) http.Handler {
		s, err := failure.Wrap(flaky, p)
		if err != nil {
			t.Fatal(err)
		}
		return wrap(t, httplimit.Config{
			Rules:      []httplimit.Rule{{Limiter: newLimiter(t, s, "api", "fixed_window 2/1m"), Key: clientKey}},
			OnDecision: hook,
		})
	}
	flaky.fail.Store(true)

	t.Run("open", func(t *testing.T) {
		rec := do(t, newH(failure.Policy{}), get("a"))
		wantStatus(t, rec, 200)
		wantHeader(t, rec, "RateLimit-Policy", `"api";q=2;w=60`)
		wantHeader(t, rec, "RateLimit", "") // nothing known to report: never a claimed r=0
		if r := last[0]; !r.Decision.Allowed || !r.Decision.Degraded || r.Err != nil {
			t.Errorf("hook saw %+v", r)
		}
	})
	t.Run("closed", func(t *testing.T) {
		rec := do(t, newH(failure.Policy{Mode: failure.Closed, RetryAfter: 3 * time.Second}), get("a"))
		wantStatus(t, rec, 503)
		wantHeader(t, rec, "Retry-After", "3")
		wantHeader(t, rec, "RateLimit", "")
		if p := problem(t, rec); p.Type != httplimit.BlankType || p.Title != "Service Unavailable" {
			t.Errorf("problem %+v", p)
		}
		if r := last[0]; r.Decision.Allowed || !r.Decision.Degraded {
			t.Errorf("hook saw %+v", r)
		}
		rec = do(t, newH(failure.Policy{Mode: failure.Closed}), get("a"))
		wantHeader(t, rec, "Retry-After", "1")
	})
	t.Run("fallback", func(t *testing.T) {
		h := newH(failure.Policy{Mode: failure.Fallback, Fallback: local.store})
		for n, want := range []int{200, 200, 429} {
			rec := do(t, h, get("a"))
			wantStatus(t, rec, want)
			if r := last[0]; !r.Decision.Degraded || r.Policy.Name != "api" || r.Err != nil {
				t.Errorf("request %d: hook saw %+v", n+1, r)
			}
			if n == 1 {
				wantHeader(t, rec, "RateLimit", `"api";r=0;t=60`) // the fallback's numbers
			}
			if want == 429 {
				wantHeader(t, rec, "Retry-After", "60")
				if p := problem(t, rec); !slices.Equal(p.ViolatedPolicies, []string{"api"}) {
					t.Errorf("problem %+v", p)
				}
			}
		}
	})
	t.Run("fallback fails too", func(t *testing.T) {
		broken := &flakyStore{Store: local.store}
		broken.fail.Store(true)
		rec := do(t, newH(failure.Policy{Mode: failure.Fallback, Fallback: broken}), get("b"))
		wantStatus(t, rec, 200)
		wantHeader(t, rec, "RateLimit", "")
		if r := last[0]; !r.Decision.Allowed || !r.Decision.Degraded {
			t.Errorf("hook saw %+v", r)
		}
	})
	t.Run("closed but another rule denies", func(t *testing.T) {
		s, err := failure.Wrap(flaky, failure.Policy{Mode: failure.Closed})
		if err != nil {
			t.Fatal(err)
		}
		h := wrap(t, httplimit.Config{
			Rules: []httplimit.Rule{
				{Limiter: e.limiter("zero", "fixed_window 0/1m"), Key: clientKey},
				{Limiter: newLimiter(t, s, "api", "fixed_window 2/1m"), Key: clientKey},
			},
		})
		rec := do(t, h, get("a"))
		wantStatus(t, rec, 429)
		wantHeader(t, rec, "RateLimit", `"zero";r=0`)
	})
	t.Run("unwrapped store", func(t *testing.T) {
		h := wrap(t, httplimit.Config{
			Rules:      []httplimit.Rule{{Limiter: newLimiter(t, flaky, "api", "fixed_window 2/1m"), Key: clientKey}},
			OnDecision: hook,
		})
		rec := do(t, h, get("a"))
		wantStatus(t, rec, 503)
		wantHeader(t, rec, "Retry-After", "1")
		if r := last[0]; !errors.Is(r.Err, floodgate.ErrUnavailable) {
			t.Errorf("hook saw %+v", r)
		}
	})
	flaky.fail.Store(false)
	flaky.hang.Store(true)
	t.Run("timeout", func(t *testing.T) {
		for _, mode := range []failure.Mode{failure.Open, failure.Closed, failure.Fallback} {
			h := newH(failure.Policy{Mode: mode, Timeout: 30 * time.Millisecond, Fallback: local.store})
			start := time.Now()
			rec := do(t, h, get("t-"+mode.String()))
			// At least the timeout (the store hangs), and no hang: hung
			// is far above any scheduling delay of a loaded machine, and a
			// store call the timeout did not cut would never return.
			if took := time.Since(start); took < 30*time.Millisecond || took > hung {
				t.Errorf("%s: request took %v with a 30ms timeout", mode, took)
			}
			if want := map[failure.Mode]int{failure.Open: 200, failure.Closed: 503, failure.Fallback: 200}[mode]; rec.Code != want {
				t.Errorf("%s: status %d, want %d", mode, rec.Code, want)
			}
			if !last[0].Decision.Degraded {
				t.Errorf("%s: hook saw %+v, want a degraded decision", mode, last[0])
			}
		}
	})
}

// TestSpoofedForwardingThroughMiddleware checks end to end that a client
// cannot escape its quota by sending forwarding fields, while clients
// behind a trusted proxy each get their own.
func TestSpoofedForwardingThroughMiddleware(t *testing.T) {
	e := newEnv(t)
	kf := mustClientIP(t, httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.XForwardedFor})
	h := wrap(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("ip", "fixed_window 1/1m"), Key: kf}}})
	req := func(peer, xff string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		return r
	}
	wantStatus(t, do(t, h, req("203.0.113.9:1000", "198.51.100.1")), 200)
	wantStatus(t, do(t, h, req("203.0.113.9:1001", "198.51.100.2")), 429) // same peer, spoofed field ignored
	wantStatus(t, do(t, h, req("10.0.0.1:1000", "198.51.100.1")), 200)
	wantStatus(t, do(t, h, req("10.0.0.2:1000", "198.51.100.2, 10.0.0.1")), 200)
	wantStatus(t, do(t, h, req("10.0.0.1:1001", "203.0.113.77, 198.51.100.1")), 429) // the client's own spoof is left of it
	rec := do(t, h, req("10.0.0.1:1002", "bogus"))
	wantStatus(t, rec, 400)
}
