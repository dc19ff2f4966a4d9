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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/redisstore"
)

// RedisPrefix starts every key the redis target writes, so that a run
// never touches a service's keys (whose prefix is redisstore's "fg").
const RedisPrefix = "fg-bench"

// RedisOptions says how to reach Redis.
type RedisOptions struct {
	// Addr is host:port.
	Addr string
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
	client *redis.Client
	store  *redisstore.Store
	policy *floodgate.Policy
}

// OpenRedis connects to Redis, authenticates and loads the scripts, so
// that a wrong address or password fails here, at once, with a message
// that says which. Keys are written under RedisPrefix with their
// algorithm's TTL, as the service writes its own.
func OpenRedis(ctx context.Context, o RedisOptions, p *floodgate.Policy) (*RedisTarget, error) {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	// MaxRetries -1: a script call that may have run is never sent again
	// (it would count twice); ContextTimeoutEnabled: the request's
	// context bounds every call (redisstore's package documentation);
	// DialerRetries 1: a refused connection fails at once.
	client := redis.NewClient(&redis.Options{
		Addr: o.Addr, Username: o.Username, Password: o.Password,
		MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		PoolSize: max(o.PoolSize, 1),
	})
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, redisError(o, err)
	}
	store, err := redisstore.New(client, redisstore.WithPrefix(RedisPrefix))
	if err != nil {
		client.Close()
		return nil, err
	}
	if err := store.Preload(pctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("Redis at %s: %w", o.Addr, err)
	}
	return &RedisTarget{client: client, store: store, policy: p}, nil
}

// redisError explains a failed first contact with Redis.
func redisError(o RedisOptions, err error) error {
	msg := err.Error()
	who := "the default user"
	if o.Username != "" {
		who = "user " + strconv.Quote(o.Username)
	}
	var netErr net.Error
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("Redis at %s refused the password for %s (%s): check --user and --password", o.Addr, who, msg)
	case strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("Redis at %s requires authentication (%s): give --user and --password", o.Addr, msg)
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("Redis at %s: %s lacks a permission the bench needs (%s)", o.Addr, who, msg)
	case strings.Contains(msg, "ERR AUTH") || strings.Contains(msg, "without any password configured"):
		return fmt.Errorf("Redis at %s has no password set, but one was given (%s): drop --password", o.Addr, msg)
	case errors.As(err, &netErr) || strings.Contains(msg, "connection refused"):
		return fmt.Errorf("cannot reach Redis at %s: %v (check --host and --port)", o.Addr, err)
	}
	return fmt.Errorf("Redis at %s: %v", o.Addr, err)
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
		return nil, fmt.Errorf("cannot reach the service at %s: %w (is floodgate serve running?)", base, err)
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

// Rule finds the rule a descriptor of entries matches in domain, as the
// service does: at each level the exact key_value, else a wildcard that
// matches it, else the key alone; a rule applies only at the descriptor's
// last entry. An entry taking the request's key matches by its key (or a
// wildcard), since its values differ from request to request.
func (s *Service) Rule(domain string, entries []Entry) (*ServiceRule, error) {
	var dom *ServiceDomain
	var names []string
	for i := range s.Domains {
		if s.Domains[i].Name == domain {
			dom = &s.Domains[i]
		}
		names = append(names, s.Domains[i].Name)
	}
	if dom == nil {
		return nil, fmt.Errorf("the service has no Envoy domain %q; it has: %s", domain, listOrNone(names))
	}
	rules := map[string]*ServiceRule{}
	nodes := map[string]bool{}
	var paths []string
	for i := range dom.Rules {
		r := &dom.Rules[i]
		rules[r.Path] = r
		paths = append(paths, r.Path)
		for p := r.Path; len(p) > len(domain); {
			nodes[p] = true
			j := strings.LastIndexByte(p, '.')
			if j < len(domain) {
				break
			}
			p = p[:j]
		}
	}
	sort.Strings(paths)
	hasChildren := func(p string) bool {
		for n := range nodes {
			if strings.HasPrefix(n, p+".") {
				return true
			}
		}
		return false
	}
	cur := domain
	for i, e := range entries {
		next := ""
		if !e.FromKey && nodes[cur+"."+e.Key+"_"+e.Value] {
			next = cur + "." + e.Key + "_" + e.Value
		}
		if next == "" {
			// A wildcard: probe with a value the run's keys share.
			composite := e.Key + "_" + e.Value
			if e.FromKey {
				composite = e.Key + "_bench-"
			}
			var wild []string
			for n := range nodes {
				if rest, ok := strings.CutPrefix(n, cur+"."); ok && strings.Contains(rest, "*") && !strings.Contains(rest, ".") {
					wild = append(wild, n)
				}
			}
			sort.Strings(wild)
			for _, n := range wild {
				if config.WildcardMatch(n[len(cur)+1:], composite) {
					next = n
					break
				}
			}
		}
		if next == "" && nodes[cur+"."+e.Key] {
			next = cur + "." + e.Key
		}
		if next == "" {
			break
		}
		if i == len(entries)-1 {
			if r := rules[next]; r != nil {
				return r, nil
			}
			break
		}
		if !hasChildren(next) {
			break
		}
		cur = next
	}
	var es []string
	for _, e := range entries {
		es = append(es, e.String())
	}
	return nil, fmt.Errorf("no rule of domain %s matches the descriptor %s; its rules: %s", domain, strings.Join(es, ","), listOrNone(paths))
}
