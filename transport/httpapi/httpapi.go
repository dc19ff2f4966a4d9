// Package httpapi serves floodgate's HTTP/JSON API over a service.Service:
//
//	POST /v1/check     decide one request or a batch, recording them
//	POST /v1/peek      the same, recording nothing
//	POST /v1/reset     forget a key (admin)
//	POST /v1/reserve   decide a request, and return a token to settle it with
//	POST /v1/settle    give back a reservation's unused units
//	POST /v1/refund    give back units to a key (admin)
//	GET  /v1/policies  the named policies and Envoy domains
//	POST /v1/envoy/rule the rule of an Envoy domain a descriptor meets
//	GET  /v1/keys      a tracked policy's top keys, or all of them page by page (admin)
//	GET  /v1/keys/{key}/usage  one key's usage series (admin)
//	GET  /v1/stats     counters and state for the dashboard (admin; when Stats is given)
//	GET  /v1/stats/history the service's last 24 h per policy (admin; when History is given)
//	GET  /dashboard    a live dashboard page over /v1/stats (when enabled)
//	POST /json         envoyproxy/ratelimit's JSON form of the RLS request (when given)
//	GET  /healthz      the process is up
//	GET  /readyz       a configuration is loaded and the store answers
//	GET  /metrics      Prometheus metrics (when a handler is given)
//
// Admin endpoints need the admin token of the configuration in force
// (admin.allow_loopback opens them to loopback callers when there is
// none), and refuse cross-origin browser requests. With client
// authentication on (Options.Clients, or client certificates on the
// listener), the decision endpoints — check, peek, reserve, settle,
// policies, envoy/rule and /json — need a client's token or certificate. No POST is taken from
// a cross-origin browser page (http.CrossOriginProtection).
//
// Every error is a JSON object {"error": {"code", "message", "field"}}
// with a 4xx status for a bad request; docs/operations.md lists them.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/internal/auth"
	"github.com/floodgatehq/floodgate/internal/telemetry"
	"github.com/floodgatehq/floodgate/rlheader"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/transport/reqlog"
	"github.com/floodgatehq/floodgate/usage"
)

// Options configures the API. The admin token and admin.allow_loopback
// are the service's configuration in force (config.Admin).
type Options struct {
	// Clients are the named tokens of the decision endpoints; nil, or
	// none loaded, leaves client authentication to the listener's client
	// certificates, if any.
	Clients *auth.Clients
	// Auth receives the outcome of the credential checks, for metrics;
	// nil means none.
	Auth auth.Observer
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// EnvoyJSON serves /json (envoyrls.JSONHandler); nil leaves it out.
	EnvoyJSON http.Handler
	// Envoy is the Envoy engine whose domains /v1/policies lists and
	// /v1/envoy/rule matches; nil lists none.
	Envoy *rls.Engine
	// Logger receives request errors worth an operator's eye; nil means
	// slog.Default(). Keys are never logged.
	Logger *slog.Logger
	// Stats returns what the metrics counted, for /v1/stats
	// (internal/telemetry's Metrics.Snapshot); nil leaves /v1/stats out.
	Stats func() telemetry.Snapshot
	// History is what /v1/stats/history answers from (internal/telemetry's
	// Metrics.History); nil leaves it out.
	History *telemetry.History
	// Version is the service's version, as /v1/stats reports it.
	Version string
	// Dashboard serves the dashboard page at /dashboard. It reads
	// /v1/stats, so it is left out without Stats.
	Dashboard bool
	// Requests receives every request answered, for metrics; nil means
	// none.
	Requests reqlog.Observer
	// Access is the access log; its zero value writes none.
	Access reqlog.AccessLog
}

// Handler returns the API's handler.
func Handler(svc *service.Service, o Options) http.Handler {
	a := &api{svc: svc, o: o, log: o.Logger, started: time.Now()}
	if a.log == nil {
		a.log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", a.method(http.MethodPost, a.client(a.check)))
	mux.HandleFunc("/v1/peek", a.method(http.MethodPost, a.client(a.peek)))
	mux.HandleFunc("/v1/reset", a.method(http.MethodPost, a.admin(a.reset)))
	a.budgetRoutes(mux)
	mux.HandleFunc("/v1/policies", a.method(http.MethodGet, a.client(a.policies)))
	mux.HandleFunc("/v1/envoy/rule", a.method(http.MethodPost, a.client(a.envoyRule)))
	mux.HandleFunc("/v1/keys", a.method(http.MethodGet, a.admin(a.keys)))
	mux.HandleFunc("/v1/keys/{key}/usage", a.method(http.MethodGet, a.admin(a.keyUsage)))
	if o.Stats != nil {
		mux.HandleFunc("/v1/stats", a.method(http.MethodGet, a.admin(a.stats)))
		if o.Dashboard {
			mux.HandleFunc("/dashboard", a.method(http.MethodGet, a.dashboard))
			mux.HandleFunc("/dashboard/", a.method(http.MethodGet, a.dashboard))
		}
	}
	if o.History != nil {
		mux.HandleFunc("/v1/stats/history", a.method(http.MethodGet, a.admin(a.history)))
	}
	if o.EnvoyJSON != nil {
		mux.HandleFunc("/json", a.client(o.EnvoyJSON.ServeHTTP))
	}
	mux.HandleFunc("/healthz", a.method(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	mux.HandleFunc("/readyz", a.method(http.MethodGet, a.ready))
	if o.Metrics != nil {
		mux.Handle("/metrics", o.Metrics)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "", fmt.Sprintf("no endpoint %s; see docs/operations.md", clip(r.URL.Path)))
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		surface := "client"
		if r.URL.Path == "/v1/reset" || r.URL.Path == "/v1/refund" {
			surface = "admin"
		}
		a.refused(surface, "cross_origin")
		writeError(w, http.StatusForbidden, "cross_origin", "", "cross-origin browser requests are refused")
	}))
	return a.observe(cop.Handler(mux))
}

type api struct {
	svc     *service.Service
	o       Options
	log     *slog.Logger
	started time.Time // for the uptime /v1/stats reports
}

// method answers 405 to other methods.
func (a *api) method(m string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "", fmt.Sprintf("%s takes %s, not %s", r.URL.Path, m, r.Method))
			return
		}
		h(w, r)
	}
}

// item is one request of /v1/check and /v1/peek.
type item struct {
	Policy string  `json:"policy"`
	Key    jsonKey `json:"key"`
	Cost   *int64  `json:"cost,omitempty"`
	AtMost bool    `json:"at_most,omitempty"` // a partial grant (budget.go)
}

// checkRequest is the body of /v1/check and /v1/peek: one item, or a
// batch of them in requests. The items stay raw until each is decoded on
// its own, so that an error names its index (requests[2].cost).
type checkRequest struct {
	Policy   string            `json:"policy"`
	Key      jsonKey           `json:"key"`
	Cost     *int64            `json:"cost,omitempty"`
	AtMost   bool              `json:"at_most,omitempty"` // a partial grant (budget.go)
	Requests []json.RawMessage `json:"requests,omitempty"`
	Atomic   bool              `json:"atomic,omitempty"` // the batch is one group (budget.go)
}

// decodeCheck reads a check body. It is what the fuzz test drives.
func decodeCheck(body io.Reader) ([]service.Item, *apiError) {
	items, _, e := decodeCheckAtomic(body)
	return items, e
}

// decodeCheckAtomic reads a check body, and whether it asks for an
// atomic batch.
func decodeCheckAtomic(body io.Reader) ([]service.Item, bool, *apiError) {
	items, req, e := decodeCheckItems(body)
	return items, req.Atomic, e
}

// decodeCheckItems reads a check body into items and the request.
func decodeCheckItems(body io.Reader) ([]service.Item, checkRequest, *apiError) {
	var req checkRequest
	if e := decodeJSON(body, &req); e != nil {
		return nil, req, e
	}
	items, e := checkItems(&req)
	return items, req, e
}

// checkItems turns a decoded check body into items.
func checkItems(req *checkRequest) ([]service.Item, *apiError) {
	single := req.Policy != "" || req.Key != "" || req.Cost != nil || req.AtMost
	if single && req.Requests != nil {
		return nil, &apiError{http.StatusBadRequest, "invalid_request", "requests", "give either one request (policy, key, cost) or requests, not both"}
	}
	var items []item
	if single {
		items = []item{{Policy: req.Policy, Key: req.Key, Cost: req.Cost, AtMost: req.AtMost}}
	} else {
		items = make([]item, len(req.Requests))
		for i, raw := range req.Requests {
			if e := decodeJSON(bytes.NewReader(raw), &items[i]); e != nil {
				e.field = join(fmt.Sprintf("requests[%d]", i), e.field)
				return nil, e
			}
		}
	}
	out := make([]service.Item, len(items))
	for i, it := range items {
		out[i] = service.Item{Policy: it.Policy, Key: string(it.Key), Cost: 1, AtMost: it.AtMost}
		if it.Cost != nil {
			if *it.Cost < 1 {
				field := "cost"
				if !single {
					field = fmt.Sprintf("requests[%d].cost", i)
				}
				return nil, &apiError{http.StatusBadRequest, "invalid_cost", field, fmt.Sprintf("cost %d: want an integer from 1 to 2^53-1", *it.Cost)}
			}
			out[i].Cost = *it.Cost
		}
		if it.Policy == "" {
			field := "policy"
			if !single {
				field = fmt.Sprintf("requests[%d].policy", i)
			}
			return nil, &apiError{http.StatusBadRequest, "missing_policy", field, "name the policy to apply"}
		}
	}
	return out, nil
}

func (a *api) check(w http.ResponseWriter, r *http.Request) { a.decide(w, r, false) }
func (a *api) peek(w http.ResponseWriter, r *http.Request)  { a.decide(w, r, true) }

func (a *api) decide(w http.ResponseWriter, r *http.Request, peek bool) {
	items, atomic, e := a.readItems(w, r)
	if e != nil {
		if n := reqlog.NoteOf(r.Context()); n != nil {
			n.Problem = e.code
		}
		e.write(w)
		return
	}
	if atomic || atMost(items) {
		a.decideBudget(w, r, items, atomic, peek)
		return
	}
	var res service.Verdict
	var err error
	if peek {
		res, err = a.svc.Peek(r.Context(), items)
	} else {
		res, err = a.svc.Check(r.Context(), items)
	}
	if err != nil {
		a.serviceError(w, err)
		if n := reqlog.NoteOf(r.Context()); n != nil {
			var re *service.RequestError
			if errors.As(err, &re) {
				n.Problem = re.Code
			} else if errors.Is(err, service.ErrOverloaded) {
				n.Problem = "overloaded"
			}
		}
		return
	}
	if n := reqlog.NoteOf(r.Context()); n != nil {
		for i, it := range res.Items {
			n.Policies = append(n.Policies, it.Policy.Name)
			n.Keys = append(n.Keys, service.KeyDigest(items[i].Key))
			n.Degraded = n.Degraded || it.Decision.Degraded
		}
		n.Allowed = &res.Allowed
	}
	out := checkResponse{Allowed: res.Allowed, Decisions: make([]decisionJSON, len(res.Items))}
	for i, it := range res.Items {
		out.Decisions[i] = toJSONDecision(it.Policy, it.Decision)
	}
	out.Headers = rateLimitHeaders(res.Items)
	status := http.StatusOK
	if !res.Allowed && !peek {
		status = http.StatusTooManyRequests
		if retry, ok := failedClosed(res.Items); ok {
			// No limit denied it: the store failed and the failure policy
			// denies. The limiter is unavailable, as the middleware says.
			status = http.StatusServiceUnavailable
			out.Headers["Retry-After"] = rlheader.RetryAfterValue(retry)
		}
	}
	for k, v := range out.Headers {
		w.Header().Set(k, v)
	}
	writeJSON(w, status, out)
}

func (a *api) readItems(w http.ResponseWriter, r *http.Request) ([]service.Item, bool, *apiError) {
	if e := checkContentType(r); e != nil {
		return nil, false, e
	}
	body := http.MaxBytesReader(w, r.Body, a.svc.Config().Bounds.MaxBodyBytes)
	return decodeCheckAtomic(body)
}

type checkResponse struct {
	Allowed   bool              `json:"allowed"`
	Decisions []decisionJSON    `json:"decisions"`
	Headers   map[string]string `json:"headers,omitempty"`
}

// decisionJSON is a decision in the API: SPEC.md's exact µs (-1: never)
// and the same rounded up to whole seconds, as headers give them.
type decisionJSON struct {
	Policy       string `json:"policy"`
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterUS int64  `json:"retry_after_us"`
	ResetAfterUS int64  `json:"reset_after_us"`
	Binding      int32  `json:"binding,omitempty"`
	Degraded     bool   `json:"degraded,omitempty"`
	Granted      *int64 `json:"granted,omitempty"` // partial grants and reservations (budget.go)
}

func toJSONDecision(p *floodgate.Policy, d floodgate.Decision) decisionJSON {
	out := decisionJSON{
		Policy: p.Name, Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfterUS: int64(d.RetryAfter / time.Microsecond), ResetAfterUS: int64(d.ResetAfter / time.Microsecond),
		Binding: d.Binding, Degraded: d.Degraded,
	}
	if d.RetryAfter == floodgate.Never {
		out.RetryAfterUS = -1
	}
	return out
}

func (a *api) reset(w http.ResponseWriter, r *http.Request) {
	// JSON only, and said so: no form a foreign page could post.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "",
			fmt.Sprintf("Content-Type %q: an admin endpoint takes application/json only", clip(r.Header.Get("Content-Type"))))
		return
	}
	var req struct {
		Policy string  `json:"policy"`
		Key    jsonKey `json:"key"`
	}
	if e := decodeJSON(http.MaxBytesReader(w, r.Body, a.svc.Config().Bounds.MaxBodyBytes), &req); e != nil {
		e.write(w)
		return
	}
	if req.Policy == "" {
		writeError(w, http.StatusBadRequest, "missing_policy", "policy", "name the policy whose key to reset")
		return
	}
	if err := a.svc.Reset(r.Context(), req.Policy, string(req.Key)); err != nil {
		a.serviceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"reset": true})
}

func (a *api) policies(w http.ResponseWriter, r *http.Request) {
	type policyJSON struct {
		Name   string           `json:"name"`
		Text   string           `json:"text"`
		Policy floodgate.Policy `json:"policy"`
	}
	out := struct {
		Policies []policyJSON `json:"policies"`
		Domains  []domainJSON `json:"domains"`
	}{Policies: []policyJSON{}, Domains: domainsJSON(a.o.Envoy)}
	for _, p := range a.svc.Policies() {
		out.Policies = append(out.Policies, policyJSON{Name: p.Name, Text: p.String(), Policy: *p})
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) keys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if pagedListing(q) {
		a.listKeys(w, r)
		return
	}
	for k := range q {
		if k != "policy" && k != "sort" && k != "limit" {
			writeError(w, http.StatusBadRequest, "unknown_parameter", k, "unknown query parameter; allowed: policy, sort, order, window, limit, cursor")
			return
		}
	}
	policy := q.Get("policy")
	if policy == "" {
		writeError(w, http.StatusBadRequest, "missing_policy", "policy", "name the tracked policy: /v1/keys?policy=NAME")
		return
	}
	by := usage.ByRequests
	if s := q.Get("sort"); s != "" {
		o, err := usage.ParseOrder(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_sort", "sort", "want requests, denied, last_seen, first_seen or usage")
			return
		}
		by = o
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10_000 {
			writeError(w, http.StatusBadRequest, "invalid_limit", "limit", "want an integer from 1 to 10000")
			return
		}
		limit = n
	}
	us, err := a.svc.TopKeys(r.Context(), policy, by, limit)
	if err != nil {
		a.serviceError(w, err)
		return
	}
	type usageJSON struct {
		Key       string    `json:"key"`
		FirstSeen time.Time `json:"first_seen"`
		LastSeen  time.Time `json:"last_seen"`
		Requests  int64     `json:"requests"`
		Denied    int64     `json:"denied"`
	}
	out := make([]usageJSON, len(us))
	for i, u := range us {
		out[i] = usageJSON{u.Key, u.FirstSeen.UTC(), u.LastSeen.UTC(), u.Requests, u.Denied}
	}
	writeJSON(w, http.StatusOK, map[string]any{"policy": policy, "sort": by.String(), "keys": out})
}

func (a *api) ready(w http.ResponseWriter, r *http.Request) {
	p, breakers := a.svc.Failure()
	body := readyJSON{Status: "ready", FailureMode: p.Mode.String(), Breakers: breakersJSON(breakers)}
	status := http.StatusOK
	if err := a.svc.Ready(r.Context()); err != nil {
		body.Status, body.Error, status = "not_ready", err.Error(), http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
}

// readyJSON is the body of /readyz: whether the service can decide, and
// what decides when the store cannot.
type readyJSON struct {
	Status      string        `json:"status"` // ready or not_ready
	Error       string        `json:"error,omitempty"`
	FailureMode string        `json:"failure_mode"` // what a decision becomes when the store fails
	Breakers    []breakerJSON `json:"open_breakers"`
}

// breakerJSON is a store node whose breaker is open.
type breakerJSON struct {
	Node  string     `json:"node"`
	Since *time.Time `json:"since,omitempty"`
}

// breakersJSON lists the open breakers, by node.
func breakersJSON(bs []failure.BreakerState) []breakerJSON {
	out := []breakerJSON{}
	for _, b := range bs {
		if !b.Open {
			continue
		}
		j := breakerJSON{Node: b.Node}
		if b.Node == "" {
			j.Node = "store"
		}
		if !b.Since.IsZero() {
			since := b.Since.UTC()
			j.Since = &since
		}
		out = append(out, j)
	}
	slices.SortFunc(out, func(x, y breakerJSON) int { return strings.Compare(x.Node, y.Node) })
	return out
}

// serviceError answers an error of the service: a *RequestError is the
// client's fault; anything else is the store's.
func (a *api) serviceError(w http.ResponseWriter, err error) {
	var re *service.RequestError
	switch {
	case errors.As(err, &re):
		status := http.StatusBadRequest
		if re.NotFound() {
			status = http.StatusNotFound
		}
		writeError(w, status, re.Code, re.Field, re.Msg)
	case errors.Is(err, service.ErrNoUsage):
		writeError(w, http.StatusNotImplemented, "no_usage", "", err.Error())
	case errors.Is(err, service.ErrOverloaded):
		// Backpressure: nothing was decided, nothing counted. The status
		// is the operator's (overload.status): 503, or 429.
		w.Header().Set("Retry-After", "1")
		writeError(w, a.svc.Config().Overload.Status, "overloaded", "", "the service is at its bound on store calls; retry later")
	case errors.Is(err, context.Canceled):
		// The client left before its decision came back.
		writeError(w, http.StatusServiceUnavailable, "canceled", "", "the request was canceled")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, floodgate.ErrUnavailable):
		a.log.Warn("store unavailable", "error", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", "", "the store is unavailable; try again")
	default:
		a.log.Error("request failed", "error", err)
		writeError(w, http.StatusInternalServerError, "internal", "", "internal error")
	}
}

// apiError is an error answer.
type apiError struct {
	status  int
	code    string
	field   string
	message string
}

func (e *apiError) write(w http.ResponseWriter) { writeError(w, e.status, e.code, e.field, e.message) }

func checkContentType(r *http.Request) *apiError {
	ct := r.Header.Get("Content-Type")
	if ct == "" || strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		return nil // curl -d sends a form type; the body is JSON all the same
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return &apiError{http.StatusUnsupportedMediaType, "unsupported_media_type", "", fmt.Sprintf("Content-Type %q: send application/json", clip(ct))}
	}
	return nil
}

// decodeJSON reads exactly one JSON object with known fields into v.
func decodeJSON(body io.Reader, v any) *apiError {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		var ke *errKey
		switch {
		case errors.As(err, &mbe):
			return tooLarge(mbe)
		case errors.As(err, &ke):
			return &apiError{http.StatusBadRequest, ke.code, "key", ke.msg}
		case errors.Is(err, io.EOF):
			return &apiError{http.StatusBadRequest, "empty_body", "", "send a JSON object"}
		case errors.As(err, &se):
			return &apiError{http.StatusBadRequest, "malformed_json", "", fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)}
		case errors.As(err, &te):
			return &apiError{http.StatusBadRequest, "invalid_field", te.Field, fmt.Sprintf("want %s, found a JSON %s", jsonType(te.Type), te.Value)}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &apiError{http.StatusBadRequest, "unknown_field", name, "unknown field"}
		}
		return &apiError{http.StatusBadRequest, "malformed_json", "", "malformed JSON: " + err.Error()}
	}
	if dec.More() {
		return &apiError{http.StatusBadRequest, "malformed_json", "", "one JSON object per request, found more after it"}
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) { // an object, then padding past the limit
			return tooLarge(mbe)
		}
		return &apiError{http.StatusBadRequest, "malformed_json", "", "one JSON object per request, found more after it"}
	}
	return nil
}

func tooLarge(mbe *http.MaxBytesError) *apiError {
	return &apiError{http.StatusRequestEntityTooLarge, "body_too_large", "", fmt.Sprintf("request body over %d bytes (limits.max_body_bytes)", mbe.Limit)}
}

// jsonType names the JSON a Go type reads, for errors: "an integer"
// rather than "int64".
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}

// join adds a field's name to the path of the object holding it.
func join(path, field string) string {
	if field == "" {
		return path
	}
	return path + "." + field
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, field, msg string) {
	type body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field,omitempty"`
	}
	writeJSON(w, status, map[string]body{"error": {Code: code, Message: msg, Field: field}})
}

// failedClosed reports whether the denials of a Check are all the failure
// policy's (fail closed: degraded, with no numbers), and the longest wait
// they ask for.
func failedClosed(decisions []service.ItemDecision) (time.Duration, bool) {
	var retry time.Duration
	closed := false
	for _, it := range decisions {
		d := &it.Decision
		switch {
		case d.Allowed:
		case d.Degraded && d.Limit == 0:
			closed, retry = true, max(retry, d.RetryAfter)
		default:
			return 0, false // a limit denied it: a 429
		}
	}
	return retry, closed
}

// rateLimitHeaders returns the RateLimit, RateLimit-Policy and
// Retry-After fields of a Check result, as the middleware sets them.
func rateLimitHeaders(decisions []service.ItemDecision) map[string]string {
	h := http.Header{}
	items := make([]rlheader.Item, len(decisions))
	for i, d := range decisions {
		items[i] = rlheader.Item{Policy: d.Policy, Decision: d.Decision}
	}
	rlheader.Set(h, rlheader.IETF|rlheader.RetryAfter, time.Now(), rlheader.PolicyField(items), items)
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[rlheader.Spelling(k)] = strings.Join(v, ", ")
	}
	return out
}

type domainJSON struct {
	Name  string     `json:"name"`
	Rules []ruleJSON `json:"rules"`
}

type ruleJSON struct {
	Path      string   `json:"path"`
	Policy    string   `json:"policy,omitempty"`
	Text      string   `json:"text,omitempty"`
	Name      string   `json:"name,omitempty"`
	Unlimited bool     `json:"unlimited,omitempty"`
	Shadow    bool     `json:"shadow_mode,omitempty"`
	Quota     bool     `json:"quota_mode,omitempty"`
	Replaces  []string `json:"replaces,omitempty"`
}

func domainsJSON(eng *rls.Engine) []domainJSON {
	out := []domainJSON{}
	if eng == nil {
		return out
	}
	for _, d := range eng.Table().Domains() {
		dj := domainJSON{Name: d.Name, Rules: []ruleJSON{}}
		for _, r := range d.Rules {
			dj.Rules = append(dj.Rules, ruleJSON(r))
		}
		out = append(out, dj)
	}
	return out
}

// envoyRule answers POST /v1/envoy/rule: the rule of an Envoy domain that a
// descriptor meets, as ShouldRateLimit matches it. A client that predicts
// the service's answers (floodgate bench) asks it instead of walking the
// rules itself. Body: {"domain": D, "entries": [{"key": K, "value": V}, …]}.
func (a *api) envoyRule(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Domain  string `json:"domain"`
		Entries []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"entries"`
	}
	if e := checkContentType(r); e != nil {
		e.write(w)
		return
	}
	if e := decodeJSON(http.MaxBytesReader(w, r.Body, a.svc.Config().Bounds.MaxBodyBytes), &body); e != nil {
		e.write(w)
		return
	}
	if body.Domain == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "domain", "name the Envoy domain")
		return
	}
	if len(body.Entries) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "entries", "give the descriptor's entries")
		return
	}
	entries := make([]rls.Entry, len(body.Entries))
	for i, e := range body.Entries {
		entries[i] = rls.Entry{Key: e.Key, Value: e.Value}
	}
	if a.o.Envoy == nil {
		writeError(w, http.StatusNotFound, "no_rule", "", "the service has no Envoy domains")
		return
	}
	rule, ok := a.o.Envoy.Table().Rule(body.Domain, entries)
	if !ok {
		writeError(w, http.StatusNotFound, "no_rule", "entries", fmt.Sprintf("no rule of domain %q matches the descriptor", clip(body.Domain)))
		return
	}
	writeJSON(w, http.StatusOK, map[string]ruleJSON{"rule": ruleJSON(rule)})
}
