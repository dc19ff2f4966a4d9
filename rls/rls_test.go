package rls_test

// Envoy domain files (X11 of docs/envoy-ratelimit-semantics.md §8: what
// envoyproxy/ratelimit refuses, and what it loads) and ShouldRateLimit
// itself, without a transport.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
)

func parse(files ...string) (*config.Config, error) {
	srcs := make([]config.Source, len(files))
	for i, f := range files {
		srcs[i] = config.Source{Name: "f" + string(rune('0'+i)) + ".yaml", Data: []byte(f)}
	}
	return config.Parse(srcs...)
}

// TestEnvoyConfigErrors: X11, every configuration error of §1.2 refuses
// the whole load.
func TestEnvoyConfigErrors(t *testing.T) {
	const limit = "rate_limit: {unit: second, requests_per_unit: 1}"
	cases := []struct {
		name  string
		files []string
		want  string
	}{
		{"empty key", []string{"domain: d\ndescriptors:\n  - key: \"\"\n    " + limit}, "non-empty key"},
		{"missing key", []string{"domain: d\ndescriptors:\n  - value: v\n    " + limit}, "non-empty key"},
		{"duplicate composite key", []string{"domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n"}, `duplicate descriptor composite key "a_b"`},
		{"duplicate composite key, quirk", []string{"domain: d\ndescriptors:\n  - key: a_b\n    value: c\n  - key: a\n    value: b_c\n"}, `duplicate descriptor composite key "a_b_c"`},
		{"duplicate nested", []string{"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n        value: \"\"\n"}, `duplicate descriptor composite key "b"`},
		{"bad unit", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"}, "invalid rate limit unit"},
		{"unit unknown", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n"}, "invalid rate limit unit"},
		{"no unit", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n"}, "invalid rate limit unit"},
		{"empty rate_limit", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {}\n"}, "invalid rate limit unit"},
		{"unlimited with a unit", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n"}, "should not specify rate limit unit when unlimited"},
		{"empty replaces", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n"}, "replaces"},
		{"replaces without name", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n"}, "replaces"},
		{"self replaces", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n"}, "cannot replace itself"},
		{"replaces not a map", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [foo]}\n"}, "want a mapping"},
		{"unknown key", []string{"domain: d\ndescriptors:\n  - key: a\n    colour: red\n"}, "unknown field"},
		{"unknown rate_limit key", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2}\n"}, "unknown field"},
		{"descriptor not a map", []string{"domain: d\ndescriptors:\n  - a\n"}, "want a mapping"},
		{"float requests_per_unit", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.0}\n"}, "want an integer"},
		{"negative requests_per_unit", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n"}, "want an integer"},
		{"requests_per_unit over uint32", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n"}, "want an integer"},
		{"shadow_mode not a bool", []string{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n"}, "want true or false"},
		{"empty domain", []string{"domain: \"\"\ndescriptors:\n  - key: a\n"}, "non-empty domain"},
		{"null domain", []string{"domain:\ndescriptors:\n  - key: a\n"}, "domain"},
		{"empty file", []string{""}, "empty file"},
		{"comment-only file", []string{"# nothing\n"}, "empty file"},
		{"top-level list", []string{"- domain: d\n"}, "want a mapping"},
		{"duplicate domain", []string{"domain: d\ndescriptors:\n  - key: a\n", "domain: d\ndescriptors:\n  - key: b\n"}, `duplicate domain "d"`},
		{"duplicate key across merged files", []string{"envoy: {merge_domains: true}\n", "domain: d\ndescriptors:\n  - key: a\n", "domain: d\ndescriptors:\n  - key: a\n"},
			`duplicate descriptor composite key "a"`},
		{"share_threshold without *", []string{"domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n    " + limit}, "share_threshold can only be used with wildcard values"},
		{"policy and unit", []string{"policies: {p: \"gcra 1/1s\"}\n", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {policy: p, unit: second}\n"}, "floodgate policy replaces unit"},
		{"unknown policy", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {policy: nope}\n"}, `no policy named "nope"`},
		{"bad policy text", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {floodgate: \"gcra fast\"}\n"}, "rate_limit.floodgate"},
	}
	for _, c := range cases {
		_, err := parse(c.files...)
		if err == nil || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}
}

// harness is a service on a memory store at the spec's clock.
func newService(t testing.TB, files ...string) (*rls.Engine, *floodgatetest.ManualClock) {
	t.Helper()
	cfg, err := parse(files...)
	if err != nil {
		t.Fatal(err)
	}
	clock := floodgatetest.NewManualClock(time.Unix(1714825800, 0))
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return engineOn(t, cfg, store, clock), clock
}

// redisClient is a client of srv that sends a decision once and reads its
// reply for up to a minute: go-redis's 3 s would fail a call that a
// loaded machine held up.
func redisClient(t testing.TB, srv *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password, MaxRetries: -1,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return c
}

// engineOn returns the engine of cfg deciding on store, timed by clock.
// Unless cfg sets them to other values than the defaults config.Parse
// fills in, store.timeout and overload.queue_wait are a minute, not 50ms
// and 500ms: the tests are about decisions, and a loaded machine may hold
// a call up for more than 50ms (the first also loads Redis's library),
// which would hand it to the failure mode.
func engineOn(t testing.TB, cfg *config.Config, store floodgate.Store, clock storekit.Clock) *rls.Engine {
	t.Helper()
	if cfg.Store.Timeout == 0 || cfg.Store.Timeout == config.DefaultTimeout {
		cfg.Store.Timeout = time.Minute
	}
	if cfg.Overload.QueueWait == 0 || cfg.Overload.QueueWait == config.DefaultQueueWait {
		cfg.Overload.QueueWait = time.Minute
	}
	svc, err := service.New(cfg, service.Options{Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func ask(t *testing.T, svc *rls.Engine, domain string, ds ...rls.Descriptor) rls.Response {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), rls.Request{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func d(kv ...string) rls.Descriptor {
	var out rls.Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, rls.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// summary is a status in the spec's notation: OK(r) or OVER, "none" for
// no limit, "unlimited", and "shadow" for OK with a limit and nothing
// remaining.
func summary(s rls.Status) string {
	switch {
	case s.CurrentLimit == nil && s.Code == rls.CodeOK && s.LimitRemaining == 0 && !s.HasReset:
		return "none"
	case s.CurrentLimit == nil && s.Code == rls.CodeOK && s.LimitRemaining == 4294967295 && !s.HasReset:
		return "unlimited"
	case s.CurrentLimit == nil || !s.HasReset:
		return "malformed"
	case s.Code == rls.CodeOverLimit && s.LimitRemaining == 0:
		return "OVER"
	case s.Code == rls.CodeOK:
		return "OK(" + itoa(s.LimitRemaining) + ")"
	}
	return "malformed"
}

func itoa(n uint32) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func summaries(r rls.Response) string {
	var parts []string
	for _, s := range r.Statuses {
		parts = append(parts, summary(s))
	}
	return strings.Join(parts, " ")
}

// TestEnvoyConfigAccepted: files envoyproxy/ratelimit loads load, and
// mean what they mean there (§1.2): YAML 1.1 booleans, numbers as values,
// units in any case, unlimited with a requests_per_unit, null rate_limit,
// replaces naming nothing, metadata and the metric-only keys.
func TestEnvoyConfigAccepted(t *testing.T) {
	svc, _ := newService(t, `---
domain: ok
descriptors:
  - key: shadow_true
    shadow_mode: True
    rate_limit: {unit: SECOND, requests_per_unit: 1}
  - key: shadow_yes
    shadow_mode: yes
    detailed_metric: on
    value_to_metric: Off
    rate_limit: {unit: Minute, requests_per_unit: 1}
  - key: shadow_no
    shadow_mode: no
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: unlimited
    rate_limit: {unlimited: yes, requests_per_unit: 5, replaces: [{name: nothing_at_all}]}
  - key: number
    value: 10
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: placeholder
    rate_limit:
    metadata: {any: [thing, {at: all}]}
    descriptors:
      - key: child
        rate_limit: {unit: week, requests_per_unit: 3}
`)
	steps := []struct {
		descs []rls.Descriptor
		want  string
	}{
		{[]rls.Descriptor{d("shadow_true", "a"), d("shadow_yes", "a"), d("shadow_no", "a")}, "OK(0) OK(0) OK(0)"},
		{[]rls.Descriptor{d("shadow_true", "a"), d("shadow_yes", "a"), d("shadow_no", "a")}, "OK(0) OK(0) OVER"},
		{[]rls.Descriptor{d("unlimited", "a"), d("number", "10"), d("number", "1")}, "unlimited OK(1) none"},
		{[]rls.Descriptor{d("placeholder", "p"), d("placeholder", "p", "child", "c")}, "none OK(2)"},
	}
	for i, s := range steps {
		resp := ask(t, svc, "ok", s.descs...)
		if got := summaries(resp); got != s.want {
			t.Errorf("step %d: %s, want %s", i, got, s.want)
		}
	}
	// The shadow statuses of step 1 carry their limit and are OK: the
	// first shadow one was over (1 per second, second hit).
	resp := ask(t, svc, "ok", d("shadow_true", "a"))
	if s := resp.Statuses[0]; s.Code != rls.CodeOK || s.CurrentLimit.RequestsPerUnit != 1 || s.CurrentLimit.Unit != config.Second || resp.OverallCode != rls.CodeOK {
		t.Errorf("shadow: %+v overall %v", s, resp.OverallCode)
	}
}

// TestMergeDomains: envoy.merge_domains (MERGE_DOMAIN_CONFIG) spreads one
// domain over files, wildcards in file order.
func TestMergeDomains(t *testing.T) {
	svc, _ := newService(t, "envoy: {merge_domains: true}\n",
		"domain: m\ndescriptors:\n  - key: a\n    value: x*\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"domain: m\ndescriptors:\n  - key: a\n    value: xy*\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	if got := summaries(ask(t, svc, "m", d("a", "xyz"), d("b", "1"), d("a", "x"))); got != "OK(0) OK(1) OK(0)" {
		t.Errorf("merged: %s, want OK(0) OK(1) OK(0)", got)
	}
}

// TestShouldRateLimitErrors: the refusals are *RequestError.
func TestShouldRateLimitErrors(t *testing.T) {
	svc, _ := newService(t, "limits: {max_descriptors: 2, max_key_bytes: 16}\n",
		"domain: e\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	cases := []struct {
		name  string
		req   rls.Request
		code  string
		field string
	}{
		{"empty domain", rls.Request{Descriptors: []rls.Descriptor{d("a", "1")}}, "invalid_request", "domain"},
		{"no descriptors", rls.Request{Domain: "e"}, "invalid_request", "descriptors"},
		{"too many descriptors", rls.Request{Domain: "e", Descriptors: []rls.Descriptor{d("a", "1"), d("a", "2"), d("a", "3")}}, "too_many_items", "descriptors"},
		{"bad override unit", rls.Request{Domain: "e", Descriptors: []rls.Descriptor{
			{Entries: d("a", "1").Entries, Limit: &rls.Limit{RequestsPerUnit: 1, Unit: 99}}}}, "invalid_descriptor", "descriptors[0].limit.unit"},
		{"empty override unit", rls.Request{Domain: "e", Descriptors: []rls.Descriptor{
			d("a", "1"), {Entries: d("a", "1").Entries, Limit: &rls.Limit{RequestsPerUnit: 1}}}}, "invalid_descriptor", "descriptors[1].limit.unit"},
		{"oversized descriptor", rls.Request{Domain: "e", Descriptors: []rls.Descriptor{d("a", strings.Repeat("v", 20))}}, "invalid_descriptor", "descriptors[0]"},
	}
	for _, c := range cases {
		_, err := svc.ShouldRateLimit(context.Background(), c.req)
		var re *service.RequestError
		if !errors.As(err, &re) || re.Code != c.code || re.Field != c.field {
			t.Errorf("%s: %v; want a RequestError %s on %s", c.name, err, c.code, c.field)
		}
	}
	// Nothing was counted by the refused requests.
	if got := summaries(ask(t, svc, "e", d("a", "1"))); got != "OK(0)" {
		t.Errorf("after the errors: %s, want OK(0)", got)
	}
}

// TestHitsAddendZero: a descriptor's hits_addend 0 checks without counting
// (§4.2): remaining is requests_per_unit minus the count, OK at the limit,
// OVER past it, OK under a limit of 0.
func TestHitsAddendZero(t *testing.T) { testHitsAddendZero(t, newService) }

func testHitsAddendZero(t *testing.T, newService newEngine) {
	svc, clock := newService(t, "domain: h\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: z\n    rate_limit: {unit: minute, requests_per_unit: 0}\n")
	zero, one, two := uint64(0), uint64(1), uint64(2)
	check := rls.Descriptor{Entries: d("a", "1").Entries, HitsAddend: &zero}
	hit := func(n *uint64) rls.Descriptor {
		return rls.Descriptor{Entries: d("a", "1").Entries, HitsAddend: n}
	}
	steps := []struct {
		descs []rls.Descriptor
		want  string
	}{
		{[]rls.Descriptor{check}, "OK(3)"},
		{[]rls.Descriptor{hit(&one), check}, "OK(2) OK(2)"},
		{[]rls.Descriptor{hit(&two), check, check}, "OK(0) OK(0) OK(0)"},
		{[]rls.Descriptor{hit(&one), check}, "OVER OVER"},
		{[]rls.Descriptor{{Entries: d("z", "1").Entries, HitsAddend: &zero}}, "OK(0)"},
		{[]rls.Descriptor{d("z", "1")}, "OVER"},
	}
	for i, s := range steps {
		resp := ask(t, svc, "h", s.descs...)
		if got := summaries(resp); got != s.want {
			t.Errorf("step %d: %s, want %s", i, got, s.want)
		}
		if st := resp.Statuses[0]; st.DurationUntilReset != 60*time.Second {
			t.Errorf("step %d: reset %s, want 60s", i, st.DurationUntilReset)
		}
	}
	clock.Advance(time.Minute)
	if got := summaries(ask(t, svc, "h", check)); got != "OK(3)" {
		t.Errorf("next window: %s, want OK(3)", got)
	}
}
