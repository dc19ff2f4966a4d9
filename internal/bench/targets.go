package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"google.golang.org/grpc/credentials"
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
	// SentinelMaster, when set, is the name of a master that the Redis
	// Sentinels at SentinelAddrs (host:port each) monitor, reached instead
	// of Addr: the master they name, and after a failover the one they
	// name then.
	SentinelMaster string
	SentinelAddrs  []string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves (their requirepass, or an ACL user of theirs); empty
	// means none.
	SentinelUsername, SentinelPassword string
	// Username and Password authenticate (ACL user, or the default user
	// when Username is empty); empty means no authentication.
	Username, Password string
	// Timeout bounds connecting and each command.
	Timeout time.Duration
	// PoolSize is the most connections (the concurrency, plus one).
	PoolSize int
	// TLS, when set, dials every node with TLS of this configuration;
	// nil dials in plaintext.
	TLS *tls.Config
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
	st.master = t.opts.SentinelMaster
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
	st.master = o.SentinelMaster
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
	switch {
	case o.SentinelMaster != "":
		// The sentinels are asked with their own credentials, not the
		// master's, as floodgate serve asks them.
		client = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: o.SentinelMaster, SentinelAddrs: o.SentinelAddrs,
			Username: o.Username, Password: o.Password,
			SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword,
			MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			PoolSize: max(o.PoolSize, 1), TLSConfig: o.TLS,
		})
	case len(o.ClusterAddrs) > 0:
		// A pool of PoolSize per master; the slot map is read again
		// every 500 ms, as floodgate serve does.
		client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: o.ClusterAddrs, Username: o.Username, Password: o.Password,
			MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			PoolSize: max(o.PoolSize, 1), ClusterStateReloadInterval: 500 * time.Millisecond,
			TLSConfig: o.TLS,
		})
	default:
		client = redis.NewClient(&redis.Options{
			Addr: o.Addr, Username: o.Username, Password: o.Password,
			MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			PoolSize: max(o.PoolSize, 1), TLSConfig: o.TLS,
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

// where names the server, the cluster's seed nodes, or the master and
// its sentinels.
func (o *RedisOptions) where() string {
	switch {
	case o.SentinelMaster != "":
		return fmt.Sprintf("the master %q of the sentinels %s", o.SentinelMaster, strings.Join(o.SentinelAddrs, ","))
	case len(o.ClusterAddrs) > 0:
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
	switch {
	case o.SentinelMaster != "":
		check = "check --redis-sentinel"
	case len(o.ClusterAddrs) > 0:
		check = "check --redis-cluster"
	}
	msg := err.Error()
	who := o.who()
	var netErr net.Error
	if reply, sentinels := redisstore.AuthRefused(err); sentinels {
		at := "the sentinels " + strings.Join(o.SentinelAddrs, ",")
		switch {
		case strings.HasPrefix(reply, "NOAUTH"):
			return fmt.Errorf("%s ask for a password (%s): give theirs with --sentinel-password, and --sentinel-user for an ACL user of theirs (--password is the master's)", at, reply)
		case strings.HasPrefix(reply, "WRONGPASS"):
			return fmt.Errorf("%s refused the credentials given (%s): check --sentinel-user and --sentinel-password", at, reply)
		}
		return fmt.Errorf("%s have no password set, but one was given (%s): drop --sentinel-password", at, reply)
	}
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("Redis at %s refused the password for %s (%s): check --user and --password", at, who, msg)
	case strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("Redis at %s requires authentication (%s): give --user and --password", at, msg)
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("Redis at %s: %s lacks a permission the bench needs (%s)", at, who, msg)
	case strings.Contains(msg, "ERR AUTH") || strings.Contains(msg, "without any password configured"):
		return fmt.Errorf("Redis at %s has no password set, but one was given (%s): drop --password", at, msg)
	case o.TLS != nil && errors.As(err, new(x509.HostnameError)):
		return fmt.Errorf("Redis at %s: its certificate names another host than the one dialed (%v): give a name it carries with --redis-server-name", at, err)
	case o.TLS != nil && strings.Contains(msg, "x509: "):
		return fmt.Errorf("Redis at %s: its certificate does not verify (%v): give the CA that signs it with --redis-ca-file", at, err)
	case o.TLS != nil && o.TLS.Certificates == nil && o.TLS.GetClientCertificate == nil && transportError(msg):
		// A server with tls-auth-clients refuses a client without a
		// certificate: under TLS 1.3 after the handshake, so that the
		// client sees "certificate required", a reset or EOF.
		return fmt.Errorf("Redis at %s closed the TLS connection (%v): if it has tls-auth-clients, it wants --redis-cert-file and --redis-key-file", at, err)
	case errors.As(err, &netErr) || strings.Contains(msg, "connection refused") || strings.Contains(msg, "sentinels specified in configuration are unreachable"):
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

// Access says how the http and grpc targets reach a running floodgate
// serve, and FetchService and FetchRule its HTTP API: the client token
// they send and the TLS they speak. The zero value sends no token,
// verifies an https:// service against the system's roots and dials gRPC
// in plaintext.
type Access struct {
	// Token, when set, goes with every request as a bearer token: HTTP's
	// Authorization field, gRPC's authorization metadata. The service
	// needs one when its clients.tokens_file is set.
	Token string
	// TLS, when set, verifies an https:// service and the gRPC listener
	// (RootCAs; nil: the system's roots), and holds the client
	// certificate for a listener that asks for one (mutual TLS).
	TLS *tls.Config
	// GRPCTLS dials the gRPC listener with TLS (its listen.grpc_tls).
	GRPCTLS bool
}

// client returns an HTTP client of a's TLS, for the service's HTTP API.
func (a Access) client() *http.Client {
	if a.TLS == nil {
		return http.DefaultClient
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: a.TLS.Clone(), Proxy: http.ProxyFromEnvironment}}
}

// authorize sets req's Authorization field to a's token, if any.
func (a Access) authorize(req *http.Request) {
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
}

// HTTPTarget decides through a running floodgate serve's POST /v1/check.
type HTTPTarget struct {
	url    string
	client *http.Client
	prefix []byte   // `{"policy":"NAME","key":`
	bearer []string // the Authorization field's value, or nil
}

// NewHTTP returns a target that checks requests under the service's
// policy named policy, at baseURL (http://host:port, or https://), keeping
// up to conns connections open, with a's token and TLS.
func NewHTTP(baseURL, policy string, conns int, a Access) (*HTTPTarget, error) {
	base, err := normalizeURL(baseURL)
	if err != nil {
		return nil, err
	}
	name, _ := json.Marshal(policy)
	tr := &http.Transport{
		Proxy: nil, MaxIdleConns: conns + 1, MaxIdleConnsPerHost: conns + 1, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	if a.TLS != nil {
		tr.TLSClientConfig = a.TLS.Clone()
	}
	t := &HTTPTarget{
		url:    base + "/v1/check",
		client: &http.Client{Transport: tr},
		prefix: append(append([]byte(`{"policy":`), name...), `,"key":`...),
	}
	if a.Token != "" {
		t.bearer = []string{"Bearer " + a.Token}
	}
	return t, nil
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
	if t.bearer != nil {
		req.Header["Authorization"] = t.bearer
	}
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
			return Outcome{}, fmt.Errorf("HTTP %d %s: %s%s%s", resp.StatusCode, a.Error.Code, field, a.Error.Message, tokenHint(resp.StatusCode == http.StatusUnauthorized, t.bearer != nil))
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

// answerHint says what to do about the service's answer of status with
// body to a request of a: a token wanted or refused, or plain HTTP sent to
// its HTTPS listener; "" when none of these.
func (a Access) answerHint(status int, body []byte) string {
	if status == http.StatusBadRequest && bytes.Contains(body, []byte("HTTP request to an HTTPS server")) {
		return " (the listener speaks TLS: write the URL https://)"
	}
	return tokenHint(status == http.StatusUnauthorized, a.Token != "")
}

// tokenHint says what to do about a refusal for want of a client token
// (refused): give one, or check the one given (sent); "" when not refused.
func tokenHint(refused, sent bool) string {
	switch {
	case !refused:
		return ""
	case sent:
		return " (check --token, or FLOODGATE_TOKEN: the service's clients.tokens_file has no such token)"
	}
	return " (the service wants a client token: give --token, or set FLOODGATE_TOKEN)"
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
	conn             *grpc.ClientConn
	client           rlsv3.RateLimitServiceClient
	domain           string
	entries          []Entry
	tls, cert, token bool // dialed with TLS; with a client certificate; sends a token
}

// NewGRPC returns a target sending ShouldRateLimit to addr (host:port)
// for domain, with one descriptor of entries, in plaintext or, with
// a.GRPCTLS, over TLS of a.TLS; a.Token goes with every call.
func NewGRPC(addr, domain string, entries []Entry, a Access) (*GRPCTarget, error) {
	if domain == "" {
		return nil, errors.New("no domain")
	}
	if len(entries) == 0 {
		return nil, errors.New("no descriptor entries")
	}
	creds := insecure.NewCredentials()
	if a.GRPCTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if a.TLS != nil {
			cfg = a.TLS.Clone()
		}
		creds = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if a.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerCreds{"authorization": "Bearer " + a.Token}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &GRPCTarget{conn: conn, client: rlsv3.NewRateLimitServiceClient(conn), domain: domain, entries: entries,
		tls: a.GRPCTLS, cert: a.TLS != nil && (len(a.TLS.Certificates) > 0 || a.TLS.GetClientCertificate != nil), token: a.Token != ""}, nil
}

// bearerCreds sends a client token as every call's authorization
// metadata. It does not require TLS: the service takes tokens on a
// plaintext listener too (and warns about one beyond loopback).
type bearerCreds map[string]string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b, nil
}

func (bearerCreds) RequireTransportSecurity() bool { return false }

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
			return Outcome{}, fmt.Errorf("gRPC %s: %s%s", st.Code(), st.Message(), t.hint(st))
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

// hint says what to do about a failed call that the target's own
// settings explain: a token wanted or refused, or TLS on one side only.
func (t *GRPCTarget) hint(st *status.Status) string {
	msg := st.Message()
	switch {
	case st.Code() == codes.Unauthenticated:
		return tokenHint(true, t.token)
	case st.Code() != codes.Unavailable:
	case !t.tls && transportError(msg):
		// A TLS listener closes a connection whose first bytes are not a
		// TLS handshake.
		return " (does the gRPC listener speak TLS? add --grpc-tls)"
	case t.tls && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return " (the gRPC listener speaks plaintext: drop --grpc-tls)"
	case t.tls && strings.Contains(msg, "x509: "):
		return " (give the CA that signs the listener's certificate with --ca-file)"
	case t.tls && !t.cert && transportError(msg):
		// A listener with a client CA refuses a connection without a
		// client certificate: under TLS 1.3 after the handshake, so that
		// the client sees "certificate required", a reset, a broken pipe
		// or EOF, whichever comes first.
		return " (if the listener has a client_ca, it wants --cert-file and --key-file)"
	}
	return ""
}

// transportError reports whether msg is that of a connection the other
// side closed or refused to speak on (a preface or handshake that failed,
// a reset, a broken pipe, EOF, a certificate it asked for), as opposed to
// an answer of the service (its store unavailable, say) or a refused dial.
func transportError(msg string) bool {
	for _, s := range []string{"server preface", "certificate required", "connection reset", "broken pipe", "EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
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

// FetchService reads GET /v1/policies at baseURL, with a's token and TLS.
func FetchService(ctx context.Context, baseURL string, a Access) (*Service, error) {
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
	a.authorize(req)
	resp, err := a.client().Do(req)
	if err != nil {
		return nil, unreachable(base, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/v1/policies: HTTP %d: %.200s%s", base, resp.StatusCode, bytes.TrimSpace(data), a.answerHint(resp.StatusCode, data))
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
var ErrUnreachable = errors.New("the service cannot be reached")

// unreachable wraps ErrUnreachable for a request to base that got no
// answer, saying what to check: the certificate, the scheme, or whether
// the service runs.
func unreachable(base string, err error) error {
	msg := err.Error()
	hint := "is floodgate serve running?"
	switch {
	case strings.Contains(msg, "x509: "):
		hint = "give the CA that signs the service's certificate with --ca-file"
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		hint = "the listener speaks plain HTTP: write the URL http://"
	case strings.HasPrefix(base, "http://") && (strings.Contains(msg, "malformed HTTP response") || strings.HasSuffix(msg, ": EOF")):
		hint = "does the listener speak TLS? write the URL https://"
	case strings.Contains(msg, "tls: "):
		hint = "a listener with a client_ca wants --cert-file and --key-file"
	}
	return fmt.Errorf("%w at %s: %v (%s)", ErrUnreachable, base, err, hint)
}

// FetchRule asks the service at baseURL which rule of domain a descriptor
// of entries meets (POST /v1/envoy/rule), as its ShouldRateLimit matches
// it: the service's own matcher, not a prediction of it. An entry taking
// the request's key is sent with the value every key of the run starts
// with, so that the rule found is one a wildcard of the run's keys meets.
// The request carries a's token and speaks its TLS.
func FetchRule(ctx context.Context, baseURL, domain string, entries []Entry, a Access) (*ServiceRule, error) {
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
	a.authorize(req)
	resp, err := a.client().Do(req)
	if err != nil {
		return nil, unreachable(base, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, fmt.Errorf("no rule of domain %s matches the descriptor %s (GET %s/v1/policies lists the rules)", domain, strings.Join(es, ","), base)
	default:
		return nil, fmt.Errorf("POST %s/v1/envoy/rule: HTTP %d: %.200s%s", base, resp.StatusCode, bytes.TrimSpace(out), a.answerHint(resp.StatusCode, out))
	}
	var r struct {
		Rule ServiceRule `json:"rule"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("POST %s/v1/envoy/rule: %w", base, err)
	}
	return &r.Rule, nil
}
