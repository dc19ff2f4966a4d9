package cli

import "github.com/floodgatehq/floodgate/config"

// builtinPolicies is the configuration serve runs with when given none: a
// few policies to try, and an Envoy domain.
const builtinPolicies = `# floodgate's built-in example configuration (floodgate serve with no --config).
policies:
  # 10 requests per second per key, bursts of 20.
  api: "gcra 10/1s burst 20"
  # Login attempts: 5 per minute and 20 per hour, per key.
  login: "sliding_window 5/1m resolution 1s, 20/1h resolution 1m"
  # Uploads: start with 10, at most 100 per hour; usage listed by /v1/keys.
  uploads: "token_bucket 100/1h burst 10 track"
`

// builtinDomain is an Envoy rate limit domain, in envoyproxy/ratelimit's
// format.
const builtinDomain = `# An Envoy domain: 10 requests per second per remote address.
domain: example
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
`

func builtin() []config.Source {
	return []config.Source{
		{Name: "<built-in>/floodgate.yaml", Data: []byte(builtinPolicies)},
		{Name: "<built-in>/example-domain.yaml", Data: []byte(builtinDomain)},
	}
}
