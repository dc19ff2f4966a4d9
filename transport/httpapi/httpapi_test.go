package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
)

// The API's error answers, as TestErrors checks them. Every error body is
// {"error": {"code": ..., "message": ..., "field": ...}}; field names the
// offending part of the request when there is one (cost, requests[1].key,
// limit), and is absent otherwise.
//
//	Status  Code                    When
//	400     empty_body              the body is empty (or only whitespace)
//	400     malformed_json          the body is not JSON, is cut short, or has
//	                                anything after its object (trailing
//	                                garbage, a second object)
//	400     unknown_field           a field the endpoint does not know, at the
//	                                top level (field: x) or in a batch item
//	                                (field: requests[1].x)
//	400     invalid_field           a field of the wrong JSON type (cost as a
//	                                string or 1.5 or beyond 64 bits, key as a
//	                                number, requests not a list), or a body
//	                                that is not an object (field empty)
//	400     invalid_request         both a single request (policy, key, cost)
//	                                and requests
//	400     no_items                no request at all: {}, null, "requests": []
//	400     missing_policy          an item without a policy; /v1/reset without
//	                                a policy; /v1/keys without ?policy=
//	400     invalid_key             an empty key, or one over
//	                                limits.max_key_bytes
//	400     invalid_cost            a cost below 1 (0, negative) or above
//	                                2^53-1
//	400     too_many_items          more items than limits.max_batch
//	400     not_tracked             /v1/keys (or a key's usage) on a policy
//	                                without track: true
//	400     no_series               /v1/keys/{key}/usage on a policy without a
//	                                series (track 1m for 24h)
//	400     invalid_sort            /v1/keys?sort= other than requests, denied,
//	                                last_seen, first_seen, usage; usage on a
//	                                policy without a series
//	400     invalid_order           /v1/keys?order= other than asc, desc
//	400     invalid_window          /v1/keys?window= not a duration above 0 and
//	                                at most the series' retention, or on a
//	                                policy without a series
//	400     invalid_cursor          a cursor of another query (policy, sort,
//	                                order, window), malformed, or expired
//	400     invalid_limit           /v1/keys?limit= not an integer from 1 to
//	                                10000
//	400     invalid_time            usage, history: from or to not RFC 3339,
//	                                "now" or a duration before now
//	400     invalid_range           usage, history: from after to
//	400     invalid_step            usage: step not a whole multiple of the
//	                                series' resolution, or over 10000 points
//	400     unknown_parameter       /v1/keys with a query parameter other than
//	                                policy, sort, order, window, limit, cursor;
//	                                usage with one other than policy, from,
//	                                to, step (TestKeyUsage, TestKeysPaged)
//	401     unauthorized            an admin endpoint (/v1/reset, /v1/keys)
//	                                without "Authorization: Bearer <token>", or
//	                                with the wrong token, when a token is
//	                                configured; WWW-Authenticate says Bearer
//	403     admin_disabled          an admin endpoint from a non-loopback
//	                                address when no admin token is configured
//	404     unknown_policy          no policy of that name (check, peek, reset,
//	                                keys)
//	404     not_found               no such endpoint
//	405     method_not_allowed      a method the endpoint does not take; Allow
//	                                names the one it does (GET ones take HEAD)
//	413     body_too_large          a body over limits.max_body_bytes
//	415     unsupported_media_type  a Content-Type other than application/json
//	                                (none, and curl's form type, are accepted)
//	429     (a decision, no error)  /v1/check denied at least one item
//	501     no_usage                /v1/keys on a store that tracks no usage
//	503     store_unavailable       the store failed a reset; Retry-After: 1
//	503     not_ready               /readyz while the store does not answer
//
// Admin checks come before the request is read, and the method check
// before both: a GET /v1/reset is a 405 whatever its token.

const (
	testToken = "s3cret-admin-token-0123"

	testConfig = `
policies:
  api: "gcra 10/1s burst 20"
  strict: "fixed_window 2/1h"
  uploads: "token_bucket 100/1h burst 10 track"
admin:
  token: "` + testToken + `"
limits:
  max_body_bytes: 1024
  max_batch: 3
  max_key_bytes: 16
`
	testDomain = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
`
)

// t0 is an hour boundary, so that strict's window has exactly 1h to run.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type testAPI struct {
	h     http.Handler
	svc   *service.Service
	eng   *rls.Engine
	clock *floodgatetest.ManualClock
}

// newAPI serves testConfig on a memory store with a stopped clock, with
// the admin token or, when token is false, without one but with
// admin.allow_loopback.
func newAPI(t *testing.T, token bool) *testAPI {
	t.Helper()
	clock := floodgatetest.NewManualClock(t0)
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return newAPIStore(t, store, clock, token)
}

func newAPIStore(t *testing.T, store floodgate.Store, clock *floodgatetest.ManualClock, token bool) *testAPI {
	t.Helper()
	conf := testConfig
	if !token {
		conf = strings.Replace(conf, `  token: "`+testToken+`"`, "  allow_loopback: true", 1)
	}
	return newAPIWith(t, store, clock, conf, Options{Logger: quietLogger()})
}

// newAPIWith serves conf (and testDomain) on store with options o (whose
// Envoy it sets).
func newAPIWith(t *testing.T, store floodgate.Store, clock *floodgatetest.ManualClock, conf string, o Options) *testAPI {
	t.Helper()
	cfg, err := config.Parse(config.Source{Name: "floodgate.yaml", Data: []byte(conf)},
		config.Source{Name: "edge.yaml", Data: []byte(testDomain)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: store, Clock: clock, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.Envoy = eng
	return &testAPI{h: Handler(svc, o), svc: svc, eng: eng, clock: clock}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// call is one request to the API.
type call struct {
	method, path, body string
	contentType        string // "" sends application/json; "-" sends none
	auth               string // the Authorization field, if any
	remote             string // RemoteAddr; "" is loopback
	host               string // the Host field; "" is localhost:8080
	header             http.Header
}

type answer struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

func (a *testAPI) do(t *testing.T, c call) answer {
	t.Helper()
	r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
	switch c.contentType {
	case "":
		r.Header.Set("Content-Type", "application/json")
	case "-":
	default:
		r.Header.Set("Content-Type", c.contentType)
	}
	if c.auth != "" {
		r.Header.Set("Authorization", c.auth)
	}
	r.RemoteAddr = "127.0.0.1:40000"
	if c.remote != "" {
		r.RemoteAddr = c.remote
	}
	r.Host = "localhost:8080"
	if c.host != "" {
		r.Host = c.host
	}
	for k, v := range c.header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	res := answer{status: w.Code, header: w.Header(), raw: w.Body.String()}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", c.method, c.path, ct)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &res.body); err != nil {
		t.Fatalf("%s %s: body %q is not a JSON object: %v", c.method, c.path, w.Body.String(), err)
	}
	return res
}

func (a *testAPI) post(t *testing.T, path, body string) answer {
	t.Helper()
	return a.do(t, call{method: "POST", path: path, body: body})
}

// errorOf returns the code and field of an error answer, and fails when
// the body is not exactly {"error": {"code", "message"[, "field"]}}.
func errorOf(t *testing.T, a answer) (code, field string) {
	t.Helper()
	e, ok := a.body["error"].(map[string]any)
	if !ok || len(a.body) != 1 {
		t.Fatalf("not an error answer: %s", a.raw)
	}
	for k := range e {
		if k != "code" && k != "message" && k != "field" {
			t.Errorf("error answer has an extra member %q: %s", k, a.raw)
		}
	}
	if m, _ := e["message"].(string); m == "" {
		t.Errorf("error answer without a message: %s", a.raw)
	}
	if f, ok := e["field"]; ok && f == "" {
		t.Errorf("error answer with an empty field: %s", a.raw)
	}
	code, _ = e["code"].(string)
	field, _ = e["field"].(string)
	return code, field
}

func TestErrors(t *testing.T) {
	withToken, noToken := newAPI(t, true), newAPI(t, false)
	bearer := "Bearer " + testToken
	const remote = "203.0.113.7:5555"
	cases := []struct {
		name     string
		noToken  bool // serve without an admin token
		c        call
		status   int
		code     string
		field    string
		header   string // a response field that must be set…
		hvalue   string // …to this
		contains string // in the message
	}{
		// The body: JSON and its shape.
		{name: "empty body", c: call{method: "POST", path: "/v1/check", body: ""}, status: 400, code: "empty_body"},
		{name: "whitespace body", c: call{method: "POST", path: "/v1/check", body: " \n\t "}, status: 400, code: "empty_body"},
		{name: "bad JSON", c: call{method: "POST", path: "/v1/check", body: `{"policy": api}`}, status: 400, code: "malformed_json", contains: "byte"},
		{name: "truncated JSON", c: call{method: "POST", path: "/v1/check", body: `{"policy": "api", "key":`}, status: 400, code: "malformed_json"},
		{name: "trailing garbage", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"} xyz`}, status: 400, code: "malformed_json"},
		{name: "trailing brace", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"}}`}, status: 400, code: "malformed_json"},
		{name: "two JSON objects", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"}{"policy":"api","key":"k"}`}, status: 400, code: "malformed_json"},
		{name: "an array, not an object", c: call{method: "POST", path: "/v1/check", body: `[{"policy":"api","key":"k"}]`}, status: 400, code: "invalid_field", contains: "want an object"},
		{name: "a string, not an object", c: call{method: "POST", path: "/v1/check", body: `"api"`}, status: 400, code: "invalid_field"},
		{name: "unknown top-level field", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","weight":2}`}, status: 400, code: "unknown_field", field: "weight"},
		{name: "unknown per-item field", c: call{method: "POST", path: "/v1/check", body: `{"requests":[{"policy":"api","key":"a"},{"policy":"api","key":"b","prio":1}]}`}, status: 400, code: "unknown_field", field: "requests[1].prio"},
		{name: "cost as a string", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","cost":"5"}`}, status: 400, code: "invalid_field", field: "cost", contains: "want an integer"},
		{name: "cost as a fraction", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","cost":1.5}`}, status: 400, code: "invalid_field", field: "cost"},
		{name: "cost beyond 64 bits", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","cost":99999999999999999999}`}, status: 400, code: "invalid_field", field: "cost"},
		{name: "key as a number", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":42}`}, status: 400, code: "invalid_field", field: "key", contains: "want a string"},
		{name: "item key as a number", c: call{method: "POST", path: "/v1/check", body: `{"requests":[{"policy":"api","key":"a"},{"policy":"api","key":42}]}`}, status: 400, code: "invalid_field", field: "requests[1].key"},
		{name: "requests not a list", c: call{method: "POST", path: "/v1/check", body: `{"requests":{"policy":"api","key":"a"}}`}, status: 400, code: "invalid_field", field: "requests"},
		{name: "item not an object", c: call{method: "POST", path: "/v1/check", body: `{"requests":["api"]}`}, status: 400, code: "invalid_field", field: "requests[0]"},
		{name: "body over max_body_bytes", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"` + strings.Repeat("k", 2000) + `"}`}, status: 413, code: "body_too_large", contains: "1024"},
		{name: "object padded past max_body_bytes", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"}` + strings.Repeat(" ", 2000)}, status: 413, code: "body_too_large"},
		{name: "batch over max_body_bytes", c: call{method: "POST", path: "/v1/peek", body: `{"requests":[` + strings.Repeat(`{"policy":"api","key":"k"},`, 100) + `{"policy":"api","key":"k"}]}`}, status: 413, code: "body_too_large"},

		// The items.
		{name: "empty object", c: call{method: "POST", path: "/v1/check", body: `{}`}, status: 400, code: "no_items"},
		{name: "null", c: call{method: "POST", path: "/v1/check", body: `null`}, status: 400, code: "no_items"},
		{name: "empty batch", c: call{method: "POST", path: "/v1/check", body: `{"requests":[]}`}, status: 400, code: "no_items"},
		{name: "both single and requests", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","requests":[{"policy":"api","key":"k"}]}`}, status: 400, code: "invalid_request", field: "requests"},
		{name: "missing policy", c: call{method: "POST", path: "/v1/check", body: `{"key":"k"}`}, status: 400, code: "missing_policy", field: "policy"},
		{name: "missing policy, cost only", c: call{method: "POST", path: "/v1/check", body: `{"cost":3}`}, status: 400, code: "missing_policy", field: "policy"},
		{name: "missing policy in an item", c: call{method: "POST", path: "/v1/check", body: `{"requests":[{"policy":"api","key":"a"},{"key":"b"}]}`}, status: 400, code: "missing_policy", field: "requests[1].policy"},
		{name: "null item", c: call{method: "POST", path: "/v1/check", body: `{"requests":[null]}`}, status: 400, code: "missing_policy", field: "requests[0].policy"},
		{name: "unknown policy", c: call{method: "POST", path: "/v1/check", body: `{"policy":"nope","key":"k"}`}, status: 404, code: "unknown_policy", field: "policy", contains: `nope`},
		{name: "unknown policy in an item", c: call{method: "POST", path: "/v1/peek", body: `{"requests":[{"policy":"api","key":"a"},{"policy":"nope","key":"b"}]}`}, status: 404, code: "unknown_policy", field: "requests[1].policy"},
		{name: "empty key", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":""}`}, status: 400, code: "invalid_key", field: "key", contains: "empty key"},
		{name: "missing key", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api"}`}, status: 400, code: "invalid_key", field: "key"},
		{name: "key over max_key_bytes", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"0123456789abcdefX"}`}, status: 400, code: "invalid_key", field: "key", contains: "17 bytes; at most 16"},
		{name: "empty key in an item", c: call{method: "POST", path: "/v1/check", body: `{"requests":[{"policy":"api","key":"a"},{"policy":"api","key":""}]}`}, status: 400, code: "invalid_key", field: "requests[1].key"},
		{name: "zero cost", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","cost":0}`}, status: 400, code: "invalid_cost", field: "cost"},
		{name: "negative cost", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","cost":-3}`}, status: 400, code: "invalid_cost", field: "cost", contains: "-3"},
		{name: "negative cost in an item", c: call{method: "POST", path: "/v1/peek", body: `{"requests":[{"policy":"api","key":"a","cost":-1}]}`}, status: 400, code: "invalid_cost", field: "requests[0].cost"},
		{name: "cost 2^53", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","cost":9007199254740992}`}, status: 400, code: "invalid_cost", field: "cost", contains: "2^53-1"},
		{name: "cost 2^63-1", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k","cost":9223372036854775807}`}, status: 400, code: "invalid_cost", field: "cost"},
		{name: "cost 2^53 in an item", c: call{method: "POST", path: "/v1/check", body: `{"requests":[{"policy":"api","key":"a"},{"policy":"api","key":"b","cost":9007199254740992}]}`}, status: 400, code: "invalid_cost", field: "requests[1].cost"},
		{name: "batch over max_batch", c: call{method: "POST", path: "/v1/check", body: `{"requests":[{"policy":"api","key":"a"},{"policy":"api","key":"b"},{"policy":"api","key":"c"},{"policy":"api","key":"d"}]}`}, status: 400, code: "too_many_items", field: "requests", contains: "at most 3"},

		// Methods, media types, endpoints.
		{name: "GET /v1/check", c: call{method: "GET", path: "/v1/check"}, status: 405, code: "method_not_allowed", header: "Allow", hvalue: "POST"},
		{name: "PUT /v1/peek", c: call{method: "PUT", path: "/v1/peek", body: `{}`}, status: 405, code: "method_not_allowed", header: "Allow", hvalue: "POST"},
		{name: "POST /v1/policies", c: call{method: "POST", path: "/v1/policies", body: `{}`}, status: 405, code: "method_not_allowed", header: "Allow", hvalue: "GET"},
		{name: "DELETE /v1/keys", c: call{method: "DELETE", path: "/v1/keys?policy=uploads", auth: bearer}, status: 405, code: "method_not_allowed", header: "Allow", hvalue: "GET"},
		{name: "GET /v1/reset with the token", c: call{method: "GET", path: "/v1/reset", auth: bearer}, status: 405, code: "method_not_allowed", header: "Allow", hvalue: "POST"},
		{name: "POST /healthz", c: call{method: "POST", path: "/healthz"}, status: 405, code: "method_not_allowed", header: "Allow", hvalue: "GET"},
		{name: "text/plain", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"}`, contentType: "text/plain"}, status: 415, code: "unsupported_media_type", contains: "text/plain"},
		{name: "XML", c: call{method: "POST", path: "/v1/peek", body: `<check/>`, contentType: "application/xml"}, status: 415, code: "unsupported_media_type"},
		{name: "unparsable Content-Type", c: call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"}`, contentType: "application/json; charset"}, status: 415, code: "unsupported_media_type"},
		{name: "text/plain to /v1/reset", c: call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, contentType: "text/plain", auth: bearer}, status: 415, code: "unsupported_media_type"},
		{name: "unknown endpoint", c: call{method: "GET", path: "/v1/nope"}, status: 404, code: "not_found", contains: "/v1/nope"},
		{name: "check with a trailing slash", c: call{method: "POST", path: "/v1/check/", body: `{"policy":"api","key":"k"}`}, status: 404, code: "not_found"},
		{name: "v2", c: call{method: "POST", path: "/v2/check", body: `{"policy":"api","key":"k"}`}, status: 404, code: "not_found"},

		// /v1/keys parameters.
		{name: "keys without policy", c: call{method: "GET", path: "/v1/keys", auth: bearer}, status: 400, code: "missing_policy", field: "policy"},
		{name: "keys with an empty policy", c: call{method: "GET", path: "/v1/keys?policy=", auth: bearer}, status: 400, code: "missing_policy", field: "policy"},
		{name: "keys of an unknown policy", c: call{method: "GET", path: "/v1/keys?policy=nope", auth: bearer}, status: 404, code: "unknown_policy", field: "policy"},
		{name: "keys of an untracked policy", c: call{method: "GET", path: "/v1/keys?policy=api", auth: bearer}, status: 400, code: "not_tracked", field: "policy"},
		{name: "keys with a bad sort", c: call{method: "GET", path: "/v1/keys?policy=uploads&sort=size", auth: bearer}, status: 400, code: "invalid_sort", field: "sort"},
		{name: "keys with limit 0", c: call{method: "GET", path: "/v1/keys?policy=uploads&limit=0", auth: bearer}, status: 400, code: "invalid_limit", field: "limit"},
		{name: "keys with limit 10001", c: call{method: "GET", path: "/v1/keys?policy=uploads&limit=10001", auth: bearer}, status: 400, code: "invalid_limit", field: "limit"},
		{name: "keys with limit abc", c: call{method: "GET", path: "/v1/keys?policy=uploads&limit=abc", auth: bearer}, status: 400, code: "invalid_limit", field: "limit"},
		{name: "keys with an unknown parameter", c: call{method: "GET", path: "/v1/keys?policy=uploads&size=3", auth: bearer}, status: 400, code: "unknown_parameter", field: "size"},

		// /v1/reset bodies.
		{name: "reset without policy", c: call{method: "POST", path: "/v1/reset", body: `{"key":"k"}`, auth: bearer}, status: 400, code: "missing_policy", field: "policy"},
		{name: "reset of an unknown policy", c: call{method: "POST", path: "/v1/reset", body: `{"policy":"nope","key":"k"}`, auth: bearer}, status: 404, code: "unknown_policy", field: "policy"},
		{name: "reset of an empty key", c: call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":""}`, auth: bearer}, status: 400, code: "invalid_key", field: "key"},
		{name: "reset with an unknown field", c: call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k","all":true}`, auth: bearer}, status: 400, code: "unknown_field", field: "all"},
		{name: "reset with bad JSON", c: call{method: "POST", path: "/v1/reset", body: `{"policy":`, auth: bearer}, status: 400, code: "malformed_json"},
		{name: "reset with an empty body", c: call{method: "POST", path: "/v1/reset", auth: bearer}, status: 400, code: "empty_body"},
		{name: "reset over max_body_bytes", c: call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"` + strings.Repeat("k", 2000) + `"}`, auth: bearer}, status: 413, code: "body_too_large"},

		// Admin authentication.
		{name: "reset without the token", c: call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`}, status: 401, code: "unauthorized", header: "WWW-Authenticate", hvalue: `Bearer realm="floodgate admin"`, contains: "Authorization: Bearer"},
		{name: "keys without the token", c: call{method: "GET", path: "/v1/keys?policy=uploads"}, status: 401, code: "unauthorized", header: "WWW-Authenticate", hvalue: `Bearer realm="floodgate admin"`},
		{name: "reset with a wrong token", c: call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, auth: "Bearer " + testToken + "x"}, status: 401, code: "unauthorized", header: "WWW-Authenticate", hvalue: `Bearer realm="floodgate admin"`, contains: "wrong token"},
		{name: "keys with a wrong token", c: call{method: "GET", path: "/v1/keys?policy=uploads", auth: "Bearer nope"}, status: 401, code: "unauthorized", header: "WWW-Authenticate", hvalue: `Bearer realm="floodgate admin"`, contains: "wrong token"},
		{name: "keys with a token but no Bearer", c: call{method: "GET", path: "/v1/keys?policy=uploads", auth: testToken}, status: 401, code: "unauthorized", header: "WWW-Authenticate", hvalue: `Bearer realm="floodgate admin"`},
		{name: "keys with Basic auth", c: call{method: "GET", path: "/v1/keys?policy=uploads", auth: "Basic YWRtaW46YWRtaW4="}, status: 401, code: "unauthorized"},
		{name: "token checked before the body", c: call{method: "POST", path: "/v1/reset", body: `not json`}, status: 401, code: "unauthorized"},
		{name: "token checked before parameters", c: call{method: "GET", path: "/v1/keys?bogus=1"}, status: 401, code: "unauthorized"},
		{name: "reset from afar without a token configured", noToken: true, c: call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, remote: remote}, status: 403, code: "admin_disabled"},
		{name: "keys from afar without a token configured", noToken: true, c: call{method: "GET", path: "/v1/keys?policy=uploads", remote: remote}, status: 403, code: "admin_disabled"},
		{name: "keys from afar (IPv6) without a token configured", noToken: true, c: call{method: "GET", path: "/v1/keys?policy=uploads", remote: "[2001:db8::1]:443"}, status: 403, code: "admin_disabled"},
		{name: "a bearer token does not open admin when none is configured", noToken: true, c: call{method: "GET", path: "/v1/keys?policy=uploads", remote: remote, auth: bearer}, status: 403, code: "admin_disabled"},
		{name: "an unparsable RemoteAddr is not loopback", noToken: true, c: call{method: "GET", path: "/v1/keys?policy=uploads", remote: "127.0.0.1"}, status: 403, code: "admin_disabled"},
	}
	if len(cases) < 25 {
		t.Fatalf("only %d cases", len(cases))
	}
	codes := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api := withToken
			if tc.noToken {
				api = noToken
			}
			a := api.do(t, tc.c)
			if a.status != tc.status {
				t.Errorf("status %d, want %d: %s", a.status, tc.status, a.raw)
			}
			code, field := errorOf(t, a)
			if code != tc.code || field != tc.field {
				t.Errorf("code %q field %q, want %q %q: %s", code, field, tc.code, tc.field, a.raw)
			}
			if tc.header != "" {
				if got := a.header.Get(tc.header); got != tc.hvalue {
					t.Errorf("%s: %q, want %q", tc.header, got, tc.hvalue)
				}
			}
			if tc.status != 401 && a.header.Get("WWW-Authenticate") != "" {
				t.Errorf("WWW-Authenticate on a %d", a.status)
			}
			if tc.contains != "" && !strings.Contains(a.raw, tc.contains) {
				t.Errorf("message does not say %q: %s", tc.contains, a.raw)
			}
			for _, h := range []string{"Ratelimit", "Retry-After"} {
				if a.header.Get(h) != "" {
					t.Errorf("%s set on an error: %q", h, a.header.Get(h))
				}
			}
		})
		codes[tc.code] = true
	}
	// A refused request decides nothing: the keys above are untouched (a
	// peek of 1 leaves gcra 10/1s burst 20 19, and fixed_window 2/1h 1).
	a := withToken.post(t, "/v1/peek", `{"requests":[{"policy":"api","key":"k"},{"policy":"strict","key":"k"},{"policy":"api","key":"a"}]}`)
	for i, d := range decisions(t, a) {
		if want := []int64{19, 1, 19}[i]; num(d["remaining"]) != want {
			t.Errorf("after the refused requests, decision %d: %v, want %d remaining", i, d, want)
		}
	}
	t.Logf("%d cases, %d codes", len(cases), len(codes))
}

// TestServiceFailures covers the error answers that need a failing or
// limited store: 501 no_usage, 503 store_unavailable and not_ready.
func TestServiceFailures(t *testing.T) {
	clock := floodgatetest.NewManualClock(t0)
	ms, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	api := newAPIStore(t, &failingStore{Store: ms}, clock, true)
	bearer := "Bearer " + testToken

	a := api.do(t, call{method: "GET", path: "/v1/keys?policy=uploads", auth: bearer})
	if code, _ := errorOf(t, a); a.status != 501 || code != "no_usage" {
		t.Errorf("keys on a store without usage: %d %s, want 501 no_usage", a.status, a.raw)
	}
	a = api.do(t, call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, auth: bearer})
	if code, _ := errorOf(t, a); a.status != 503 || code != "store_unavailable" || a.header.Get("Retry-After") != "1" {
		t.Errorf("reset on a failing store: %d %v %s, want 503 store_unavailable, Retry-After 1", a.status, a.header, a.raw)
	}
	a = api.do(t, call{method: "GET", path: "/readyz"})
	if a.status != 503 || a.body["status"] != "not_ready" || a.body["failure_mode"] != "open" || a.body["error"] == nil {
		t.Errorf("readyz on a failing store: %d %s, want 503 not_ready, with the failure mode in force", a.status, a.raw)
	}
	// A failing store fails open (failure.mode's default): a 200, degraded,
	// without numbers in the headers.
	a = api.post(t, "/v1/check", `{"policy":"strict","key":"k"}`)
	ds := decisions(t, a)
	if a.status != 200 || len(ds) != 1 || ds[0]["allowed"] != true || ds[0]["degraded"] != true {
		t.Errorf("check on a failing store: %d %s, want 200 allowed degraded", a.status, a.raw)
	}
}

// failingStore fails every decision and reset, answers no ping, and lists
// no usage (it hides the memory store's TopKeys).
type failingStore struct{ floodgate.Store }

func (failingStore) Take(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, floodgate.ErrUnavailable
}
func (failingStore) Reset(context.Context, *floodgate.Policy, string) error {
	return floodgate.ErrUnavailable
}
func (failingStore) Ping(context.Context) error { return errors.New("connection refused") }

func decisions(t *testing.T, a answer) []map[string]any {
	t.Helper()
	raw, ok := a.body["decisions"].([]any)
	if !ok {
		t.Fatalf("no decisions: %s", a.raw)
	}
	out := make([]map[string]any, len(raw))
	for i, d := range raw {
		out[i] = d.(map[string]any)
	}
	return out
}

// num reads a JSON number of a decoded body.
func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

func TestCheck(t *testing.T) {
	api := newAPI(t, true)
	a := api.post(t, "/v1/check", `{"policy":"strict","key":"alice"}`)
	if a.status != 200 {
		t.Fatalf("status %d: %s", a.status, a.raw)
	}
	if a.body["allowed"] != true {
		t.Errorf("allowed: %v", a.body["allowed"])
	}
	ds := decisions(t, a)
	if len(ds) != 1 {
		t.Fatalf("%d decisions, want 1", len(ds))
	}
	want := map[string]any{"policy": "strict", "allowed": true, "limit": 2.0, "remaining": 1.0,
		"retry_after_us": 0.0, "reset_after_us": float64(time.Hour / time.Microsecond)}
	if !equalJSON(ds[0], want) {
		t.Errorf("decision %v, want %v", ds[0], want)
	}
	wantHeaders := map[string]string{
		"RateLimit-Policy": `"strict";q=2;w=3600`,
		"RateLimit":        `"strict";r=1;t=3600`,
	}
	checkHeaders(t, a, wantHeaders)

	// The cost counts; the default is 1. (A GCRA decision's limit is the
	// rate's count; its remaining counts down from the burst.)
	a = api.post(t, "/v1/check", `{"policy":"api","key":"bob","cost":5}`)
	if ds := decisions(t, a); a.status != 200 || num(ds[0]["remaining"]) != 15 || num(ds[0]["limit"]) != 10 {
		t.Errorf("cost 5 of gcra 10/1s burst 20: %d %s, want 200 with 15 remaining, limit 10", a.status, a.raw)
	}
	// curl -d sends a form type; the body is JSON all the same. So is a
	// request without a type, or with a charset.
	for _, ct := range []string{"application/x-www-form-urlencoded", "-", "application/json; charset=utf-8", "Application/JSON"} {
		a = api.do(t, call{method: "POST", path: "/v1/peek", body: `{"policy":"api","key":"bob"}`, contentType: ct})
		if a.status != 200 {
			t.Errorf("Content-Type %q: status %d: %s", ct, a.status, a.raw)
		}
	}
}

func checkHeaders(t *testing.T, a answer, want map[string]string) {
	t.Helper()
	got, _ := a.body["headers"].(map[string]any)
	if len(got) != len(want) {
		t.Errorf("JSON headers %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("JSON headers[%s] = %v, want %q", k, got[k], v)
		}
		if h := a.header.Values(k); len(h) != 1 || h[0] != v {
			t.Errorf("response field %s: %q, want %q", k, h, v)
		}
	}
}

func equalJSON(got, want map[string]any) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func TestCheckDenied(t *testing.T) {
	api := newAPI(t, true)
	for i := range 2 {
		if a := api.post(t, "/v1/check", `{"policy":"strict","key":"alice"}`); a.status != 200 {
			t.Fatalf("check %d: %d %s", i, a.status, a.raw)
		}
	}
	api.clock.Advance(15 * time.Minute)
	a := api.post(t, "/v1/check", `{"policy":"strict","key":"alice"}`)
	if a.status != 429 || a.body["allowed"] != false {
		t.Fatalf("third check of fixed_window 2/1h: %d %s, want 429", a.status, a.raw)
	}
	left := float64(45 * time.Minute / time.Microsecond)
	want := map[string]any{"policy": "strict", "allowed": false, "limit": 2.0, "remaining": 0.0,
		"retry_after_us": left, "reset_after_us": left}
	if ds := decisions(t, a); !equalJSON(ds[0], want) {
		t.Errorf("decision %v, want %v", ds[0], want)
	}
	checkHeaders(t, a, map[string]string{
		"RateLimit-Policy": `"strict";q=2;w=3600`,
		"RateLimit":        `"strict";r=0;t=2700`,
		"Retry-After":      "2700",
	})
	// Another key is not affected.
	if a := api.post(t, "/v1/check", `{"policy":"strict","key":"bob"}`); a.status != 200 {
		t.Errorf("another key: %d %s", a.status, a.raw)
	}
}

func TestBatch(t *testing.T) {
	api := newAPI(t, true)
	body := `{"requests":[{"policy":"api","key":"a"},{"policy":"strict","key":"b","cost":2},{"policy":"uploads","key":"c"}]}`
	a := api.post(t, "/v1/check", body)
	if a.status != 200 || a.body["allowed"] != true {
		t.Fatalf("batch: %d %s", a.status, a.raw)
	}
	ds := decisions(t, a)
	if len(ds) != 3 {
		t.Fatalf("%d decisions, want 3: %s", len(ds), a.raw)
	}
	for i, w := range []struct {
		policy           string
		limit, remaining int64
	}{{"api", 10, 19}, {"strict", 2, 0}, {"uploads", 100, 9}} {
		d := ds[i]
		if d["policy"] != w.policy || d["allowed"] != true || num(d["limit"]) != w.limit || num(d["remaining"]) != w.remaining {
			t.Errorf("decision %d: %v, want %s allowed %d of %d", i, d, w.policy, w.remaining, w.limit)
		}
	}
	// The binding item (least remaining) gives RateLimit; every policy is
	// in RateLimit-Policy.
	hs, _ := a.body["headers"].(map[string]any)
	if rl, _ := hs["RateLimit"].(string); !strings.HasPrefix(rl, `"strict";r=0`) {
		t.Errorf("RateLimit %q, want strict's", rl)
	}
	if rp, _ := hs["RateLimit-Policy"].(string); strings.Count(rp, ";q=") != 3 || a.header.Get("RateLimit-Policy") != rp {
		t.Errorf("RateLimit-Policy %q (field %q), want the three policies", rp, a.header.Get("RateLimit-Policy"))
	}

	// Now strict's b is spent: the same batch is a 429 with one decision
	// per item, the others allowed and recorded.
	a = api.post(t, "/v1/check", body)
	ds = decisions(t, a)
	if a.status != 429 || a.body["allowed"] != false || len(ds) != 3 {
		t.Fatalf("second batch: %d %s, want 429 with 3 decisions", a.status, a.raw)
	}
	if ds[0]["allowed"] != true || ds[1]["allowed"] != false || ds[2]["allowed"] != true {
		t.Errorf("second batch: %s, want only the second denied", a.raw)
	}
	if num(ds[0]["remaining"]) != 18 {
		t.Errorf("api in the second batch: %v, want 18 remaining", ds[0])
	}
	if a.header.Get("Retry-After") == "" {
		t.Errorf("no Retry-After on a 429")
	}
	// A batch of max_batch items is fine; one item in requests too.
	a = api.post(t, "/v1/peek", `{"requests":[{"policy":"api","key":"x"}]}`)
	if a.status != 200 || len(decisions(t, a)) != 1 {
		t.Errorf("batch of one: %d %s", a.status, a.raw)
	}
}

func TestPeek(t *testing.T) {
	api := newAPI(t, true)
	for i := range 3 {
		a := api.post(t, "/v1/peek", `{"policy":"strict","key":"alice"}`)
		ds := decisions(t, a)
		if a.status != 200 || ds[0]["allowed"] != true || num(ds[0]["remaining"]) != 1 {
			t.Fatalf("peek %d: %d %s, want 200 allowed with 1 remaining after it", i, a.status, a.raw)
		}
	}
	// The peeks recorded nothing: the check sees an untouched window.
	a := api.post(t, "/v1/check", `{"policy":"strict","key":"alice","cost":2}`)
	if ds := decisions(t, a); a.status != 200 || num(ds[0]["remaining"]) != 0 {
		t.Fatalf("check after peeks: %d %s, want 200 with 0 remaining", a.status, a.raw)
	}
	// A peek that would be denied is still a 200 (nothing was refused),
	// saying allowed: false, and records nothing either.
	for i := range 2 {
		a = api.post(t, "/v1/peek", `{"policy":"strict","key":"alice"}`)
		if ds := decisions(t, a); a.status != 200 || a.body["allowed"] != false || ds[0]["allowed"] != false {
			t.Errorf("peek %d of a spent key: %d %s, want 200 allowed false", i, a.status, a.raw)
		}
	}
	// A peek of a batch.
	a = api.post(t, "/v1/peek", `{"requests":[{"policy":"strict","key":"alice"},{"policy":"strict","key":"bob"}]}`)
	if ds := decisions(t, a); a.status != 200 || len(ds) != 2 || ds[0]["allowed"] != false || ds[1]["allowed"] != true || num(ds[1]["remaining"]) != 1 {
		t.Errorf("peek batch: %d %s", a.status, a.raw)
	}
	a = api.post(t, "/v1/check", `{"policy":"strict","key":"bob"}`)
	if ds := decisions(t, a); num(ds[0]["remaining"]) != 1 {
		t.Errorf("check of bob after a peek: %s, want 1 remaining", a.raw)
	}
}

func TestReset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token bool
		auth  string
	}{{"token", true, "Bearer " + testToken}, {"loopback without a token", false, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			api := newAPI(t, tc.token)
			api.post(t, "/v1/check", `{"policy":"strict","key":"alice","cost":2}`)
			if a := api.post(t, "/v1/check", `{"policy":"strict","key":"alice"}`); a.status != 429 {
				t.Fatalf("spent key: %d %s", a.status, a.raw)
			}
			remotes := []string{"127.0.0.1:1", "[::1]:2"}
			for _, remote := range remotes {
				a := api.do(t, call{method: "POST", path: "/v1/reset", body: `{"policy":"strict","key":"alice"}`, auth: tc.auth, remote: remote})
				if a.status != 200 || a.body["reset"] != true || len(a.body) != 1 {
					t.Fatalf("reset from %s: %d %s, want 200 {\"reset\":true}", remote, a.status, a.raw)
				}
				if a := api.post(t, "/v1/check", `{"policy":"strict","key":"alice"}`); a.status != 200 || num(decisions(t, a)[0]["remaining"]) != 1 {
					t.Fatalf("check after the reset: %d %s, want a fresh window", a.status, a.raw)
				}
			}
			// Resetting a key never seen is fine.
			a := api.do(t, call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"nobody"}`, auth: tc.auth})
			if a.status != 200 {
				t.Errorf("reset of an unseen key: %d %s", a.status, a.raw)
			}
		})
	}
	// With a token, the token opens admin from anywhere.
	api := newAPI(t, true)
	a := api.do(t, call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, auth: "Bearer " + testToken, remote: "203.0.113.7:5555"})
	if a.status != 200 {
		t.Errorf("reset from afar with the token: %d %s", a.status, a.raw)
	}
}

func TestPolicies(t *testing.T) {
	api := newAPI(t, false)
	a := api.do(t, call{method: "GET", path: "/v1/policies", remote: "203.0.113.7:5555"}) // not an admin endpoint
	if a.status != 200 {
		t.Fatalf("status %d: %s", a.status, a.raw)
	}
	var got struct {
		Policies []struct {
			Name, Text string
			Policy     map[string]any
		}
		Domains []struct {
			Name  string
			Rules []map[string]any
		}
	}
	if err := json.Unmarshal([]byte(a.raw), &got); err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, text, algorithm string }{
		{"api", "gcra 10/1s burst 20", "gcra"},
		{"strict", "fixed_window 2/1h", "fixed_window"},
		{"uploads", "token_bucket 100/1h burst 10 track", "token_bucket"},
	}
	if len(got.Policies) != len(want) {
		t.Fatalf("%d policies, want %d: %s", len(got.Policies), len(want), a.raw)
	}
	for i, w := range want {
		p := got.Policies[i]
		if p.Name != w.name || p.Text != w.text || p.Policy["name"] != w.name || p.Policy["algorithm"] != w.algorithm {
			t.Errorf("policy %d: %+v, want %s %q (%s)", i, p, w.name, w.text, w.algorithm)
		}
		// The text form parses back to the same policy.
		q, err := floodgate.ParsePolicy(p.Name, p.Text)
		if err != nil || q.String() != p.Text {
			t.Errorf("policy %s: text %q does not round-trip: %v", p.Name, p.Text, err)
		}
	}
	if len(got.Domains) != 1 || got.Domains[0].Name != "edge" || len(got.Domains[0].Rules) != 1 ||
		got.Domains[0].Rules[0]["path"] != "edge.remote_address" || got.Domains[0].Rules[0]["text"] != "fixed_window 10/1s count_denied true" {
		t.Errorf("domains: %+v", got.Domains)
	}
}

func TestKeys(t *testing.T) {
	api := newAPI(t, true)
	bearer := "Bearer " + testToken
	// One request a second. Usage sums costs: bob asks 11 and is denied 1
	// (his first cost of 10 spent the burst), alice asks 3, carol 4.
	for _, c := range []struct {
		key  string
		cost int
		n    int
	}{{"bob", 10, 1}, {"bob", 1, 1}, {"alice", 1, 3}, {"carol", 2, 2}} {
		for range c.n {
			api.post(t, "/v1/check", `{"policy":"uploads","key":"`+c.key+`","cost":`+itoa(c.cost)+`}`)
			api.clock.Advance(time.Second)
		}
	}
	keys := func(query string) []string {
		t.Helper()
		a := api.do(t, call{method: "GET", path: "/v1/keys?" + query, auth: bearer})
		if a.status != 200 {
			t.Fatalf("keys?%s: %d %s", query, a.status, a.raw)
		}
		raw, _ := a.body["keys"].([]any)
		var out []string
		for _, k := range raw {
			m := k.(map[string]any)
			out = append(out, m["key"].(string))
			for _, f := range []string{"first_seen", "last_seen", "requests", "denied"} {
				if _, ok := m[f]; !ok {
					t.Errorf("keys?%s: %v lacks %s", query, m, f)
				}
			}
		}
		return out
	}
	for _, c := range []struct {
		query string
		want  string
	}{
		{"policy=uploads", "bob carol alice"},
		{"policy=uploads&sort=requests", "bob carol alice"},
		{"policy=uploads&sort=denied&limit=1", "bob"},
		{"policy=uploads&sort=last_seen", "carol alice bob"},
		{"policy=uploads&limit=2", "bob carol"},
		{"policy=uploads&limit=10000", "bob carol alice"},
	} {
		if got := strings.Join(keys(c.query), " "); got != c.want {
			t.Errorf("keys?%s: %q, want %q", c.query, got, c.want)
		}
	}
	a := api.do(t, call{method: "GET", path: "/v1/keys?policy=uploads&sort=last_seen&limit=1", auth: bearer})
	if a.body["policy"] != "uploads" || a.body["sort"] != "last_seen" {
		t.Errorf("keys answer: %s", a.raw)
	}
	k := a.body["keys"].([]any)[0].(map[string]any)
	if k["key"] != "carol" || num(k["requests"]) != 4 || num(k["denied"]) != 0 ||
		k["first_seen"] != "2030-01-01T00:00:05Z" || k["last_seen"] != "2030-01-01T00:00:06Z" {
		t.Errorf("carol's usage: %v", k)
	}
	// Loopback without a token.
	if a := newAPI(t, false).do(t, call{method: "GET", path: "/v1/keys?policy=uploads"}); a.status != 200 {
		t.Errorf("keys from loopback without a token: %d %s", a.status, a.raw)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestHealth(t *testing.T) {
	api := newAPI(t, true)
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		a := api.do(t, call{method: "GET", path: path, remote: "203.0.113.7:5555"})
		if a.status != 200 || a.body["status"] != want {
			t.Errorf("%s: %d %s, want 200 status %s", path, a.status, a.raw, want)
		}
		a = api.do(t, call{method: "HEAD", path: path})
		if a.status != 200 {
			t.Errorf("HEAD %s: %d", path, a.status)
		}
	}
}

// TestEnvoyRule: POST /v1/envoy/rule answers the rule a descriptor meets,
// as ShouldRateLimit matches it, and names what is wrong otherwise.
func TestEnvoyRule(t *testing.T) {
	api := newAPI(t, false)
	a := api.post(t, "/v1/envoy/rule", `{"domain":"edge","entries":[{"key":"remote_address","value":"10.0.0.1"}]}`)
	if a.status != 200 {
		t.Fatalf("status %d: %s", a.status, a.raw)
	}
	rule, _ := a.body["rule"].(map[string]any)
	if rule["path"] != "edge.remote_address" || rule["text"] != "fixed_window 10/1s count_denied true" {
		t.Errorf("rule %v", rule)
	}
	for _, c := range []struct {
		body        string
		status      int
		code, field string
	}{
		{`{"domain":"edge","entries":[{"key":"other","value":"x"}]}`, 404, "no_rule", "entries"},
		{`{"domain":"nope","entries":[{"key":"remote_address","value":"x"}]}`, 404, "no_rule", "entries"},
		{`{"entries":[{"key":"remote_address","value":"x"}]}`, 400, "invalid_request", "domain"},
		{`{"domain":"edge"}`, 400, "invalid_request", "entries"},
		{`{"domain":"edge","entries":[],"extra":1}`, 400, "unknown_field", "extra"},
	} {
		a := api.post(t, "/v1/envoy/rule", c.body)
		if a.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.body, a.status, c.status, a.raw)
			continue
		}
		if code, field := errorOf(t, a); code != c.code || field != c.field {
			t.Errorf("%s: error %s at %q, want %s at %q", c.body, code, field, c.code, c.field)
		}
	}
}
