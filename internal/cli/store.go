package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/internal/telemetry"
	"github.com/floodgatehq/floodgate/internal/throttle"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// openedStore is the store serve decides through, and what it needs to
// check and release it.
type openedStore struct {
	store  floodgate.Store
	redis  *redisstore.Store // nil for the memory store
	memory *memstore.Store   // nil for Redis
	close  func()

	// addr is a Redis address (the URL's, or the first seed node's or
	// sentinel's), and tls whether it is dialed with TLS: what
	// protocolMismatch tries when the store does not answer.
	addr string
	tls  bool

	// sentinel is how to ask the sentinels of a Sentinel store which
	// masters they monitor (masterUnknown); nil for other stores.
	sentinel *redis.FailoverOptions

	// poolSize is the Redis client's connections per node (0 for the
	// memory store): the default bound on store calls in flight
	// (overload.max_inflight 0).
	poolSize int
}

// openStore builds the configured store without contacting it (see
// probeStore). The closer releases it and its client.
func openStore(cfg *config.Config) (*openedStore, error) {
	s := cfg.Store
	if s.Type == "memory" {
		var opts []memstore.Option
		switch {
		case s.MaxKeys > 0:
			opts = append(opts, memstore.WithMaxKeys(s.MaxKeys))
		case s.MaxKeys < 0:
			opts = append(opts, memstore.WithUnbounded())
		}
		if cfg.Bounds.MaxKeyBytes > 0 {
			opts = append(opts, memstore.WithMaxKeyLen(cfg.Bounds.MaxKeyBytes))
		}
		m, err := memstore.New(opts...)
		if err != nil {
			return nil, err
		}
		return &openedStore{store: m, memory: m, close: func() { m.Close() }}, nil
	}
	client, sentinel, err := redisClient(cfg)
	if err != nil {
		return nil, err
	}
	opts := []redisstore.Option{redisstore.WithMaxKeyLen(cfg.Bounds.MaxKeyBytes)}
	if s.Prefix != "" {
		opts = append(opts, redisstore.WithPrefix(s.Prefix))
	}
	if s.HashKeysSecret != "" {
		opts = append(opts, redisstore.WithHashedKeys([]byte(s.HashKeysSecret)))
	}
	if s.Clock == "service" {
		opts = append(opts, redisstore.WithClock(storekit.SystemClock{}))
	}
	if s.Counters {
		opts = append(opts, redisstore.WithCounters())
	}
	if s.Type == "redis-sentinel" {
		// With replica reads the client is a cluster client over the one
		// master and its replicas (redisClient).
		opts = append(opts, redisstore.WithOneMaster())
	}
	rs, err := redisstore.New(client, opts...)
	if err != nil {
		client.Close()
		return nil, err
	}
	st := &openedStore{store: rs, redis: rs, close: func() { rs.Close(); client.Close() }, tls: s.UsesTLS(), sentinel: sentinel}
	switch c := client.(type) {
	case *redis.Client:
		st.poolSize = c.Options().PoolSize
	case *redis.ClusterClient:
		st.poolSize = c.Options().PoolSize
	}
	if s.Type == "redis" {
		if o, err := redis.ParseURL(s.URL); err == nil {
			st.addr = o.Addr
		}
	} else if hp := s.HostPorts(); len(hp) > 0 {
		st.addr = hp[0]
	}
	return st, nil
}

// clusterReloadInterval is how often a cluster client reads the slot map
// again while it is used.
const clusterReloadInterval = 500 * time.Millisecond

// memoryStats adapts memstore's Stats for the metrics.
func memoryStats(m *memstore.Store) func() telemetry.MemoryStats {
	return func() telemetry.MemoryStats {
		s := m.Stats()
		return telemetry.MemoryStats{Entries: s.Entries, Bound: s.Bound, Evictions: s.Evictions, Refused: s.Refused, Swept: s.Swept}
	}
}

// logMemoryBound says at start how many keys the memory store holds, and
// why that many.
func logMemoryBound(log *slog.Logger, m *memstore.Store, maxKeys int) {
	bound := m.Stats().Bound
	switch {
	case bound == 0:
		log.Info("memory store unbounded (store.max_keys: -1)")
	case maxKeys > 0:
		log.Info("memory store bounded", "max_keys", bound, "from", "store.max_keys")
	default:
		sz := memstore.DefaultSizing()
		log.Info("memory store bounded", "max_keys", bound, "from", "the memory the process may use",
			"memory_bytes", sz.Memory, "memory_source", sz.Source)
	}
}

// redisClient builds the go-redis client of the configured Redis store.
// Store calls are bounded by their context (ContextTimeoutEnabled); a call
// that may have run is never retried (MaxRetries -1). For a Sentinel store
// it also returns the client's options, by which masterUnknown asks the
// sentinels; nil for the others.
func redisClient(cfg *config.Config) (redis.UniversalClient, *redis.FailoverOptions, error) {
	s := cfg.Store
	timeouts := func(dial, rw *time.Duration) {
		*dial = max(time.Second, 5*s.Timeout)
		*rw = max(time.Second, 5*s.Timeout)
	}
	var tlsConfig *tls.Config
	if s.UsesTLS() {
		var err error
		if tlsConfig, err = s.TLS.Config(); err != nil {
			return nil, nil, err
		}
	}
	switch s.Type {
	case "redis":
		o, err := redis.ParseURL(s.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("store url: %w", err)
		}
		o.MaxRetries, o.ContextTimeoutEnabled = -1, true
		timeouts(&o.DialTimeout, &o.ReadTimeout)
		o.WriteTimeout = o.ReadTimeout
		if tlsConfig != nil {
			if tlsConfig.ServerName == "" && o.TLSConfig != nil {
				tlsConfig.ServerName = o.TLSConfig.ServerName // the URL's host
			}
			o.TLSConfig = tlsConfig
		}
		return redis.NewClient(o), nil, nil
	case "redis-cluster":
		o := &redis.ClusterOptions{Addrs: s.HostPorts(), Username: s.Username, Password: s.Password, MaxRetries: -1, ContextTimeoutEnabled: true, TLSConfig: tlsConfig,
			// The slot map is read again twice a second while decisions are
			// made (and by redisstore as soon as a call fails to reach a
			// master), so a replica that took over is used within half a
			// second; a redirection is followed without a pause.
			ClusterStateReloadInterval: clusterReloadInterval, MinRetryBackoff: -1, MaxRetryBackoff: -1,
			// Read-only commands (peeks: FCALL_RO) to a random node of the
			// slot, master or replica; adds always to the master.
			ReadOnly: s.ReadFromReplicas, RouteRandomly: s.ReadFromReplicas}
		timeouts(&o.DialTimeout, &o.ReadTimeout)
		o.WriteTimeout = o.ReadTimeout
		return redis.NewClusterClient(o), nil, nil
	case "redis-sentinel":
		o := &redis.FailoverOptions{MasterName: s.Master, SentinelAddrs: s.HostPorts(), Username: s.Username, Password: s.Password,
			SentinelUsername: s.SentinelUsername, SentinelPassword: s.SentinelPassword, MaxRetries: -1, ContextTimeoutEnabled: true,
			TLSConfig: tlsConfig} // to the sentinels and to the master they name
		timeouts(&o.DialTimeout, &o.ReadTimeout)
		o.WriteTimeout = o.ReadTimeout
		if s.ReadFromReplicas {
			// Read-only commands (peeks: FCALL_RO) to the master or a
			// replica the sentinels name, at random; adds to the master.
			// go-redis builds a cluster client with one slot range over
			// them, which redisstore.WithOneMaster tells the store. Its
			// pool would be 5 connections a CPU, not a server client's 10
			// (the size overload.max_inflight takes without batching).
			o.RouteRandomly = true
			o.PoolSize = 10 * runtime.GOMAXPROCS(0)
			o.Dialer = loopbackDialer(o.DialTimeout, tlsConfig)
			return redis.NewFailoverClusterClient(o), o, nil
		}
		return redis.NewFailoverClient(o), o, nil
	}
	return nil, nil, fmt.Errorf("store type %q", s.Type)
}

// loopbackDialer dials as go-redis does (redis.NewDialer), but dials an
// address without a host (":6379") at 127.0.0.1. go-redis's cluster
// client over a Sentinel master and its replicas writes the loopback
// addresses the sentinels name so (it takes them for a Cluster's nodes
// seen from another host), and a TLS dial cannot verify an empty host.
func loopbackDialer(timeout time.Duration, tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	dial := redis.NewDialer(&redis.Options{DialTimeout: timeout, TLSConfig: tlsConfig})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return dial(ctx, network, addr)
	}
}

// errStoreMisconfigured is wrapped by probeStore's error when no retry can
// mend the store's configuration.
var errStoreMisconfigured = errors.New("the store is misconfigured")

// probeStore checks that the Redis store answers and loads its scripts,
// trying again while the failure may pass (connection refused, timeouts)
// until wait has passed. It returns at once, with an error wrapping
// errStoreMisconfigured, when the failure is one no retry can mend (a
// wrong password, an ACL without the commands the store needs, a database
// the server does not have: redisstore.Misconfigured). The memory store
// always answers.
func probeStore(ctx context.Context, st *openedStore, wait time.Duration, log *slog.Logger) error {
	if st.redis == nil {
		return nil
	}
	deadline := time.Now().Add(wait)
	warned := false
	var last error // the last failure that says more than a deadline
	for {
		attempt := min(2*time.Second, max(time.Until(deadline), 100*time.Millisecond))
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := st.redis.Ping(actx)
		if err == nil {
			err = st.redis.Preload(actx)
		}
		cancel()
		if err != nil && (last == nil || !timedOut(err)) {
			last = err
		}
		switch {
		case err == nil:
			return nil
		case redisstore.Misconfigured(err):
			if m := st.credentialsRefused(err); m != nil {
				err = m
			}
			return fmt.Errorf("%w: %v", errStoreMisconfigured, err)
		case ctx.Err() != nil:
			return ctx.Err()
		case !time.Now().Before(deadline):
			return last
		}
		if !warned {
			if m := st.protocolMismatch(ctx); m != nil {
				return fmt.Errorf("%w: %v", errStoreMisconfigured, m)
			}
			if m := st.masterUnknown(ctx); m != nil {
				return fmt.Errorf("%w: %v", errStoreMisconfigured, m)
			}
			if r := refusalOf(err); r != nil {
				log.Warn(r.waiting, "store_wait", wait.String(), "error", err)
			} else {
				log.Warn("Redis is not answering yet; waiting for it", "store_wait", wait.String(), "error", err)
			}
			warned = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(250*time.Millisecond, time.Until(deadline))):
		}
	}
}

// timedOut reports whether err is an attempt cut short by its deadline
// (the context's, or the socket's that go-redis sets from it), which says
// less than the failure seen before it: a refusal seen once must not turn
// into "does not answer" because the last attempt ran out of time on a
// busy machine.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) || strings.Contains(err.Error(), "i/o timeout")
}

// A refusal is a state in which Redis answers but refuses every write
// (redisstore.WritesRefused), so that no decision can be made, and which
// may pass (a failover, keys expiring, a disk mended): serve waits
// --store-wait, naming it, rather than saying the server does not answer.
type refusal struct {
	waiting  string // the warning while serve waits
	degraded string // what --start-degraded starts without: "the store …"
	failed   string // serve's exit: "the store (origin) <failed> <wait> (--store-wait)"
	advice   string // what to do
}

// refusals are the refusals by redisstore.WritesRefused's codes.
var refusals = map[string]*refusal{
	"READONLY": {
		waiting:  "Redis answers as a read-only replica; waiting for it to become a master",
		degraded: "the store is a read-only replica",
		failed:   "is a read-only replica, and did not become a master within",
		advice:   "point it at the master, or at the Sentinels (--redis-sentinel)"},
	"OOM": {
		waiting:  "Redis is full: it refuses writes (its used memory is above its maxmemory); waiting for room",
		degraded: "the store is full (out of memory)",
		failed:   "is full: its used memory is above its maxmemory, and it refused writes for",
		advice:   `give it more memory (maxmemory) or let it evict (maxmemory-policy: see "Redis memory" in docs/operations.md)`},
	"MISCONF": {
		waiting:  "Redis refuses writes: it cannot save its RDB snapshot (stop-writes-on-bgsave-error); waiting for it",
		degraded: "the store refuses writes: it cannot save its RDB snapshot (MISCONF)",
		failed:   "cannot save its RDB snapshot, and refused writes (stop-writes-on-bgsave-error) for",
		advice:   "its log says why (a full or read-only disk, a dir that is gone): mend that, or set stop-writes-on-bgsave-error no"},
	"NOREPLICAS": {
		waiting:  "Redis refuses writes: it has fewer good replicas than its min-replicas-to-write; waiting for them",
		degraded: "the store refuses writes: it has fewer good replicas than its min-replicas-to-write (NOREPLICAS)",
		failed:   "has fewer good replicas than its min-replicas-to-write, and refused writes for",
		advice:   "bring its replicas back, or lower min-replicas-to-write"},
	"LOADING": {
		waiting:  "Redis is loading its dataset into memory; waiting for it",
		degraded: "the store is loading its dataset (LOADING)",
		failed:   "was still loading its dataset after",
		advice:   "give --store-wait the time its load takes (its log says how long)"},
}

// refusalOf returns the refusal err reports, or nil.
func refusalOf(err error) *refusal {
	return refusals[redisstore.WritesRefused(err)]
}

// protocolMismatch tells a server that answers in another protocol than
// the one dialed from one that does not answer yet: a TLS client at a
// plain port gets no reply at all (Redis waits for the end of a line that
// never comes), and a plain client at a TLS port sees its connection
// closed, both of which look like a server that is not up yet. It returns
// the error that says which, or nil.
func (st *openedStore) protocolMismatch(ctx context.Context) error {
	if st.addr == "" || !otherProtocol(ctx, st.addr, st.tls) {
		return nil
	}
	if st.tls {
		return fmt.Errorf("%s answers without TLS: write its address redis:// (or turn store.tls off)", st.addr)
	}
	return fmt.Errorf("%s speaks TLS: write its address rediss:// (and give store.tls.ca_file if its CA is not the system's)", st.addr)
}

// otherProtocol reports whether the Redis at addr speaks the other
// protocol than the one dialed: plain RESP when TLS was dialed (tlsDialed),
// TLS when plaintext was. It probes for at most a second and reports
// false when addr does not answer, or answers as dialed.
func otherProtocol(ctx context.Context, addr string, tlsDialed bool) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false // not up, or not reachable: not a mismatch
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if tlsDialed {
		// Does it answer plain RESP?
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return false
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		return strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") || strings.HasPrefix(line, "-ERR")
	}
	// Does it complete a TLS handshake? (Only to tell; nothing is sent.)
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // a probe of the protocol, no data
	return tc.HandshakeContext(ctx) == nil
}

// credentialsRefused tells, for a store behind Sentinel, the sentinels'
// refusal of the credentials given (or of none) from the master's, which
// go-redis reports alike but which two different settings mend. It returns
// the error that names the setting, or nil when err is neither, or the
// store has no sentinels.
func (st *openedStore) credentialsRefused(err error) error {
	if st.sentinel == nil {
		return nil
	}
	reply, sentinels := redisstore.AuthRefused(err)
	if reply == "" {
		return nil
	}
	p := struct{ who, asks, refuses, user, password, other string }{"the master the sentinels name", "asks", "refuses",
		"store.username", "store.password or " + EnvRedisPassword, "store.sentinel_password is the sentinels' own"}
	if sentinels {
		p.who, p.asks, p.refuses = "the sentinels", "ask", "refuse"
		p.user, p.password = "store.sentinel_username", "store.sentinel_password or "+EnvSentinelPassword
		p.other = "their requirepass, with store.sentinel_username for an ACL user of theirs; store.password is the master's"
	}
	switch {
	case strings.HasPrefix(reply, "NOAUTH"):
		return fmt.Errorf("%s %s for a password (%s): give it as %s (%s)", p.who, p.asks, reply, p.password, p.other)
	case strings.HasPrefix(reply, "WRONGPASS"):
		return fmt.Errorf("%s %s the credentials given (%s): check %s and %s", p.who, p.refuses, reply, p.user, p.password)
	}
	return fmt.Errorf("%s %s for no password, but one was given (%s): drop %s", p.who, p.asks, reply, p.password)
}

// masterUnknown tells sentinels that answer but monitor no master of the
// configured name (a mistyped MASTER in --redis-sentinel) from sentinels
// that do not answer yet: go-redis reports both as "all sentinels
// specified in configuration are unreachable". It returns the error that
// says so, with the names the sentinels do monitor, or nil when a sentinel
// knows the name or none answers.
func (st *openedStore) masterUnknown(ctx context.Context) error {
	if st.sentinel == nil {
		return nil
	}
	return unknownMaster(ctx, st.sentinel)
}

// unknownMaster asks the sentinels of o whether they monitor a master
// named o.MasterName, and returns the error that says they answer but do
// not (with the names they do monitor), or nil when one knows it or none
// answers.
func unknownMaster(ctx context.Context, o *redis.FailoverOptions) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	answered := 0
	var monitored []string
	for _, addr := range o.SentinelAddrs {
		// As go-redis asks them: with their own credentials, not the master's.
		c := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword, TLSConfig: o.TLSConfig, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
		_, err := c.GetMasterAddrByName(ctx, o.MasterName).Result()
		if err == nil {
			c.Close()
			return nil // it knows the master: something else is wrong
		}
		if errors.Is(err, redis.Nil) {
			answered++
			if monitored == nil {
				if ms, err := c.Masters(ctx).Result(); err == nil {
					monitored = masterNames(ms)
				}
			}
		}
		c.Close()
	}
	if answered == 0 {
		return nil
	}
	known := "no master at all"
	if len(monitored) > 0 {
		known = fmt.Sprintf("%q", monitored[0])
		for _, n := range monitored[1:] {
			known += fmt.Sprintf(", %q", n)
		}
	}
	return fmt.Errorf("%d of the %d sentinels answer, and none monitors a master named %q (they monitor %s)",
		answered, len(o.SentinelAddrs), o.MasterName, known)
}

// masterNames returns the names in a SENTINEL MASTERS reply: one entry per
// master, a flat list of fields and values (RESP2) or a map (RESP3).
func masterNames(masters []any) []string {
	var names []string
	for _, m := range masters {
		switch m := m.(type) {
		case []any:
			for i := 0; i+1 < len(m); i += 2 {
				if k, _ := m[i].(string); k == "name" {
					if v, ok := m[i+1].(string); ok {
						names = append(names, v)
					}
				}
			}
		case map[any]any:
			if v, ok := m["name"].(string); ok {
				names = append(names, v)
			}
		}
	}
	slices.Sort(names)
	return names
}

// tlsProblem reports whether err comes from TLS: a certificate that does
// not verify, or a server that refuses the client's.
func tlsProblem(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "x509: ") || strings.Contains(msg, "tls: ")
}

// hostnameMismatch reports whether err says that a server's certificate,
// signed by a trusted CA, names another host than the one dialed
// (x509.HostnameError, whose text is all that is left once wrapped).
func hostnameMismatch(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "x509: certificate is valid for") || strings.Contains(msg, "x509: certificate is not valid for any names") ||
		strings.Contains(msg, "because it doesn't contain any IP SANs")
}

// storeOrigin names where the store's settings came from, for messages:
// the flag, the environment variable, or the configuration's field.
func (e *environ) storeOrigin(f serveFlags, path string, cfg *config.Config) string {
	for _, o := range []struct{ flag, env, value string }{
		{"--redis", EnvRedisURL, f.redisURL},
		{"--redis-cluster", EnvRedisCluster, f.redisCluster},
		{"--redis-sentinel", EnvRedisSentinel, f.redisSentinel},
	} {
		if o.value != "" {
			return o.flag
		}
		if e.getenv(o.env) != "" {
			return o.env
		}
	}
	field := map[string]string{"redis": "store.url", "redis-cluster": "store.addrs", "redis-sentinel": "store.master and store.addrs"}[cfg.Store.Type]
	if cfg.Store.Password != "" && e.getenv(EnvRedisPassword) != "" {
		field += " (with " + EnvRedisPassword + ")"
	}
	if path == "" {
		return field
	}
	return field + " of " + path
}

// redisLogger routes go-redis's own log lines (a pool that cannot dial, a
// cluster that cannot load its slots) to slog, as warnings, at most one a
// second with how many were held back: a dead Redis under load must not
// write a line per connection attempt, and --log-format json must hold.
type redisLogger struct {
	log      *slog.Logger
	throttle throttle.Log
}

func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	ok, held := l.throttle.Allow(time.Now())
	if !ok {
		return
	}
	l.log.Warn("redis client", "message", strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "suppressed", held)
}
