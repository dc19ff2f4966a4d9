package envoyrls_test

// The rest of the RLS surface: response headers, the /json body and
// request forms, error paths, and floodgate's policy extension.

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// TestResponseHeaders checks response_headers_to_add: the RateLimit and
// RateLimit-Policy fields of the binding descriptor (§6.1's choice: the
// least remaining among descriptors with a limit, the last one over its
// limit above all; never an unlimited, unmatched or replaced one), and no
// fields when envoy.response_headers is false.
func TestResponseHeaders(t *testing.T) {
	foo := func(kv ...string) *rlv3.RateLimitDescriptor { return desc(append([]string{"foo", "foo"}, kv...)...) }
	type hv = [2]string
	cases := []struct {
		name    string
		sources []string
		domain  string
		before  [][]*rlv3.RateLimitDescriptor // requests sent first
		descs   []*rlv3.RateLimitDescriptor
		want    []hv // in order; nil: none
	}{
		{name: "one descriptor", descs: ds(foo()),
			want: []hv{{"RateLimit", `"rl.foo";r=1;t=60`}, {"RateLimit-Policy", `"rl.foo";q=2;w=60`}}},
		{name: "least remaining", before: [][]*rlv3.RateLimitDescriptor{ds(foo())}, descs: ds(foo("bar", "bar"), foo(), foo("bar", "x")),
			want: []hv{{"RateLimit", `"rl.foo";r=0;t=60`}, {"RateLimit-Policy", `"rl.foo";q=2;w=60`}}},
		{name: "last over wins", before: [][]*rlv3.RateLimitDescriptor{ds(foo("baz", "baz"))}, descs: ds(foo("baz", "baz"), foo("bar", "banned"), foo("bar", "bar")),
			// A limit of 0 never admits: no t.
			want: []hv{{"RateLimit", `"rl.foo.bar_banned";r=0`}, {"RateLimit-Policy", `"rl.foo.bar_banned";q=0;w=60`}}},
		{name: "last over wins, reversed", before: [][]*rlv3.RateLimitDescriptor{ds(foo("baz", "baz"))}, descs: ds(foo("bar", "banned"), foo("baz", "baz"), foo("bar", "bar")),
			want: []hv{{"RateLimit", `"rl.foo.baz";r=0;t=1`}, {"RateLimit-Policy", `"rl.foo.baz";q=1;w=1`}}},
		{name: "over beats a later remaining 0", before: [][]*rlv3.RateLimitDescriptor{ds(foo("baz", "baz"), foo())}, descs: ds(foo("baz", "baz"), foo()),
			want: []hv{{"RateLimit", `"rl.foo.baz";r=0;t=1`}, {"RateLimit-Policy", `"rl.foo.baz";q=1;w=1`}}},
		{name: "shadow can bind", before: [][]*rlv3.RateLimitDescriptor{ds(foo("baz", "shady"))}, descs: ds(foo("baz", "shady"), foo("bar", "bar")),
			want: []hv{{"RateLimit", `"rl.foo.baz_shady";r=0;t=60`}, {"RateLimit-Policy", `"rl.foo.baz_shady";q=1;w=60`}}},
		{name: "unlimited and unmatched never bind", descs: ds(desc("qux", "x"), foo("bay", "y"), desc("nope", "n")), want: nil},
		{name: "replaced never binds", sources: []string{"example7.yaml"}, domain: "example7",
			descs: ds(desc("key_2", "value_2", "user", "bkthomps"), desc("key_1", "value_1", "user", "bkthomps")),
			want:  []hv{{"RateLimit", `"example7.key_2_value_2.user_bkthomps";r=9;t=1`}, {"RateLimit-Policy", `"example7.key_2_value_2.user_bkthomps";q=10;w=1`}}},
		{name: "global shadow mode keeps them", sources: []string{x8, "demo.yaml"}, before: [][]*rlv3.RateLimitDescriptor{ds(foo("baz", "baz"))},
			descs: ds(foo("baz", "baz")),
			want:  []hv{{"RateLimit", `"rl.foo.baz";r=0;t=1`}, {"RateLimit-Policy", `"rl.foo.baz";q=1;w=1`}}},
		{name: "off", sources: []string{"envoy: {response_headers: false}\n", "demo.yaml"}, descs: ds(foo()), want: nil},
		{name: "off, over", sources: []string{"envoy: {response_headers: false}\n", "demo.yaml"}, descs: ds(foo("bar", "banned")), want: nil},
	}
	for _, c := range cases {
		if c.sources == nil {
			c.sources = []string{"demo.yaml"}
		}
		if c.domain == "" {
			c.domain = "rl"
		}
		for _, tr := range transports {
			t.Run(c.name+"/"+tr.name, func(t *testing.T) {
				h := newHarness(t, c.sources...)
				for _, b := range c.before {
					tr.call(h, t, &rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: b})
				}
				got := tr.call(h, t, &rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: c.descs})
				var want []*corev3.HeaderValue
				for _, w := range c.want {
					want = append(want, &corev3.HeaderValue{Key: w[0], Value: w[1]})
				}
				if !proto.Equal(&rlsv3.RateLimitResponse{ResponseHeadersToAdd: got.ResponseHeadersToAdd},
					&rlsv3.RateLimitResponse{ResponseHeadersToAdd: want}) {
					t.Errorf("response_headers_to_add:\n got: %v\nwant: %v", got.ResponseHeadersToAdd, want)
				}
			})
		}
	}
}

// TestJSONBody checks the /json answer's JSON itself against §5's example
// body (compared parsed: protojson's whitespace is random): lowerCamelCase
// names, enums as names, zero values omitted, durations as "23s".
func TestJSONBody(t *testing.T) {
	h := newHarness(t, "envoy: {response_headers: false}\n", `
domain: body
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 2, name: n}
  - key: u
    rate_limit: {unlimited: true}
`)
	h.clock.Advance(37 * time.Second)
	h.jsonPost(t, []byte(`{"domain":"body","descriptors":[{"entries":[{"key":"a","value":"1"}]}]}`))
	code, hdr, body := h.jsonPost(t, []byte(`{"domain":"body","descriptors":[
		{"entries":[{"key":"a","value":"1"}]},
		{"entries":[{"key":"b","value":"1"}]},
		{"entries":[{"key":"c","value":"1"}]},
		{"entries":[{"key":"u","value":"1"}]}]}`))
	if code != http.StatusTooManyRequests || hdr.Get("Content-Type") != "application/json" {
		t.Errorf("status %d, Content-Type %q; want 429, application/json", code, hdr.Get("Content-Type"))
	}
	const want = `{"overallCode":"OVER_LIMIT","statuses":[
  {"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"23s"},
  {"code":"OK","currentLimit":{"name":"n","requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"23s"},
  {"code":"OK"},
  {"code":"OK","limitRemaining":4294967295}]}`
	var g, w any
	if err := json.Unmarshal(body, &g); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("body\n got: %s\nwant: %s", body, want)
	}
}

// TestJSONRequestForms checks what /json accepts (§5): field names in
// either case style, the descriptor's hits_addend as a wrapper (string or
// number), enums as names or numbers.
func TestJSONRequestForms(t *testing.T) {
	h := newHarness(t, "demo.yaml")
	cases := []struct {
		name, body string
		code       int
		want       string // the response, protojson
	}{
		{"snake_case, check only", `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"a"}],"hits_addend":"0"}]}`, 200,
			`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":2,"durationUntilReset":"60s"}]}`},
		{"camelCase request hitsAddend", `{"domain":"rl","hitsAddend":2,"descriptors":[{"entries":[{"key":"foo","value":"a"}]}]}`, 200,
			`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"60s"}]}`},
		{"descriptor hitsAddend as a number", `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"a"}],"hitsAddend":1}]}`, 429,
			`{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"60s"}]}`},
		{"override unit as a name", `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"b"}],"limit":{"requests_per_unit":3,"unit":"HOUR"}}]}`, 200,
			`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":3,"unit":"HOUR"},"limitRemaining":2,"durationUntilReset":"1800s"}]}`},
		{"override unit as a number", `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"c"}],"limit":{"requestsPerUnit":3,"unit":3}}]}`, 200,
			`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":3,"unit":"HOUR"},"limitRemaining":2,"durationUntilReset":"1800s"}]}`},
	}
	for _, c := range cases {
		code, _, body := h.jsonPost(t, []byte(c.body))
		var got, want rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(body, &got); err != nil {
			t.Errorf("%s: %d %s: %v", c.name, code, body, err)
			continue
		}
		if err := protojson.Unmarshal([]byte(c.want), &want); err != nil {
			t.Fatal(err)
		}
		got.ResponseHeadersToAdd = nil
		if code != c.code || !proto.Equal(&got, &want) {
			t.Errorf("%s: %d %s\nwant %d %s", c.name, code, body, c.code, c.want)
		}
	}
}

// TestErrors checks the refused requests: over gRPC InvalidArgument, through
// /json 400 with a JSON error naming the problem. (envoyproxy/ratelimit
// answers gRPC UNKNOWN and a text/plain 400 "Bad Request"; floodgate's
// choice is InvalidArgument and a JSON error.)
func TestErrors(t *testing.T) {
	h := newHarness(t, "demo.yaml")
	cases := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		json string // the /json body, when req cannot say it
		code string // the JSON error's code
		msg  string // in both errors' messages
	}{
		{name: "empty domain", req: &rlsv3.RateLimitRequest{Descriptors: ds(desc("foo", "foo"))},
			code: "invalid_request", msg: "rate limit domain must not be empty"},
		{name: "no descriptors", req: &rlsv3.RateLimitRequest{Domain: "rl"},
			code: "invalid_request", msg: "rate limit descriptor list must not be empty"},
		{name: "override unit UNKNOWN", req: &rlsv3.RateLimitRequest{Domain: "rl",
			Descriptors: ds(desc("qux", "x"), override(5, typev3.RateLimitUnit_UNKNOWN, desc("foo", "foo")))},
			code: "malformed_request", msg: "descriptors[1].limit.unit"},
		{name: "override unit 99", req: &rlsv3.RateLimitRequest{Domain: "rl",
			Descriptors: ds(override(5, typev3.RateLimitUnit(99), desc("foo", "foo")))},
			code: "malformed_request", msg: "descriptors[0].limit.unit"},
		{name: "unknown field", json: `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"foo"}]}],"nope":1}`,
			code: "malformed_request", msg: "nope"},
		{name: "empty body", json: ` `, code: "malformed_request", msg: "empty body"},
		{name: "not JSON", json: `domain: rl`, code: "malformed_request", msg: "not a RateLimitRequest"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.req != nil {
				_, err := h.grpcCall(t, c.req)
				if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), c.msg) {
					t.Errorf("gRPC: %v; want InvalidArgument with %q", err, c.msg)
				}
				b, err := protojson.Marshal(c.req)
				if err != nil {
					t.Fatal(err)
				}
				c.json = string(b)
			}
			code, hdr, body := h.jsonPost(t, []byte(c.json))
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(body, &e); err != nil || code != http.StatusBadRequest ||
				hdr.Get("Content-Type") != "application/json" || e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.msg) {
				t.Errorf("/json: %d %s %s; want 400, a JSON error %s with %q", code, hdr.Get("Content-Type"), body, c.code, c.msg)
			}
		})
	}
	// Nothing refused was counted: the first real request gets OK(1).
	resp, err := h.grpcCall(t, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: ds(desc("foo", "foo"))})
	if err != nil || resp.Statuses[0].LimitRemaining != 1 {
		t.Errorf("after the errors: %v %v; want OK(1)", prototext.Format(resp), err)
	}
	// /json takes POST only (envoyproxy/ratelimit takes any method).
	resp2, err := http.Get(h.url)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /json: %d, want 405", resp2.StatusCode)
	}
}

// TestFloodgatePolicies checks the extension: a descriptor's rate_limit
// naming a policy of the policies section, or giving one's text, decides
// by that policy. current_limit states the policy (its quota, the unit of
// its period, the rate limit's name or else the policy's) and
// duration_until_reset the time until the key's state empties.
func TestFloodgatePolicies(t *testing.T) {
	const policies = `
policies:
  burst: "gcra 1/1s burst 3"
`
	const ext = `
domain: ext
descriptors:
  - key: g
    rate_limit: {policy: burst}
  - key: sw
    rate_limit: {floodgate: "sliding_window 3/1m resolution 1s", name: sw}
  - key: self
    rate_limit: {policy: burst, replaces: [{name: burst}]}
  - key: r
    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: burst}]}
  - key: named
    rate_limit: {policy: burst, name: named_burst}
  - key: r2
    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: named_burst}]}
`
	burst := lim{"burst", 1, second}
	sw := lim{"sw", 3, minute}
	rs := func(s st, d time.Duration) st { s.reset = d; return s }
	runScenarios(t, []scenario{
		{name: "gcra", sources: []string{policies, ext}, domain: "ext", steps: []step{
			// GCRA, one per second, a burst of 3: each request pushes the
			// theoretical arrival time one second further.
			{descs: ds(desc("g", "1")), want: sts(rs(ok(2, burst), time.Second))},
			{descs: ds(desc("g", "1")), want: sts(rs(ok(1, burst), 2*time.Second))},
			{descs: ds(desc("g", "1")), want: sts(rs(ok(0, burst), 3*time.Second))},
			{descs: ds(desc("g", "1")), want: sts(rs(over(burst), 3*time.Second))},
			{descs: ds(desc("g", "2")), want: sts(rs(ok(2, burst), time.Second))},
			{advance: time.Second, descs: ds(desc("g", "1")), want: sts(rs(ok(0, burst), 3*time.Second))},
			{advance: 4 * time.Second, descs: ds(desc("g", "1")), want: sts(rs(ok(2, burst), time.Second))},
		}},
		{name: "sliding_window", sources: []string{policies, ext}, domain: "ext", steps: []step{
			{descs: ds(desc("sw", "1")), times: 3, want: sts(rs(countdown(2, sw), time.Minute))},
			{descs: ds(desc("sw", "1")), want: sts(rs(over(sw), time.Minute))},
			// A rolling minute: still 3 in it 30 s later; all gone a
			// minute and a second after.
			{advance: 30 * time.Second, descs: ds(desc("sw", "1")), want: sts(rs(over(sw), 30*time.Second))},
			{advance: 31 * time.Second, descs: ds(desc("sw", "1")), times: 3, want: sts(rs(countdown(2, sw), time.Minute))},
		}},
		// replaces refers to rate_limit.name only, never to a policy's name.
		{name: "replaces", sources: []string{policies, ext}, domain: "ext", steps: []step{
			{note: "does not replace itself", descs: ds(desc("self", "1")), want: sts(rs(ok(2, burst), time.Second))},
			{note: "an unnamed rule is not replaced", descs: ds(desc("g", "1"), desc("r", "1")),
				want: sts(rs(ok(2, burst), time.Second), ok(4, L(5, second)))},
			{note: "a named one is", descs: ds(desc("named", "1"), desc("r2", "1")),
				want: sts(noLimit, ok(4, L(5, second)))},
			{note: "and was not counted", descs: ds(desc("named", "1")),
				want: sts(rs(ok(2, lim{"named_burst", 1, second}), time.Second))},
		}},
	})
}
