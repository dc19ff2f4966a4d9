package config

import (
	"errors"
	"testing"
)

// FuzzParseConfig feeds Parse arbitrary bytes, as one file or beside a
// valid file of the other format: it never panics (nor hangs), and every
// error wraps ErrInvalid and names a file given.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`
policies:
  api: "gcra 10/1s burst 20"
  login: "sliding_window 5/1m resolution 1s, 20/1h resolution 1m"
  uploads:
    algorithm: token_bucket
    limit: 100
    window: 1h
    burst: 10
    track: true
  decay:
    algorithm: ar1
    limits: [{max: 1.5, resolution: 1s, decay: 2}]
store:
  url: redis://user:pass@cache:6379/0
  timeout: 20ms
failure: {mode: fallback, retry_after: 2s}
admin: {token: 0123456789abcdef}
limits: {max_body_bytes: 4096, max_batch: 10, max_key_bytes: 64, max_descriptors: 8}
listen: {http: ":8080", grpc: ":8081", tls_cert: c.pem, tls_key: k.pem}
envoy: {shadow_mode: false, merge_domains: true, response_headers: true}
`,
		`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /api*
    share_threshold: true
    shadow_mode: true
    rate_limit:
      name: api
      unit: MINUTE
      requests_per_unit: 100
      replaces: [{name: other}]
    descriptors:
      - key: user
        rate_limit: {policy: api}
      - key: plan
        value: free
        rate_limit: {floodgate: "gcra 1/1s burst 5"}
      - key: internal
        rate_limit: {unlimited: true}
        metadata: {owner: me}
`,
		"store:\n  type: redis-sentinel\n  master: m\n  addrs: [a:1, b:2]\n",
		"a: &a [*a]\n",
		"a: &x [1, 2]\nb: [*x, *x, *x]\n",
		"policies:\n  p: &p {limits: [*p]}\n",
		"- a\n- b\n",
		"just text\n",
		"",
		"a: [b\n",
		"policies: {}\n---\nstore: {}\n",
		"domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
		"policies:\n  p: \"fixed_window 0/1s\"\n  p: x\n",
		"\t\x00\xff",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	other := map[bool]Source{
		false: {Name: "domain.yaml", Data: []byte("domain: other\ndescriptors:\n  - key: k\n    rate_limit: {policy: api}\n")},
		true:  {Name: "floodgate.yaml", Data: []byte("policies:\n  api: \"gcra 1/1s\"\nenvoy: {merge_domains: true}\n")},
	}
	f.Fuzz(func(t *testing.T, data []byte, native bool) {
		srcs := []Source{{Name: "fuzz.yaml", Data: data}, other[native]}
		cfg, err := Parse(srcs...)
		if err == nil {
			if cfg == nil {
				t.Fatal("no config and no error")
			}
			for _, p := range cfg.Policies {
				if err := p.Validate(); err != nil {
					t.Errorf("policy %s accepted, invalid: %v", p.Name, err)
				}
			}
			return
		}
		if cfg != nil {
			t.Errorf("a config and an error")
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("error does not wrap ErrInvalid: %v", err)
		}
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Fatalf("error is not a non-empty Errors: %#v", err)
		}
		for _, e := range es {
			if e.File != "fuzz.yaml" && e.File != other[native].Name {
				t.Errorf("error without a file name given: %#v", e)
			}
			if !errors.Is(e, ErrInvalid) || e.Msg == "" || e.Line < 0 {
				t.Errorf("error %#v", e)
			}
		}
	})
}
