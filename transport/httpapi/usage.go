package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/floodgatehq/floodgate/usage"
)

// The usage endpoints (SPEC.md, "Per-key usage series"; docs/operations.md):
//
//	GET /v1/keys?policy=P&sort=S&order=O&window=W&limit=N&cursor=C
//	GET /v1/keys/{key}/usage?policy=P&from=T&to=T&step=D
//
// both admin. /v1/keys without order, window or cursor, and with a sort
// of requests, denied or last_seen, keeps its first form: the top keys.

// pagedKeysParams are the parameters that make /v1/keys a paged listing.
var pagedKeysParams = []string{"order", "window", "cursor"}

// pagedListing reports whether a /v1/keys query asks for a paged listing
// rather than the top keys.
func pagedListing(q url.Values) bool {
	for _, k := range pagedKeysParams {
		if q.Has(k) {
			return true
		}
	}
	s := q.Get("sort")
	return s == usage.ByFirstSeen.String() || s == usage.ByUsage.String()
}

// keyJSON is one key of /v1/keys.
type keyJSON struct {
	Key            string    `json:"key"`
	FirstSeen      time.Time `json:"first_seen"`
	LastSeen       time.Time `json:"last_seen"`
	Requests       int64     `json:"requests"`
	Denied         int64     `json:"denied"`
	WindowRequests *int64    `json:"window_requests,omitempty"`
	WindowDenied   *int64    `json:"window_denied,omitempty"`
}

// listKeys answers a paged /v1/keys: one page, and the cursor of the next
// ("next_cursor", absent on the last page).
func (a *api) listKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "policy", "sort", "order", "window", "limit", "cursor":
		default:
			writeError(w, http.StatusBadRequest, "unknown_parameter", k, "unknown query parameter; allowed: policy, sort, order, window, limit, cursor")
			return
		}
	}
	policy := q.Get("policy")
	if policy == "" {
		writeError(w, http.StatusBadRequest, "missing_policy", "policy", "name the tracked policy: /v1/keys?policy=NAME")
		return
	}
	lq := usage.Query{By: usage.ByRequests, Limit: 100, Cursor: q.Get("cursor")}
	if s := q.Get("sort"); s != "" {
		o, err := usage.ParseOrder(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_sort", "sort", "want requests, denied, last_seen, first_seen or usage")
			return
		}
		lq.By = o
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		lq.Ascending = true
	default:
		writeError(w, http.StatusBadRequest, "invalid_order", "order", "want asc or desc")
		return
	}
	if s := q.Get("window"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, "invalid_window", "window", "want a duration above 0, such as 1h")
			return
		}
		lq.Window = d
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > usage.MaxLimit {
			writeError(w, http.StatusBadRequest, "invalid_limit", "limit", "want an integer from 1 to 10000")
			return
		}
		lq.Limit = n
	}
	page, err := a.svc.ListKeys(r.Context(), policy, lq)
	if err != nil {
		a.serviceError(w, err)
		return
	}
	if lq.By == usage.ByUsage && lq.Window == 0 {
		lq.Window = a.policyRetention(policy)
	}
	type pageJSON struct {
		Policy   string    `json:"policy"`
		Sort     string    `json:"sort"`
		Order    string    `json:"order"`
		WindowUS int64     `json:"window_us,omitempty"`
		Now      time.Time `json:"now"`
		Keys     []keyJSON `json:"keys"`
		Next     string    `json:"next_cursor,omitempty"`
	}
	out := pageJSON{Policy: policy, Sort: lq.By.String(), Order: "desc", WindowUS: int64(lq.Window / time.Microsecond),
		Now: page.Now.UTC(), Keys: make([]keyJSON, len(page.Records)), Next: page.Next}
	if lq.Ascending {
		out.Order = "asc"
	}
	for i, u := range page.Records {
		out.Keys[i] = keyJSON{Key: u.Key, FirstSeen: u.FirstSeen.UTC(), LastSeen: u.LastSeen.UTC(), Requests: u.Requests, Denied: u.Denied}
		if lq.Window > 0 {
			out.Keys[i].WindowRequests, out.Keys[i].WindowDenied = &u.WindowRequests, &u.WindowDenied
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// policyRetention returns the series retention of the named policy, 0 for
// none.
func (a *api) policyRetention(name string) time.Duration {
	for _, p := range a.svc.Policies() {
		if p.Name == name {
			return p.SeriesRetention
		}
	}
	return 0
}

// timeParam is a from or to parameter, read as /v1/stats/history reads
// its own (parseWhen): an RFC 3339 time, "now", or a duration before now
// (-1h; 0s is now).
type timeParam struct {
	set bool
	at  time.Time     // absolute
	ago time.Duration // relative, ≤ 0
	rel bool
}

func parseTimeParam(s string) (timeParam, bool) {
	if s == "" {
		return timeParam{}, true
	}
	if s == "now" {
		return timeParam{set: true, rel: true}, true
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return timeParam{set: true, at: t}, true
	}
	if d, err := time.ParseDuration(s); err == nil && d <= 0 {
		return timeParam{set: true, ago: d, rel: true}, true
	}
	return timeParam{}, false
}

func (p timeParam) resolve(now time.Time) time.Time {
	if p.rel {
		return now.Add(p.ago)
	}
	return p.at
}

// countJSON is the summary of one count of a series.
type countJSON struct {
	Sum    int64      `json:"sum"`
	Mean   float64    `json:"mean"`
	Peak   int64      `json:"peak"`
	PeakAt *time.Time `json:"peak_at"`
}

func toCountJSON(s usage.Stats) countJSON {
	out := countJSON{Sum: s.Sum, Mean: s.Mean, Peak: s.Peak}
	if !s.PeakAt.IsZero() {
		at := s.PeakAt.UTC()
		out.PeakAt = &at
	}
	return out
}

// seriesJSON is the body of GET /v1/keys/{key}/usage.
type seriesJSON struct {
	Policy       string      `json:"policy"`
	Key          string      `json:"key"`
	From         time.Time   `json:"from"`
	To           time.Time   `json:"to"`
	StepUS       int64       `json:"step_us"`
	ResolutionUS int64       `json:"resolution_us"`
	Points       []pointJSON `json:"points"`
	Requests     countJSON   `json:"requests"`
	Denied       countJSON   `json:"denied"`
}

type pointJSON struct {
	T        time.Time `json:"t"`
	Requests int64     `json:"requests"`
	Denied   int64     `json:"denied"`
}

// keyUsage answers GET /v1/keys/{key}/usage: the key's series, re-bucketed
// to step over [from, to), with sums, means and peaks.
func (a *api) keyUsage(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "policy", "from", "to", "step":
		default:
			writeError(w, http.StatusBadRequest, "unknown_parameter", k, "unknown query parameter; allowed: policy, from, to, step")
			return
		}
	}
	policy := q.Get("policy")
	if policy == "" {
		writeError(w, http.StatusBadRequest, "missing_policy", "policy", "name the tracked policy: /v1/keys/KEY/usage?policy=NAME")
		return
	}
	from, ok := parseTimeParam(q.Get("from"))
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_time", "from", errWhen.Error())
		return
	}
	to, ok := parseTimeParam(q.Get("to"))
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_time", "to", errWhen.Error())
		return
	}
	var step time.Duration
	if s := q.Get("step"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, "invalid_step", "step", "want a duration above 0, a whole multiple of the policy's series resolution")
			return
		}
		step = d
	}
	series, p, err := a.svc.Series(r.Context(), policy, key)
	if err != nil {
		a.serviceError(w, err)
		return
	}
	end := series.Now
	if to.set {
		end = to.resolve(series.Now)
	}
	start := end.Add(-p.SeriesRetention)
	if from.set {
		start = from.resolve(series.Now)
	}
	sum, err := series.Summarize(start, end, step)
	var qe *usage.QueryError
	if errors.As(err, &qe) {
		code := "invalid_" + qe.Field
		if qe.Field == "from" {
			code = "invalid_range" // from after to, as /v1/stats/history says it
		}
		writeError(w, http.StatusBadRequest, code, qe.Field, qe.Msg)
		return
	}
	if err != nil {
		a.serviceError(w, err)
		return
	}
	out := seriesJSON{
		Policy: p.Name, Key: key, From: start.UTC(), To: end.UTC(),
		StepUS: int64(sum.Step / time.Microsecond), ResolutionUS: int64(sum.Resolution / time.Microsecond),
		Points:   make([]pointJSON, len(sum.Points)),
		Requests: toCountJSON(sum.Requests), Denied: toCountJSON(sum.Denied),
	}
	for i, pt := range sum.Points {
		out.Points[i] = pointJSON{T: pt.T.UTC(), Requests: pt.Requests, Denied: pt.Denied}
	}
	writeJSON(w, http.StatusOK, out)
}
