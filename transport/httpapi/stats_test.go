package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/telemetry"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
)

// shadowDomain is an Envoy domain whose one rule runs in shadow mode.
const shadowDomain = `
domain: quiet
descriptors:
  - key: user
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
`

// flakyStore is a memory store whose takes of the key "broken" fail.
type flakyStore struct{ *memstore.Store }

func (s flakyStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if req.Key == "broken" {
		return floodgate.Decision{}, fmt.Errorf("flaky: %w", floodgate.ErrUnavailable)
	}
	return s.Store.Take(ctx, req)
}

type statsAPI struct {
	*testAPI
	metrics *telemetry.Metrics
}

// batchStore is a flakyStore the service batches for, deciding each
// batch one request at a time.
type batchStore struct{ flakyStore }

func (s batchStore) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	for i := range reqs {
		d, err := s.Take(ctx, reqs[i])
		out[i] = storekit.Outcome{Decision: d, Err: err}
	}
}

// newStatsAPI serves testConfig, an edge and a shadow domain, with the
// telemetry observer on its own registry as serve wires it.
func newStatsAPI(t *testing.T, dashboard bool) *statsAPI {
	t.Helper()
	return newStatsAPIOn(t, dashboard, false)
}

// newStatsAPIOn is newStatsAPI, on a store the service batches for when
// batched.
func newStatsAPIOn(t *testing.T, dashboard, batched bool) *statsAPI {
	t.Helper()
	clock := floodgatetest.NewManualClock(t0)
	mem, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	cfg, err := config.Parse(config.Source{Name: "floodgate.yaml", Data: []byte(testConfig)},
		config.Source{Name: "edge.yaml", Data: []byte(testDomain)},
		config.Source{Name: "quiet.yaml", Data: []byte(shadowDomain)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := telemetry.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var store floodgate.Store = flakyStore{mem}
	if batched {
		store = batchStore{flakyStore{mem}}
	}
	svc, err := service.New(cfg, service.Options{Store: store, Clock: clock, Logger: quietLogger(), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := Handler(svc, Options{Logger: quietLogger(), Stats: m.Snapshot, Version: "v9.9.9-test", Dashboard: dashboard, Envoy: eng})
	return &statsAPI{testAPI: &testAPI{h: h, svc: svc, eng: eng, clock: clock}, metrics: m}
}

// The shape of /v1/stats, decoded strictly: a renamed or missing field
// fails the test.
type statsBody struct {
	Time          time.Time `json:"time"`
	Version       string    `json:"version"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Store         struct {
		Type         string `json:"type"`
		Ready        bool   `json:"ready"`
		Error        string `json:"error"`
		FailureMode  string `json:"failure_mode"`
		OpenBreakers []struct {
			Node  string     `json:"node"`
			Since *time.Time `json:"since"`
		} `json:"open_breakers"`
		Links []struct {
			Node             string   `json:"node"`
			Far              bool     `json:"far"`
			RoundTripSeconds *float64 `json:"round_trip_seconds"`
			BatchesInFlight  int      `json:"batches_in_flight"`
		} `json:"links"`
	} `json:"store"`
	Config struct {
		Sources    []string   `json:"sources"`
		AppliedAt  *time.Time `json:"applied_at"`
		LastReload *struct {
			At      *time.Time `json:"at"`
			Outcome string     `json:"outcome"`
		} `json:"last_reload"`
		Applied  int64 `json:"reloads_applied"`
		Rejected int64 `json:"reloads_rejected"`
	} `json:"config"`
	Policies []struct {
		Name          string `json:"name"`
		Kind          string `json:"kind"`
		Text          string `json:"text"`
		Track         bool   `json:"track"`
		Shadow        bool   `json:"shadow_mode"`
		Allowed       int64  `json:"allowed"`
		Denied        int64  `json:"denied"`
		ShadowDenials int64  `json:"shadow_denials"`
		Degraded      int64  `json:"degraded"`
		CacheHits     int64  `json:"over_limit_cache_hits"`
	} `json:"policies"`
	StoreCalls []struct {
		Op         string   `json:"op"`
		Count      int64    `json:"count"`
		SumSeconds float64  `json:"sum_seconds"`
		Mean       *float64 `json:"mean_seconds"`
		P50        *float64 `json:"p50_seconds"`
		P99        *float64 `json:"p99_seconds"`
		Buckets    []struct {
			LE    float64 `json:"le"`
			Count int64   `json:"count"`
		} `json:"buckets"`
		Errors  int64            `json:"errors"`
		ByCause map[string]int64 `json:"errors_by_cause"`
	} `json:"store_calls"`
}

func (a *statsAPI) stats(t *testing.T) (statsBody, string) {
	t.Helper()
	r := httptest.NewRequest("GET", "/v1/stats", nil)
	r.RemoteAddr = "203.0.113.7:5555" // an admin endpoint: the token opens it from afar
	r.Header.Set("Authorization", "Bearer "+testToken)
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/stats: %d %q %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var s statsBody
	dec := json.NewDecoder(strings.NewReader(w.Body.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("GET /v1/stats: %v\n%s", err, w.Body)
	}
	return s, w.Body.String()
}

func TestStats(t *testing.T) {
	api := newStatsAPI(t, true)

	// Before any decision: every configured policy, zero counts, no store
	// call, the configuration as loaded.
	s, _ := api.stats(t)
	if s.Version != "v9.9.9-test" || s.Store.Type != "memory" || !s.Store.Ready || s.Store.Error != "" || s.UptimeSeconds < 0 {
		t.Errorf("state: version %q, store %+v, uptime %v", s.Version, s.Store, s.UptimeSeconds)
	}
	if got := strings.Join(s.Config.Sources, " "); got != "floodgate.yaml edge.yaml quiet.yaml" {
		t.Errorf("sources: %q", got)
	}
	if s.Config.AppliedAt == nil || time.Since(*s.Config.AppliedAt) > time.Minute || s.Config.LastReload != nil {
		t.Errorf("config at start: applied %v, last reload %+v", s.Config.AppliedAt, s.Config.LastReload)
	}
	var names []string
	for _, p := range s.Policies {
		names = append(names, p.Kind+":"+p.Name)
		if p.Allowed+p.Denied+p.ShadowDenials+p.Degraded+p.CacheHits != 0 {
			t.Errorf("%s counts before any decision: %+v", p.Name, p)
		}
	}
	if got := strings.Join(names, " "); got != "policy:api policy:strict policy:uploads rule:edge.remote_address rule:quiet.user" {
		t.Errorf("policies: %s", got)
	}
	if len(s.StoreCalls) != 0 {
		t.Errorf("store calls before any: %+v", s.StoreCalls)
	}

	// Decisions: strict admits 2, the store denies the 3rd, the
	// over-limit cache the 4th and 5th; a broken key's take fails and is
	// let through (failure mode open); uploads tracks secret keys; the
	// shadow rule denies its 2nd hit without enforcing it.
	for range 5 {
		api.post(t, "/v1/check", `{"policy":"strict","key":"k"}`)
	}
	api.post(t, "/v1/check", `{"policy":"api","key":"broken"}`)
	api.post(t, "/v1/check", `{"policy":"api","key":"k"}`)
	api.post(t, "/v1/peek", `{"policy":"api","key":"k"}`) // a peek is no decision
	for _, k := range []string{"secret-key-alice", "secret-key-bob", "secret-key-alice", "secret-key-alice"} {
		api.post(t, "/v1/check", `{"policy":"uploads","key":"`+k+`","cost":5}`)
	}
	for range 2 {
		req := rls.Request{Domain: "quiet", Descriptors: []rls.Descriptor{{Entries: []rls.Entry{{Key: "user", Value: "sk-carol"}}}}}
		if _, err := api.eng.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}

	s, raw := api.stats(t)
	if s.Store.FailureMode != "open" || s.Store.OpenBreakers == nil || len(s.Store.OpenBreakers) != 0 {
		t.Errorf("store state %+v: want failure mode open and no open breaker", s.Store)
	}
	type counts struct{ allowed, denied, shadow, degraded, cacheHits int64 }
	want := map[string]counts{
		"api":                 {2, 0, 0, 1, 0},
		"strict":              {2, 3, 0, 0, 2},
		"uploads":             {3, 1, 0, 0, 0}, // a burst of 10 at cost 5
		"edge.remote_address": {0, 0, 0, 0, 0},
		"quiet.user":          {1, 1, 1, 0, 0},
	}
	for _, p := range s.Policies {
		got := counts{p.Allowed, p.Denied, p.ShadowDenials, p.Degraded, p.CacheHits}
		if got != want[p.Name] {
			t.Errorf("%s: %+v, want %+v", p.Name, got, want[p.Name])
		}
		switch p.Name {
		case "strict":
			if p.Text != "fixed_window 2/1h" || p.Track {
				t.Errorf("strict: text %q, track %v", p.Text, p.Track)
			}
		case "uploads":
			if !p.Track || !strings.HasPrefix(p.Text, "token_bucket") {
				t.Errorf("uploads: text %q, track %v", p.Text, p.Track)
			}
		case "quiet.user":
			if !p.Shadow || p.Kind != "rule" {
				t.Errorf("quiet.user: %+v", p)
			}
		}
	}
	// Store calls: a take for every decision but the two cache hits,
	// one of them failed; the peek.
	if len(s.StoreCalls) != 2 || s.StoreCalls[0].Op != "take" || s.StoreCalls[1].Op != "peek" {
		t.Fatalf("store calls: %+v", s.StoreCalls)
	}
	take, peek := s.StoreCalls[0], s.StoreCalls[1]
	if take.Count != 11 || take.Errors != 1 || take.ByCause["unavailable"] != 1 || len(take.ByCause) != 1 {
		t.Errorf("takes: count %d, errors %d %v; want 11, 1 {unavailable: 1}", take.Count, take.Errors, take.ByCause)
	}
	if peek.Count != 1 || peek.Errors != 0 || len(peek.ByCause) != 0 {
		t.Errorf("peeks: %+v", peek)
	}
	if take.Mean == nil || take.P50 == nil || take.P99 == nil || *take.P50 > *take.P99 || *take.P99 > 1 ||
		math.Abs(*take.Mean-take.SumSeconds/11) > 1e-12 {
		t.Errorf("take latency: mean %v, p50 %v, p99 %v", take.Mean, take.P50, take.P99)
	}
	if n := len(take.Buckets); n == 0 || take.Buckets[n-1].Count > take.Count || take.Buckets[n-1].LE != 1 {
		t.Errorf("take buckets: %+v", take.Buckets)
	}

	// No key, tracked or not, reaches the stats: they are /v1/keys's
	// alone (which does list the tracked ones).
	for _, k := range []string{"secret-key", "sk-carol", "broken", `"k"`} {
		if strings.Contains(raw, k) {
			t.Errorf("/v1/stats holds the key %s:\n%s", k, raw)
		}
	}
	if a := api.do(t, call{method: "GET", path: "/v1/keys?policy=uploads", auth: "Bearer " + testToken}); !strings.Contains(a.raw, "secret-key-alice") {
		t.Errorf("/v1/keys does not list the tracked key: %s", a.raw)
	}

	// Reloads: a rejected one is the last; then an applied one.
	api.metrics.Reload(false)
	s, _ = api.stats(t)
	if r := s.Config.LastReload; r == nil || r.Outcome != "rejected" || r.At == nil || s.Config.Rejected != 1 || s.Config.Applied != 0 {
		t.Errorf("after a rejected reload: %+v", s.Config)
	}
	applied := *s.Config.AppliedAt
	time.Sleep(10 * time.Millisecond)
	if err := api.svc.Reload(api.svc.Config()); err != nil {
		t.Fatal(err)
	}
	s, _ = api.stats(t)
	if r := s.Config.LastReload; r == nil || r.Outcome != "applied" || s.Config.Applied != 1 || !s.Config.AppliedAt.After(applied) {
		t.Errorf("after an applied reload: %+v", s.Config)
	}

	// GET only; an admin endpoint, as it lists the configuration's files.
	if a := api.do(t, call{method: "POST", path: "/v1/stats", body: "{}"}); a.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/stats: %d", a.status)
	}
	if a := api.do(t, call{method: "GET", path: "/v1/stats", remote: "203.0.113.7:5555"}); a.status != http.StatusUnauthorized {
		t.Errorf("GET /v1/stats without the admin token: %d %s", a.status, a.raw)
	}
	if a := api.do(t, call{method: "GET", path: "/v1/stats", auth: "bearer " + testToken}); a.status != http.StatusOK {
		t.Errorf("GET /v1/stats with the admin token (scheme in lower case): %d %s", a.status, a.raw)
	}
}

// TestStatsStoreDown: readiness follows the store's ping.
// TestStatsLinks: store.links is empty (not null) for a store the service
// does not batch for; for one it does, the store's one node, with the
// round trip of its second batch (the first tells nothing) and no batch
// in flight between calls, as service.Links has it.
func TestStatsLinks(t *testing.T) {
	s, body := newStatsAPI(t, false).stats(t)
	if s.Store.Links == nil || len(s.Store.Links) != 0 {
		t.Errorf("links without batching: %+v; want []\n%s", s.Store.Links, body)
	}

	api := newStatsAPIOn(t, false, true)
	for range 2 {
		if res := api.post(t, "/v1/check", `{"policy":"api","key":"alice"}`); res.status != 200 {
			t.Fatalf("check: %d %s", res.status, res.raw)
		}
	}
	var want []service.Link
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if want = api.svc.Links(); len(want) == 1 && want[0].Batches == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service.Links: %+v; want one node, no batch in flight", want)
		}
	}
	s, body = api.stats(t)
	if len(s.Store.Links) != 1 {
		t.Fatalf("links: %+v; want one\n%s", s.Store.Links, body)
	}
	l := s.Store.Links[0]
	if l.Node != "store" || l.Far != want[0].Far || l.BatchesInFlight != 0 || l.RoundTripSeconds == nil ||
		*l.RoundTripSeconds != want[0].RoundTrip.Seconds() {
		t.Errorf("link %+v (round trip %v); want node \"store\", as %+v", l, l.RoundTripSeconds, want[0])
	}
}

func TestStatsStoreDown(t *testing.T) {
	cfg, err := config.Parse(config.Source{Name: "floodgate.yaml", Data: []byte(testConfig)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := telemetry.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: failingStore{}, Logger: quietLogger(), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	api := &statsAPI{testAPI: &testAPI{h: Handler(svc, Options{Logger: quietLogger(), Stats: m.Snapshot})}}
	s, _ := api.stats(t)
	if s.Store.Ready || !strings.Contains(s.Store.Error, "connection refused") {
		t.Errorf("store state with a failing store: %+v", s.Store)
	}
}

func TestQuantile(t *testing.T) {
	b := []bucketJSON{{0.001, 0}, {0.01, 50}, {0.1, 90}, {1, 100}}
	for _, c := range []struct {
		q     float64
		count int64
		want  float64
		none  bool
	}{
		{0.5, 100, 0.01, false},    // the 50th is the 0.01 bucket's last
		{0.25, 100, 0.0055, false}, // halfway into (0.001, 0.01]
		{0.9, 100, 0.1, false},
		{0.99, 100, 0.91, false}, // 9/10 into (0.1, 1]
		{0.99, 200, 1, false},    // past the last finite bound
		{0.5, 0, 0, true},        // nothing observed
	} {
		got := quantile(c.q, b, c.count)
		if c.none {
			if got != nil {
				t.Errorf("quantile(%v) of none = %v, want nil", c.q, *got)
			}
			continue
		}
		if got == nil || math.Abs(*got-c.want) > 1e-9 {
			t.Errorf("quantile(%v, count %d) = %v, want %v", c.q, c.count, got, c.want)
		}
	}
	first := []bucketJSON{{0.002, 4}}
	if got := quantile(0.5, first, 4); got == nil || *got != 0.001 {
		t.Errorf("quantile within the first bucket = %v, want 0.001 (from 0)", got)
	}
}
