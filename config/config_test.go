package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/storekit"
)

// src returns a Source; a leading newline in data is dropped, so that
// files can be written as raw strings starting on their first line.
func src(name, data string) Source {
	return Source{Name: name, Data: []byte(strings.TrimPrefix(data, "\n"))}
}

// errorLines parses srcs and returns every error as "file:line: path:
// message", checking that the error is an Errors of *Error that wraps
// ErrInvalid and is sorted by file and line.
func errorLines(t *testing.T, srcs ...Source) []string {
	t.Helper()
	cfg, err := Parse(srcs...)
	if err == nil {
		t.Fatalf("no error; config %+v", cfg)
	}
	if cfg != nil {
		t.Errorf("a config and an error")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error does not wrap ErrInvalid: %v", err)
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is a %T, not Errors: %v", err, err)
	}
	var first *Error
	if !errors.As(err, &first) || first != es[0] {
		t.Errorf("errors.As(*Error) does not find the first error")
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
		if !errors.Is(e, ErrInvalid) || e.File == "" || e.Msg == "" {
			t.Errorf("error %d: %#v", i, e)
		}
		if i > 0 && (es[i-1].File > e.File || es[i-1].File == e.File && es[i-1].Line > e.Line) {
			t.Errorf("errors not sorted by file and line: %q before %q", es[i-1], e)
		}
	}
	if err.Error() != strings.Join(out, "\n") {
		t.Errorf("Error() = %q, want the errors one per line", err.Error())
	}
	return out
}

func checkErrors(t *testing.T, got, want []string) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	t.Errorf("got %d errors:\n\t%s\nwant %d:\n\t%s", len(got), strings.Join(got, "\n\t"), len(want), strings.Join(want, "\n\t"))
}

// TestNativeErrors checks the exact errors of invalid files in
// floodgate's own format.
func TestNativeErrors(t *testing.T) {
	const allowedPolicy = "algorithm, limits, max, limit, window, align, burst, interval, min_interval, rate, count_denied, track, retention, period, tz, hash_tag"
	cases := []struct {
		name string
		file string
		want []string
	}{
		// Unknown fields, at each level.
		{"unknown top-level field", `
policies:
  api: "gcra 10/1s"
polices:
  web: "gcra 1/1s"
`, []string{"f.yaml:3: polices: unknown field; allowed here: policies, store, failure, overload, admin, clients, budgets, limits, listen, envoy"}},
		{"unknown policy field", `
policies:
  p:
    algorithm: gcra
    rate: 10/1s
    brust: 5
`, []string{"f.yaml:5: policies.p.brust: unknown field; allowed here: " + allowedPolicy}},
		{"TLS addresses mixed", `
store:
  addrs: [rediss://127.0.0.1:7000, 127.0.0.1:7001]
`, []string{"f.yaml:2: store.addrs: give every address rediss:// (TLS) or none"}},
		{"TLS settings without TLS", `
store:
  url: redis://127.0.0.1:6380
  tls:
    server_name: redis.example
`, []string{"f.yaml:4: store.tls: settings without TLS: set store.tls.enabled, or write the url or addrs rediss://"}},
		{"TLS files that cannot be used", `
store:
  url: rediss://127.0.0.1:6380
  tls:
    ca_file: /nonexistent/ca.pem
    cert_file: /nonexistent/client.pem
`, []string{"f.yaml:4: store.tls: cert_file and key_file go together: give both or neither"}},
		{"a CA file that cannot be read", `
store:
  url: rediss://127.0.0.1:6380
  tls:
    ca_file: /nonexistent/ca.pem
`, []string{"f.yaml:4: store.tls.ca_file: open /nonexistent/ca.pem: no such file or directory"}},
		{"TLS for the memory store", `
store:
  tls:
    enabled: true
`, []string{"f.yaml:3: store.tls: the memory store has no connection to encrypt"}},
		{"an address scheme that is not Redis's", `
store:
  addrs: ["http://127.0.0.1:7000"]
`, []string{"f.yaml:2: store.addrs[0]: want host:port, redis://host:port or rediss://host:port (TLS), found \"http://127.0.0.1:7000\""}},
		{"unknown store field", `
store:
  type: memory
  tpye: redis
`, []string{"f.yaml:3: store.tpye: unknown field; allowed here: type, url, addrs, master, username, password, sentinel_username, sentinel_password, prefix, timeout, max_keys, hash_keys_secret, batching, over_limit_cache, read_from_replicas, clock, counters, tls"}},
		{"unknown fields of failure, admin, limits, listen, envoy", `
failure:
  modus: open
admin:
  password: x
limits:
  max_keys: 5
listen:
  https: ":443"
envoy:
  shadow: true
`, []string{
			"f.yaml:2: failure.modus: unknown field; allowed here: mode, retry_after, breaker",
			"f.yaml:4: admin.password: unknown field; allowed here: token, token_file, allow_loopback",
			"f.yaml:6: limits.max_keys: unknown field; allowed here: max_body_bytes, max_batch, max_key_bytes, max_descriptors, max_connections, max_header_bytes, read_header_timeout, read_timeout, write_timeout, idle_timeout, max_concurrent_streams, keepalive_min_time",
			"f.yaml:8: listen.https: unknown field; allowed here: http, grpc, http_tls, grpc_tls, tls_cert, tls_key",
			"f.yaml:10: envoy.shadow: unknown field; allowed here: shadow_mode, merge_domains, response_headers, calendar_month, atomic_domains",
		}},

		// Wrong types.
		{"policies a list", `
policies:
  - api
`, []string{`f.yaml:2: policies: want a mapping (key: value lines), found a list`}},
		{"store a string", `
store: redis
`, []string{`f.yaml:1: store: want a mapping (key: value lines), found "redis"`}},
		{"section empty", `
limits:
`, []string{`f.yaml:1: limits: want a mapping (key: value lines), found an empty value`}},
		{"wrong scalar types", `
store:
  timeout: 5
  addrs: host:6379
  batching: yes
limits:
  max_batch: many
  max_body_bytes: 10
  max_key_bytes: 2000000
admin:
  token: [a, b]
envoy:
  merge_domains: 1
policies:
  api: 10
`, []string{
			`f.yaml:2: store.timeout: want a duration such as "250ms" or "1m30s", found "5"`,
			`f.yaml:3: store.addrs: want a list, found "host:6379"`,
			`f.yaml:4: store.batching: want true or false, found "yes"`,
			`f.yaml:6: limits.max_batch: want an integer from 1 to 100000, found "many"`,
			`f.yaml:7: limits.max_body_bytes: want an integer from 1024 to 1073741824, found "10"`,
			`f.yaml:8: limits.max_key_bytes: want an integer from 1 to 1048576, found "2000000"`,
			`f.yaml:10: admin.token: want a string, found a list`,
			`f.yaml:12: envoy.merge_domains: want true or false, found "1"`,
			`f.yaml:14: policies.api.rate: "10": want "<count>/<duration>", such as "100/1s"`,
		}},
		{"policy an empty value or a list", `
policies:
  a:
  b: [gcra, 1/1s]
`, []string{
			`f.yaml:2: policies.a: want a policy: its text form ("gcra 100/1s burst 10") or a mapping of its fields, found an empty value`,
			`f.yaml:3: policies.b: want a policy: its text form ("gcra 100/1s burst 10") or a mapping of its fields, found a list`,
		}},

		// Invalid policies, text form.
		{"policy text: bad duration", `
policies:
  api: "gcra 10/1x"
`, []string{`f.yaml:2: policies.api.rate: "10/1x": want a Go duration after the /, such as "1s" or "1m30s"`}},
		{"policy text: burst over the limit", `
policies:
  ok: "gcra 10/1s"
  uploads: "token_bucket 10/1m burst 20"
`, []string{`f.yaml:3: policies.uploads.burst: 20: want an integer with 1 ≤ burst ≤ limit (10)`}},
		{"policy text: unknown algorithm", `
policies:
  api: "leaky_bucket 10/1s"
`, []string{`f.yaml:2: policies.api.algorithm: "leaky_bucket": want one of sliding_window, ar1, fixed_window, token_bucket, sliding_log, gcra`}},
		{"policy text: bad name", `
policies:
  "my api": "gcra 10/1s"
`, []string{`f.yaml:2: policies.my api: "my api": want 1 to 128 bytes of A-Z a-z 0-9 _ . - /`}},

		// Invalid policies, mapping form: the line of the field at fault.
		{"policy mapping: bad duration", `
policies:
  uploads:
    algorithm: token_bucket
    limit: 10
    window: 1x
`, []string{`f.yaml:5: policies.uploads.window: "1x": want a Go duration such as "250ms" or "1m30s"`}},
		{"policy mapping: burst over the limit", `
policies:
  uploads:
    algorithm: token_bucket
    limit: 10
    window: 1m
    burst: 20
`, []string{`f.yaml:6: policies.uploads.burst: 20: want an integer with 1 ≤ burst ≤ limit (10)`}},
		{"policy mapping: unknown algorithm", `
policies:
  uploads:
    limit: 10
    algorithm: leaky_bucket
`, []string{`f.yaml:4: policies.uploads.algorithm: "leaky_bucket": want one of sliding_window, ar1, fixed_window, token_bucket, sliding_log, gcra`}},
		{"policy mapping: several problems, each at its line", `
policies:
  login:
    algorithm: sliding_window
    limits:
      - max: 5
        window: 1m
        resolution: 1s
      - max: -1
        window: 1h
        resolution: 2h
`, []string{
			`f.yaml:8: policies.login.limits[1].max: -1: want an integer from 0 to 2^53-1`,
			`f.yaml:10: policies.login.limits[1].resolution: 2h: want a duration ≤ window (1h)`,
		}},
		{"policy mapping: wrong types", `
policies:
  uploads:
    algorithm: token_bucket
    limit: many
    window: 5
    track: yes
  login:
    algorithm: sliding_window
    limits:
      - {max: x, window: 1m, resolution: 1s}
      - 5
      - {max: 1, windw: 1m, resolution: 1s}
  api:
    algorithm: gcra
    rate: 10/1s
    limits: 5
`, []string{
			`f.yaml:4: policies.uploads.limit: want a number, found "many"`,
			`f.yaml:6: policies.uploads.track: want true, false or a series such as "1m for 24h", found "yes"`,
			`f.yaml:10: policies.login.limits[0].max: want a number, found "x"`,
			`f.yaml:11: policies.login.limits[1]: want a mapping (key: value lines), found "5"`,
			`f.yaml:12: policies.login.limits[2].windw: unknown field; allowed here: max, window, resolution, decay`,
			`f.yaml:16: policies.api.limits: want a list, found "5"`,
		}},
		{"policy mapping: a number where a duration goes", `
policies:
  uploads:
    algorithm: token_bucket
    limit: 10
    window: 5
`, []string{`f.yaml:5: policies.uploads.window: "5": want a Go duration such as "250ms" or "1m30s"`}},
		{"policy mapping: a parameter of another algorithm", `
policies:
  api:
    algorithm: gcra
    rate: 10/1s
    max: 5
`, []string{`f.yaml:5: policies.api.max: 5: not a parameter of gcra`}},

		// Duplicate keys.
		{"duplicate policy", `
policies:
  api: "gcra 10/1s"
  web: "gcra 1/1s"
  api: "gcra 20/1s"
`, []string{`f.yaml:4: policies.api: appears twice`}},
		{"duplicate section", `
store:
  type: memory
store:
  type: redis
`, []string{`f.yaml:3: store: appears twice`}},

		// The store.
		{"store: bad type", `
store:
  type: postgres
`, []string{`f.yaml:2: store.type: want memory, redis, redis-cluster or redis-sentinel, found "postgres"`}},
		{"store: redis without url", `
store:
  type: redis
  prefix: fg
`, []string{`f.yaml:2: store.url: type redis needs a url such as redis://host:6379/0`}},
		{"store: bad url scheme", `
store:
  type: redis
  url: http://user:hunter2@cache:6379/0
`, []string{`f.yaml:3: store.url: want redis://[user:password@]host:port[/db] or rediss:// for TLS, found "http://user:***@cache:6379/0"`}},
		{"store: url without a host", `
store:
  url: redis:///0
`, []string{`f.yaml:2: store.url: want redis://[user:password@]host:port[/db] or rediss:// for TLS, found "redis:///0"`}},
		{"store: sentinel without master", `
store:
  type: redis-sentinel
  addrs: [s1:26379, s2:26379]
`, []string{`f.yaml:2: store: type redis-sentinel needs master (the master's name) and addrs (the sentinels)`}},
		{"store: cluster without addrs", `
store:
  type: redis-cluster
`, []string{`f.yaml:2: store.addrs: type redis-cluster needs addrs: the seed nodes, host:port`}},
		{"store: memory with a url, and other misplaced settings", `
store:
  type: memory
  url: redis://cache:6379
  hash_keys_secret: short
  prefix: "fg {x}"
`, []string{
			`f.yaml:2: store.type: memory takes no url, addrs or master`,
			`f.yaml:4: store.hash_keys_secret: want at least 16 bytes`,
			`f.yaml:5: store.prefix: want letters, digits and _ . - / : only, found "fg {x}"`,
		}},
		{"store: max_keys with redis", `
store:
  url: redis://cache:6379
  max_keys: 1000
  timeout: 500us
`, []string{
			`f.yaml:3: store.max_keys: applies to the memory store only`,
			`f.yaml:4: store.timeout: want a duration of at least 1ms, found 500µs`,
		}},
		{"store: read_from_replicas without a Cluster", `
store:
  url: redis://cache:6379
  read_from_replicas: true
`, []string{
			`f.yaml:3: store.read_from_replicas: applies to types redis-cluster and redis-sentinel only (the masters' replicas), found type "redis"`,
		}},
		{"store: counters without the service's clock", `
store:
  url: redis://cache:6379
  counters: true
`, []string{
			`f.yaml:3: store.counters: needs store.clock: service (a counter's window is chosen by this process's clock before Redis is asked), found store.clock redis`,
		}},

		// Failure, admin, listen.
		{"failure.mode", `
failure:
  mode: sometimes
  retry_after: 100ms
`, []string{
			`f.yaml:2: failure.mode: want open, closed or fallback, found "sometimes"`,
			`f.yaml:3: failure.retry_after: want a duration of at least 1s, found 100ms`,
		}},
		{"store addresses and timeout", `
store:
  addrs: [foo, "host:99999", "h:6379"]
  timeout: 1000h
`, []string{
			`f.yaml:2: store.addrs[0]: "foo": want host:port, such as 127.0.0.1:6379 (missing port in address)`,
			`f.yaml:2: store.addrs[1]: "host:99999": want a port from 1 to 65535, found "99999"`,
			`f.yaml:3: store.timeout: want at most 1m0s (a decision that waits longer is no rate limit), found 1000h0m0s`,
		}},
		{"store url port and db", `
store:
  url: redis://h:99999/0
`, []string{`f.yaml:2: store.url: port 99999 of "redis://h:99999/0": want a port from 1 to 65535`}},
		{"store url db", `
store:
  url: redis://user:secret@h:6379/x
`, []string{`f.yaml:2: store.url: database "x" of "redis://user:***@h:6379/x": want a number from 0 (the server's databases setting bounds it)`}},
		{"listen addresses", `
listen:
  http: not an address
  grpc: ":0"
`, []string{`f.yaml:2: listen.http: "not an address": want host:port, such as 127.0.0.1:8080 (missing port in address)`}},
		{"failure.retry_after not whole seconds", `
failure:
  retry_after: 1500ms
`, []string{`f.yaml:2: failure.retry_after: want whole seconds (Retry-After is in seconds), found 1.5s`}},
		{"failure.breaker out of bounds", `
failure:
  breaker:
    window: 20m
    min_calls: 0
    failure_ratio: 1.5
    open_for: 5ms
    disabled: maybe
    half_open: true
`, []string{
			`f.yaml:3: failure.breaker.window: want a duration from 1s to 10m, found 20m0s`,
			`f.yaml:4: failure.breaker.min_calls: want an integer from 1 to 1000000, found "0"`,
			`f.yaml:5: failure.breaker.failure_ratio: want a number above 0, at most 1, found "1.5"`,
			`f.yaml:6: failure.breaker.open_for: want a duration of at least 10ms, found 5ms`,
			`f.yaml:7: failure.breaker.disabled: want true or false, found "maybe"`,
			`f.yaml:8: failure.breaker.half_open: unknown field; allowed here: disabled, window, min_calls, failure_ratio, open_for`,
		}},
		{"admin token too short", `
admin:
  token: hunter2
`, []string{`f.yaml:2: admin.token: unusable token: 7 characters, want at least 16 (or no token)`}},
		{"listen tls_cert without tls_key", `
listen:
  http: 0.0.0.0:8080
  tls_cert: /etc/floodgate/cert.pem
`, []string{`f.yaml:2: listen: tls_cert and tls_key go together: give both or neither`}},
		{"listen tls_key without tls_cert", `
listen:
  tls_key: /etc/floodgate/key.pem
`, []string{`f.yaml:2: listen: tls_cert and tls_key go together: give both or neither`}},

		// Not a configuration at all.
		{"not YAML", `
policies:
  api: "gcra 10/1s
`, []string{`f.yaml:2: not valid YAML: found unexpected end of stream`}},
		{"not YAML: a tab", "policies:\n\tapi: x\n", []string{`f.yaml:2: not valid YAML: found character that cannot start any token`}},
		{"a top-level list", `
- policies
- store
`, []string{`f.yaml:1: want a mapping at the top level, found a list`}},
		{"a top-level scalar", `
just some text
`, []string{`f.yaml:1: want a mapping at the top level, found "just some text"`}},
		{"an empty file", ``, []string{`f.yaml: an empty file: want a mapping at the top level`}},
		{"only comments", "# nothing here\n", []string{`f.yaml: an empty file: want a mapping at the top level`}},
		{"two documents", `
policies:
  api: "gcra 10/1s"
---
policies:
  api: "gcra 1/1s"
`, []string{`f.yaml:3: a second YAML document: give one per file`}},
		{"an alias inside its own anchor", `
policies:
  p: &loop
    limits: [*loop]
`, []string{`f.yaml:3: alias *loop is inside the node its anchor names: it would repeat without end`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, errorLines(t, src("f.yaml", tc.file)), tc.want)
		})
	}
}

// TestEnvoyErrors checks the exact errors of invalid Envoy domain files
// (and of their references to floodgate's file).
func TestEnvoyErrors(t *testing.T) {
	const native = `
policies:
  api: "gcra 10/1s burst 20"
`
	cases := []struct {
		name string
		file string
		want []string
	}{
		{"empty domain", `
domain: ""
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
`, []string{`d.yaml:1: domain: a domain file needs a non-empty domain`}},
		{"domain a list", `
domain: [a, b]
`, []string{
			`d.yaml:1: domain: want a string, found a list`,
			`d.yaml:1: domain: a domain file needs a non-empty domain`,
		}},
		{"unknown fields at each level", `
domain: d
descriptor: []
descriptors:
  - key: a
    vaule: x
    rate_limit:
      unit: second
      requests_per_unit: 1
      per: ip
      replaces:
        - name: b
          why: old
`, []string{
			`d.yaml:2: descriptor: unknown field; allowed here: domain, descriptors`,
			`d.yaml:5: descriptors[0].vaule: unknown field; allowed here: key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, metadata`,
			`d.yaml:9: descriptors[0].rate_limit.per: unknown field; allowed here: unit, requests_per_unit, unlimited, name, replaces, policy, floodgate`,
			`d.yaml:12: descriptors[0].rate_limit.replaces[0].why: unknown field; allowed here: name`,
		}},
		{"wrong types", `
domain: d
descriptors:
  - key: a
    shadow_mode: sometimes
    rate_limit:
      unit: second
      requests_per_unit: -5
  - key: b
    metadata: [x]
    descriptors: {key: c}
  - hello
`, []string{
			`d.yaml:4: descriptors[0].shadow_mode: want true or false, found "sometimes"`,
			`d.yaml:7: descriptors[0].rate_limit.requests_per_unit: want an integer from 0 to 4294967295, found "-5"`,
			`d.yaml:9: descriptors[1].metadata: want a mapping, found a list`,
			`d.yaml:10: descriptors[1].descriptors: want a list, found a mapping`,
			`d.yaml:11: descriptors[2]: want a mapping (key: value lines), found "hello"`,
		}},
		{"descriptors a mapping", `
domain: d
descriptors:
  key: a
`, []string{`d.yaml:3: descriptors: want a list, found a mapping`}},
		{"empty key", `
domain: d
descriptors:
  - value: x
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: ""
    rate_limit: {unit: second, requests_per_unit: 1}
`, []string{
			`d.yaml:3: descriptors[0].key: a descriptor needs a non-empty key`,
			`d.yaml:5: descriptors[1].key: a descriptor needs a non-empty key`,
		}},
		{"duplicate composite key", `
domain: d
descriptors:
  - key: a
    value: x
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: x
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    descriptors:
      - key: c
      - key: c
`, []string{
			`d.yaml:8: descriptors[2]: duplicate descriptor composite key "a_x" (first at line 3)`,
			`d.yaml:14: descriptors[3].descriptors[1]: duplicate descriptor composite key "c" (first at line 13)`,
		}},
		{"invalid unit", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: fortnight
      requests_per_unit: 1
  - key: b
    rate_limit:
      requests_per_unit: 1
`, []string{
			`d.yaml:5: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight": want one of second, minute, hour, day, week, month, year (any case)`,
			`d.yaml:9: descriptors[1].rate_limit.unit: invalid rate limit unit "": want one of second, minute, hour, day, week, month, year (any case)`,
		}},
		{"unlimited with a unit", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
      unit: second
`, []string{`d.yaml:6: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited`}},
		{"replaces empty and self", `
domain: d
descriptors:
  - key: a
    rate_limit:
      name: a-limit
      unit: second
      requests_per_unit: 1
      replaces:
        - name: ""
        - name: a-limit
        - {}
`, []string{
			`d.yaml:9: descriptors[0].rate_limit.replaces[0].name: a replaces entry needs the name of the rate limit it replaces`,
			`d.yaml:10: descriptors[0].rate_limit.replaces[1].name: a rate limit cannot replace itself ("a-limit")`,
			`d.yaml:11: descriptors[0].rate_limit.replaces[2].name: a replaces entry needs the name of the rate limit it replaces`,
		}},
		{"share_threshold without a wildcard", `
domain: d
descriptors:
  - key: path
    value: /api
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /web*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
`, []string{`d.yaml:5: descriptors[0].share_threshold: share_threshold can only be used with wildcard values (containing '*'), but found key "path_/api"`}},
		{"a policy reference to an unknown policy", `
domain: d
descriptors:
  - key: a
    rate_limit:
      name: a-limit
      policy: nope
  - key: b
    rate_limit:
      policy: api
`, []string{`d.yaml:6: descriptors[0].rate_limit.policy: no policy named "nope" in the policies section`}},
		{"policy and floodgate both set", `
domain: d
descriptors:
  - key: a
    rate_limit:
      policy: api
      floodgate: "gcra 1/1s"
`, []string{`d.yaml:5: descriptors[0].rate_limit: give policy (a named policy) or floodgate (a policy's text form), not both`}},
		{"floodgate with a unit", `
domain: d
descriptors:
  - key: a
    rate_limit:
      floodgate: "gcra 1/1s"
      unit: second
      requests_per_unit: 5
`, []string{`d.yaml:5: descriptors[0].rate_limit: a floodgate policy replaces unit, requests_per_unit and unlimited: give one or the other`}},
		{"an invalid floodgate policy", `
domain: d
descriptors:
  - key: a
    rate_limit:
      floodgate: "token_bucket 10/1m burst 20"
  - key: b
    rate_limit:
      floodgate: "leaky 1/1s"
`, []string{
			`d.yaml:5: descriptors[0].rate_limit.floodgate.burst: 20: want an integer with 1 ≤ burst ≤ limit (10)`,
			`d.yaml:8: descriptors[1].rate_limit.floodgate.algorithm: "leaky": want one of sliding_window, ar1, fixed_window, token_bucket, sliding_log, gcra`,
		}},
		{"nested errors", `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit:
          unit: parsec
          requests_per_unit: 1
        descriptors:
          - key: ""
`, []string{
			`d.yaml:7: descriptors[0].descriptors[0].rate_limit.unit: invalid rate limit unit "parsec": want one of second, minute, hour, day, week, month, year (any case)`,
			`d.yaml:10: descriptors[0].descriptors[0].descriptors[0].key: a descriptor needs a non-empty key`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, errorLines(t, src("a.yaml", native), src("d.yaml", tc.file)), tc.want)
		})
	}
}

const (
	domainA = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
`
	domainB = `
domain: edge
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit:
      policy: api
`
	domainC = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1}
`
)

func TestDuplicateDomains(t *testing.T) {
	const native = `
policies:
  api: "gcra 10/1s"
`
	checkErrors(t, errorLines(t, src("a.yaml", native), src("b.yaml", domainA), src("c.yaml", domainB)), []string{
		`c.yaml:1: domain: duplicate domain "edge" (also in b.yaml:1; envoy.merge_domains: true merges them)`,
	})
	// A bad reference in a duplicate is reported too.
	checkErrors(t, errorLines(t, src("b.yaml", domainA), src("c.yaml", domainB)), []string{
		`c.yaml:1: domain: duplicate domain "edge" (also in b.yaml:1; envoy.merge_domains: true merges them)`,
		`c.yaml:7: descriptors[1].rate_limit.policy: no policy named "api" in the policies section`,
	})

	merge := native + "envoy:\n  merge_domains: true\n"
	cfg, err := Parse(src("a.yaml", merge), src("b.yaml", domainA), src("c.yaml", domainB))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Domains) != 1 {
		t.Fatalf("%d domains, want 1 merged", len(cfg.Domains))
	}
	var keys []string
	for _, d := range cfg.Domains[0].Descriptors {
		keys = append(keys, d.File+":"+d.Key)
	}
	if got := strings.Join(keys, " "); got != "b.yaml:remote_address c.yaml:path c.yaml:user" {
		t.Errorf("merged descriptors: %s", got)
	}
	// Merged, a composite key may still appear once only; and a merged
	// file's references are checked like the first's.
	checkErrors(t, errorLines(t, src("a.yaml", merge), src("b.yaml", domainA), src("c.yaml", domainC)), []string{
		`c.yaml:3: descriptors: duplicate descriptor composite key "remote_address" (also in b.yaml:3)`,
	})
	checkErrors(t, errorLines(t, src("a.yaml", "envoy:\n  merge_domains: true\n"), src("b.yaml", domainA), src("c.yaml", domainB)), []string{
		`c.yaml:7: descriptors[1].rate_limit.policy: no policy named "api" in the policies section`,
	})
}

func TestTwoNativeFiles(t *testing.T) {
	checkErrors(t, errorLines(t, src("a.yaml", "policies:\n  api: \"gcra 1/1s\"\n"), src("b.yaml", "store:\n  type: memory\n")), []string{
		`b.yaml:1: a second file in floodgate's format (the first is a.yaml); put its settings in one file`,
	})
}

// TestAllErrorsAtOnce checks that every problem of several files is
// reported in one error, sorted by file and line, whatever the order the
// reader found them in.
func TestAllErrorsAtOnce(t *testing.T) {
	native := `
store:
  type: redis
  url: http://cache
failure:
  mode: sometimes
policies:
  api: "gcra 10/1x"
  ok: "gcra 1/1s"
admin:
  token: short
bogus: 1
listen:
  tls_cert: cert.pem
`
	domain := `
domain: edge
descriptors:
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: b
    rate_limit: {policy: missing}
`
	got := errorLines(t, src("z.yaml", "- not a mapping\n"), src("m.yaml", domain), src("b.yaml", native), src("e.yaml", "a: [b\n"))
	checkErrors(t, got, []string{
		`b.yaml:3: store.url: want redis://[user:password@]host:port[/db] or rediss:// for TLS, found "http://cache"`,
		`b.yaml:5: failure.mode: want open, closed or fallback, found "sometimes"`,
		`b.yaml:7: policies.api.rate: "10/1x": want a Go duration after the /, such as "1s" or "1m30s"`,
		`b.yaml:10: admin.token: unusable token: 5 characters, want at least 16 (or no token)`,
		`b.yaml:11: bogus: unknown field; allowed here: policies, store, failure, overload, admin, clients, budgets, limits, listen, envoy`,
		`b.yaml:13: listen: tls_cert and tls_key go together: give both or neither`,
		`e.yaml:1: not valid YAML: did not find expected ',' or ']'`,
		`m.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight": want one of second, minute, hour, day, week, month, year (any case)`,
		`m.yaml:6: descriptors[1].rate_limit.policy: no policy named "missing" in the policies section`,
		`z.yaml:1: want a mapping at the top level, found a list`,
	})
}

// TestAliasBomb checks that aliases cannot make a small file expand
// without bound: the readers walk aliases expanded, so this file of 2 KB
// would be 10^8 descriptors.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: defs\n    metadata:\n")
	for i := range 8 {
		b.WriteString("      l" + strconv.Itoa(i) + ": &l" + strconv.Itoa(i) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("{key: k" + strconv.Itoa(j))
			if i > 0 {
				b.WriteString(", descriptors: *l" + strconv.Itoa(i-1))
			}
			b.WriteString("}")
		}
		b.WriteString("]\n")
	}
	b.WriteString("  - key: bomb\n    descriptors: *l7\n")
	start := time.Now()
	got := errorLines(t, src("bomb.yaml", b.String()))
	checkErrors(t, got, []string{`bomb.yaml:1: aliases expand this file by more than 100000 nodes`})
	// It stops at the limit in milliseconds; expanding the whole
	// 10^8 nodes would take minutes (20 s is only a hang's bound).
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v: the expansion was not stopped at the limit", d)
	}
	// Aliases within reason are fine.
	cfg, err := Parse(src("ok.yaml", `
domain: d
descriptors:
  - key: a
    rate_limit: &second {unit: second, requests_per_unit: 5}
  - key: b
    rate_limit: *second
    descriptors: &children
      - key: c
        rate_limit: *second
  - key: d
    descriptors: *children
`))
	if err != nil {
		t.Fatal(err)
	}
	ds := cfg.Domains[0].Descriptors
	if rl := ds[1].RateLimit; rl == nil || rl.Unit != Second || rl.RequestsPerUnit != 5 {
		t.Errorf("aliased rate limit: %+v", rl)
	}
	if len(ds[2].Descriptors) != 1 || ds[2].Descriptors[0].Key != "c" || ds[2].Descriptors[0].RateLimit.RequestsPerUnit != 5 {
		t.Errorf("aliased descriptors: %+v", ds[2].Descriptors)
	}
}

// TestValid checks a valid configuration of both formats, and what its
// fields become.
func TestValid(t *testing.T) {
	native := `
policies:
  api: "gcra 10/1s burst 20"
  uploads:
    algorithm: token_bucket
    limit: 100
    window: 1h
    burst: 10
    track: true
store:
  type: redis-sentinel
  master: mymaster
  addrs: [s1:26379, s2:26379]
  timeout: 20ms
  batching: false
  clock: service
  counters: true
failure:
  mode: closed
  retry_after: 2s
  breaker:
    window: 30s
    min_calls: 50
    failure_ratio: 0.25
    open_for: 250ms
admin:
  token: 0123456789abcdef
limits:
  max_batch: 10
listen:
  http: 0.0.0.0:8080
  tls_cert: cert.pem
  tls_key: key.pem
envoy:
  shadow_mode: true
---
`
	cfg, err := Parse(src("f.yaml", native), src("d.yaml", domainB))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policies) != 2 || cfg.Policies[0].String() != "gcra 10/1s burst 20" || cfg.Policies[1].String() != "token_bucket 100/1h burst 10 track" {
		t.Errorf("policies: %v", cfg.Policies)
	}
	s := cfg.Store
	if s.Type != "redis-sentinel" || s.Master != "mymaster" || len(s.Addrs) != 2 || s.Timeout != 20*time.Millisecond || s.Batching || !s.OverLimitCache ||
		s.Clock != "service" || !s.Counters {
		t.Errorf("store: %+v", s)
	}
	wantBreaker := failure.Breaker{Window: 30 * time.Second, MinCalls: 50, FailureRatio: 0.25, OpenFor: 250 * time.Millisecond}
	if cfg.Failure != (Failure{Mode: failure.Closed, RetryAfter: 2 * time.Second, Breaker: wantBreaker}) || cfg.Admin.Token != "0123456789abcdef" {
		t.Errorf("failure %+v, admin %+v", cfg.Failure, cfg.Admin)
	}
	if cfg.Bounds != (RequestBounds{MaxBodyBytes: DefaultMaxBodyBytes, MaxBatch: 10, MaxKeyBytes: storekit.DefaultMaxKeyLen, MaxDescriptors: DefaultMaxDescriptors,
		MaxConnections: DefaultMaxConnections, MaxHeaderBytes: DefaultMaxHeaderBytes, ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout, IdleTimeout: DefaultIdleTimeout,
		MaxConcurrentStreams: DefaultMaxConcurrentStreams, KeepaliveMinTime: DefaultKeepaliveMinTime}) {
		t.Errorf("limits: %+v", cfg.Bounds)
	}
	if cfg.Listen != (Listen{HTTP: "0.0.0.0:8080", GRPC: DefaultGRPC, GRPCTLS: TLS{Cert: "cert.pem", Key: "key.pem"}}) {
		t.Errorf("listen: %+v", cfg.Listen)
	}
	if e := cfg.Envoy; !e.ShadowMode || !e.ResponseHeaders || e.MergeDomains || e.CalendarMonth || len(e.AtomicDomains) != 0 {
		t.Errorf("envoy: %+v", cfg.Envoy)
	}
	if len(cfg.Domains) != 1 || cfg.Domains[0].Name != "edge" || len(cfg.Domains[0].Descriptors) != 2 {
		t.Fatalf("domains: %+v", cfg.Domains)
	}
	d := cfg.Domains[0]
	if rl := d.Descriptors[0].RateLimit; d.File != "d.yaml" || d.Line != 1 || rl.Unit != Minute || rl.RequestsPerUnit != 100 || rl.Line != 4 {
		t.Errorf("domain %+v, first rate limit %+v", d, rl)
	}
	if rl := d.Descriptors[1].RateLimit; rl.Policy != "api" || d.Descriptors[1].Line != 5 {
		t.Errorf("second descriptor %+v, rate limit %+v", d.Descriptors[1], rl)
	}
	if !reflect.DeepEqual(cfg.Sources, []string{"f.yaml", "d.yaml"}) {
		t.Errorf("sources: %v", cfg.Sources)
	}

	// No file in floodgate's format: the defaults.
	cfg, err = Parse(src("d.yaml", domainA))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.Type != "memory" || cfg.Store.Counters || cfg.Failure.Mode != failure.Open || cfg.Listen.HTTP != DefaultHTTP || cfg.Bounds.MaxBatch != DefaultMaxBatch {
		t.Errorf("defaults: %+v", cfg)
	}
}

// TestLoadDirectory builds a tree: nested *.yaml and *.yml files are read
// in name order, other files ignored, hidden files and directories
// skipped (a Kubernetes ConfigMap's ..data among them), and symlinks to
// files followed.
func TestLoadDirectory(t *testing.T) {
	root := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.TrimPrefix(data, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	symlink := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Skipf("no symlinks: %v", err)
		}
	}
	write("floodgate.yaml", "policies:\n  api: \"gcra 10/1s\"\n")
	write("domains/b.yml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("domains/deeper/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {policy: api}\n")
	write("domains/README.md", "not: [yaml\n")
	write("domains/a.yaml.bak", "not: [yaml\n")
	write(".hidden.yaml", "not: [yaml\n")
	write(".git/config.yaml", "not: [yaml\n")
	write("..2030_01_01/c.yaml", "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	symlink("..2030_01_01", "..data")
	symlink("..data/c.yaml", "c.yaml")
	symlink("missing.yaml", "dangling.yaml")
	symlink("domains", "dirlink.yaml")

	cfg, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, s := range cfg.Sources {
		r, _ := filepath.Rel(root, s)
		rel = append(rel, r)
	}
	if got := strings.Join(rel, " "); got != "c.yaml domains/b.yml domains/deeper/a.yaml floodgate.yaml" {
		t.Errorf("sources: %s", got)
	}
	var names []string
	for _, d := range cfg.Domains {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, " "); got != "c b a" {
		t.Errorf("domains: %s", got)
	}

	// Errors name the files by their paths.
	write("domains/deeper/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {policy: nope}\n")
	_, err = Load(root)
	want := filepath.Join(root, "domains/deeper/a.yaml") + `:4: descriptors[0].rate_limit.policy: no policy named "nope" in the policies section`
	if !errors.Is(err, ErrInvalid) || err == nil || err.Error() != want {
		t.Errorf("Load: %v, want %s", err, want)
	}

	// One file.
	cfg, err = Load(filepath.Join(root, "floodgate.yaml"))
	if err != nil || len(cfg.Policies) != 1 || len(cfg.Domains) != 0 {
		t.Errorf("Load of a file: %+v, %v", cfg, err)
	}
	// A directory without configuration files is invalid; a missing path
	// is another error.
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	write("empty/.hidden.yaml", "policies: {}\n")
	if _, err := Load(empty); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no *.yaml or *.yml files") {
		t.Errorf("Load of an empty directory: %v", err)
	}
	if _, err := Load(filepath.Join(root, "absent")); err == nil || errors.Is(err, ErrInvalid) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing path: %v", err)
	}
}

func TestWildcardMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"path_/foo", "path_/foo", true},
		{"path_/foo", "path_/foo/", false},
		{"path_/foo*", "path_/foo", true},
		{"path_/foo*", "path_/foo/bar", true},
		{"path_/foo*", "path_/fo", false},
		{"path_*/bar", "path_/x/bar", true},
		{"path_*/bar", "path_/x/baz", false},
		{"path_/a*b*c", "path_/abc", true},
		{"path_/a*b*c", "path_/a-c-b", false},
		{"path_/a*b*c", "path_/axbyc", true},
		{"*", "", true},
	} {
		if got := WildcardMatch(c.pattern, c.s); got != c.want {
			t.Errorf("WildcardMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// TestPolicyTrackSeries: a usage series in both policy forms, "track 1m
// for 24h" in the text and track: 1m for 24h in a mapping; a bad series
// is reported at its line.
func TestPolicyTrackSeries(t *testing.T) {
	cfg, err := Parse(src("f.yaml", `
policies:
  api: "gcra 10/1s burst 20 track 1m for 24h"
  uploads:
    algorithm: fixed_window
    max: 100
    window: 1m
    track: 10s for 1h
    retention: 48h
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policies) != 2 || cfg.Policies[0].String() != "gcra 10/1s burst 20 track 1m for 24h" ||
		cfg.Policies[1].String() != "fixed_window 100/1m track 10s for 1h retention 48h" {
		t.Errorf("policies: %v", cfg.Policies)
	}
	_, err = Parse(src("f.yaml", `
policies:
  uploads:
    algorithm: fixed_window
    max: 100
    window: 1m
    track: 1m for 90s
`))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:6: policies.uploads.track: 1m for 1m30s: want a retention that is a whole multiple of the resolution") {
		t.Errorf("a bad series: %v", err)
	}
}

// TestPolicyCalendar: a calendar window and hash_tag, as text and as a
// mapping; a bad zone is reported at its line.
func TestPolicyCalendar(t *testing.T) {
	cfg, err := Parse(src("f.yaml", `
policies:
  monthly: "fixed_window 1000/1month align calendar tz Europe/Paris"
  daily:
    algorithm: fixed_window
    max: 50
    align: calendar
    period: day
    tz: America/New_York
    hash_tag: true
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policies) != 2 || cfg.Policies[0].String() != "fixed_window 1000/1month align calendar tz Europe/Paris" ||
		cfg.Policies[1].String() != "fixed_window 50/1day align calendar tz America/New_York hash_tag" {
		t.Errorf("policies: %v", cfg.Policies)
	}
	_, err = Parse(src("f.yaml", `
policies:
  daily:
    algorithm: fixed_window
    max: 50
    align: calendar
    period: day
    tz: Mars/Olympus
`))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:7: policies.daily.tz") {
		t.Errorf("a bad zone: %v", err)
	}
}

// TestStoreOverride: the store that serve's --redis, --redis-cluster or
// --redis-sentinel names replaces the files' before their store.tls and
// store.read_from_replicas are judged, so a file that keeps only the TLS
// settings is valid with a rediss:// flag; a memory store's max_keys stays
// valid (the packaged configuration with FLOODGATE_REDIS_URL); settings
// that the store in use cannot take are still refused, naming the line.
func TestStoreOverride(t *testing.T) {
	tlsFile := "store:\n  tls:\n    server_name: redis.example\n"
	for _, c := range []struct {
		what, yaml string
		o          *StoreOverride
		want       string // the error, or "" for none
	}{
		{"TLS settings alone", tlsFile, nil, "f.yaml:5: store.tls: settings without TLS"},
		{"TLS enabled alone", "store:\n  tls: {enabled: true}\n", nil, "f.yaml:4: store.tls: the memory store has no connection to encrypt"},
		{"TLS enabled with --redis", "store:\n  tls: {enabled: true}\n", &StoreOverride{Type: "redis", URL: "redis://127.0.0.1:6380"}, ""},
		{"TLS settings with --redis rediss://", tlsFile, &StoreOverride{Type: "redis", URL: "rediss://127.0.0.1:6380"}, ""},
		{"TLS settings with --redis-cluster rediss://", tlsFile, &StoreOverride{Type: "redis-cluster", Addrs: []string{"rediss://127.0.0.1:7000"}}, ""},
		{"TLS settings with --redis redis://", tlsFile, &StoreOverride{Type: "redis", URL: "redis://127.0.0.1:6380"}, "f.yaml:5: store.tls: settings without TLS"},
		{"replicas with --redis-cluster", "store:\n  type: redis\n  url: redis://r:6379\n  read_from_replicas: true\n", &StoreOverride{Type: "redis-cluster", Addrs: []string{"127.0.0.1:7000"}}, ""},
		{"replicas with --redis", "store:\n  read_from_replicas: true\n", &StoreOverride{Type: "redis", URL: "redis://127.0.0.1:6379"}, `f.yaml:4: store.read_from_replicas: applies to types redis-cluster and redis-sentinel only (the masters' replicas), found type "redis"`},
		{"replicas with --redis-sentinel", "store:\n  read_from_replicas: true\n", &StoreOverride{Type: "redis-sentinel", Master: "m", Addrs: []string{"127.0.0.1:26379"}}, ""},
		{"replicas of a file's sentinels", "store:\n  type: redis-sentinel\n  master: m\n  addrs: [127.0.0.1:26379]\n  read_from_replicas: true\n", nil, ""},
		{"replicas of memory", "store:\n  type: memory\n  read_from_replicas: true\n", nil, `f.yaml:5: store.read_from_replicas: applies to types redis-cluster and redis-sentinel only (the masters' replicas), found type "memory"`},
		{"no store section with --redis-cluster", "", &StoreOverride{Type: "redis-cluster", Addrs: []string{"127.0.0.1:7000"}}, ""},
		{"the flag named", "store:\n  read_from_replicas: true\n", &StoreOverride{From: "FLOODGATE_REDIS_URL", Type: "redis", URL: "redis://127.0.0.1:6379"}, `found type "redis" (the store is FLOODGATE_REDIS_URL's, not the file's)`},
		{"max_keys of memory with --redis", "store:\n  type: memory\n  max_keys: 1000\n", &StoreOverride{Type: "redis", URL: "redis://127.0.0.1:6379"}, ""},
		{"max_keys of redis", "store:\n  url: redis://r:6379\n  max_keys: 1000\n", nil, "f.yaml:5: store.max_keys: applies to the memory store only"},
		{"type redis without a url, with --redis", "store:\n  type: redis\n", &StoreOverride{Type: "redis", URL: "redis://127.0.0.1:6379"}, ""},
		{"type redis-sentinel without addrs, with --redis-sentinel", "store:\n  type: redis-sentinel\n  sentinel_password: s3cret\n", &StoreOverride{Type: "redis-sentinel", Master: "m", Addrs: []string{"127.0.0.1:26379"}}, ""},
		{"type redis without a url", "store:\n  type: redis\n", nil, "f.yaml:4: store.url: type redis needs a url"},
		{"type redis with a bad url, with --redis", "store:\n  type: redis\n  url: redis://h:99999\n", &StoreOverride{Type: "redis", URL: "redis://127.0.0.1:6379"}, "f.yaml:5: store.url: "},
		{"type redis-cluster without addrs, with FLOODGATE_REDIS_URL", "store:\n  type: redis-cluster\n", &StoreOverride{Type: "redis", URL: "redis://127.0.0.1:6379"}, ""},
		{"a password in a sentinel's address", "store:\n  master: m\n  addrs: [\"rediss://:hunter2@127.0.0.1:26379\"]\n", nil, "f.yaml:5: store.addrs[0]: credentials (user:password@) do not go in an address: the password has a setting of its own"},
		{"sentinel password with sentinels", "store:\n  master: m\n  addrs: [127.0.0.1:26379]\n  sentinel_password: s3cret\n", nil, ""},
		{"sentinel password with --redis-sentinel", "store:\n  sentinel_username: w\n  sentinel_password: s3cret\n", &StoreOverride{Type: "redis-sentinel", Master: "m", Addrs: []string{"127.0.0.1:26379"}}, ""},
		{"sentinel password with a url", "store:\n  url: redis://r:6379\n  sentinel_password: s3cret\n", nil, `f.yaml:5: store.sentinel_password: applies to type redis-sentinel only (the sentinels' own credentials), found type "redis"`},
		{"sentinel user with --redis", "store:\n  master: m\n  addrs: [127.0.0.1:26379]\n  sentinel_username: w\n", &StoreOverride{From: "--redis", Type: "redis", URL: "redis://127.0.0.1:6379"}, `f.yaml:6: store.sentinel_username: applies to type redis-sentinel only (the sentinels' own credentials), found type "redis" (the store is --redis's, not the file's)`},
	} {
		cfg, err := ParseWith(c.o, Source{Name: "f.yaml", Data: []byte("policies:\n  api: \"gcra 10/1s\"\n" + c.yaml)})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.what, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want %q", c.what, err, c.want)
		case c.want == "" && c.o != nil && (cfg.Store.Type != c.o.Type || cfg.Store.URL != c.o.URL || !slices.Equal(cfg.Store.Addrs, c.o.Addrs)):
			t.Errorf("%s: store %s %q, want the override's", c.what, cfg.Store.Type, cfg.Store.URL)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("%s: the error shows the password: %v", c.what, err)
		case c.want == "" && strings.Contains(c.yaml, "sentinel_password") && cfg.Store.SentinelPassword != "s3cret":
			t.Errorf("%s: sentinel password %q, want the file's", c.what, cfg.Store.SentinelPassword)
		case c.want == "" && strings.Contains(c.yaml, "sentinel_username") && cfg.Store.SentinelUsername != "w":
			t.Errorf("%s: sentinel user %q, want the file's", c.what, cfg.Store.SentinelUsername)
		}
	}
}
