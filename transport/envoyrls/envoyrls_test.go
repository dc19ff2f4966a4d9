package envoyrls_test

// Conformance with envoyproxy/ratelimit, after
// docs/envoy-ratelimit-semantics.md §8: the README's example configurations
// (testdata/example*.yaml and demo.yaml hold them verbatim), each test's
// sequence of requests and the answer of every request, over gRPC and
// through /json.

import (
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

func ds(d ...*rlv3.RateLimitDescriptor) []*rlv3.RateLimitDescriptor { return d }

func sts(s ...st) []st { return s }

// TestReadmeExamples plays T1.1–T11.3.
func TestReadmeExamples(t *testing.T) {
	l500s := L(500, second)
	l5d, l100d := L(5, day), L(100, day)
	l10s, l0s := L(10, second), L(0, second)
	l300s := L(300, second)
	l100m := L(100, minute)
	l20s := L(20, second)
	specific := lim{name: "specific_limit", rpu: 5, unit: second}
	l10m, l20m, l60m := L(10, minute), L(20, minute), L(60, minute)
	l10h := L(10, hour)

	marketing := func(number string) *rlv3.RateLimitDescriptor {
		return desc("message_type", "marketing", "to_number", number)
	}
	k1 := func() *rlv3.RateLimitDescriptor { return desc("key_1", "value_1", "user", "bkthomps") }
	k2 := func() *rlv3.RateLimitDescriptor { return desc("key_2", "value_2", "user", "bkthomps") }

	runScenarios(t, []scenario{
		{name: "example1", sources: []string{"example1.yaml"}, domain: "mongo_cps", steps: []step{
			{note: "T1.1", descs: ds(desc("database", "users")), times: 500, want: sts(countdown(499, l500s))},
			{note: "T1.1 501st", descs: ds(desc("database", "users")), want: sts(over(l500s))},
			{note: "T1.2", descs: ds(desc("database", "default")), want: sts(ok(499, l500s))},
			{note: "T1.3", descs: ds(desc("database", "other")), want: sts(noLimit)},
			{note: "T1.4", advance: time.Second, descs: ds(desc("database", "users")), want: sts(ok(499, l500s))},
		}},

		{name: "example2", sources: []string{"example2.yaml"}, domain: "messaging", steps: []step{
			{note: "T2.1", descs: ds(marketing("2061111111")), times: 5, want: sts(countdown(4, l5d))},
			{note: "T2.1 6th", descs: ds(marketing("2061111111")), want: sts(over(l5d))},
			{note: "T2.2", descs: ds(marketing("2062222222")), want: sts(ok(4, l5d))},
			{note: "T2.3", descs: ds(desc("to_number", "2061111111")), times: 100, want: sts(countdown(99, l100d))},
			{note: "T2.3 101st", descs: ds(desc("to_number", "2061111111")), want: sts(over(l100d))},
			{note: "T2.3 per number", descs: ds(desc("to_number", "2062222222")), want: sts(ok(99, l100d))},
			{note: "T2.5", descs: ds(desc("message_type", "marketing")), want: sts(noLimit)},
			{note: "T2.6", descs: ds(desc("message_type", "transactional", "to_number", "2061111111")), want: sts(noLimit)},
		}},
		{name: "example2/T2.4", sources: []string{"example2.yaml"}, domain: "messaging", steps: []step{
			{note: "1–5", descs: ds(marketing("2061111111"), desc("to_number", "2061111111")), times: 5,
				want: sts(countdown(4, l5d), countdown(99, l100d))},
			{note: "6", descs: ds(marketing("2061111111"), desc("to_number", "2061111111")),
				want: sts(over(l5d), ok(94, l100d)), overall: codeOver},
		}},

		{name: "example3", sources: []string{"example3.yaml"}, domain: "edge_proxy_per_ip", steps: []step{
			{note: "T3.1", descs: ds(desc("remote_address", "50.0.0.1")), times: 10, want: sts(countdown(9, l10s))},
			{note: "T3.1 11th", descs: ds(desc("remote_address", "50.0.0.1")), want: sts(over(l10s))},
			{note: "T3.2", descs: ds(desc("remote_address", "50.0.0.2")), want: sts(ok(9, l10s))},
			{note: "T3.3", descs: ds(desc("remote_address", "50.0.0.5")), times: 3, want: sts(over(l0s))},
			{note: "T3.3 next second", advance: time.Second, descs: ds(desc("remote_address", "50.0.0.5")), want: sts(over(l0s))},
		}},

		{name: "example4a", sources: []string{"example4a.yaml"}, domain: "example4", steps: []step{
			{note: "T4.1", descs: ds(desc("key", "value", "subkey", "subvalue")), times: 3, want: sts(noLimit)},
			{note: "T4.2", descs: ds(desc("key", "value")), times: 300, want: sts(countdown(299, l300s))},
			{note: "T4.2 301st", descs: ds(desc("key", "value")), want: sts(over(l300s))},
		}},
		{name: "example4b", sources: []string{"example4b.yaml"}, domain: "example4", steps: []step{
			{note: "T4.3", descs: ds(desc("key", "value", "subkey", "subvalue")), times: 300, want: sts(countdown(299, l300s))},
			{note: "T4.3 301st", descs: ds(desc("key", "value", "subkey", "subvalue")), want: sts(over(l300s))},
			{note: "T4.4", descs: ds(desc("key", "value", "subkey", "other")), want: sts(ok(299, l300s))},
			{note: "T4.5", descs: ds(desc("key", "value")), want: sts(noLimit)},
		}},

		{name: "example5", sources: []string{"example5.yaml"}, domain: "internal", steps: []step{
			{note: "T5.1", descs: ds(desc("ldap", "anything")), times: 5, want: sts(unlimited)},
			{note: "T5.2", descs: ds(desc("azure", "x")), times: 100, want: sts(countdown(99, l100m))},
			{note: "T5.2 101st", descs: ds(desc("azure", "x")), want: sts(over(l100m))},
			{note: "T5.2 per value", descs: ds(desc("azure", "y")), want: sts(ok(99, l100m))},
			{note: "T5.1 beside a limit", descs: ds(desc("ldap", "a"), desc("azure", "x")), want: sts(unlimited, over(l100m))},
		}},

		{name: "example6", sources: []string{"example6.yaml"}, domain: "example6", steps: []step{
			{note: "T6.1 1–10", descs: ds(desc("service", "auth-service", "user", "user-a")), times: 10, want: sts(countdown(9, l10s))},
			{note: "T6.1 11–15 shadow", descs: ds(desc("service", "auth-service", "user", "user-a")), times: 5, want: sts(shadowed(l10s))},
			{note: "T6.2", descs: ds(desc("service", "s", "user", "user-b")), times: 20, want: sts(countdown(19, l20s))},
			{note: "T6.2 21st", descs: ds(desc("service", "s", "user", "user-b")), want: sts(over(l20s))},
			{note: "shadow beside over", descs: ds(desc("service", "auth-service", "user", "user-a"), desc("service", "s", "user", "user-b")),
				want: sts(shadowed(l10s), over(l20s))},
		}},

		{name: "example7", sources: []string{"example7.yaml"}, domain: "example7", steps: []step{
			{note: "T7.2", descs: ds(k2()), times: 10, want: sts(countdown(9, l10s))},
			{note: "T7.2 11th", descs: ds(k2()), want: sts(over(l10s))},
			{note: "T7.3 1–10", advance: time.Second, descs: ds(k1(), k2()), times: 10, want: sts(noLimit, countdown(9, l10s))},
			{note: "T7.3 11th", descs: ds(k1(), k2()), want: sts(noLimit, over(l10s))},
			{note: "T7.1 same second", descs: ds(k1()), times: 5, want: sts(countdown(4, specific))},
			{note: "T7.1 6th", descs: ds(k1()), want: sts(over(specific))},
		}},

		{name: "example8", sources: []string{"example8.yaml"}, domain: "example8", steps: []step{
			{note: "T8.1", descs: ds(desc("key1", "unspecified_value")), times: 10, want: sts(countdown(9, l10m))},
			{note: "T8.1 11th", descs: ds(desc("key1", "unspecified_value")), want: sts(over(l10m))},
			{note: "T8.1 own counter", descs: ds(desc("key1", "unspecified_value2")), times: 10, want: sts(countdown(9, l10m))},
			{note: "T8.2", descs: ds(desc("key1", "value1")), times: 20, want: sts(countdown(19, l20m))},
			{note: "T8.2 21st", descs: ds(desc("key1", "value1")), want: sts(over(l20m))},
			{note: "next minute", advance: time.Minute, descs: ds(desc("key1", "unspecified_value")), want: sts(ok(9, l10m))},
		}},

		{name: "example9a", sources: []string{"example9a.yaml"}, domain: "example9", steps: []step{
			{note: "T9.1", descs: ds(desc("key1", "value1")), times: 20, want: sts(countdown(19, l20m))},
			{note: "T9.1 21st", descs: ds(desc("key1", "value1")), want: sts(over(l20m))},
			{note: "T9.1 own counter", descs: ds(desc("key1", "value2")), want: sts(ok(19, l20m))},
			{note: "T9.1 valueXYZ", descs: ds(desc("key1", "valueXYZ")), want: sts(ok(19, l20m))},
			{note: "T9.2 empty star", descs: ds(desc("key1", "value")), want: sts(ok(19, l20m))},
			{note: "T9.2 no match", descs: ds(desc("key1", "valu")), want: sts(noLimit)},
		}},
		{name: "example9b", sources: []string{"example9b.yaml"}, domain: "example9", steps: []step{
			{note: "T9.3", descs: ds(desc("path", "/api/123/action")), want: sts(ok(19, l20m))},
			{note: "T9.3", descs: ds(desc("path", "/api/user-id/action")), want: sts(ok(19, l20m))},
			{note: "T9.3 own counter", descs: ds(desc("path", "/api/123/action")), want: sts(ok(18, l20m))},
			{note: "T9.3 no match", descs: ds(desc("path", "/api/123/other")), want: sts(noLimit)},
			{note: "T9.3 empty star", descs: ds(desc("path", "/api//action")), want: sts(ok(19, l20m))},
		}},
		{name: "example9c", sources: []string{"example9c.yaml"}, domain: "example9", steps: []step{
			{note: "T9.4", descs: ds(desc("route", "/api/v1/resource/123/action")), want: sts(ok(19, l20m))},
			{note: "T9.4", descs: ds(desc("route", "/api/v2/resource/456/action")), want: sts(ok(19, l20m))},
			{note: "T9.4 own counter", descs: ds(desc("route", "/api/v1/resource/123/action")), want: sts(ok(18, l20m))},
			{note: "T9.4 no match", descs: ds(desc("route", "/api/v1/resource/123/other")), want: sts(noLimit)},
		}},

		{name: "example10", sources: []string{"example10a.yaml", "example10b.yaml"}, domain: "example10", steps: []step{
			{note: "T10.1", descs: ds(desc("route", "api", "http_method", "GET", "subject_id", "123")), times: 60, want: sts(countdown(59, l60m))},
			{note: "T10.1 61st", descs: ds(desc("route", "api", "http_method", "GET", "subject_id", "123")), want: sts(over(l60m))},
			{note: "T10.1 other subject", descs: ds(desc("route", "api", "http_method", "GET", "subject_id", "124")), want: sts(ok(59, l60m))},
			{note: "T10.1 other method", descs: ds(desc("route", "api", "http_method", "POST", "subject_id", "123")), want: sts(ok(59, l60m))},
			{note: "T10.2", domain: "example10_wildcard", descs: ds(desc("user", "alice", "action", "readfile", "resource", "documents")),
				times: 100, want: sts(countdown(99, l100m))},
			{note: "T10.2 101st", domain: "example10_wildcard", descs: ds(desc("user", "alice", "action", "readfile", "resource", "documents")),
				want: sts(over(l100m))},
			{note: "T10.2 no match", domain: "example10_wildcard", descs: ds(desc("user", "alice", "action", "write", "resource", "d")),
				want: sts(noLimit)},
		}},

		{name: "example11a", sources: []string{"example11a.yaml"}, domain: "example11", steps: []step{
			{note: "T11.1 a.pdf", descs: ds(desc("files", "files/a.pdf")), times: 5, want: sts(countdown(9, l10h))},
			{note: "T11.1 b.csv shares", descs: ds(desc("files", "files/b.csv")), times: 5, want: sts(countdown(4, l10h))},
			{note: "T11.1 c.txt", descs: ds(desc("files", "files/c.txt")), want: sts(over(l10h))},
			{note: "T11.2", descs: ds(desc("files_no_share", "files_no_share/a.pdf")), times: 10, want: sts(countdown(9, l10h))},
			{note: "T11.2 11th", descs: ds(desc("files_no_share", "files_no_share/a.pdf")), want: sts(over(l10h))},
			{note: "T11.2 b.csv own", descs: ds(desc("files_no_share", "files_no_share/b.csv")), times: 10, want: sts(countdown(9, l10h))},
			{note: "T11.1 next hour", advance: time.Hour, descs: ds(desc("files", "files/c.txt")), want: sts(ok(9, l10h))},
		}},
		{name: "example11b", sources: []string{"example11b.yaml"}, domain: "example11_metrics", steps: []step{
			{note: "T11.3 v1", descs: ds(desc("route", "api/v1", "method", "GET")), times: 30, want: sts(countdown(59, l60m))},
			{note: "T11.3 v2 shares", descs: ds(desc("route", "api/v2", "method", "GET")), times: 30, want: sts(countdown(29, l60m))},
			{note: "T11.3 61st", descs: ds(desc("route", "api/v3", "method", "GET")), want: sts(over(l60m))},
			{note: "T11.3 POST own", descs: ds(desc("route", "api/v1", "method", "POST")), want: sts(ok(59, l60m))},
			{note: "T11.3 POST shares routes", descs: ds(desc("route", "api/v9", "method", "POST")), want: sts(ok(58, l60m))},
		}},
	})
}

// TestDemoConfig plays the README's curl lines against
// examples/ratelimit/config/example.yaml (§8, the demo table).
func TestDemoConfig(t *testing.T) {
	foo := func(kv ...string) *rlv3.RateLimitDescriptor { return desc(append([]string{"foo", "foo"}, kv...)...) }
	runScenarios(t, []scenario{
		{name: "demo", sources: []string{"demo.yaml"}, domain: "rl", steps: []step{
			{note: "/test", descs: ds(desc("source_cluster", "proxy", "destination_cluster", "mock")), want: sts(ok(0, L(1, minute)))},
			{note: "/test 2nd", descs: ds(desc("source_cluster", "proxy", "destination_cluster", "mock")), want: sts(over(L(1, minute)))},
			{note: "/header", descs: ds(foo()), times: 2, want: sts(countdown(1, L(2, minute)))},
			{note: "/header 3rd", descs: ds(foo()), want: sts(over(L(2, minute)))},
			{note: "/twoheader bar", descs: ds(foo("bar", "bar")), times: 3, want: sts(countdown(2, L(3, minute)))},
			{note: "/twoheader bar 4th", descs: ds(foo("bar", "bar")), want: sts(over(L(3, minute)))},
			{note: "baz", descs: ds(foo("baz", "baz")), want: sts(ok(0, L(1, second)))},
			{note: "baz 2nd", descs: ds(foo("baz", "baz")), want: sts(over(L(1, second)))},
			{note: "baz next second", advance: time.Second, descs: ds(foo("baz", "baz")), want: sts(ok(0, L(1, second)))},
			{note: "banned", descs: ds(foo("bar", "banned")), times: 3, want: sts(over(L(0, minute)))},
			{note: "shady", descs: ds(foo("baz", "shady")), want: sts(ok(0, L(1, minute)))},
			{note: "shady again", descs: ds(foo("baz", "shady")), times: 3, want: sts(shadowed(L(1, minute)))},
			{note: "not-so-shady", descs: ds(foo("baz", "not-so-shady")), want: sts(ok(0, L(1, second)))},
			{note: "not-so-shady 2nd", descs: ds(foo("baz", "not-so-shady")), want: sts(over(L(1, second)))},
			{note: "bay unlimited", descs: ds(foo("bay", "x")), times: 3, want: sts(unlimited)},
			{note: "qux unlimited", descs: ds(desc("qux", "x")), want: sts(unlimited)},
			{note: "all of them", advance: time.Minute, descs: ds(
				desc("source_cluster", "proxy", "destination_cluster", "mock"), foo(), foo("bar", "bar"), foo("bar", "banned"),
				foo("baz", "shady"), foo("bay", "y"), desc("qux", "q"), desc("nope", "n")),
				want: sts(ok(0, L(1, minute)), ok(1, L(2, minute)), ok(2, L(3, minute)), over(L(0, minute)),
					ok(0, L(1, minute)), unlimited, unlimited, noLimit)},
			// §3.2: identical descriptors in one request count twice.
			{note: "identical descriptors", advance: time.Minute, descs: ds(foo(), foo(), foo()),
				want: sts(ok(1, L(2, minute)), ok(0, L(2, minute)), over(L(2, minute)))},
		}},
	})
}

// x2, x5 … are the configurations of the extra cases X1–X10.
const (
	x1 = `
domain: x1
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: c
`
	x2 = `
domain: x2
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: y
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 7}
`
	x5 = `
domain: x5
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
`
	x8 = `
envoy:
  shadow_mode: true
`
	x9 = `
domain: x9
descriptors:
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: n
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	x10 = `
domain: x10
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: y*
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: d
        rate_limit: {unit: minute, requests_per_unit: 4}
  - key: c
    value: z*
    rate_limit: {unit: minute, requests_per_unit: 9}
`
	wildcards = `
domain: wild
descriptors:
  - key: file
    value: test*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: file
    value: test1
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: file
    value: te*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: a
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: "foo*"
    rate_limit: {unit: minute, requests_per_unit: 8}
  - key: mid
    value: "a*b*c"
    rate_limit: {unit: minute, requests_per_unit: 7}
`
	replaces = `
domain: rep
descriptors:
  - key: u
    rate_limit: {unlimited: true, replaces: [{name: n}]}
  - key: n
    rate_limit: {unit: minute, requests_per_unit: 1, name: n}
  - key: un
    rate_limit: {unlimited: true, name: un}
  - key: r
    rate_limit: {unit: minute, requests_per_unit: 1, replaces: [{name: un}]}
`
	units = `
domain: units
descriptors:
  - key: s
    rate_limit: {unit: SECOND, requests_per_unit: 1}
  - key: m
    rate_limit: {unit: Minute, requests_per_unit: 1}
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: d
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: w
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: mo
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: named
    rate_limit: {unit: minute, requests_per_unit: 3, name: n}
`
)

// TestExtraCases plays X1–X10 (§8, "Extra conformance cases").
func TestExtraCases(t *testing.T) {
	runScenarios(t, []scenario{
		{name: "X1", sources: []string{x1}, domain: "x1", steps: []step{
			{note: "more entries than the limit's depth", descs: ds(desc("a", "1", "b", "2")), want: sts(noLimit)},
			{note: "more entries, a child without limit", descs: ds(desc("b", "1", "c", "2")), want: sts(noLimit)},
			{note: "more entries, no child", descs: ds(desc("b", "1", "d", "2")), want: sts(noLimit)},
			{note: "at depth", descs: ds(desc("b", "1")), want: sts(ok(4, l5m))},
		}},
		{name: "X2", sources: []string{x2}, domain: "x2", steps: []step{
			{note: "no backtracking", descs: ds(desc("a", "x", "b", "z")), want: sts(noLimit)},
			{note: "exact path", descs: ds(desc("a", "x", "b", "y")), want: sts(ok(4, l5m))},
			{note: "key-only path", descs: ds(desc("a", "w", "b", "z")), want: sts(ok(6, L(7, minute)))},
		}},
		{name: "X3", sources: []string{"demo.yaml"}, domain: "no-such-domain", steps: []step{
			{note: "unknown domain", descs: ds(desc("foo", "foo"), desc("qux", "x")), times: 5, want: sts(noLimit, noLimit)},
			{note: "unknown domain, override", descs: ds(override(0, typev3.RateLimitUnit_MINUTE, desc("foo", "foo"))), want: sts(noLimit)},
		}},
		{name: "X5", sources: []string{x5}, domain: "x5", steps: x5Steps},
		{name: "X6", sources: []string{x5}, domain: "x5", steps: x6Steps},
		// The same without the local over-limit cache: the store's own
		// counting (count_denied) must give the same answers.
		{name: "X5/no-over-limit-cache", sources: []string{noCache, x5}, domain: "x5", steps: x5Steps},
		{name: "X6/no-over-limit-cache", sources: []string{noCache, x5}, domain: "x5", steps: x6Steps},
		{name: "X7", sources: []string{x5, "demo.yaml"}, domain: "x5", steps: []step{
			{note: "override 2/min", descs: ds(override(2, typev3.RateLimitUnit_MINUTE, desc("k", "o"))), times: 2, want: sts(countdown(1, L(2, minute)))},
			{note: "override 3rd", descs: ds(override(2, typev3.RateLimitUnit_MINUTE, desc("k", "o"))), want: sts(over(L(2, minute)))},
			{note: "override on unconfigured entries", descs: ds(override(2, typev3.RateLimitUnit_HOUR, desc("nothing", "here", "at", "all"))),
				want: sts(ok(1, L(2, hour)))},
			{note: "override of a zero limit", descs: ds(override(9, typev3.RateLimitUnit_SECOND, desc("zero", "v"))), want: sts(ok(8, L(9, second)))},
			{note: "override WEEK (7, beyond envoy.type.v3's enum)", descs: ds(override(3, typev3.RateLimitUnit(7), desc("k", "wk"))),
				want: sts(ok(2, L(3, week)))},
			{note: "override 0", descs: ds(override(0, typev3.RateLimitUnit_DAY, desc("k", "z"))), want: sts(over(L(0, day)))},
			{note: "override in another domain", domain: "rl", descs: ds(override(1, typev3.RateLimitUnit_MINUTE, desc("qux", "x"))),
				want: sts(ok(0, L(1, minute)))},
			{note: "override cannot be replaced nor shadowed", domain: "rl", descs: ds(override(1, typev3.RateLimitUnit_MINUTE, desc("foo", "foo", "baz", "shady"))),
				want: sts(ok(0, L(1, minute)))},
			{note: "override over, not shadow", domain: "rl", descs: ds(override(1, typev3.RateLimitUnit_MINUTE, desc("foo", "foo", "baz", "shady"))),
				want: sts(over(L(1, minute)))},
		}},
		{name: "X8", sources: []string{x8, "demo.yaml"}, domain: "rl", steps: []step{
			{note: "under", descs: ds(desc("foo", "foo")), times: 2, want: sts(countdown(1, L(2, minute)))},
			{note: "over, global shadow", descs: ds(desc("foo", "foo")), want: sts(over(L(2, minute))), overall: codeOK},
			{note: "banned, global shadow", descs: ds(desc("foo", "foo", "bar", "banned"), desc("qux", "x")),
				want: sts(over(L(0, minute)), unlimited), overall: codeOK},
		}},
		{name: "X9", sources: []string{x9}, domain: "x9", steps: []step{
			{note: "both quota under", descs: ds(desc("q1", "a"), desc("q2", "a")), want: sts(ok(0, L(1, minute)), ok(2, L(3, minute)))},
			{note: "Q1 over only", descs: ds(desc("q1", "a"), desc("q2", "a")), times: 2,
				want: sts(over(L(1, minute)), countdown(1, L(3, minute))), overall: codeOK},
			{note: "both over", descs: ds(desc("q1", "a"), desc("q2", "a")), want: sts(over(L(1, minute)), over(L(3, minute))), overall: codeOver},
			{note: "quota under, non-quota under", descs: ds(desc("q1", "b"), desc("n", "a")), want: sts(ok(0, L(1, minute)), ok(0, L(1, minute)))},
			{note: "non-quota over", descs: ds(desc("q2", "b"), desc("n", "a")), want: sts(ok(2, L(3, minute)), over(L(1, minute))), overall: codeOver},
			{note: "the only quota descriptor over", descs: ds(desc("q1", "b")), want: sts(over(L(1, minute))), overall: codeOver},
			{note: "quota over beside no limit", descs: ds(desc("q1", "b"), desc("none", "x")), want: sts(over(L(1, minute)), noLimit), overall: codeOver},
		}},
		{name: "X10", sources: []string{x10}, domain: "x10", steps: []step{
			{note: "nested wildcard", descs: ds(desc("a", "x", "b", "yes")), want: sts(ok(1, L(2, minute)))},
			{note: "nested wildcard, empty star", descs: ds(desc("a", "x", "b", "y")), want: sts(ok(1, L(2, minute)))},
			{note: "nested wildcard, own counter", descs: ds(desc("a", "x", "b", "yes")), want: sts(ok(0, L(2, minute)))},
			{note: "nested wildcard, no match, no key-only b", descs: ds(desc("a", "x", "b", "no")), want: sts(noLimit)},
			{note: "nested key-only sibling", descs: ds(desc("a", "x", "d", "1")), want: sts(ok(3, L(4, minute)))},
			{note: "the domain's wildcards are not consulted below", descs: ds(desc("a", "x", "c", "zed")), want: sts(noLimit)},
			{note: "top-level wildcard", descs: ds(desc("c", "zed")), want: sts(ok(8, L(9, minute)))},
		}},
		// §4.7: replaces, within one request only; an unlimited rule
		// replaces, and a replaced unlimited one still answers unlimited.
		{name: "replaces", sources: []string{replaces}, domain: "rep", steps: []step{
			{note: "unlimited replaces", descs: ds(desc("u", "1"), desc("n", "1")), want: sts(unlimited, noLimit)},
			{note: "the replaced one was not counted", descs: ds(desc("n", "1")), want: sts(ok(0, lim{"n", 1, minute}))},
			{note: "and is counted alone", descs: ds(desc("n", "1")), want: sts(over(lim{"n", 1, minute}))},
			{note: "a replaced unlimited rule", descs: ds(desc("un", "1"), desc("r", "1")), want: sts(unlimited, ok(0, L(1, minute)))},
			{note: "replacing needs a match", descs: ds(desc("n", "2"), desc("nope", "1")), want: sts(ok(0, lim{"n", 1, minute}), noLimit)},
		}},
		// §3.1: exact beats wildcard, the first wildcard in config order
		// wins, and the pattern is matched against "key_value".
		{name: "wildcard-rules", sources: []string{wildcards}, domain: "wild", steps: []step{
			{note: "exact beats wildcard", descs: ds(desc("file", "test1")), want: sts(ok(0, L(1, minute)))},
			{note: "first wildcard wins", descs: ds(desc("file", "test2")), want: sts(ok(4, L(5, minute)))},
			{note: "second wildcard", descs: ds(desc("file", "tex")), want: sts(ok(2, L(3, minute)))},
			{note: "value * matches key a_x", descs: ds(desc("a_x", "anything")), want: sts(ok(5, L(6, minute)))},
			{note: "value *", descs: ds(desc("a", "")), want: sts(ok(5, L(6, minute)))},
			{note: "wildcard key", descs: ds(desc("foobar", "v")), want: sts(ok(7, L(8, minute)))},
			{note: "middle parts", descs: ds(desc("mid", "a1b2c")), want: sts(ok(6, L(7, minute)))},
			{note: "middle parts in order", descs: ds(desc("mid", "acb")), want: sts(noLimit)},
			{note: "case-sensitive", descs: ds(desc("FILE", "test1")), want: sts(noLimit)},
		}},
		// §2: units, case-insensitive, windows aligned to the epoch, and
		// duration_until_reset the seconds left in the window.
		{name: "units", sources: []string{units}, domain: "units", steps: []step{
			{note: "every unit", advance: 17 * time.Second, descs: ds(desc("s", "1"), desc("m", "1"), desc("h", "1"), desc("d", "1"), desc("w", "1"), desc("mo", "1"), desc("y", "1")),
				want: sts(ok(0, L(1, second)), ok(0, L(1, minute)), ok(0, L(1, hour)), ok(0, L(1, day)), ok(0, L(1, week)), ok(0, L(1, month)), ok(0, L(1, year)))},
			{note: "every unit, 2nd", advance: time.Second, descs: ds(desc("s", "1"), desc("m", "1"), desc("h", "1"), desc("d", "1"), desc("w", "1"), desc("mo", "1"), desc("y", "1")),
				want: sts(ok(0, L(1, second)), over(L(1, minute)), over(L(1, hour)), over(L(1, day)), over(L(1, week)), over(L(1, month)), over(L(1, year)))},
			{note: "the name", descs: ds(desc("named", "1")), want: sts(ok(2, lim{"n", 3, minute}))},
			{note: "the minute's last second", advance: 41 * time.Second, descs: ds(desc("named", "1")), want: sts(ok(1, lim{"n", 3, minute}))},
			{note: "the next minute", advance: time.Second, descs: ds(desc("named", "1"), desc("m", "1")), want: sts(ok(2, lim{"n", 3, minute}), ok(0, L(1, minute)))},
		}},
	})
}

const noCache = `
store:
  over_limit_cache: false
`

var l5m = L(5, minute)

// x5Steps: per-descriptor hits_addend 0 checks without counting (§4.2).
var x5Steps = []step{
	{note: "fresh key, check only", descs: ds(hits(0, desc("k", "fresh"))), want: sts(ok(5, l5m))},
	{note: "5 of 5", descs: ds(desc("k", "v")), times: 5, want: sts(countdown(4, l5m))},
	{note: "5 of 5, check only", descs: ds(hits(0, desc("k", "v"))), times: 2, want: sts(ok(0, l5m))},
	{note: "6 of 5", descs: ds(desc("k", "v")), want: sts(over(l5m))},
	{note: "6 of 5, check only", descs: ds(hits(0, desc("k", "v"))), want: sts(over(l5m))},
	{note: "3 of 5, check only", descs: ds(hits(1, desc("k", "w")), hits(1, desc("k", "w")), hits(1, desc("k", "w")), hits(0, desc("k", "w"))),
		want: sts(ok(4, l5m), ok(3, l5m), ok(2, l5m), ok(2, l5m))},
	{note: "rpu 0, check only", descs: ds(hits(0, desc("zero", "v"))), want: sts(ok(0, L(0, minute)))},
	{note: "rpu 0", descs: ds(desc("zero", "v")), want: sts(over(L(0, minute)))},
	{note: "next window", advance: time.Minute, descs: ds(hits(0, desc("k", "v"))), want: sts(ok(5, l5m))},
}

// x6Steps: a request's hits_addend, counted even when over (§4.2, §4.3).
var x6Steps = []step{
	{note: "request hits 3, 1st", hits: 3, descs: ds(desc("k", "v")), want: sts(ok(2, l5m))},
	{note: "request hits 3, 2nd", hits: 3, descs: ds(desc("k", "v")), want: sts(over(l5m))},
	{note: "keeps counting", hits: 3, descs: ds(desc("k", "v")), want: sts(over(l5m))},
	{note: "descriptor hits win", hits: 3, descs: ds(hits(1, desc("k", "w"))), want: sts(ok(4, l5m))},
	{note: "descriptor hits 0 wins", hits: 3, descs: ds(hits(0, desc("k", "w"))), want: sts(ok(4, l5m))},
	{note: "hits over the limit on a fresh key", descs: ds(hits(10, desc("k", "big"))), want: sts(over(l5m))},
	{note: "and it was counted", descs: ds(hits(0, desc("k", "big"))), want: sts(over(l5m))},
	{note: "next window", advance: time.Minute, hits: 5, descs: ds(desc("k", "v")), want: sts(ok(0, l5m))},
}
