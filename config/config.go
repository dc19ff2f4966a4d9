// Package config reads the configuration of floodgate's service: named
// policies, the store, the failure policy, the admin token, limits on
// requests, listeners — and Envoy rate limit domains in the format of
// envoyproxy/ratelimit, which load unchanged.
//
// A configuration is a YAML file or a directory of them. A file with a
// top-level "domain" key is an Envoy domain (one per file, as
// envoyproxy/ratelimit has it); any other file is floodgate's own format
// (see docs/operations.md for its reference). Every problem found is
// reported at once, each with its file, line and field.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/storekit"
)

// Config is a loaded, validated configuration. Zero fields mean the
// defaults documented on each.
type Config struct {
	// Policies are the named floodgate policies, in file order.
	Policies []floodgate.Policy

	// Domains are the Envoy rate limit domains, by name order.
	Domains []*Domain

	Store    Store
	Failure  Failure
	Overload Overload
	Admin    Admin
	Clients  Clients
	Bounds   RequestBounds // the "limits" section: bounds on requests to the service
	Listen   Listen
	Envoy    Envoy

	// Sources are the files the configuration was read from.
	Sources []string

	// Budgets is the "budgets" section: the key of reservation tokens.
	Budgets Budgets
}

// Store says where limiter state lives.
type Store struct {
	// Type is "memory" (the default), "redis", "redis-cluster" or
	// "redis-sentinel".
	Type string
	// URL is the server of type redis: redis://[user:password@]host:port/db,
	// or rediss:// for TLS.
	URL string
	// Addrs are the seed nodes of a cluster, or the sentinels.
	Addrs []string
	// Master is the Sentinel master's name.
	Master string
	// Username and Password authenticate to a cluster or to the master a
	// sentinel names (a URL carries its own).
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves (type redis-sentinel), when they ask for it: their
	// requirepass (SentinelUsername empty), or an ACL user of theirs.
	// Empty: the sentinels are asked without credentials.
	SentinelUsername, SentinelPassword string
	// Prefix starts every Redis key; empty means DefaultPrefix.
	Prefix string
	// Timeout bounds each store call; 0 means 50ms.
	Timeout time.Duration
	// MaxKeys bounds the memory store's entries: 0 means the default bound,
	// derived from the memory the process may use (memstore.DefaultSizing);
	// -1 means no bound.
	MaxKeys int
	// HashKeysSecret, when set, stores an HMAC of every key instead of the
	// key (Redis); at least 16 bytes.
	HashKeysSecret string
	// Batching pipelines concurrent decisions to Redis (default true).
	Batching bool
	// OverLimitCache answers keys already over a fixed window's limit
	// locally until the window ends (default true).
	OverLimitCache bool
	// ReadFromReplicas sends peeks (FCALL_RO, which writes nothing) to
	// the replicas too, at random with the master, and adds to the
	// masters (types redis-cluster and redis-sentinel, whose replicas the
	// sentinels name; default false). A replica lags its master, so a
	// peek may see a count from a moment ago.
	ReadFromReplicas bool
	// Clock says whose clock times the decisions made in Redis: "redis"
	// (the default, also meant by ""), the server's TIME read by each call, or
	// "service", this process's clock passed with each call, which spares
	// Redis the TIME call (about a fifth of a fixed_window decision's
	// instructions) and asks the replicas' clocks to be kept in step (NTP).
	// The memory store always uses the service's clock.
	Clock string
	// Counters keeps every fixed window aligned to the epoch that counts
	// denied hits (an Envoy descriptor's limit, outside atomic domains and
	// calendar months) as a Redis integer per window, changed by INCRBY
	// and PEXPIRE instead of a function call (SPEC.md, "Counters";
	// redisstore.WithCounters): about a quarter of the Redis CPU of such a
	// decision. It needs Clock "service"; such policies then refuse
	// reservations, partial grants and groups. The memory store, which
	// costs no Redis, ignores it (so that one file serves with --redis and
	// without). Default false.
	Counters bool
	// TLS configures TLS to every Redis node and sentinel.
	TLS StoreTLS
}

// StoreTLS configures TLS to Redis: standalone, every node of a cluster,
// the sentinels and the master they name alike.
type StoreTLS struct {
	// Enabled turns TLS on. A rediss:// url, or addrs written
	// rediss://host:port, turn it on too.
	Enabled bool
	// CAFile is a PEM bundle of the certificate authorities that sign the
	// servers' certificates; empty means the system's roots.
	CAFile string
	// CertFile and KeyFile, both or neither, are the client certificate
	// presented to servers that ask for one (tls-auth-clients). They are
	// read again when they change.
	CertFile, KeyFile string
	// ServerName is the name the servers' certificates carry, when it is
	// not the host of the address dialed (a cluster announcing IPs, say).
	ServerName string
}

// Failure says what the service answers when the store fails or exceeds
// its timeout (package failure applies it).
type Failure struct {
	// Mode is failure.Open (allow; the default), failure.Closed (deny with
	// Retry-After) or failure.Fallback (decide on a local memory store).
	Mode failure.Mode
	// RetryAfter is the Retry-After of a fail-closed denial; 0 means 1s.
	RetryAfter time.Duration
	// Breaker configures the circuit breaker of each store node; zero
	// fields take failure's defaults.
	Breaker failure.Breaker
}

// OverloadMode says what the service answers a decision it could not send
// to the store in time because the store calls in flight were at their
// bound (Overload.MaxInflight) and the queue was full or its wait passed.
type OverloadMode uint8

const (
	// Backpressure refuses the decision as overloaded (service.ErrOverloaded):
	// HTTP 503 (or Overload.Status) with Retry-After, gRPC
	// RESOURCE_EXHAUSTED. Nothing is admitted that the store did not
	// decide. It is the zero value and the default.
	Backpressure OverloadMode = iota
	// OverloadFailurePolicy answers as the failure policy (failure.mode)
	// answers a failing store: with the default mode open, an overloaded
	// service admits, as it did before overload had a mode of its own.
	OverloadFailurePolicy
)

// String returns "backpressure" or "failure_policy".
func (m OverloadMode) String() string {
	if m == OverloadFailurePolicy {
		return "failure_policy"
	}
	return "backpressure"
}

// Overload bounds the store calls in flight and the decisions waiting for
// one (the "overload" section; docs/operations.md, Overload).
type Overload struct {
	// Mode is what a decision that could not be sent in time becomes;
	// the zero value is Backpressure.
	Mode OverloadMode
	// MaxInflight bounds the decisions in flight at each store node at
	// once (a Redis Cluster's masters have a bound each; with
	// store.batching, carried by one pipelined batch at a time to a near
	// Redis and up to 8 to a far one; without, one store call each). 0
	// means 256 with store.batching (service.DefaultBatchInflight), else
	// the Redis connection pool's size, which go-redis keeps per node
	// (none for the memory store). MaxQueue applies per node too. From 1
	// to 100000.
	MaxInflight int
	// MaxQueue bounds the decisions waiting for a call to finish; past
	// it a decision is refused at once. 0 means DefaultMaxQueue; from 1
	// to 1000000.
	MaxQueue int
	// QueueWait bounds a decision's wait in the queue, from 1ms to
	// MaxTimeout; 0 means DefaultQueueWait. store.timeout starts when the
	// call is sent, after this wait.
	QueueWait time.Duration
	// Status is the HTTP status of a backpressure answer, 503 or 429; 0
	// means 503.
	Status int
}

// FailurePolicy returns the failure policy of the configuration: f with the
// store's timeout, and fallback for failure.Fallback mode.
func (c *Config) FailurePolicy(fallback floodgate.Store) failure.Policy {
	return failure.Policy{
		Mode: c.Failure.Mode, Timeout: c.Store.Timeout, RetryAfter: c.Failure.RetryAfter,
		Breaker: c.Failure.Breaker, Fallback: fallback,
	}
}

// Admin protects the admin endpoints (/v1/reset, /v1/keys, /v1/stats).
type Admin struct {
	// Token is the bearer token admin requests must carry (at least
	// auth.MinTokenLen characters). Empty means no token: admin endpoints
	// answer 403, unless AllowLoopback.
	Token string
	// TokenFile names a file holding the token (admin.token_file); the
	// command line reads it into Token at start and at every reload.
	TokenFile string
	// AllowLoopback lets admin requests through without a token when
	// none is configured, from a loopback peer naming a loopback host
	// (admin.allow_loopback; off by default). Every process of the host,
	// and every client of a proxy on it, is then an admin.
	AllowLoopback bool
}

// Clients configures the authentication of the decision APIs
// (/v1/check, /v1/peek, /v1/policies, /v1/envoy/rule, /json and gRPC
// ShouldRateLimit). It is on when TokensFile is set or a listener asks
// for client certificates (Listen's ClientCA).
type Clients struct {
	// TokensFile names a file of "NAME TOKEN" lines (auth.ParseClients),
	// re-read when it changes. Empty means no bearer tokens.
	TokensFile string
}

// RequestBounds bound requests to the service, and the connections that
// carry them (the configuration's "limits" section; not to be confused
// with a policy's rate limits). Zero fields take the defaults below.
type RequestBounds struct {
	MaxBodyBytes   int64 // 0 means 1 MiB
	MaxBatch       int   // items per /v1/check; 0 means 1000
	MaxKeyBytes    int   // 0 means storekit.DefaultMaxKeyLen
	MaxDescriptors int   // per RLS request; 0 means 64

	// MaxConnections caps the open connections of each listener (HTTP
	// and gRPC alike); at the cap, the idlest connection makes room for a
	// new one (internal/connlimit). 0 means DefaultMaxConnections.
	MaxConnections int
	// MaxHeaderBytes bounds an HTTP request's header and a gRPC call's
	// metadata (HTTP/2 MAX_HEADER_LIST_SIZE), in bytes; 0 means 64 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the wait for an HTTP request's header, and
	// for a new gRPC connection's handshake; 0 means 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout and WriteTimeout bound the reading of a whole HTTP
	// request and the writing of its answer; 0 means 30s each.
	ReadTimeout, WriteTimeout time.Duration
	// IdleTimeout closes an HTTP keep-alive connection, or a gRPC
	// connection without calls, idle this long; 0 means 2m.
	IdleTimeout time.Duration
	// MaxConcurrentStreams bounds the calls in flight on one gRPC
	// connection; 0 means 256.
	MaxConcurrentStreams int
	// KeepaliveMinTime is the shortest interval between a gRPC client's
	// keepalive pings; a client pinging more often is disconnected
	// (GOAWAY too_many_pings). 0 means 10s.
	KeepaliveMinTime time.Duration
}

// Envoy holds the settings of envoyproxy/ratelimit that change answers
// (its environment variables of the same meaning in brackets).
type Envoy struct {
	// ShadowMode answers OK overall even when a descriptor is over its
	// limit; statuses still say OVER_LIMIT (SHADOW_MODE).
	ShadowMode bool
	// MergeDomains merges files of the same domain instead of refusing
	// them (MERGE_DOMAIN_CONFIG).
	MergeDomains bool
	// ResponseHeaders adds the RateLimit and RateLimit-Policy fields of the
	// binding descriptor to RLS responses (default true).
	ResponseHeaders bool
	// CalendarMonth makes the month unit the UTC calendar month, reset at
	// 00:00 UTC on the 1st, instead of 30 days from the Unix epoch
	// (USE_CALENDAR_MONTH_RATE_LIMIT; the serve command sets it from that
	// environment variable when it is set, over the file's value). It
	// needs a store that decides calendar windows. Default false.
	CalendarMonth bool
	// AtomicDomains are the names of the Envoy domains whose descriptors
	// of one request are decided as one atomic group, spent on all or
	// none (a floodgate extension; docs/operations.md). Each must be a
	// loaded domain. A store whose keys live on several nodes (a Redis
	// Cluster) cannot decide them: package rls refuses the configuration
	// then. Default none.
	AtomicDomains []string
}

// Atomic reports whether domain is one of AtomicDomains.
func (e *Envoy) Atomic(domain string) bool { return slices.Contains(e.AtomicDomains, domain) }

// Listen holds the service's addresses and their TLS.
type Listen struct {
	HTTP, GRPC string // empty means 127.0.0.1:8080 and 127.0.0.1:8081
	// HTTPTLS and GRPCTLS serve each listener over TLS when their Cert is
	// set (listen.http_tls, listen.grpc_tls; listen.tls_cert and tls_key
	// are the older spelling of grpc_tls's).
	HTTPTLS, GRPCTLS TLS
}

// TLS names a listener's certificate files (PEM). The files are re-read
// when they change.
type TLS struct {
	// Cert and Key, both or neither, are the certificate chain and its
	// private key.
	Cert, Key string
	// ClientCA, when set, is a bundle of CA certificates: clients must
	// present a certificate one of them signed (mutual TLS). It needs
	// Cert.
	ClientCA string
}

// On reports whether t serves TLS.
func (t TLS) On() bool { return t.Cert != "" }

// MaxTimeout bounds store.timeout.
const MaxTimeout = time.Minute

// Defaults of the fields above.
const (
	DefaultTimeout        = 50 * time.Millisecond
	DefaultMaxQueue       = 4096
	DefaultQueueWait      = 500 * time.Millisecond
	DefaultOverloadStatus = 503
	DefaultRetryAfter     = time.Second
	DefaultMaxBodyBytes   = 1 << 20
	DefaultMaxBatch       = 1000
	DefaultMaxDescriptors = 64
	DefaultHTTP           = "127.0.0.1:8080"
	DefaultGRPC           = "127.0.0.1:8081"

	DefaultMaxConnections       = 4096
	DefaultMaxHeaderBytes       = 64 << 10
	DefaultReadHeaderTimeout    = 10 * time.Second
	DefaultReadTimeout          = 30 * time.Second
	DefaultWriteTimeout         = 30 * time.Second
	DefaultIdleTimeout          = 2 * time.Minute
	DefaultMaxConcurrentStreams = 256
	DefaultKeepaliveMinTime     = 10 * time.Second
)

// withDefaults fills the zero fields that have defaults.
func (c *Config) withDefaults() {
	if c.Store.Type == "" {
		c.Store.Type = "memory"
	}
	if c.Store.Prefix == "" {
		c.Store.Prefix = DefaultPrefix
	}
	if c.Store.Clock == "" {
		c.Store.Clock = "redis"
	}
	if c.Store.Timeout == 0 {
		c.Store.Timeout = DefaultTimeout
	}
	if c.Failure.RetryAfter == 0 {
		c.Failure.RetryAfter = DefaultRetryAfter
	}
	if c.Overload.MaxQueue == 0 {
		c.Overload.MaxQueue = DefaultMaxQueue
	}
	if c.Overload.QueueWait == 0 {
		c.Overload.QueueWait = DefaultQueueWait
	}
	if c.Overload.Status == 0 {
		c.Overload.Status = DefaultOverloadStatus
	}
	if c.Bounds.MaxBodyBytes == 0 {
		c.Bounds.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Bounds.MaxBatch == 0 {
		c.Bounds.MaxBatch = DefaultMaxBatch
	}
	if c.Bounds.MaxKeyBytes == 0 {
		c.Bounds.MaxKeyBytes = storekit.DefaultMaxKeyLen
	}
	if c.Bounds.MaxDescriptors == 0 {
		c.Bounds.MaxDescriptors = DefaultMaxDescriptors
	}
	b := &c.Bounds
	for _, d := range []struct {
		v   *int
		def int
	}{{&b.MaxConnections, DefaultMaxConnections}, {&b.MaxHeaderBytes, DefaultMaxHeaderBytes}, {&b.MaxConcurrentStreams, DefaultMaxConcurrentStreams}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&b.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&b.ReadTimeout, DefaultReadTimeout}, {&b.WriteTimeout, DefaultWriteTimeout},
		{&b.IdleTimeout, DefaultIdleTimeout}, {&b.KeepaliveMinTime, DefaultKeepaliveMinTime}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.Listen.HTTP == "" {
		c.Listen.HTTP = DefaultHTTP
	}
	if c.Listen.GRPC == "" {
		c.Listen.GRPC = DefaultGRPC
	}
}

// Policy returns the named policy, or false.
func (c *Config) Policy(name string) (floodgate.Policy, bool) {
	for _, p := range c.Policies {
		if p.Name == name {
			return p, true
		}
	}
	return floodgate.Policy{}, false
}

// Load reads the configuration at path: a YAML file, or a directory whose
// *.yaml and *.yml files (those of subdirectories too, not hidden ones)
// are read in name order. At most one file may be in floodgate's own
// format; every other file is an Envoy domain. The error, when the
// configuration is invalid, is an Errors listing every problem with its
// file and line; it wraps ErrInvalid.
func Load(path string) (*Config, error) {
	return LoadWith(path, nil)
}

// StoreOverride replaces the store's type and addresses that the files
// give, as serve's --redis, --redis-cluster and --redis-sentinel do. It
// takes effect before the checks of the files' store.tls and
// store.read_from_replicas, so that those are judged against the store the
// service will use: store.tls settings with --redis rediss://… are valid,
// as is store.read_from_replicas with --redis-cluster. (store.max_keys of a
// memory store stays valid, and unused, under --redis.)
type StoreOverride struct {
	// From names where it comes from (such as "--redis"), for messages.
	From string
	// Type is redis, redis-cluster or redis-sentinel.
	Type string
	// URL is a redis store's URL; Addrs the seed nodes or the sentinels;
	// Master the sentinels' master name.
	URL, Master string
	Addrs       []string
}

// LoadWith is Load with the store's type and addresses replaced by o's
// (nil: as the files give them).
func LoadWith(path string, o *StoreOverride) (*Config, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var files []string
	if info.IsDir() {
		if files, err = yamlFiles(path); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%w: %s: no *.yaml or *.yml files", ErrInvalid, path)
		}
	} else {
		files = []string{path}
	}
	srcs := make([]Source, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		srcs = append(srcs, Source{Name: f, Data: data})
	}
	return ParseWith(o, srcs...)
}

// yamlFiles returns the *.yaml and *.yml files under dir, subdirectories
// included, in name order, skipping hidden files and directories (such as
// a Kubernetes ConfigMap's ..data, whose files the visible symlinks name).
// Symlinks to files are followed.
func yamlFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if path != dir && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			return nil
		}
		if st, err := os.Stat(path); err != nil || st.IsDir() {
			return nil // a dangling symlink, or one to a directory
		}
		files = append(files, path)
		return nil
	})
	sort.Strings(files)
	return files, err
}

// Source is one configuration file's name and contents.
type Source struct {
	Name string
	Data []byte
}

// Parse reads configuration files given as bytes, as Load does.
func Parse(srcs ...Source) (*Config, error) {
	return ParseWith(nil, srcs...)
}

// ParseWith is Parse with the store's type and addresses replaced by o's
// (nil: as the files give them), as LoadWith.
func ParseWith(o *StoreOverride, srcs ...Source) (*Config, error) {
	c := &collector{}
	cfg := &Config{Store: Store{Batching: true, OverLimitCache: true}, Envoy: Envoy{ResponseHeaders: true}}
	native := ""
	for _, src := range srcs {
		cfg.Sources = append(cfg.Sources, src.Name)
		r := &reader{file: src.Name, c: c, override: o}
		var doc yaml.Node
		dec := yaml.NewDecoder(bytes.NewReader(src.Data))
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				c.add(src.Name, 0, "", "an empty file: want a mapping at the top level")
				continue
			}
			line := 0
			var te *yaml.TypeError
			if !errors.As(err, &te) {
				line = yamlErrorLine(err)
			}
			c.add(src.Name, line, "", "not valid YAML: %s", cleanYAMLError(err))
			continue
		}
		if !r.onlyDocument(dec) || !r.checkAliases(&doc) {
			continue
		}
		root := resolve(&doc)
		if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
			root = resolve(root.Content[0])
		}
		if root.Kind != yaml.MappingNode {
			r.errorf(root, "", "want a mapping at the top level, found %s", describe(root))
			continue
		}
		if isEnvoyDomain(root) {
			if d := r.envoyDomain(root); d != nil {
				cfg.Domains = append(cfg.Domains, d)
			}
			continue
		}
		if native != "" {
			r.errorf(root, "", "a second file in floodgate's format (the first is %s); put its settings in one file", native)
			continue
		}
		native = src.Name
		r.native(root, cfg)
	}
	if o != nil {
		// As store() applied it, for files without a store section too,
		// before the domains are judged against the store.
		cfg.Store.Type, cfg.Store.URL, cfg.Store.Addrs, cfg.Store.Master = o.Type, o.URL, o.Addrs, o.Master
	}
	cfg.withDefaults()
	checkDomains(c, cfg)
	if err := c.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// onlyDocument reports a second document after the one read (an empty
// one, as a trailing "---" makes, is fine); it returns false then.
func (r *reader) onlyDocument(dec *yaml.Decoder) bool {
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		switch {
		case errors.Is(err, io.EOF):
			return true
		case err != nil:
			r.c.add(r.file, yamlErrorLine(err), "", "not valid YAML: %s", cleanYAMLError(err))
			return false
		}
		if v := resolve(&next); len(v.Content) == 1 && v.Content[0].Tag == "!!null" && v.Content[0].Value == "" {
			continue
		}
		r.errorf(&next, "", "a second YAML document: give one per file")
		return false
	}
}

// native reads floodgate's own format.
func (r *reader) native(root *yaml.Node, cfg *Config) {
	fs := r.section(root, "")
	if f, ok := fs["envoy"]; ok {
		ef := r.section(f.value, "envoy")
		for _, b := range []struct {
			key string
			dst *bool
		}{{"shadow_mode", &cfg.Envoy.ShadowMode}, {"merge_domains", &cfg.Envoy.MergeDomains}, {"response_headers", &cfg.Envoy.ResponseHeaders}, {"calendar_month", &cfg.Envoy.CalendarMonth}} {
			if v, ok := ef[b.key]; ok {
				*b.dst, _ = r.boolean(v.value, "envoy."+b.key)
			}
		}
		if v, ok := ef["atomic_domains"]; ok {
			if names, _ := r.strings(v.value, "envoy.atomic_domains"); len(names) > 0 {
				cfg.Envoy.AtomicDomains = names
			}
			r.c.atomicFile, r.c.atomicLine = r.file, v.value.Line
		}
	}
	if f, ok := fs["policies"]; ok {
		r.policies(f.value, cfg)
	}
	if f, ok := fs["store"]; ok {
		r.store(f.value, &cfg.Store)
	}
	if f, ok := fs["failure"]; ok {
		ff := r.section(f.value, "failure")
		if v, ok := ff["mode"]; ok {
			if s, ok := r.str(v.value, "failure.mode"); ok {
				m, err := failure.ParseMode(s)
				if err != nil {
					r.errorf(v.value, "failure.mode", "want open, closed or fallback, found %q", s)
				}
				cfg.Failure.Mode = m
			}
		}
		if v, ok := ff["retry_after"]; ok {
			if d, ok := r.duration(v.value, "failure.retry_after", time.Second); ok {
				if d%time.Second != 0 {
					r.errorf(v.value, "failure.retry_after", "want whole seconds (Retry-After is in seconds), found %s", d)
				}
				cfg.Failure.RetryAfter = d
			}
		}
		if v, ok := ff["breaker"]; ok {
			r.breaker(v.value, &cfg.Failure.Breaker)
		}
	}
	if f, ok := fs["overload"]; ok {
		r.overload(f.value, &cfg.Overload)
	}
	if f, ok := fs["admin"]; ok {
		r.admin(f.value, &cfg.Admin)
	}
	if f, ok := fs["clients"]; ok {
		r.clients(f.value, &cfg.Clients)
	}
	if f, ok := fs["budgets"]; ok {
		r.budgets(f.value, &cfg.Budgets)
	}
	if f, ok := fs["limits"]; ok {
		r.limits(f.value, &cfg.Bounds)
	}
	if f, ok := fs["listen"]; ok {
		r.listen(f.value, &cfg.Listen)
	}
}

// overload reads the overload section.
func (r *reader) overload(n *yaml.Node, o *Overload) {
	of := r.section(n, "overload")
	if v, ok := of["mode"]; ok {
		if s, ok := r.str(v.value, "overload.mode"); ok {
			switch s {
			case "backpressure":
				o.Mode = Backpressure
			case "failure_policy":
				o.Mode = OverloadFailurePolicy
			default:
				r.errorf(v.value, "overload.mode", "want backpressure or failure_policy, found %q", s)
			}
		}
	}
	if v, ok := of["max_inflight"]; ok {
		n, _ := r.integer(v.value, "overload.max_inflight", 0, 100_000)
		o.MaxInflight = int(n)
	}
	if v, ok := of["max_queue"]; ok {
		n, _ := r.integer(v.value, "overload.max_queue", 1, 1_000_000)
		o.MaxQueue = int(n)
	}
	if v, ok := of["queue_wait"]; ok {
		if d, ok := r.duration(v.value, "overload.queue_wait", time.Millisecond); ok {
			if d > MaxTimeout {
				r.errorf(v.value, "overload.queue_wait", "want a duration from 1ms to %s, found %s", MaxTimeout, d)
			}
			o.QueueWait = d
		}
	}
	if v, ok := of["status"]; ok {
		if n, ok := r.integer(v.value, "overload.status", 0, 999); ok {
			if n != 503 && n != 429 {
				r.errorf(v.value, "overload.status", "want 503 or 429, found %d", n)
			}
			o.Status = int(n)
		}
	}
}

// breaker reads failure.breaker: the circuit breaker's settings, each
// within the bounds failure.Policy accepts.
func (r *reader) breaker(n *yaml.Node, b *failure.Breaker) {
	bf := r.section(n, "failure.breaker")
	if v, ok := bf["disabled"]; ok {
		b.Disabled, _ = r.boolean(v.value, "failure.breaker.disabled")
	}
	if v, ok := bf["window"]; ok {
		if d, ok := r.duration(v.value, "failure.breaker.window", time.Second); ok {
			if d > 10*time.Minute {
				r.errorf(v.value, "failure.breaker.window", "want a duration from 1s to 10m, found %s", d)
			}
			b.Window = d
		}
	}
	if v, ok := bf["min_calls"]; ok {
		n, _ := r.integer(v.value, "failure.breaker.min_calls", 1, 1_000_000)
		b.MinCalls = int(n)
	}
	if v, ok := bf["failure_ratio"]; ok {
		if s, ok := r.scalar(v.value, "failure.breaker.failure_ratio", "a number above 0, at most 1"); ok {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || !(f > 0 && f <= 1) {
				r.errorf(v.value, "failure.breaker.failure_ratio", "want a number above 0, at most 1, found %q", s)
			}
			b.FailureRatio = f
		}
	}
	if v, ok := bf["open_for"]; ok {
		if d, ok := r.duration(v.value, "failure.breaker.open_for", 10*time.Millisecond); ok {
			if d > time.Minute {
				r.errorf(v.value, "failure.breaker.open_for", "want a duration from 10ms to 1m, found %s", d)
			}
			b.OpenFor = d
		}
	}
}

// policyFields are the keys of a policy written as a mapping: SPEC.md's
// names, as floodgate.Policy's JSON form.
var policyFields = []string{"algorithm", "limits", "max", "limit", "window", "align", "burst", "interval",
	"min_interval", "rate", "count_denied", "track", "retention", "period", "tz", "hash_tag"}

func (r *reader) policies(n *yaml.Node, cfg *Config) {
	fs, ok := r.mapping(n, "policies")
	if !ok {
		return
	}
	for _, f := range fs {
		path := "policies." + f.key
		v := resolve(f.value)
		var p floodgate.Policy
		var err error
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
			p, err = floodgate.ParsePolicy(f.key, v.Value)
		case v.Kind == yaml.MappingNode:
			known := r.fields(v, path, policyFields...)
			if len(known) != len(v.Content)/2 {
				continue // unknown fields reported
			}
			m, ok := r.policyJSON(known, path)
			if !ok {
				continue // fields of the wrong type reported
			}
			var data []byte
			if data, err = json.Marshal(m); err == nil {
				err = json.Unmarshal(data, &p)
			}
			if err == nil {
				p.Name = f.key
				err = p.Validate()
			}
		default:
			r.errorf(v, path, "want a policy: its text form (\"gcra 100/1s burst 10\") or a mapping of its fields, found %s", describe(v))
			continue
		}
		if err != nil {
			r.policyErrors(v, path, err)
			continue
		}
		cfg.Policies = append(cfg.Policies, p)
	}
}

// policyErrors reports a policy's errors at the line of the field each
// names.
func (r *reader) policyErrors(n *yaml.Node, path string, err error) {
	var pes []*floodgate.PolicyError
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			var pe *floodgate.PolicyError
			if errors.As(e, &pe) {
				pes = append(pes, pe)
			}
		}
	} else {
		var pe *floodgate.PolicyError
		if errors.As(err, &pe) {
			pes = append(pes, pe)
		}
	}
	if len(pes) == 0 {
		r.errorf(n, path, "%v", err)
		return
	}
	for _, pe := range pes {
		at := locate(n, pe.Field)
		msg := pe.Allowed // "not a parameter of gcra" reads as it is
		if !strings.HasPrefix(msg, "not ") {
			msg = "want " + msg
		}
		if pe.Value != "" {
			msg = pe.Value + ": " + msg
		}
		field := path
		if pe.Field != "name" {
			field = join(path, pe.Field)
		}
		r.errorf(at, field, "%s", msg)
	}
}

// locate finds the node of a field path such as limits[1].resolution in a
// policy mapping, or returns n itself.
func locate(n *yaml.Node, field string) *yaml.Node {
	cur := resolve(n)
	for _, part := range strings.Split(field, ".") {
		name, idx := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			name = part[:i]
			idx, _ = strconv.Atoi(part[i+1 : len(part)-1])
		}
		if cur == nil || cur.Kind != yaml.MappingNode {
			return n
		}
		var next *yaml.Node
		for i := 0; i+1 < len(cur.Content); i += 2 {
			if cur.Content[i].Value == name {
				next = resolve(cur.Content[i+1])
			}
		}
		if next == nil {
			return cur
		}
		if idx >= 0 {
			if next.Kind != yaml.SequenceNode || idx >= len(next.Content) {
				return next
			}
			next = resolve(next.Content[idx])
		}
		cur = next
	}
	return cur
}

// policyJSON returns a policy mapping's fields as floodgate.Policy's JSON
// form reads them, reporting each field of the wrong type at its line
// (ok is false then).
func (r *reader) policyJSON(fs map[string]field, path string) (m map[string]any, ok bool) {
	m = make(map[string]any, len(fs))
	ok = true
	for _, k := range policyFields {
		f, given := fs[k]
		if !given {
			continue
		}
		var v any
		good := false
		switch fp := path + "." + k; k {
		case "limits":
			v, good = r.limitsJSON(f.value, fp)
		case "max", "limit", "burst":
			v, good = r.number(f.value, fp)
		case "count_denied", "hash_tag":
			v, good = r.boolean(f.value, fp)
		case "track":
			v, good = r.track(f.value, fp)
		default:
			v, good = r.str(f.value, fp)
		}
		m[k] = v
		ok = ok && good
	}
	return m, ok
}

// track reads a policy's track: true, false, or a usage series as its
// text form writes it ("1m for 24h"), which the policy's JSON form checks.
func (r *reader) track(n *yaml.Node, path string) (any, bool) {
	s, ok := r.scalar(n, path, `true, false or a series such as "1m for 24h"`)
	if !ok {
		return nil, false
	}
	switch {
	case s == "true" || s == "false":
		return s == "true", true
	case strings.Contains(s, " for "):
		return s, true
	}
	r.errorf(n, path, `want true, false or a series such as "1m for 24h", found %q`, s)
	return nil, false
}

// limitsJSON returns the limits of a sliding_window or ar1 policy in their
// JSON form.
func (r *reader) limitsJSON(n *yaml.Node, path string) ([]any, bool) {
	items, ok := r.sequence(n, path)
	if !ok {
		return nil, false
	}
	out := make([]any, len(items))
	for i, item := range items {
		ip := path + "[" + strconv.Itoa(i) + "]"
		fs := r.fields(item, ip, "max", "window", "resolution", "decay")
		if fs == nil || len(fs) != len(resolve(item).Content)/2 {
			ok = false
			continue
		}
		m := make(map[string]any, len(fs))
		for _, k := range []string{"max", "window", "resolution", "decay"} {
			f, given := fs[k]
			if !given {
				continue
			}
			var good bool
			if k == "max" || k == "decay" {
				m[k], good = r.number(f.value, ip+"."+k)
			} else {
				m[k], good = r.str(f.value, ip+"."+k)
			}
			ok = ok && good
		}
		out[i] = m
	}
	return out, ok
}

// number reads a scalar holding a JSON number, kept as written so that
// integers beyond 2^53 are not rounded before they are checked.
func (r *reader) number(n *yaml.Node, path string) (json.Number, bool) {
	s, ok := r.scalar(n, path, "a number")
	if !ok {
		return "", false
	}
	var f float64
	if s == "null" || json.Unmarshal([]byte(s), &f) != nil {
		r.errorf(n, path, "want a number, found %q", s)
		return "", false
	}
	return json.Number(s), true
}

func (r *reader) store(n *yaml.Node, s *Store) {
	fs := r.section(n, "store")
	str := func(k string) string {
		if v, ok := fs[k]; ok {
			s, _ := r.str(v.value, "store."+k)
			return s
		}
		return ""
	}
	s.Type, s.URL, s.Master = str("type"), str("url"), str("master")
	s.Username, s.Password, s.Prefix, s.HashKeysSecret = str("username"), str("password"), str("prefix"), str("hash_keys_secret")
	s.SentinelUsername, s.SentinelPassword = str("sentinel_username"), str("sentinel_password")
	if v, ok := fs["addrs"]; ok {
		s.Addrs, _ = r.strings(v.value, "store.addrs")
	}
	if v, ok := fs["tls"]; ok {
		r.storeTLS(v.value, &s.TLS)
	}
	if v, ok := fs["timeout"]; ok {
		if d, ok := r.duration(v.value, "store.timeout", time.Millisecond); ok {
			if d > MaxTimeout {
				r.errorf(v.value, "store.timeout", "want at most %s (a decision that waits longer is no rate limit), found %s", MaxTimeout, d)
			}
			s.Timeout = d
		}
	}
	if v, ok := fs["max_keys"]; ok {
		n, _ := r.integer(v.value, "store.max_keys", -1, math.MaxInt32)
		s.MaxKeys = int(n)
	}
	if v, ok := fs["batching"]; ok {
		s.Batching, _ = r.boolean(v.value, "store.batching")
	}
	if v, ok := fs["over_limit_cache"]; ok {
		s.OverLimitCache, _ = r.boolean(v.value, "store.over_limit_cache")
	}
	if v, ok := fs["read_from_replicas"]; ok {
		s.ReadFromReplicas, _ = r.boolean(v.value, "store.read_from_replicas")
	}
	if v, ok := fs["counters"]; ok {
		s.Counters, _ = r.boolean(v.value, "store.counters")
	}
	if v, ok := fs["clock"]; ok {
		if c, ok := r.str(v.value, "store.clock"); ok {
			if c != "redis" && c != "service" {
				r.errorf(v.value, "store.clock", "want redis (the server's TIME) or service (this process's clock), found %q", c)
			} else {
				s.Clock = c
			}
		}
	}
	if s.Type == "" {
		switch {
		case s.URL != "":
			s.Type = "redis"
		case s.Master != "":
			s.Type = "redis-sentinel"
		case len(s.Addrs) > 0:
			s.Type = "redis-cluster"
		}
	}
	line := func(k string) *yaml.Node {
		if v, ok := fs[k]; ok {
			return v.value
		}
		return n
	}
	// Under a flag's store the file's may leave out its addresses (the
	// flag or variable gives them); what it does give is checked.
	given := r.override != nil
	switch s.Type {
	case "", "memory":
		if s.URL != "" || len(s.Addrs) > 0 || s.Master != "" {
			r.errorf(line("type"), "store.type", "memory takes no url, addrs or master")
		}
	case "redis":
		if s.URL == "" && !given {
			r.errorf(line("type"), "store.url", "type redis needs a url such as redis://host:6379/0")
		} else if s.URL != "" {
			if err := CheckRedisURL(s.URL); err != nil {
				r.errorf(line("url"), "store.url", "%v", err)
			}
		}
	case "redis-cluster":
		if len(s.Addrs) == 0 && !given {
			r.errorf(line("type"), "store.addrs", "type redis-cluster needs addrs: the seed nodes, host:port")
		}
	case "redis-sentinel":
		if (s.Master == "" || len(s.Addrs) == 0) && !given {
			r.errorf(line("type"), "store", "type redis-sentinel needs master (the master's name) and addrs (the sentinels)")
		}
	default:
		r.errorf(line("type"), "store.type", "want memory, redis, redis-cluster or redis-sentinel, found %q", s.Type)
	}
	if s.Type == "redis-cluster" || s.Type == "redis-sentinel" {
		for _, p := range addrProblems(s.Addrs) {
			field := "store.addrs"
			if p.index >= 0 {
				field = fmt.Sprintf("store.addrs[%d]", p.index)
			}
			r.errorf(line("addrs"), field, "%v", p.err)
		}
	}
	// store.max_keys is judged against the files' kind: a memory store's
	// bound stays valid, and unused, when --redis replaces that store (the
	// packaged configuration is written so, for FLOODGATE_REDIS_URL).
	fileType := s.Type
	if o := r.override; o != nil {
		// The files' own kind and addresses were checked above, as
		// written; TLS and replicas are judged against the store in use.
		s.Type, s.URL, s.Addrs, s.Master = o.Type, o.URL, o.Addrs, o.Master
	}
	if s.ReadFromReplicas && s.Type != "redis-cluster" && s.Type != "redis-sentinel" {
		r.errorf(line("read_from_replicas"), "store.read_from_replicas", "applies to types redis-cluster and redis-sentinel only (the masters' replicas), found type %q%s", or(s.Type, "memory"), r.overridden())
	}
	for _, f := range []struct{ k, v string }{{"sentinel_username", s.SentinelUsername}, {"sentinel_password", s.SentinelPassword}} {
		if f.v != "" && s.Type != "redis-sentinel" {
			r.errorf(line(f.k), "store."+f.k, "applies to type redis-sentinel only (the sentinels' own credentials), found type %q%s", or(s.Type, "memory"), r.overridden())
		}
	}
	if s.Counters && s.Clock != "service" {
		r.errorf(line("counters"), "store.counters", "needs store.clock: service (a counter's window is chosen by this process's clock before Redis is asked), found store.clock %s", or(s.Clock, "redis"))
	}
	if s.MaxKeys != 0 && fileType != "memory" && fileType != "" {
		r.errorf(line("max_keys"), "store.max_keys", "applies to the memory store only")
	}
	if t := s.TLS; (t.CAFile != "" || t.CertFile != "" || t.ServerName != "") && !s.UsesTLS() {
		r.errorf(line("tls"), "store.tls", "settings without TLS: set store.tls.enabled, or write the url or addrs rediss://%s", r.overridden())
	}
	if s.UsesTLS() && (s.Type == "memory" || s.Type == "") {
		r.errorf(line("tls"), "store.tls", "the memory store has no connection to encrypt")
	}
	if s.HashKeysSecret != "" && len(s.HashKeysSecret) < 16 {
		r.errorf(line("hash_keys_secret"), "store.hash_keys_secret", "want at least 16 bytes")
	}
	if s.Prefix != "" && strings.ContainsAny(s.Prefix, "{}*?[]\\ ") {
		r.errorf(line("prefix"), "store.prefix", "want letters, digits and _ . - / : only, found %q", s.Prefix)
	}
}

// overridden says, for a message, that the store's kind and addresses
// are those of a flag or variable (StoreOverride.From); "" when they are
// the files'.
func (r *reader) overridden() string {
	if r.override == nil || r.override.From == "" {
		return ""
	}
	return " (the store is " + r.override.From + "'s, not the file's)"
}

// UsesTLS reports whether the store connects over TLS: store.tls.enabled,
// a rediss:// url, or addrs written rediss://host:port.
func (s Store) UsesTLS() bool {
	if s.TLS.Enabled || strings.HasPrefix(s.URL, "rediss://") {
		return true
	}
	for _, a := range s.Addrs {
		if strings.HasPrefix(a, "rediss://") {
			return true
		}
	}
	return false
}

// HostPorts returns the addresses of a cluster's seed nodes or of the
// sentinels as host:port, without the redis:// or rediss:// they may be
// written with.
func (s Store) HostPorts() []string {
	out := make([]string, len(s.Addrs))
	for i, a := range s.Addrs {
		if _, rest, ok := strings.Cut(a, "://"); ok {
			a = rest
		}
		out[i] = a
	}
	return out
}

// CheckAddrs reports what is wrong with the addresses of a cluster's seed
// nodes or of the sentinels, or nil: each is host:port, redis://host:port
// or rediss://host:port (TLS), and either all or none ask for TLS. The
// error names each address at fault by its index.
func CheckAddrs(addrs []string) error {
	if len(addrs) == 0 {
		return errors.New("no address: want host:port, or rediss://host:port for TLS")
	}
	var errs []error
	for _, p := range addrProblems(addrs) {
		if p.index >= 0 {
			errs = append(errs, fmt.Errorf("[%d]: %w", p.index, p.err))
		} else {
			errs = append(errs, p.err)
		}
	}
	return errors.Join(errs...)
}

type addrProblem struct {
	index int // -1: the list as a whole
	err   error
}

func addrProblems(addrs []string) []addrProblem {
	var out []addrProblem
	schemes := map[bool]bool{} // TLS or not
	for i, a := range addrs {
		scheme, rest, found := strings.Cut(a, "://")
		if !found {
			scheme, rest = "", a
		} else if scheme != "redis" && scheme != "rediss" {
			out = append(out, addrProblem{i, fmt.Errorf("want host:port, redis://host:port or rediss://host:port (TLS), found %q", a)})
			continue
		}
		schemes[scheme == "rediss"] = true
		if strings.Contains(rest, "@") {
			// Not quoted: it holds a password.
			out = append(out, addrProblem{i, errors.New("credentials (user:password@) do not go in an address: the password has a setting of its own")})
			continue
		}
		if err := CheckAddr(rest, false); err != nil {
			out = append(out, addrProblem{i, err})
		}
	}
	if len(schemes) > 1 {
		out = append(out, addrProblem{-1, errors.New("give every address rediss:// (TLS) or none")})
	}
	return out
}

// CheckRedisURL reports what is wrong with a Redis URL, or nil: its scheme
// must be redis or rediss, with a host, a port (if given) from 1 to 65535
// and a database number (if given) from 0. The error never holds the
// URL's password.
func CheckRedisURL(u string) error {
	want := "want redis://[user:password@]host:port[/db] or rediss:// for TLS"
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok || (scheme != "redis" && scheme != "rediss") || rest == "" || strings.HasPrefix(rest, "/") {
		return fmt.Errorf("%s, found %q", want, RedactURL(u))
	}
	pu, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("%s, found %q (not a URL)", want, RedactURL(u))
	}
	if p := pu.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s of %q: want a port from 1 to 65535", p, RedactURL(u))
		}
	}
	if db := strings.Trim(pu.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return fmt.Errorf("database %q of %q: want a number from 0 (the server's databases setting bounds it)", db, RedactURL(u))
		}
	}
	return nil
}

// CheckAddr reports what is wrong with a network address, or nil: it must
// be host:port (the host may be empty, as in ":8080", or an IPv6 literal in
// brackets) with a port from 1 to 65535 (0 when zeroPort: any free port,
// as a listener's address may have; the error's example is then a
// listener's, else a Redis server's).
func CheckAddr(a string, zeroPort bool) error {
	example := "127.0.0.1:6379"
	if zeroPort {
		example = "127.0.0.1:8080"
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q: want host:port, such as %s (%v)", a, example, strings.TrimPrefix(err.Error(), "address "+a+": "))
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: want host:port, such as %s", a, example)
	}
	n, err := strconv.Atoi(port)
	low := 1
	if zeroPort {
		low = 0
	}
	if err != nil || n < low || n > 65535 {
		return fmt.Errorf("%q: want a port from %d to 65535, found %q", a, low, port)
	}
	return nil
}

// RedactURL returns u with its password, if any, replaced by ***, for
// messages and listings.
func RedactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			return scheme + "://" + user + ":***@" + rest[at+1:]
		}
	}
	return u
}

func yamlErrorLine(err error) int {
	var n int
	if _, e := fmt.Sscanf(strings.TrimPrefix(err.Error(), "yaml: "), "line %d:", &n); e == nil {
		return n
	}
	return 0
}

func cleanYAMLError(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	if i := strings.Index(s, ": "); i >= 0 && strings.HasPrefix(s, "line ") {
		s = s[i+2:]
	}
	return s
}
