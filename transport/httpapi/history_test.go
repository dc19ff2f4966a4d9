package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/telemetry"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
)

// clockedMetrics is the telemetry observer with a history on the test's
// clock in place of the one Metrics keeps on the system clock.
type clockedMetrics struct {
	*telemetry.Metrics
	h *telemetry.History
}

func (m clockedMetrics) Decision(policy string, allowed, shadow, degraded bool) {
	m.Metrics.Decision(policy, allowed, shadow, degraded)
	m.h.Decision(policy, allowed, degraded)
}

func (m clockedMetrics) StoreCall(op, node string, took time.Duration, err error) {
	m.Metrics.StoreCall(op, node, took, err)
	m.h.StoreCall(took, err)
}

type historyAPI struct {
	*testAPI
	hist *telemetry.History
}

// newHistoryAPI serves testConfig and the edge domain on a flaky memory
// store, with a history on the service's manual clock (at t0).
func newHistoryAPI(t *testing.T) *historyAPI {
	t.Helper()
	clock := floodgatetest.NewManualClock(t0)
	mem, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	cfg, err := config.Parse(config.Source{Name: "floodgate.yaml", Data: []byte(testConfig)},
		config.Source{Name: "edge.yaml", Data: []byte(testDomain)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := telemetry.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hist, err := telemetry.NewHistory(telemetry.HistoryOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: flakyStore{mem}, Clock: clock, Logger: quietLogger(), Observer: clockedMetrics{m, hist}})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := Handler(svc, Options{Logger: quietLogger(), Stats: m.Snapshot, History: hist, Envoy: eng})
	return &historyAPI{testAPI: &testAPI{h: h, svc: svc, eng: eng, clock: clock}, hist: hist}
}

// historyBody is /v1/stats/history's shape, decoded strictly.
type historyBody struct {
	From              time.Time   `json:"from"`
	To                time.Time   `json:"to"`
	StepSeconds       float64     `json:"step_seconds"`
	ResolutionSeconds float64     `json:"resolution_seconds"`
	RetentionSeconds  float64     `json:"retention_seconds"`
	Since             time.Time   `json:"recording_since"`
	Times             []time.Time `json:"times"`
	Seconds           []float64   `json:"seconds"`
	Store             struct {
		Type         string     `json:"type"`
		FailureMode  string     `json:"failure_mode"`
		OpenBreakers []any      `json:"open_breakers"`
		Calls        []int64    `json:"calls"`
		Errors       []int64    `json:"errors"`
		P50          []*float64 `json:"p50_seconds"`
		P99          []*float64 `json:"p99_seconds"`
	} `json:"store"`
	Policies    []historyPolicyBody `json:"policies"`
	Overflow    *historyPolicyBody  `json:"overflow"`
	MaxPolicies int                 `json:"max_policies"`
	Bytes       int                 `json:"bytes"`
}

type historyPolicyBody struct {
	Name     string  `json:"name"`
	Kind     string  `json:"kind"`
	Text     string  `json:"text"`
	Allowed  []int64 `json:"allowed"`
	Denied   []int64 `json:"denied"`
	Degraded []int64 `json:"degraded"`
}

func (a *historyAPI) history(t *testing.T, query string) historyBody {
	t.Helper()
	r := httptest.NewRequest("GET", "/v1/stats/history"+query, nil)
	r.RemoteAddr = "203.0.113.7:5555"
	r.Header.Set("Authorization", "Bearer "+testToken) // an admin endpoint, as /v1/stats
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /v1/stats/history%s: %d %q %s", query, w.Code, w.Header(), w.Body)
	}
	var b historyBody
	dec := json.NewDecoder(strings.NewReader(w.Body.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("GET /v1/stats/history%s: %v\n%s", query, err, w.Body)
	}
	n := len(b.Times)
	if len(b.Seconds) != n || len(b.Store.Calls) != n || len(b.Store.Errors) != n || len(b.Store.P50) != n || len(b.Store.P99) != n {
		t.Errorf("columns of unequal length: %s", w.Body)
	}
	for _, p := range b.Policies {
		if len(p.Allowed) != n || len(p.Denied) != n || len(p.Degraded) != n {
			t.Errorf("policy %s: columns of unequal length", p.Name)
		}
	}
	return b
}

func TestHistoryEndpoint(t *testing.T) {
	api := newHistoryAPI(t)
	// At t0: strict admits 2 and denies 3; api's broken key fails in the
	// store and is let through (fail open, degraded). At t0+15s: api
	// admits 2. Now t0+25s.
	for range 5 {
		api.post(t, "/v1/check", `{"policy":"strict","key":"k"}`)
	}
	api.post(t, "/v1/check", `{"policy":"api","key":"broken"}`)
	api.clock.Advance(15 * time.Second)
	api.post(t, "/v1/check", `{"policy":"api","key":"a"}`)
	api.post(t, "/v1/check", `{"policy":"api","key":"b"}`)
	api.hist.Decision("gone", true, false) // a policy a reload removed
	api.clock.Advance(10 * time.Second)

	b := api.history(t, "?from=-1m&step=10s")
	if want := []time.Time{t0, t0.Add(10 * time.Second), t0.Add(20 * time.Second)}; !slices.Equal(b.Times, want) {
		t.Fatalf("times %v, want %v", b.Times, want)
	}
	if !slices.Equal(b.Seconds, []float64{10, 10, 5}) || b.StepSeconds != 10 || b.ResolutionSeconds != 10 || b.RetentionSeconds != 86400 {
		t.Errorf("seconds %v, step %v, resolution %v, retention %v", b.Seconds, b.StepSeconds, b.ResolutionSeconds, b.RetentionSeconds)
	}
	if !b.From.Equal(t0.Add(-35*time.Second)) || !b.To.Equal(t0.Add(25*time.Second)) || !b.Since.Equal(t0) {
		t.Errorf("from %s, to %s, since %s", b.From, b.To, b.Since)
	}
	var kinds []string
	for _, p := range b.Policies {
		kinds = append(kinds, p.Kind+":"+p.Name)
	}
	// Every named policy, with a series or not; no Envoy rule, none
	// having decided; the removed one last.
	if got := strings.Join(kinds, " "); got != "policy:api policy:strict policy:uploads :gone" {
		t.Errorf("policies %s", got)
	}
	byName := map[string]historyPolicyBody{}
	for _, p := range b.Policies {
		byName[p.Name] = p
	}
	for name, want := range map[string][3][]int64{
		"api":     {{1, 2, 0}, {0, 0, 0}, {1, 0, 0}},
		"strict":  {{2, 0, 0}, {3, 0, 0}, {0, 0, 0}},
		"uploads": {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
		"gone":    {{0, 1, 0}, {0, 0, 0}, {0, 0, 0}},
	} {
		p := byName[name]
		if !slices.Equal(p.Allowed, want[0]) || !slices.Equal(p.Denied, want[1]) || !slices.Equal(p.Degraded, want[2]) {
			t.Errorf("%s: allowed %v denied %v degraded %v, want %v", name, p.Allowed, p.Denied, p.Degraded, want)
		}
	}
	if p := byName["api"]; p.Text != "gcra 10/1s burst 20" {
		t.Errorf("api's text %q", p.Text)
	}
	if b.Overflow != nil || b.MaxPolicies != 64 || b.Bytes <= 0 {
		t.Errorf("overflow %v, max policies %d, bytes %d", b.Overflow, b.MaxPolicies, b.Bytes)
	}
	s := b.Store
	if s.Type != "memory" || s.FailureMode != "open" || s.OpenBreakers == nil {
		t.Errorf("store %s, failure mode %s, breakers %v", s.Type, s.FailureMode, s.OpenBreakers)
	}
	// The broken take failed at t0; every step with calls has quantiles
	// (the manual clock does not move during a call: 0 s, in the first
	// bucket), the one without has none.
	if !slices.Equal(s.Errors, []int64{1, 0, 0}) || s.Calls[0] < 2 || s.Calls[1] != 2 || s.Calls[2] != 0 {
		t.Errorf("store calls %v, errors %v", s.Calls, s.Errors)
	}
	for i := range s.Calls {
		if (s.P50[i] == nil) != (s.Calls[i] == 0) || (s.P99[i] == nil) != (s.Calls[i] == 0) {
			t.Errorf("step %d: %d calls, p50 %v, p99 %v", i, s.Calls[i], s.P50[i], s.P99[i])
		}
	}

	// RFC 3339 times; the range ends before the step in progress.
	b = api.history(t, "?from="+t0.Format(time.RFC3339)+"&to="+t0.Add(20*time.Second).Format(time.RFC3339Nano))
	if want := []time.Time{t0, t0.Add(10 * time.Second)}; !slices.Equal(b.Times, want) || !slices.Equal(b.Seconds, []float64{10, 10}) {
		t.Errorf("[t0, t0+20s): times %v seconds %v", b.Times, b.Seconds)
	}
	// The default range is the last hour, with a step that keeps it to
	// 720 points; a day has 2-minute steps; "now" is now.
	if b := api.history(t, ""); b.StepSeconds != 10 || !b.From.Equal(t0.Add(25*time.Second-time.Hour)) || !b.To.Equal(t0.Add(25*time.Second)) {
		t.Errorf("defaults: step %v, from %s, to %s", b.StepSeconds, b.From, b.To)
	}
	if b := api.history(t, "?from=-24h&to=now"); b.StepSeconds != 120 || len(b.Times) != 1 || b.Seconds[0] != 25 {
		t.Errorf("a day: step %v, times %v, seconds %v", b.StepSeconds, b.Times, b.Seconds)
	}
	// Before the retention and after now, the range is cut.
	if b := api.history(t, "?from=-48h&to="+t0.Add(time.Hour).Format(time.RFC3339)+"&step=1h"); !b.From.Equal(t0.Add(25*time.Second-24*time.Hour)) || !b.To.Equal(t0.Add(25*time.Second)) {
		t.Errorf("from -48h to in an hour: from %s, to %s", b.From, b.To)
	}

	// A day later the old steps are gone, and so is "gone".
	api.clock.Advance(24 * time.Hour)
	b = api.history(t, "?from=-25h&step=1h")
	for _, p := range b.Policies {
		for i := range p.Allowed {
			if p.Allowed[i]+p.Denied[i]+p.Degraded[i] != 0 {
				t.Errorf("%s has counts a day later: %+v", p.Name, p)
			}
		}
		if p.Name == "gone" {
			t.Errorf("a removed policy's series outlived the retention")
		}
	}
}

func TestHistoryEndpointErrors(t *testing.T) {
	api := newHistoryAPI(t)
	for _, c := range []struct{ query, code, field string }{
		{"?from=yesterday", "invalid_time", "from"},
		{"?from=%2B1h", "invalid_time", "from"},
		{"?from=1h", "invalid_time", "from"},
		{"?to=2030-13-01T00:00:00Z", "invalid_time", "to"},
		{"?from=-1m&to=-2m", "invalid_range", "from"},
		{"?from=-1m&to=-1m", "invalid_range", "from"},
		{"?step=15s", "invalid_step", "step"},
		{"?step=0s", "invalid_step", "step"},
		{"?step=-10s", "invalid_step", "step"},
		{"?step=48h", "invalid_step", "step"},
		{"?step=10", "invalid_step", "step"},
		{"?policy=api", "unknown_parameter", "policy"},
	} {
		a := api.do(t, call{method: "GET", path: "/v1/stats/history" + c.query, remote: "203.0.113.7:5555", auth: "Bearer " + testToken})
		if code, field := errorOf(t, a); a.status != 400 || code != c.code || field != c.field {
			t.Errorf("GET /v1/stats/history%s: %d %s %s, want 400 %s %s", c.query, a.status, code, field, c.code, c.field)
		}
	}
	if a := api.do(t, call{method: "GET", path: "/v1/stats/history", remote: "203.0.113.7:5555"}); a.status != 401 {
		t.Errorf("GET /v1/stats/history without the admin token: %d, want 401", a.status)
	}
	if a := api.do(t, call{method: "POST", path: "/v1/stats/history"}); a.status != 405 {
		t.Errorf("POST: %d, want 405", a.status)
	}
	// Without a history there is no such endpoint.
	plain := newStatsAPI(t, true)
	if w := get(t, plain, "GET", "/v1/stats/history"); w.Code != 404 {
		t.Errorf("without History: %d, want 404", w.Code)
	}
}
