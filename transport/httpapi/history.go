package httpapi

import (
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate/internal/telemetry"
)

// maxHistoryPoints is how many steps /v1/stats/history answers at most
// when no step is asked: the step is the smallest multiple of the
// resolution that keeps to it (10 s for an hour, 2 min for a day).
const maxHistoryPoints = 720

// historyJSON is the body of GET /v1/stats/history: the service's own
// recent past, per policy and for the store, one value per step in each
// column (times[i], seconds[i], policies[j].allowed[i], …). Like
// /v1/stats it holds no key.
type historyJSON struct {
	From              time.Time           `json:"from"`
	To                time.Time           `json:"to"`
	StepSeconds       float64             `json:"step_seconds"`
	ResolutionSeconds float64             `json:"resolution_seconds"`
	RetentionSeconds  float64             `json:"retention_seconds"`
	Since             time.Time           `json:"recording_since"`
	Times             []time.Time         `json:"times"`
	Seconds           []float64           `json:"seconds"`
	Store             historyStoreJSON    `json:"store"`
	Policies          []historyPolicyJSON `json:"policies"`
	Overflow          *historyPolicyJSON  `json:"overflow"`
	MaxPolicies       int                 `json:"max_policies"`
	Bytes             int                 `json:"bytes"`
}

type historyStoreJSON struct {
	Type string `json:"type"`
	// FailureMode is what a decision becomes when the store fails: what
	// the policies' degraded decisions were.
	FailureMode  string        `json:"failure_mode"`
	OpenBreakers []breakerJSON `json:"open_breakers"`
	Calls        []int64       `json:"calls"`
	Errors       []int64       `json:"errors"`
	P50          []*float64    `json:"p50_seconds"`
	P99          []*float64    `json:"p99_seconds"`
}

type historyPolicyJSON struct {
	Name string `json:"name"`
	// Kind is as in /v1/stats: policy, rule, or "" for a name the
	// configuration in force no longer has.
	Kind     string  `json:"kind"`
	Text     string  `json:"text,omitempty"`
	Allowed  []int64 `json:"allowed"`
	Denied   []int64 `json:"denied"`
	Degraded []int64 `json:"degraded"`
}

// history serves GET /v1/stats/history?from=T&to=T&step=D.
func (a *api) history(w http.ResponseWriter, r *http.Request) {
	h := a.o.History
	q := r.URL.Query()
	for k := range q {
		if k != "from" && k != "to" && k != "step" {
			writeError(w, http.StatusBadRequest, "unknown_parameter", k, "unknown query parameter; allowed: from, to, step")
			return
		}
	}
	now := h.Now()
	to, from := now, now.Add(-time.Hour)
	var err error
	if s := q.Get("to"); s != "" {
		if to, err = parseWhen(s, now); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_time", "to", err.Error())
			return
		}
	}
	if s := q.Get("from"); s != "" {
		if from, err = parseWhen(s, now); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_time", "from", err.Error())
			return
		}
	} else {
		from = to.Add(-time.Hour)
	}
	if !from.Before(to) {
		writeError(w, http.StatusBadRequest, "invalid_range", "from", "from must be before to")
		return
	}
	res, ret := h.Resolution(), h.Retention()
	var step time.Duration
	if s := q.Get("step"); s != "" {
		step, err = time.ParseDuration(s)
		if err != nil || step <= 0 || step%res != 0 || step > ret {
			writeError(w, http.StatusBadRequest, "invalid_step", "step",
				"want a duration that is a multiple of the resolution, "+res.String()+", up to the retention, "+ret.String())
			return
		}
	} else {
		end, begin := to, from
		if end.After(now) {
			end = now
		}
		if earliest := now.Add(-ret); begin.Before(earliest) {
			begin = earliest
		}
		span := max(end.Sub(begin), 0)
		n := (span + maxHistoryPoints*res - 1) / (maxHistoryPoints * res)
		step = max(n, 1) * res
	}

	hr := h.Query(from, to, step)
	fp, breakers := a.svc.Failure()
	out := historyJSON{
		From: hr.From, To: hr.To, StepSeconds: hr.Step.Seconds(), ResolutionSeconds: res.Seconds(), RetentionSeconds: ret.Seconds(),
		Since: hr.Since, Times: hr.Times, Seconds: hr.Seconds, MaxPolicies: hr.MaxPolicies, Bytes: hr.Bytes,
		Store: historyStoreJSON{
			Type: a.svc.Config().Store.Type, FailureMode: fp.Mode.String(), OpenBreakers: breakersJSON(breakers),
			Calls: make([]int64, len(hr.Times)), Errors: hr.Store.Errors,
			P50: make([]*float64, len(hr.Times)), P99: make([]*float64, len(hr.Times)),
		},
	}
	for i, l := range hr.Store.Latency {
		out.Store.Calls[i] = l.Count
		buckets := make([]bucketJSON, len(l.Buckets))
		for j, b := range l.Buckets {
			buckets[j] = bucketJSON(b)
		}
		out.Store.P50[i], out.Store.P99[i] = quantile(0.5, buckets, l.Count), quantile(0.99, buckets, l.Count)
	}

	// The policies in force first (named ones, then Envoy rules' own that
	// have a series), then names the history still has from before a
	// reload, as /v1/stats orders them.
	series := map[string]telemetry.PolicyHistory{}
	for _, p := range hr.Policies {
		series[p.Name] = p
	}
	seen := map[string]bool{}
	add := func(name, kind, text string, always bool) {
		p, ok := series[name]
		if seen[name] || !ok && !always {
			return
		}
		seen[name] = true
		if !ok {
			p.Allowed, p.Denied, p.Degraded = make([]int64, len(hr.Times)), make([]int64, len(hr.Times)), make([]int64, len(hr.Times))
		}
		out.Policies = append(out.Policies, historyPolicyJSON{Name: name, Kind: kind, Text: text, Allowed: p.Allowed, Denied: p.Denied, Degraded: p.Degraded})
	}
	for _, p := range a.svc.Policies() {
		add(p.Name, "policy", p.String(), true)
	}
	for _, d := range a.envoyDomains() {
		for _, rule := range d.Rules {
			if rule.Policy != "" {
				add(rule.Policy, "rule", rule.Text, false)
			}
		}
	}
	var gone []string
	for name := range series {
		if !seen[name] {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	for _, name := range gone {
		add(name, "", "", false)
	}
	if out.Policies == nil {
		out.Policies = []historyPolicyJSON{}
	}
	if o := hr.Overflow; o != nil {
		out.Overflow = &historyPolicyJSON{Name: "", Kind: "overflow", Allowed: o.Allowed, Denied: o.Denied, Degraded: o.Degraded}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// parseWhen reads a time of a query: RFC 3339, "now", or a duration
// before now such as -1h or -90s.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if strings.HasPrefix(s, "-") {
		d, err := time.ParseDuration(s)
		if err == nil {
			return now.Add(d), nil
		}
	} else if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, errWhen
}

// errWhen is parseWhen's error: the message of a 400.
var errWhen = errors.New(`want an RFC 3339 time (2030-01-01T12:00:00Z), "now", or a duration before now (-1h, -90s)`)
