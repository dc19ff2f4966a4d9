package luascript_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/httplimit/luascript"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
)

// healthyTimeout is the failure policy's timeout where Redis is meant to
// answer, and redisClient's dial timeout: far above any scheduling delay
// of a loaded machine, so that a healthy call is never cut (and its answer
// degraded).
const healthyTimeout = 10 * time.Second

// healthy is the failure policy of the tests where Redis answers: the
// default one (fail open) with healthyTimeout.
var healthy = failure.Policy{Timeout: healthyTimeout}

// redisClient returns a go-redis client for addr as the package wants
// one: context deadlines honoured (the failure policy's timeout bounds
// every call), no retries, and a dial timeout a loaded machine does not
// reach.
func redisClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: healthyTimeout, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// serverMillis returns the time of srv's clock, in milliseconds.
func serverMillis(t testing.TB, srv *redistest.Server) int64 {
	t.Helper()
	r, err := srv.Do(t, "TIME")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := r.([]any)
	if len(v) != 2 {
		t.Fatalf("TIME = %v", r)
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME = %v", r)
	}
	return sec*1000 + usec/1000
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })

func wrap(t testing.TB, c luascript.Config) http.Handler {
	t.Helper()
	mw, err := luascript.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return mw(ok)
}

func get(user string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	if user != "" {
		r.Header.Set("X-User", user)
	}
	return r
}

// do serves req and checks that every header field of the response is a
// valid Structured Field List (RFC 9651).
func do(t testing.TB, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	for name, values := range rec.Result().Header {
		if _, err := httpsfv.UnmarshalList(values); err != nil {
			t.Errorf("field %s: %q is not a Structured Field List: %v", name, values, err)
		}
	}
	return rec
}

// wantFields checks the response's fields named in want ("" for absent).
func wantFields(t testing.TB, rec *httptest.ResponseRecorder, want map[string]string) {
	t.Helper()
	for name, v := range want {
		got := rec.Header().Values(name)
		if v == "" && len(got) != 0 || v != "" && !slices.Equal(got, []string{v}) {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
}

func wantStatus(t testing.TB, rec *httptest.ResponseRecorder, code int) {
	t.Helper()
	if rec.Code != code {
		t.Fatalf("status %d, want %d; fields %v; body %s", rec.Code, code, rec.Header(), rec.Body)
	}
}

// TestSeedFixedWindow is the PlugLimit seed's built-in fixed window: with
// opts {10, 60} a first request gets x-ratelimit-limit: 10,
// x-ratelimit-reset: 60, x-ratelimit-remaining: 9, in the key the key
// function names.
func TestSeedFixedWindow(t *testing.T) {
	srv := redistest.StartServer(t)
	h := wrap(t, luascript.Config{
		Client:  redisClient(t, srv.Addr),
		Name:    "my_protected_pipeline_name",
		Key:     httplimit.Header("X-User"),
		Prefix:  "my_protected_pipeline_name:",
		Opts:    []any{10, 60},
		Failure: healthy,
	})
	before := serverMillis(t, srv)
	rec := do(t, h, get("12345"))
	wantStatus(t, rec, 200)
	wantFields(t, rec, map[string]string{"X-Ratelimit-Limit": "10", "X-Ratelimit-Reset": "60", "X-Ratelimit-Remaining": "9"})
	if v, err := srv.Do(t, "GET", "my_protected_pipeline_name:12345"); err != nil || v != "1" {
		t.Errorf("counter = %v, %v; want 1", v, err)
	}
	// The window lasts 60 s from when the script ran, on the server's
	// clock: between before and after, however long a loaded machine
	// takes (+1 for the milliseconds TIME truncates).
	pttl, err := srv.Do(t, "PTTL", "my_protected_pipeline_name:12345")
	after := serverMillis(t, srv)
	if n, _ := pttl.(int64); err != nil || n > 60_000 || n < 60_000-(after+1-before) {
		t.Errorf("PTTL = %v, %v; want 60 s less at most the %d ms since the request", pttl, err, after+1-before)
	}
	for n := 2; n <= 10; n++ {
		rec = do(t, h, get("12345"))
		wantStatus(t, rec, 200)
		wantFields(t, rec, map[string]string{"X-Ratelimit-Remaining": fmt.Sprint(10 - n)})
	}
	rec = do(t, h, get("12345"))
	wantStatus(t, rec, 429)
	wantFields(t, rec, map[string]string{"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": "0", "Content-Type": "application/problem+json"})
	var p httplimit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Type != httplimit.QuotaExceededType ||
		!slices.Equal(p.ViolatedPolicies, []string{"my_protected_pipeline_name"}) {
		t.Errorf("problem %+v, %v", p, err)
	}
	// A denied request is not counted; another key has its own window.
	if v, _ := srv.Do(t, "GET", "my_protected_pipeline_name:12345"); v != "10" {
		t.Errorf("counter = %v after a denial, want 10", v)
	}
	wantStatus(t, do(t, h, get("678")), 200)

	// The window ends: a new one opens.
	if _, err := srv.Do(t, "PEXPIRE", "my_protected_pipeline_name:12345", "1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	rec = do(t, h, get("12345"))
	wantStatus(t, rec, 200)
	wantFields(t, rec, map[string]string{"X-Ratelimit-Reset": "60", "X-Ratelimit-Remaining": "9"})
}

// TestSeedScriptOutputs applies the seed's two example outputs literally,
// from scripts that return them.
func TestSeedScriptOutputs(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redisClient(t, srv.Addr)
	for _, tc := range []struct {
		name, script string
		want         map[string]string
	}{
		{"fixed window output", `return {"allow", {"10", "60", "9"}}`,
			map[string]string{"X-Ratelimit-Limit": "10", "X-Ratelimit-Reset": "60", "X-Ratelimit-Remaining": "9"}},
		{"a pair overrides its position's name", `return {"allow", {"10", {"x-acme-header", "60"}, "9"}}`,
			map[string]string{"X-Ratelimit-Limit": "10", "X-Acme-Header": "60", "X-Ratelimit-Remaining": "9", "X-Ratelimit-Reset": ""}},
		{"optional elements ignored", `return {"allow", {"10"}, "ignored", 42}`,
			map[string]string{"X-Ratelimit-Limit": "10", "X-Ratelimit-Reset": ""}},
		{"integers formatted", `return {"allow", {10, 60, 9}}`,
			map[string]string{"X-Ratelimit-Limit": "10", "X-Ratelimit-Reset": "60", "X-Ratelimit-Remaining": "9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := wrap(t, luascript.Config{Client: c, Script: tc.script, Headers: luascript.FixedWindowHeaders(), Key: httplimit.Header("X-User"), Failure: healthy})
			rec := do(t, h, get("u"))
			wantStatus(t, rec, 200)
			wantFields(t, rec, tc.want)
		})
	}
}

// TestScriptInput checks that the script receives the keys and the
// options: PlugLimit's input, KEYS then ARGV.
func TestScriptInput(t *testing.T) {
	srv := redistest.StartServer(t)
	h := wrap(t, luascript.Config{
		Client:  redisClient(t, srv.Addr),
		Script:  `return {"deny", {KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]}}`,
		Headers: []string{"x-k1", "x-k2", "x-a1", "x-a2", "x-a3"},
		Keys: func(r *http.Request) ([]string, error) {
			u := r.Header.Get("X-User")
			return []string{u + ":minute", u + ":hour"}, nil
		},
		Opts:    []any{20, "600", 5},
		Failure: healthy,
	})
	rec := do(t, h, get("u1"))
	wantStatus(t, rec, 429)
	wantFields(t, rec, map[string]string{"X-K1": "u1:minute", "X-K2": "u1:hour", "X-A1": "20", "X-A2": "600", "X-A3": "5"})
}

// TestNoScript checks that a script flushed from Redis is sent again.
func TestNoScript(t *testing.T) {
	srv := redistest.StartServer(t)
	h := wrap(t, luascript.Config{Client: redisClient(t, srv.Addr), Key: httplimit.Header("X-User"), Opts: []any{5, 60}, Failure: healthy})
	for n, flush := range []bool{false, true, false} {
		if flush {
			if _, err := srv.Do(t, "SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		rec := do(t, h, get("u"))
		wantStatus(t, rec, 200)
		wantFields(t, rec, map[string]string{"X-Ratelimit-Remaining": fmt.Sprint(4 - n)})
	}
}

// TestFailures checks that script errors, malformed replies and an
// unreachable Redis follow the failure policy, within the timeout. Each
// fails at once: a loaded machine that lets the short timeout pass first
// fails it as well, with the same answer.
func TestFailures(t *testing.T) {
	const timeout = 50 * time.Millisecond
	// Far above the timeout and any scheduling delay of a loaded machine
	// (seconds): a request that long hung.
	const hung = 20 * time.Second
	srv := redistest.StartServer(t)
	c := redisClient(t, srv.Addr)
	// The fallback's time is a manual clock: on the real one, a second
	// passing between a user's two requests would make Retry-After 59.
	store, err := memstore.New(memstore.WithClock(floodgatetest.NewManualClock(time.Unix(1_700_000_000, 0))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	fallbackPolicy, err := floodgate.ParsePolicy("local", "fixed_window 1/1m align first")
	if err != nil {
		t.Fatal(err)
	}
	fallback, err := floodgate.NewLimiter(store, fallbackPolicy)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		code   int
		fields map[string]string
	}
	modes := []struct {
		failure failure.Policy
		first   outcome
		second  outcome
	}{
		{failure.Policy{Mode: failure.Open, Timeout: timeout},
			outcome{200, map[string]string{"Ratelimit": ""}}, outcome{200, nil}},
		{failure.Policy{Mode: failure.Closed, Timeout: timeout, RetryAfter: 2 * time.Second},
			outcome{503, map[string]string{"Retry-After": "2"}}, outcome{503, nil}},
		{failure.Policy{Mode: failure.Fallback, Timeout: timeout},
			outcome{200, map[string]string{"Ratelimit": `"local";r=0;t=60`, "Ratelimit-Policy": `"local";q=1;w=60`}},
			outcome{429, map[string]string{"Retry-After": "60"}}},
	}
	failing := []struct{ name, script string }{
		{"error reply", `return redis.error_reply("boom")`},
		{"runtime error", `return redis.call("INCR", "k", "too", "many")`},
		{"unknown verdict", `return {"block", {"1", "2", "3"}}`},
		{"not a list", `return 42`},
		{"too many values", `return {"allow", {"1", "2", "3", "4"}}`},
		{"bad header name", `return {"allow", {{"bad name", "1"}}}`},
	}
	user := 0
	for _, m := range modes {
		for _, f := range failing {
			t.Run(m.failure.Mode.String()+"/"+f.name, func(t *testing.T) {
				var mu sync.Mutex
				var seen []httplimit.RuleDecision
				h := wrap(t, luascript.Config{
					Client: c, Script: f.script, Headers: luascript.FixedWindowHeaders(),
					Key: httplimit.Header("X-User"), Failure: m.failure, Fallback: fallback, Name: "scripted",
					OnDecision: func(r *http.Request, res []httplimit.RuleDecision) {
						mu.Lock()
						seen = append(seen, res...)
						mu.Unlock()
					},
				})
				user++
				for i, want := range []outcome{m.first, m.second} {
					rec := do(t, h, get(fmt.Sprint(user)))
					if rec.Code != want.code {
						t.Fatalf("request %d: status %d, want %d; %v %s", i+1, rec.Code, want.code, rec.Header(), rec.Body)
					}
					wantFields(t, rec, want.fields)
				}
				for _, r := range seen {
					fallback := m.failure.Mode == failure.Fallback
					cause := errors.Is(r.Err, floodgate.ErrUnavailable) || errors.Is(r.Err, luascript.ErrMalformedReply)
					if !r.Decision.Degraded || fallback != (r.Policy != nil && r.Policy.Name == "local") || !fallback && !cause {
						t.Errorf("hook saw %+v (%v)", r, r.Err)
					}
				}
			})
		}
	}

	// Unreachable Redis: stopped mid-test, once the client's connection is
	// open and the script loaded. Redis decides the requests before the
	// stop, under a generous timeout (a loaded machine must not turn them
	// into degraded answers), through limiters of their own on the same
	// client: the limiters hold no connection.
	h := map[failure.Mode]http.Handler{}
	for i, m := range modes {
		h[m.failure.Mode] = wrap(t, luascript.Config{Client: c, Key: httplimit.Header("X-User"), Opts: []any{5, 60}, Failure: m.failure, Fallback: fallback})
		p := m.failure
		p.Timeout = healthyTimeout
		before := wrap(t, luascript.Config{Client: c, Key: httplimit.Header("X-User"), Opts: []any{5, 60}, Failure: p, Fallback: fallback})
		rec := do(t, before, get("before-stop"))
		wantStatus(t, rec, 200)
		wantFields(t, rec, map[string]string{"X-Ratelimit-Remaining": fmt.Sprint(4 - i)}) // the script's answer, not a degraded one
	}
	srv.Stop(t)
	for _, m := range modes {
		user++
		for i, want := range []outcome{m.first, m.second} {
			start := time.Now()
			rec := do(t, h[m.failure.Mode], get(fmt.Sprint(user)))
			if took := time.Since(start); took > hung {
				t.Errorf("%s: request took %v: it hung", m.failure.Mode, took)
			}
			if rec.Code != want.code {
				t.Fatalf("%s: request %d with Redis stopped: status %d, want %d", m.failure.Mode, i+1, rec.Code, want.code)
			}
			wantFields(t, rec, want.fields)
		}
	}
}

func TestShadowAndDenied(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redisClient(t, srv.Addr)
	deny := `return {"deny", {"1", "30", "0", {"retry-after", "30"}}}`
	h := wrap(t, luascript.Config{Client: c, Script: deny, Headers: luascript.FixedWindowHeaders(), Key: httplimit.Header("X-User"), Shadow: true, Failure: healthy})
	rec := do(t, h, get("u"))
	wantStatus(t, rec, 200)
	wantFields(t, rec, map[string]string{"Retry-After": "30", "X-Ratelimit-Remaining": "0"})
	wantStatus(t, do(t, h, get("")), 200) // a key error does not block in shadow mode

	h = wrap(t, luascript.Config{
		Client: c, Script: deny, Headers: luascript.FixedWindowHeaders(), Key: httplimit.Header("X-User"), Name: "s", Failure: healthy,
		Denied: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res := httplimit.Decisions(r.Context())
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprint(w, res[0].Name, res[0].Decision.Allowed)
		}),
	})
	rec = do(t, h, get("u"))
	wantStatus(t, rec, http.StatusTeapot)
	if rec.Body.String() != "sfalse" {
		t.Errorf("body %q", rec.Body)
	}
	wantFields(t, rec, map[string]string{"Retry-After": "30"})
}

func TestKeyErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer c.Close()
	for _, status := range []int{0, 500} {
		for _, cfg := range []luascript.Config{
			{Client: c, Key: httplimit.Header("X-User"), Opts: []any{1, 1}, KeyErrorStatus: status},
			{Client: c, Keys: func(*http.Request) ([]string, error) { return nil, nil }, Opts: []any{1, 1}, KeyErrorStatus: status},
			{Client: c, Keys: func(*http.Request) ([]string, error) { return []string{"a", ""}, nil }, Opts: []any{1, 1}, KeyErrorStatus: status},
			{Client: c, Keys: func(*http.Request) ([]string, error) { return nil, errors.New("no") }, Opts: []any{1, 1}, KeyErrorStatus: status},
		} {
			var seen error
			cfg.OnDecision = func(r *http.Request, res []httplimit.RuleDecision) { seen = res[0].Err }
			rec := do(t, wrap(t, cfg), get(""))
			wantStatus(t, rec, max(status, 400))
			if !errors.Is(seen, httplimit.ErrKey) {
				t.Errorf("hook saw %v, want ErrKey", seen)
			}
		}
	}
}

func TestConfigErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	key := httplimit.Header("X-User")
	fallbackStore, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer fallbackStore.Close()
	for _, tc := range []struct {
		cfg  luascript.Config
		want []string
	}{
		{luascript.Config{Key: key, Opts: []any{1, 1}}, []string{"Client = nil"}},
		{luascript.Config{Client: c, Opts: []any{1, 1}}, []string{"Key = nil"}},
		{luascript.Config{Client: c, Key: key, Keys: func(*http.Request) ([]string, error) { return nil, nil }, Opts: []any{1, 1}}, []string{"Key = set"}},
		{luascript.Config{Client: c, Key: key}, []string{"Opts = []: {limit, window seconds}"}},
		{luascript.Config{Client: c, Key: key, Script: luascript.FixedWindow, Opts: []any{0, 60}}, []string{"Opts = [0 60]"}},
		{luascript.Config{Client: c, Key: key, Opts: []any{1, 1}, Headers: []string{"ok", "not ok"}}, []string{`Headers[1] = "not ok"`}},
		{luascript.Config{Client: c, Key: key, Opts: []any{1, 1}, KeyErrorStatus: 404}, []string{"KeyErrorStatus = 404"}},
		{luascript.Config{Client: c, Key: key, Opts: []any{1, 1}, Failure: failure.Policy{Mode: failure.Fallback}}, []string{"Fallback = nil"}},
		{luascript.Config{Client: c, Key: key, Opts: []any{1, 1}, Failure: failure.Policy{RetryAfter: -time.Second}}, []string{"RetryAfter = -1s"}},
		{luascript.Config{Client: c, Key: key, Opts: []any{1, 1}, Failure: failure.Policy{Fallback: fallbackStore}}, []string{"Failure.Fallback = set"}},
	} {
		_, err := luascript.New(tc.cfg)
		if !errors.Is(err, httplimit.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", tc.cfg, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New: %q does not contain %q", err, w)
			}
		}
	}
	// A custom script needs no options and no header names.
	if _, err := luascript.New(luascript.Config{Client: c, Key: key, Script: `return {"allow", {}}`}); err != nil {
		t.Errorf("custom script: %v", err)
	}
}
