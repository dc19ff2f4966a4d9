package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/redisstore"
)

// RedisPrefix starts every key the redis target writes, so that a run
// never touches a service's keys (whose prefix is redisstore's "fg").
const RedisPrefix = "fg-bench"

// RedisOptions says how to reach Redis.
type RedisOptions struct {
	// Addr is host:port of a standalone server.
	Addr string
	// ClusterAddrs, when set, are seed nodes of a Redis Cluster (host:port
	// each), reached instead of Addr.
	ClusterAddrs []string
	// Username and Password authenticate (ACL user, or the default user
	// when Username is empty); empty means no authentication.
	Username, Password string
	// Timeout bounds connecting and each command.
	Timeout time.Duration
	// PoolSize is the most connections (the concurrency, plus one).
	PoolSize int
}

// RedisTarget decides through redisstore, straight against Redis, with one
// policy for every key.
type RedisTarget struct {
	client redis.UniversalClient
	opts   RedisOptions
	store  *redisstore.Store
	policy *floodgate.Policy
}

// OpenRedis connects to Redis, authenticates and loads the scripts, so
// that a wrong address or password fails here, at once, with a message
// that says which. Keys are written under RedisPrefix with their
// algorithm's TTL, as the service writes its own.
func OpenRedis(ctx context.Context, o RedisOptions, p *floodgate.Policy) (*RedisTarget, error) {
	client, err := dialRedis(ctx, o)
	if err != nil {
		return nil, err
	}
	store, err := redisstore.New(client, redisstore.WithPrefix(RedisPrefix))
	if err != nil {
		client.Close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	if err := store.Preload(pctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("Redis at %s: %w", o.where(), err)
	}
	return &RedisTarget{client: client, opts: o, store: store, policy: p}, nil
}

// Stats returns a reader of the INFO of the target's server, or of its
// Cluster's masters (Config.Server), once it read them; an error is
// checkStats'.
func (t *RedisTarget) Stats(ctx context.Context) (*RedisStats, error) {
	st := NewRedisStats(t.client)
	if err := checkStats(ctx, st, t.opts); err != nil {
		return nil, err
	}
	return st, nil
}

// OpenRedisStats connects to Redis and reads its INFO once, so that a
// wrong address, a wrong password or a user without the INFO command
// fails here, at once, with a message that says which. It returns the
// reader and the client to close after the run.
func OpenRedisStats(ctx context.Context, o RedisOptions) (*RedisStats, io.Closer, error) {
	client, err := dialRedis(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	st := NewRedisStats(client)
	if err := checkStats(ctx, st, o); err != nil {
		client.Close()
		return nil, nil, err
	}
	return st, client, nil
}

// checkStats reads st once, within o's timeout, and explains a failure
// as a first contact with the Redis of o.
func checkStats(ctx context.Context, st *RedisStats, o RedisOptions) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	_, err := st.Read(ctx)
	if err != nil && strings.Contains(err.Error(), "NOPERM") {
		return fmt.Errorf("Redis at %s: %s may not run INFO, which --redis-stats reads (%v): grant it +info, or give --redis-stats=false", o.where(), o.who(), err)
	}
	if err != nil {
		return redisError(o, err)
	}
	return nil
}

// timeout is o.Timeout, or 5 s when unset.
func (o *RedisOptions) timeout() time.Duration {
	if o.Timeout <= 0 {
		return 5 * time.Second
	}
	return o.Timeout
}

// dialRedis returns a client of the Redis o names, once it answered a
// PING.
func dialRedis(ctx context.Context, o RedisOptions) (redis.UniversalClient, error) {
	timeout := o.timeout()
	// MaxRetries -1: a script call that may have run is never sent again
	// (it would count twice); ContextTimeoutEnabled: the request's
	// context bounds every call (redisstore's package documentation);
	// DialerRetries 1: a refused connection fails at once.
	var client redis.UniversalClient
	if len(o.ClusterAddrs) > 0 {
		// A pool of PoolSize per master; the slot map is read again
		// every 500 ms, as floodgate serve does.
		client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: o.ClusterAddrs, Username: o.Username, Password: o.Password,
			MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			PoolSize: max(o.PoolSize, 1), ClusterStateReloadInterval: 500 * time.Millisecond,
		})
	} else {
		client = redis.NewClient(&redis.Options{
			Addr: o.Addr, Username: o.Username, Password: o.Password,
			MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			PoolSize: max(o.PoolSize, 1),
		})
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, redisError(o, err)
	}
	return client, nil
}

// where names the server, or the cluster's seed nodes.
func (o *RedisOptions) where() string {
	if len(o.ClusterAddrs) > 0 {
		return "the cluster of " + strings.Join(o.ClusterAddrs, ",")
	}
	return o.Addr
}

// who names the user o authenticates as.
func (o *RedisOptions) who() string {
	if o.Username == "" {
		return "the default user"
	}
	return "user " + strconv.Quote(o.Username)
}

// redisError explains a failed first contact with Redis.
func redisError(o RedisOptions, err error) error {
	at := o.where()
	check := "check --host and --port"
	if len(o.ClusterAddrs) > 0 {
		check = "check --redis-cluster"
	}
	msg := err.Error()
	who := o.who()
	var netErr net.Error
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("Redis at %s refused the password for %s (%s): check --user and --password", at, who, msg)
	case strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("Redis at %s requires authentication (%s): give --user and --password", at, msg)
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("Redis at %s: %s lacks a permission the bench needs (%s)", at, who, msg)
	case strings.Contains(msg, "ERR AUTH") || strings.Contains(msg, "without any password configured"):
		return fmt.Errorf("Redis at %s has no password set, but one was given (%s): drop --password", at, msg)
	case errors.As(err, &netErr) || strings.Contains(msg, "connection refused"):
		return fmt.Errorf("cannot reach Redis at %s: %v (%s)", at, err, check)
	}
	return fmt.Errorf("Redis at %s: %v", at, err)
}

// Take decides one request through redisstore.
func (t *RedisTarget) Take(ctx context.Context, key string, n int64) (Outcome, error) {
	d, err := t.store.Take(ctx, floodgate.Request{Policy: t.policy, Key: key, N: n})
	return Outcome{Allowed: d.Allowed, Degraded: d.Degraded}, err
}

// Close closes the store and its client.
func (t *RedisTarget) Close() error {
	t.store.Close()
	return t.client.Close()
}

// HTTPTarget decides through a running floodgate serve's POST /v1/check.
type HTTPTarget struct {
	url    string
	client *http.Client
	prefix []byte // `{"policy":"NAME","key":`
}

// NewHTTP returns a target that checks requests under the service's
// policy named policy, at baseURL (http://host:port), keeping up to conns
// connections open.
func NewHTTP(baseURL, policy string, conns int) (*HTTPTarget, error) {
	base, err := normalizeURL(baseURL)
	if err != nil {
		return nil, err
	}
	name, _ := json.Marshal(policy)
	tr := &http.Transport{
		Proxy: nil, MaxIdleConns: conns + 1, MaxIdleConnsPerHost: conns + 1, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	return &HTTPTarget{
		url:    base + "/v1/check",
		client: &http.Client{Transport: tr},
		prefix: append(append([]byte(`{"policy":`), name...), `,"key":`...),
	}, nil
}

func normalizeURL(s string) (string, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "/")
	if s == "" {
		return "", errors.New("no URL")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return "", fmt.Errorf("URL %q: want http://host:port or https://host:port", s)
	}
	return s, nil
}

// checkAnswer is what the target reads of /v1/check's answer.
type checkAnswer struct {
	Allowed   bool `json:"allowed"`
	Decisions []struct {
		Degraded bool `json:"degraded"`
	} `json:"decisions"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// Take posts one check.
func (t *HTTPTarget) Take(ctx context.Context, key string, n int64) (Outcome, error) {
	k, err := json.Marshal(key)
	if err != nil {
		return Outcome{}, err
	}
	body := make([]byte, 0, len(t.prefix)+len(k)+32)
	body = append(append(body, t.prefix...), k...)
	body = strconv.AppendInt(append(body, `,"cost":`...), n, 10)
	body = append(body, '}')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return Outcome{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return Outcome{}, err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return Outcome{}, err
	}
	var a checkAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return Outcome{}, fmt.Errorf("HTTP %d with an answer that is not JSON: %.120q", resp.StatusCode, data)
	}
	if a.Error != nil && a.Error.Code == "overloaded" && (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) {
		return Outcome{Backpressure: true}, nil
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		if a.Error != nil {
			field := ""
			if a.Error.Field != "" {
				field = a.Error.Field + ": "
			}
			return Outcome{}, fmt.Errorf("HTTP %d %s: %s%s", resp.StatusCode, a.Error.Code, field, a.Error.Message)
		}
		return Outcome{}, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	out := Outcome{Allowed: a.Allowed}
	for _, d := range a.Decisions {
		out.Degraded = out.Degraded || d.Degraded
	}
	return out, nil
}

// Close closes idle connections.
func (t *HTTPTarget) Close() error {
	t.client.CloseIdleConnections()
	return nil
}

// Entry is one entry of an Envoy descriptor. An entry with FromKey set
// takes each request's key as its value.
type Entry struct {
	Key, Value string
	FromKey    bool
}

// ParseEntry parses a --descriptor value: "KEY=VALUE", or "KEY" for an
// entry whose value is each request's key.
func ParseEntry(s string) (Entry, error) {
	k, v, hasValue := strings.Cut(s, "=")
	if k == "" {
		return Entry{}, fmt.Errorf("%q: want KEY=VALUE, or KEY for an entry whose value is the request's key", s)
	}
	if !hasValue {
		return Entry{Key: k, FromKey: true}, nil
	}
	return Entry{Key: k, Value: v}, nil
}

// String returns the entry as ParseEntry reads it.
func (e Entry) String() string {
	if e.FromKey {
		return e.Key
	}
	return e.Key + "=" + e.Value
}

// GRPCTarget decides through Envoy's rate limit service API
// (ShouldRateLimit) of a running floodgate serve: one descriptor per
// request, its hits_addend the request's cost.
type GRPCTarget struct {
	conn    *grpc.ClientConn
	client  rlsv3.RateLimitServiceClient
	domain  string
	entries []Entry
}

// NewGRPC returns a target sending ShouldRateLimit to addr (host:port,
// plaintext) for domain, with one descriptor of entries.
func NewGRPC(addr, domain string, entries []Entry) (*GRPCTarget, error) {
	if domain == "" {
		return nil, errors.New("no domain")
	}
	if len(entries) == 0 {
		return nil, errors.New("no descriptor entries")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &GRPCTarget{conn: conn, client: rlsv3.NewRateLimitServiceClient(conn), domain: domain, entries: entries}, nil
}

// Take sends one ShouldRateLimit.
func (t *GRPCTarget) Take(ctx context.Context, key string, n int64) (Outcome, error) {
	if n > 1<<32-1 {
		return Outcome{}, fmt.Errorf("cost %d exceeds hits_addend's 32 bits", n)
	}
	es := make([]*ratelimitv3.RateLimitDescriptor_Entry, len(t.entries))
	for i, e := range t.entries {
		v := e.Value
		if e.FromKey {
			v = key
		}
		es[i] = &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: v}
	}
	resp, err := t.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      t.domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: es}},
		HitsAddend:  uint32(n),
	})
	if err != nil {
		if st, ok := status.FromError(err); ok {
			if st.Code() == codes.ResourceExhausted {
				return Outcome{Backpressure: true}, nil
			}
			return Outcome{}, fmt.Errorf("gRPC %s: %s", st.Code(), st.Message())
		}
		return Outcome{}, err
	}
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		return Outcome{Allowed: true}, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return Outcome{}, nil
	}
	return Outcome{}, fmt.Errorf("gRPC answer with overall code %s", resp.GetOverallCode())
}

// Close closes the connection.
func (t *GRPCTarget) Close() error { return t.conn.Close() }

// Service is what a running floodgate serve says of its configuration at
// GET /v1/policies.
type Service struct {
	Policies []ServicePolicy `json:"policies"`
	Domains  []ServiceDomain `json:"domains"`
}

// ServicePolicy is a named policy of the service.
type ServicePolicy struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// ServiceDomain is an Envoy domain of the service.
type ServiceDomain struct {
	Name  string        `json:"name"`
	Rules []ServiceRule `json:"rules"`
}

// ServiceRule is a rule of an Envoy domain.
type ServiceRule struct {
	// Path is domain.key_value.key…, one composite per descriptor level.
	Path      string `json:"path"`
	Policy    string `json:"policy"`
	Text      string `json:"text"`
	Unlimited bool   `json:"unlimited"`
	Shadow    bool   `json:"shadow_mode"`
	Quota     bool   `json:"quota_mode"`
}

// FetchService reads GET /v1/policies at baseURL.
func FetchService(ctx context.Context, baseURL string) (*Service, error) {
	base, err := normalizeURL(baseURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/policies", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v (is floodgate serve running?)", ErrUnreachable, base, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/v1/policies: HTTP %d: %.200s", base, resp.StatusCode, data)
	}
	var s Service
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("GET %s/v1/policies: %w", base, err)
	}
	return &s, nil
}

// Policy returns the service's policy named name.
func (s *Service) Policy(name string) (*floodgate.Policy, error) {
	names := make([]string, 0, len(s.Policies))
	for _, p := range s.Policies {
		if p.Name == name {
			pol, err := floodgate.ParsePolicy(p.Name, p.Text)
			if err != nil {
				return nil, fmt.Errorf("the service's policy %s (%q): %w", p.Name, p.Text, err)
			}
			return &pol, nil
		}
		names = append(names, p.Name)
	}
	return nil, fmt.Errorf("the service has no policy named %q; it has: %s", name, listOrNone(names))
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// keyPrefix starts every key of a run with the default Config.KeyPrefix:
// the value an entry taking the request's key stands for when the service
// is asked which rule the run's descriptors meet.
const keyPrefix = "bench-"

// ErrUnreachable is wrapped by FetchService and FetchRule when the service
// does not answer at all (as opposed to answering an error).
var ErrUnreachable = errors.New("bench: the service cannot be reached")

// FetchRule asks the service at baseURL which rule of domain a descriptor
// of entries meets (POST /v1/envoy/rule), as its ShouldRateLimit matches
// it: the service's own matcher, not a prediction of it. An entry taking
// the request's key is sent with the value every key of the run starts
// with, so that the rule found is one a wildcard of the run's keys meets.
func FetchRule(ctx context.Context, baseURL, domain string, entries []Entry) (*ServiceRule, error) {
	base, err := normalizeURL(baseURL)
	if err != nil {
		return nil, err
	}
	type entry struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	body := struct {
		Domain  string  `json:"domain"`
		Entries []entry `json:"entries"`
	}{Domain: domain}
	var es []string
	for _, e := range entries {
		v := e.Value
		if e.FromKey {
			v = keyPrefix
		}
		body.Entries = append(body.Entries, entry{e.Key, v})
		es = append(es, e.String())
	}
	data, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/envoy/rule", bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v (is floodgate serve running?)", ErrUnreachable, base, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, fmt.Errorf("no rule of domain %s matches the descriptor %s (GET %s/v1/policies lists the rules)", domain, strings.Join(es, ","), base)
	default:
		return nil, fmt.Errorf("POST %s/v1/envoy/rule: HTTP %d: %.200s", base, resp.StatusCode, out)
	}
	var r struct {
		Rule ServiceRule `json:"rule"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("POST %s/v1/envoy/rule: %w", base, err)
	}
	return &r.Rule, nil
}
