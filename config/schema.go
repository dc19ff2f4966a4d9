package config

import (
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgatehq/floodgate/failure"
)

// setting is one field of floodgate's own configuration format. The
// schema below is the one place the format's fields are listed: the
// parser takes each section's allowed keys from it, and DefaultsYAML
// renders it with every field at its default and its comment.
type setting struct {
	key string
	// doc is the field's comment: what it is, its forms, its bounds.
	doc string
	// value renders the field of a default configuration as YAML; nil for
	// a section.
	value func(*Config) string
	// children are a section's fields.
	children []setting
}

// DefaultPrefix is store.prefix's default, redisstore.DefaultPrefix (a
// test in internal/cli keeps the two equal).
const DefaultPrefix = "fg"

// schema is floodgate's configuration format.
var schema = []setting{
	{key: "policies", doc: `named policies, each "NAME: TEXT" in the text form ("gcra 100/1s burst 10") or a mapping of SPEC.md's fields (algorithm, max, window, ...); docs/algorithms.md`,
		value: func(*Config) string { return "{}" }},
	{key: "store", doc: "where limiter state lives", children: []setting{
		{key: "type", doc: "memory | redis | redis-cluster | redis-sentinel; inferred from url, addrs or master when left out",
			value: func(c *Config) string { return c.Store.Type }},
		{key: "url", doc: "type redis: redis://[user:password@]host:port[/db], rediss:// for TLS",
			value: func(c *Config) string { return quote(c.Store.URL) }},
		{key: "addrs", doc: "type redis-cluster: the seed nodes; redis-sentinel: the sentinels; host:port each, or rediss://host:port for TLS",
			value: func(c *Config) string { return "[" + strings.Join(c.Store.Addrs, ", ") + "]" }},
		{key: "master", doc: "type redis-sentinel: the master's name",
			value: func(c *Config) string { return quote(c.Store.Master) }},
		{key: "username", doc: "a cluster's, or the master's behind sentinels (a url carries its own)",
			value: func(c *Config) string { return quote(c.Store.Username) }},
		{key: "password", doc: "the same; better: FLOODGATE_REDIS_PASSWORD",
			value: func(c *Config) string { return quote(c.Store.Password) }},
		{key: "sentinel_username", doc: "type redis-sentinel: the sentinels' own ACL user, when they have one",
			value: func(c *Config) string { return quote(c.Store.SentinelUsername) }},
		{key: "sentinel_password", doc: "type redis-sentinel: the sentinels' own password (their requirepass), when they ask for one; better: FLOODGATE_REDIS_SENTINEL_PASSWORD",
			value: func(c *Config) string { return quote(c.Store.SentinelPassword) }},
		{key: "prefix", doc: "every Redis key starts with it: letters, digits and _ . - / :",
			value: func(c *Config) string { return or(c.Store.Prefix, DefaultPrefix) }},
		{key: "timeout", doc: "bound on each store call, 1ms to " + MaxTimeout.String() + "; beyond it the failure mode decides",
			value: func(c *Config) string { return duration(c.Store.Timeout) }},
		{key: "max_keys", doc: "memory store: the most keys it holds; 0: a bound from the memory the process may use (a quarter of it, 512 bytes a key); -1: none. A full store refuses new keys (the failure mode decides them) and never forgets a key that still limits",
			value: func(c *Config) string { return strconv.Itoa(c.Store.MaxKeys) }},
		{key: "hash_keys_secret", doc: "Redis: store an HMAC-SHA-256 of every key instead of the key (16+ bytes); better: FLOODGATE_KEY_SECRET",
			value: func(c *Config) string { return quote(c.Store.HashKeysSecret) }},
		{key: "batching", doc: "pipeline concurrent decisions to Redis",
			value: func(c *Config) string { return strconv.FormatBool(c.Store.Batching) }},
		{key: "over_limit_cache", doc: "answer keys already over a fixed window's limit locally until the window ends",
			value: func(c *Config) string { return strconv.FormatBool(c.Store.OverLimitCache) }},
		{key: "read_from_replicas", doc: "redis-cluster, redis-sentinel: send peeks (read-only FCALL_RO) to the replicas too, adds to the masters; a replica lags, so a peek may see a count from a moment ago",
			value: func(c *Config) string { return strconv.FormatBool(c.Store.ReadFromReplicas) }},
		{key: "clock", doc: "Redis: whose clock times decisions: redis (each call reads the server's TIME) or service (this process's, sent with each call: a cheaper call; keep the replicas' clocks in step with NTP). The memory store always uses the service's",
			value: func(c *Config) string { return or(c.Store.Clock, "redis") }},
		{key: "counters", doc: "Redis, with clock service: keep each fixed window aligned to the epoch that counts denied hits (Envoy's descriptors) as a native counter (INCRBY and PEXPIRE, no function call: about a quarter of the Redis CPU); such policies then refuse reservations, partial grants and groups (SPEC.md, \"Counters\"). The memory store ignores it",
			value: func(c *Config) string { return strconv.FormatBool(c.Store.Counters) }},
		{key: "tls", doc: "TLS to every Redis node and sentinel", children: []setting{
			{key: "enabled", doc: "turn TLS on; a rediss:// url, or addrs written rediss://host:port, turn it on too",
				value: func(c *Config) string { return strconv.FormatBool(c.Store.TLS.Enabled) }},
			{key: "ca_file", doc: "PEM bundle of the CAs that sign the servers' certificates; empty: the system's roots",
				value: func(c *Config) string { return quote(c.Store.TLS.CAFile) }},
			{key: "cert_file", doc: "client certificate (PEM) for servers that ask for one (tls-auth-clients); read again when it changes",
				value: func(c *Config) string { return quote(c.Store.TLS.CertFile) }},
			{key: "key_file", doc: "its private key (PEM): both or neither",
				value: func(c *Config) string { return quote(c.Store.TLS.KeyFile) }},
			{key: "server_name", doc: "the name the servers' certificates carry, when it is not the host dialed",
				value: func(c *Config) string { return quote(c.Store.TLS.ServerName) }},
		}},
	}},
	{key: "failure", doc: "what a decision becomes when the store fails or exceeds store.timeout", children: []setting{
		{key: "mode", doc: "open (allow) | closed (deny with Retry-After) | fallback (decide on a local memory store)",
			value: func(c *Config) string { return c.Failure.Mode.String() }},
		{key: "retry_after", doc: "Retry-After of a fail-closed denial, whole seconds",
			value: func(c *Config) string { return duration(c.Failure.RetryAfter) }},
		{key: "breaker", doc: "one circuit breaker per store node (a Cluster master)", children: []setting{
			{key: "disabled", doc: "true: every call goes to the store, however it fails",
				value: func(c *Config) string { return strconv.FormatBool(c.Failure.Breaker.Disabled) }},
			{key: "window", doc: "1s to 10m: how far back calls count",
				value: func(c *Config) string { return duration(orDuration(c.Failure.Breaker.Window, failure.DefaultWindow)) }},
			{key: "min_calls", doc: "the fewest calls in the window to judge a node by",
				value: func(c *Config) string {
					return strconv.Itoa(orInt(c.Failure.Breaker.MinCalls, failure.DefaultMinCalls))
				}},
			{key: "failure_ratio", doc: "above 0, at most 1: the share of failed calls in the window that opens it",
				value: func(c *Config) string {
					r := c.Failure.Breaker.FailureRatio
					if r == 0 {
						r = failure.DefaultFailureRatio
					}
					return strconv.FormatFloat(r, 'g', -1, 64)
				}},
			{key: "open_for", doc: "10ms to 1m: how long it stays open; then one probe call goes through",
				value: func(c *Config) string { return duration(orDuration(c.Failure.Breaker.OpenFor, failure.DefaultOpenFor)) }},
		}},
	}},
	{key: "overload", doc: "bounds on the store calls in flight and the decisions waiting for one; store.timeout starts when a call is sent (docs/operations.md, Overload)", children: []setting{
		{key: "mode", doc: "backpressure (refuse: HTTP status below with Retry-After, gRPC RESOURCE_EXHAUSTED) | failure_policy (answer as failure.mode does)",
			value: func(c *Config) string { return c.Overload.Mode.String() }},
		{key: "max_inflight", doc: "decisions in flight at each store node at once (each Redis Cluster master has its own bound; batched: in one pipelined batch at a time to a near Redis, up to 8 to a far one), 1 to 100000; 0: 256 with store.batching, else the Redis connection pool's size (none for the memory store)",
			value: func(c *Config) string { return strconv.Itoa(c.Overload.MaxInflight) }},
		{key: "max_queue", doc: "decisions waiting for a call, 1 to 1000000; past it a decision is refused at once",
			value: func(c *Config) string { return strconv.Itoa(c.Overload.MaxQueue) }},
		{key: "queue_wait", doc: "the longest a decision waits in the queue, 1ms to " + MaxTimeout.String() + "; then it is refused",
			value: func(c *Config) string { return duration(c.Overload.QueueWait) }},
		{key: "status", doc: "HTTP status of a refused decision: 503 or 429",
			value: func(c *Config) string { return strconv.Itoa(c.Overload.Status) }},
	}},
	{key: "admin", doc: "the admin endpoints: /v1/reset, /v1/keys, /v1/stats and its history", children: []setting{
		{key: "token", doc: "the bearer token they need, 16+ characters; better: FLOODGATE_ADMIN_TOKEN or token_file. None: they answer 403, unless allow_loopback",
			value: func(c *Config) string { return quote(c.Admin.Token) }},
		{key: "token_file", doc: "a file holding the admin token (instead of token), read again on reload",
			value: func(c *Config) string { return quote(c.Admin.TokenFile) }},
		{key: "allow_loopback", doc: "without a token, answer admin requests from a loopback peer that names a loopback host (never through a proxy)",
			value: func(c *Config) string { return strconv.FormatBool(c.Admin.AllowLoopback) }},
	}},
	{key: "clients", doc: "authentication of the decision APIs (HTTP and gRPC)", children: []setting{
		{key: "tokens_file", doc: "lines \"NAME TOKEN\": a request must carry one as a bearer token (the name labels metrics); read again when it changes. Empty: no tokens (client certificates may still authenticate)",
			value: func(c *Config) string { return quote(c.Clients.TokensFile) }},
	}},
	{key: "budgets", doc: "reservations over HTTP (/v1/reserve, /v1/settle): the key that signs their tokens", children: []setting{
		{key: "token_key", doc: "HMAC-SHA-256 key of reservation tokens, 32+ bytes, the same on every replica; better: FLOODGATE_TOKEN_KEY or token_key_file. None: a random key per process (tokens do not survive a restart nor reach another replica)",
			value: func(c *Config) string { return quote(c.Budgets.TokenKey) }},
		{key: "token_key_file", doc: "a file holding the token key (instead of token_key), read at start and on reload",
			value: func(c *Config) string { return quote(c.Budgets.TokenKeyFile) }},
	}},
	{key: "limits", doc: "bounds on requests and connections to the service (not rate limits)", children: []setting{
		{key: "max_body_bytes", doc: "request bodies, HTTP and gRPC: 1024 to 1073741824",
			value: func(c *Config) string { return strconv.FormatInt(c.Bounds.MaxBodyBytes, 10) }},
		{key: "max_batch", doc: "items per /v1/check or /v1/peek: 1 to 100000",
			value: func(c *Config) string { return strconv.Itoa(c.Bounds.MaxBatch) }},
		{key: "max_key_bytes", doc: "a key's length: 1 to 1048576",
			value: func(c *Config) string { return strconv.Itoa(c.Bounds.MaxKeyBytes) }},
		{key: "max_descriptors", doc: "descriptors per Envoy request: 1 to 10000",
			value: func(c *Config) string { return strconv.Itoa(c.Bounds.MaxDescriptors) }},
		{key: "max_connections", doc: "open connections per listener, 1 to 1000000; at the cap a new one replaces the idlest",
			value: func(c *Config) string { return strconv.Itoa(c.Bounds.MaxConnections) }},
		{key: "max_header_bytes", doc: "HTTP request headers, and gRPC metadata: 4096 to 16777216",
			value: func(c *Config) string { return strconv.Itoa(c.Bounds.MaxHeaderBytes) }},
		{key: "read_header_timeout", doc: "HTTP: to read a request's header, 100ms to 10m",
			value: func(c *Config) string { return duration(c.Bounds.ReadHeaderTimeout) }},
		{key: "read_timeout", doc: "HTTP: to read a whole request, 100ms to 1h, at least read_header_timeout",
			value: func(c *Config) string { return duration(c.Bounds.ReadTimeout) }},
		{key: "write_timeout", doc: "HTTP: to write a response, 100ms to 1h",
			value: func(c *Config) string { return duration(c.Bounds.WriteTimeout) }},
		{key: "idle_timeout", doc: "an idle connection (HTTP keep-alive, gRPC) is closed after it, 1s to 24h",
			value: func(c *Config) string { return duration(c.Bounds.IdleTimeout) }},
		{key: "max_concurrent_streams", doc: "gRPC: streams per connection, 1 to 1000000",
			value: func(c *Config) string { return strconv.Itoa(c.Bounds.MaxConcurrentStreams) }},
		{key: "keepalive_min_time", doc: "gRPC: the least time between a client's pings; a client pinging faster is closed. 1s to 1h",
			value: func(c *Config) string { return duration(c.Bounds.KeepaliveMinTime) }},
	}},
	{key: "listen", doc: "the service's addresses (--http and --grpc win) and their TLS", children: []setting{
		{key: "http", doc: "the HTTP/JSON API, host:port; :0 picks a free port",
			value: func(c *Config) string { return c.Listen.HTTP }},
		{key: "grpc", doc: "Envoy's gRPC rate limit API, host:port",
			value: func(c *Config) string { return c.Listen.GRPC }},
		{key: "http_tls", doc: "TLS of the HTTP listener", children: listenerTLS(func(c *Config) TLS { return c.Listen.HTTPTLS }, "HTTP")},
		{key: "grpc_tls", doc: "TLS of the gRPC listener", children: listenerTLS(func(c *Config) TLS { return c.Listen.GRPCTLS }, "gRPC")},
		{key: "tls_cert", doc: "the older spelling of grpc_tls.cert",
			value: func(*Config) string { return quote("") }},
		{key: "tls_key", doc: "the older spelling of grpc_tls.key",
			value: func(*Config) string { return quote("") }},
	}},
	{key: "envoy", doc: "envoyproxy/ratelimit's settings that change answers (its environment variables)", children: []setting{
		{key: "shadow_mode", doc: "SHADOW_MODE: statuses say OVER_LIMIT, the overall code is OK",
			value: func(c *Config) string { return strconv.FormatBool(c.Envoy.ShadowMode) }},
		{key: "merge_domains", doc: "MERGE_DOMAIN_CONFIG: merge files of one domain instead of refusing them",
			value: func(c *Config) string { return strconv.FormatBool(c.Envoy.MergeDomains) }},
		{key: "response_headers", doc: "add the binding descriptor's RateLimit fields to response_headers_to_add",
			value: func(c *Config) string { return strconv.FormatBool(c.Envoy.ResponseHeaders) }},
		{key: "calendar_month", doc: "USE_CALENDAR_MONTH_RATE_LIMIT (which wins when set): the month unit is the UTC calendar month, not 30 days from the epoch",
			value: func(c *Config) string { return strconv.FormatBool(c.Envoy.CalendarMonth) }},
		{key: "atomic_domains", doc: "a floodgate extension: domains whose descriptors of one request are decided as one atomic group, all or none (docs/operations.md); not on a Redis Cluster",
			value: func(c *Config) string { return "[" + strings.Join(c.Envoy.AtomicDomains, ", ") + "]" }},
	}},
}

func listenerTLS(get func(*Config) TLS, what string) []setting {
	return []setting{
		{key: "cert", doc: "PEM certificate file: serve " + what + " over TLS (with key: both or neither); read again when it changes",
			value: func(c *Config) string { return quote(get(c).Cert) }},
		{key: "key", doc: "its private key (PEM)",
			value: func(c *Config) string { return quote(get(c).Key) }},
		{key: "client_ca", doc: "PEM CA bundle: demand client certificates it signs (mutual TLS; a verified client is authenticated)",
			value: func(c *Config) string { return quote(get(c).ClientCA) }},
	}
}

// section returns the fields of the section at path ("" for the top
// level, "failure.breaker" for a nested one), or nil.
func section(path string) []setting {
	cur := schema
	if path == "" {
		return cur
	}
	for _, part := range strings.Split(path, ".") {
		var next []setting
		for _, s := range cur {
			if s.key == part {
				next = s.children
			}
		}
		if next == nil {
			return nil
		}
		cur = next
	}
	return cur
}

// keys returns the keys of the section at path.
func keys(path string) []string {
	sec := section(path)
	out := make([]string, len(sec))
	for i, s := range sec {
		out[i] = s.key
	}
	return out
}

// section reads a mapping whose keys are the schema's for path.
func (r *reader) section(n *yaml.Node, path string) map[string]field {
	return r.fields(n, path, keys(path)...)
}

// Defaults returns the configuration that an empty file gives: every field
// at its default.
func Defaults() *Config {
	cfg, err := Parse()
	if err != nil {
		panic("config: the defaults do not parse: " + err.Error()) // a bug of this package
	}
	return cfg
}

// DefaultsYAML returns floodgate's configuration format as a YAML file
// with every field at its default and a comment on each: what
// "floodgate config defaults" prints, and docs/operations.md embeds.
// Parsing it gives Defaults.
func DefaultsYAML() []byte {
	var b strings.Builder
	b.WriteString("# floodgate's configuration: every field at its default (floodgate config defaults).\n")
	b.WriteString("# Any field may be left out; unknown fields are errors. docs/operations.md explains each.\n")
	render(&b, schema, Defaults(), 0)
	return []byte(b.String())
}

// commentColumn is where comments start; width is where they wrap.
const (
	commentColumn = 31
	width         = 100
)

func render(b *strings.Builder, settings []setting, c *Config, depth int) {
	indent := strings.Repeat("  ", depth)
	for _, s := range settings {
		line := indent + s.key + ":"
		if s.value != nil {
			line += " " + s.value(c)
		}
		if depth == 0 && s.key != schema[0].key {
			b.WriteString("\n")
		}
		writeCommented(b, line, s.doc)
		if s.children != nil {
			render(b, s.children, c, depth+1)
		}
	}
}

// writeCommented writes line with comment beside it, wrapped onto
// continuation lines at the same column.
func writeCommented(b *strings.Builder, line, comment string) {
	col := max(commentColumn, len(line)+1)
	words := strings.Fields(comment)
	first := true
	for len(words) > 0 {
		cur := "# " + words[0]
		words = words[1:]
		for len(words) > 0 && col+len(cur)+1+len(words[0]) <= width {
			cur += " " + words[0]
			words = words[1:]
		}
		if first {
			b.WriteString(line + strings.Repeat(" ", col-len(line)) + cur + "\n")
			first = false
		} else {
			b.WriteString(strings.Repeat(" ", col) + cur + "\n")
		}
	}
	if first {
		b.WriteString(line + "\n")
	}
}

func quote(s string) string { return strconv.Quote(s) }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// duration writes d as configuration durations are written: "50ms", "1s",
// "1m30s", "1m", "1h".
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
