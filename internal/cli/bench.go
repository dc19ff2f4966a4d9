package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/internal/bench"
	"github.com/floodgatehq/floodgate/storekit"
)

// benchPolicyName is the policy's name in the keys the redis target writes.
const benchPolicyName = "bench"

// descriptorFlag collects repeated --descriptor flags.
type descriptorFlag []bench.Entry

func (d *descriptorFlag) String() string {
	var s []string
	for _, e := range *d {
		s = append(s, e.String())
	}
	return strings.Join(s, ",")
}

func (d *descriptorFlag) Set(v string) error {
	e, err := bench.ParseEntry(v)
	if err != nil {
		return err
	}
	*d = append(*d, e)
	return nil
}

type benchFlags struct {
	target                          string
	host, user, password            string
	sentinelUser, sentinelPassword  string
	redisCluster, redisSentinel     string
	port                            int
	url, addr, policyName, domain   string
	descriptor                      descriptorFlag
	policy, algorithm, limit, align string
	window, resolution, minInterval time.Duration
	threshold, burst                int64
	decay                           float64
	concurrency, keys               int
	iterations, cost                int64
	duration, timeout, every        time.Duration
	rate, zipfS                     float64
	dist, progress                  string
	json, redisStats                bool

	// The service's client token and TLS (http, grpc).
	token, caFile, certFile, keyFile string
	grpcTLS                          bool
	// TLS to Redis (redis, and --redis-stats).
	redisTLS                         bool
	redisCAFile, redisCert, redisKey string
	redisServerName                  string
}

const benchAbout = `Sends load to a rate limiter and reports decisions/s, latency (p50 to
p99.9 and max) and accuracy: the cost admitted against what an exact
limiter admits under SPEC.md for the same requests. Admitting more than
SPEC.md allows whatever the requests' timing (the bound) is reported
loudly, with exit status 4.

Targets:
  redis  straight to Redis through the Redis store (--host, --port, or
         --redis-cluster for a Redis Cluster, --redis-sentinel for a master
         behind Sentinel, with --sentinel-password when the sentinels ask
         for one; --user, --password), with the
         policy of --policy, or of --algorithm and its parameters; by default
         the seed's fixed window of --threshold requests per minute per key.
         Keys go under the prefix fg-bench. The seed generator's short flags
         work too: -H host, -p port, -u user, -P password, -c concurrency,
         -i iterations, -t threshold.
  http   a running floodgate serve's POST /v1/check (--url), for its policy
         --policy-name.
  grpc   a running floodgate serve's Envoy API (--addr), for --domain and one
         descriptor of --descriptor entries; the entry given as KEY alone
         takes each request's key as its value.
For http and grpc the policy is the service's, read from GET /v1/policies.
A service with client tokens takes --token (or FLOODGATE_TOKEN); with TLS,
--ca-file, and --cert-file and --key-file for mutual TLS (--grpc-tls dials
its gRPC listener with TLS). A Redis with TLS takes --redis-tls and the
--redis-ca-file, --redis-cert-file and --redis-key-file.

With --target redis the report also says what the run cost Redis: its CPU
time, commands and socket reads a decision, from INFO before and after the
run (every client's work counts). --redis-stats reads the same of the
service's Redis for http and grpc.

Without --keys every worker has a key of its own, as the seed's load
generator did. Closed loop by default; --rate sends arrivals at a fixed
rate (open loop) and measures each request's latency from its scheduled
time. Ctrl-C stops the run and prints the summary so far. docs/bench.md is
the manual, with the accuracy formula of every algorithm and the --json
schema.

Exit status: 0 done, 1 error (or every request failed), 2 usage error,
4 over-admission beyond the bound.`

func (e *environ) bench(args []string) int {
	var f benchFlags
	fs := e.flags("bench", "[flags]", benchAbout)
	fs.StringVar(&f.target, "target", "redis", "the `target` to load: redis, http or grpc")
	fs.StringVar(&f.host, "host", "127.0.0.1", "redis (and --redis-stats): the Redis `host`")
	fs.IntVar(&f.port, "port", 6379, "redis (and --redis-stats): the Redis `port`")
	fs.StringVar(&f.user, "user", "", "redis (and --redis-stats): the ACL `user` to authenticate as (default: the default user)")
	fs.StringVar(&f.password, "password", "", "redis (and --redis-stats): the `password` to authenticate with")
	fs.StringVar(&f.redisCluster, "redis-cluster", "", "redis (and --redis-stats): a Redis Cluster's seed `nodes`, host:port,host:port… (rediss://host:port for TLS, as serve takes them), instead of --host and --port")
	fs.StringVar(&f.redisSentinel, "redis-sentinel", "", "redis (and --redis-stats): the master `MASTER@host:port,host:port…` that these Redis Sentinels name (rediss://host:port for TLS, as serve takes them), instead of --host and --port")
	fs.StringVar(&f.sentinelUser, "sentinel-user", "", "with --redis-sentinel: the sentinels' own ACL `user`, when they have one")
	fs.StringVar(&f.sentinelPassword, "sentinel-password", "", "with --redis-sentinel: the sentinels' own `password` (their requirepass), when they ask for one; --password is the master's")
	fs.BoolVar(&f.redisTLS, "redis-tls", false, "redis (and --redis-stats): dial Redis with TLS, verified against the system's CAs or --redis-ca-file (on when a --redis-ca-file or --redis-cert-file is given)")
	fs.StringVar(&f.redisCAFile, "redis-ca-file", "", "redis (and --redis-stats): CA certificates (PEM `file`) to verify Redis's certificate with, instead of the system's")
	fs.StringVar(&f.redisCert, "redis-cert-file", "", "redis (and --redis-stats): client certificate (PEM `file`) for a Redis with tls-auth-clients")
	fs.StringVar(&f.redisKey, "redis-key-file", "", "redis (and --redis-stats): the client certificate's private key (PEM `file`)")
	fs.StringVar(&f.redisServerName, "redis-server-name", "", "redis (and --redis-stats): the `name` Redis's TLS certificate carries, when it is not the host dialed (as serve's store.tls.server_name)")
	fs.StringVar(&f.url, "url", "", "http, grpc: the service's HTTP `address` (default "+defaultURL+")")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8081", "grpc: the service's gRPC `address`")
	fs.BoolVar(&f.grpcTLS, "grpc-tls", false, "grpc: dial the service's gRPC listener with TLS (its listen.grpc_tls), verified against the system's CAs or --ca-file")
	fs.StringVar(&f.token, "token", "", "http, grpc: the client `token` to send, for a service with clients.tokens_file (default from "+EnvToken+"; 16+ characters)")
	fs.StringVar(&f.caFile, "ca-file", "", "http, grpc: CA certificates (PEM `file`) to verify an https:// service or --grpc-tls with, instead of the system's")
	fs.StringVar(&f.certFile, "cert-file", "", "http, grpc: client certificate (PEM `file`) for a listener with a client_ca (mutual TLS)")
	fs.StringVar(&f.keyFile, "key-file", "", "http, grpc: the client certificate's private key (PEM `file`)")
	fs.StringVar(&f.policyName, "policy-name", "", "http: the service's `policy` to check")
	fs.StringVar(&f.domain, "domain", "", "grpc: the Envoy `domain`")
	fs.Var(&f.descriptor, "descriptor", "grpc: a descriptor `entry`, KEY=VALUE, or KEY for the request's key (repeat for several entries)")
	fs.StringVar(&f.policy, "policy", "", "redis: the policy in its text `form`, such as \"gcra 100/1s burst 20\"")
	fs.StringVar(&f.algorithm, "algorithm", "", "redis: the `algorithm` (fixed_window, gcra, token_bucket, sliding_window, sliding_log, ar1), with the parameters below (default fixed_window)")
	fs.Int64Var(&f.threshold, "threshold", 0, "redis: allowed `requests` per minute per key, the seed's fixed window (default 100)")
	fs.StringVar(&f.limit, "limit", "", "redis: the algorithm's `count`: max, limit, rate count (default 100)")
	fs.DurationVar(&f.window, "window", 0, "redis: the algorithm's `duration`: window, interval, rate period, ar1's resolution (default 1m)")
	fs.Int64Var(&f.burst, "burst", 0, "redis: `burst` (gcra, token_bucket)")
	fs.DurationVar(&f.resolution, "resolution", 0, "redis: bucket width (sliding_window)")
	fs.DurationVar(&f.minInterval, "min-interval", 0, "redis: least gap between requests of a key (sliding_log)")
	fs.Float64Var(&f.decay, "decay", 0, "redis: `decay` factor (ar1)")
	fs.StringVar(&f.align, "align", "", "redis: window `alignment`, epoch or first (fixed_window)")
	fs.IntVar(&f.concurrency, "concurrency", 4, "`workers`, and so the most requests in flight")
	fs.Int64Var(&f.iterations, "iterations", 0, "`requests` per worker (open loop: iterations×concurrency arrivals); 0: until --duration")
	fs.DurationVar(&f.duration, "duration", 0, "how long to send requests (default 10s when --iterations is 0)")
	fs.Float64Var(&f.rate, "rate", 0, "open loop: `arrivals` per second, latency measured from each one's scheduled time (0: closed loop)")
	fs.IntVar(&f.keys, "keys", 0, "number of distinct `keys` (0: one per worker)")
	fs.StringVar(&f.dist, "dist", "", "the `distribution` of requests among --keys: uniform or zipf (default uniform)")
	fs.Float64Var(&f.zipfS, "zipf-s", 1.1, "the Zipf `exponent`, above 1")
	fs.Int64Var(&f.cost, "cost", 1, "the `units` each request costs")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long one request may take")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON (docs/bench.md gives the schema)")
	fs.BoolVar(&f.redisStats, "redis-stats", false, "report what the run cost Redis (CPU, commands and reads a decision, from its INFO before and after the run): on by default with --target redis (--redis-stats=false turns it off); with http or grpc, of the service's Redis, named as for the redis target (--host and --port, --redis-cluster or --redis-sentinel with --sentinel-user and --sentinel-password; --user, --password; --redis-tls, its files and --redis-server-name)")
	fs.StringVar(&f.progress, "progress", "auto", "progress `mode` on stderr: auto (a line redrawn on a terminal, else plain lines), tty, lines or off")
	fs.DurationVar(&f.every, "progress-every", time.Second, "how often a progress line is printed when not on a terminal")
	// The seed generator's short flags (its --help: -p, -u, -P, -c, -i,
	// -t; -H for --host, which it left without one, -h being help).
	for short, long := range map[string]string{"H": "host", "p": "port", "u": "user", "P": "password",
		"c": "concurrency", "i": "iterations", "t": "threshold"} {
		alias(fs, short, long)
	}
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return e.usageErr("bench takes no arguments, found %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[longName(fl)] = true })

	cfg, code := e.benchConfig(&f, set)
	if code >= 0 {
		return code
	}
	target, info, policy, notes, code := e.benchTarget(&f, set, cfg.Concurrency)
	if code >= 0 {
		return code
	}
	defer target.Close()
	cfg.Target, cfg.Info, cfg.Policy = target, info, policy
	server, closeServer, note, code := e.benchServer(&f, set, target)
	if code >= 0 {
		return code
	}
	if closeServer != nil {
		defer closeServer.Close()
	}
	if note != "" {
		notes = append(notes, note)
	}
	cfg.Server = server
	if cfg.Distribution == bench.PerWorker && info.Kind == "grpc" && !takesKey(f.descriptor) {
		return e.usageErr("--descriptor: no entry takes the request's key (give one as KEY alone), so every request counts under one key: add --keys 1")
	}

	rep, err := bench.Run(e.ctx, cfg)
	if rep == nil {
		return e.errorf("bench: %v", err)
	}
	rep.Notes = append(notes, rep.Notes...)
	if f.json {
		if werr := rep.WriteJSON(e.stdout); werr != nil {
			return e.errorf("bench: %v", werr)
		}
	} else {
		rep.WriteText(e.stdout)
	}
	if err != nil {
		return e.errorf("bench: %v", err)
	}
	if rep.Accuracy != nil && rep.Accuracy.Over() {
		if f.json {
			fmt.Fprint(e.stderr, bench.OverAdmissionMessage(rep.Accuracy))
		}
		return 4
	}
	return 0
}

// discardRedisLog silences go-redis's own log.
type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

func takesKey(es []bench.Entry) bool {
	for _, e := range es {
		if e.FromKey {
			return true
		}
	}
	return false
}

// usageErr prints a usage error of bench and returns exit status 2.
func (e *environ) usageErr(format string, args ...any) int {
	return e.badUsage("bench", format, args...)
}

// benchConfig checks the workload flags and builds the run's Config
// (without its target).
func (e *environ) benchConfig(f *benchFlags, set map[string]bool) (bench.Config, int) {
	cfg := bench.Config{
		Concurrency: f.concurrency, Iterations: f.iterations, Duration: f.duration, Rate: f.rate,
		Cost: f.cost, Timeout: f.timeout, ZipfS: f.zipfS, ProgressEvery: f.every,
	}
	switch {
	case f.concurrency < 1:
		return cfg, e.usageErr("--concurrency %d: want at least 1", f.concurrency)
	case f.iterations < 0:
		return cfg, e.usageErr("--iterations %d: want 0 (until --duration) or more", f.iterations)
	case f.duration < 0:
		return cfg, e.usageErr("--duration %s: want a positive duration", f.duration)
	case f.rate < 0 || math.IsNaN(f.rate) || math.IsInf(f.rate, 0):
		return cfg, e.usageErr("--rate %v: want arrivals per second above 0, or 0 for closed loop", f.rate)
	case f.cost < 1 || f.cost > floodgate.MaxCost:
		return cfg, e.usageErr("--cost %d: want 1 to 2^53-1", f.cost)
	case f.timeout <= 0:
		return cfg, e.usageErr("--timeout %s: want a positive duration", f.timeout)
	case f.every <= 0:
		return cfg, e.usageErr("--progress-every %s: want a positive duration", f.every)
	case set["keys"] && f.keys < 1:
		return cfg, e.usageErr("--keys %d: want at least 1 (or leave it out for one key per worker)", f.keys)
	case set["dist"] && !set["keys"]:
		return cfg, e.usageErr("--dist %s: needs --keys (without it every worker has a key of its own)", f.dist)
	}
	if f.iterations == 0 && f.duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if set["keys"] {
		cfg.Keys, cfg.Distribution = f.keys, bench.Uniform
		if f.dist != "" {
			d, err := bench.ParseDistribution(f.dist)
			if err != nil {
				return cfg, e.usageErr("--dist %v", err)
			}
			cfg.Distribution = d
		}
	}
	if cfg.Distribution == bench.Zipf && !(f.zipfS > 1) {
		return cfg, e.usageErr("--zipf-s %v: want an exponent above 1", f.zipfS)
	}
	switch f.progress {
	case "auto":
		cfg.Progress, cfg.ProgressMode = e.stderr, bench.ProgressLines
		if bench.IsTerminal(e.stderr) {
			cfg.ProgressMode = bench.ProgressTTY
		}
	case "tty":
		cfg.Progress, cfg.ProgressMode = e.stderr, bench.ProgressTTY
	case "lines":
		cfg.Progress, cfg.ProgressMode = e.stderr, bench.ProgressLines
	case "off":
	default:
		return cfg, e.usageErr("--progress %q: want auto, tty, lines or off", f.progress)
	}
	return cfg, -1
}

// redisConn are the flags that name a Redis: the redis target's, or the
// service's with --redis-stats.
var redisConn = []string{"host", "port", "user", "password", "redis-cluster", "redis-sentinel",
	"sentinel-user", "sentinel-password", "redis-tls", "redis-ca-file", "redis-cert-file", "redis-key-file", "redis-server-name"}

// serviceAccess are the flags of the service's token and TLS.
var serviceAccess = []string{"token", "ca-file", "cert-file", "key-file", "grpc-tls"}

// access returns how the http and grpc targets reach the service: the
// token of --token (or FLOODGATE_TOKEN) and the TLS of --ca-file,
// --cert-file, --key-file and --grpc-tls.
func (e *environ) access(f *benchFlags) (bench.Access, error) {
	token, err := e.bearer(&clientFlags{token: f.token, tokenEnvs: []string{EnvToken}})
	if err != nil {
		return bench.Access{}, err
	}
	// The files are for TLS: refuse them where nothing speaks it, rather
	// than ignore them.
	if url := e.serviceURL(f); (f.caFile != "" || f.certFile != "") && !f.grpcTLS && !strings.HasPrefix(strings.TrimSpace(url), "https://") {
		if f.target == "grpc" {
			return bench.Access{}, fmt.Errorf("--ca-file and --cert-file are for TLS, which neither the gRPC connection (add --grpc-tls) nor the service's URL %s (write https://) speaks", url)
		}
		return bench.Access{}, fmt.Errorf("--ca-file and --cert-file are for TLS, which the service's URL %s does not speak: write https://, or drop them", url)
	}
	cfg, err := tlsFiles("", f.caFile, f.certFile, f.keyFile)
	return bench.Access{Token: token, TLS: cfg, GRPCTLS: f.grpcTLS}, err
}

// redisPolicy are the flags that only the redis target reads.
var redisPolicy = []string{"policy", "algorithm", "threshold", "limit", "window",
	"burst", "resolution", "min-interval", "decay", "align"}

// benchServer returns the reader of Redis's counters for the run's Redis
// figures (nil: none) and what to close after the run: the redis
// target's own client, unless --redis-stats=false; with http or grpc,
// the Redis --redis-stats and the connection flags name. A redis target
// whose user may not run INFO runs without the figures, with a note,
// unless --redis-stats was asked for.
func (e *environ) benchServer(f *benchFlags, set map[string]bool, target bench.Target) (bench.ServerStats, io.Closer, string, int) {
	if f.target == "redis" {
		if set["redis-stats"] && !f.redisStats {
			return nil, nil, "", -1
		}
		st, err := target.(*bench.RedisTarget).Stats(e.ctx)
		if err != nil {
			if set["redis-stats"] {
				return nil, nil, "", e.errorf("bench: %v", err)
			}
			return nil, nil, fmt.Sprintf("Redis's figures are missing: %v", err), -1
		}
		return st, nil, "", -1
	}
	if !f.redisStats {
		return nil, nil, "", -1
	}
	o, code := e.redisOptions(f, set, 1)
	if code >= 0 {
		return nil, nil, "", code
	}
	redis.SetLogger(discardRedisLog{})
	st, c, err := bench.OpenRedisStats(e.ctx, o)
	if err != nil {
		return nil, nil, "", e.errorf("bench: --redis-stats: %v", e.redisMismatch(o, err))
	}
	return st, c, "", -1
}

// redisOptions reads the flags that name a Redis: --host and --port,
// --redis-cluster or --redis-sentinel; --user, --password; --redis-tls and
// its files. pool is the connections' pool size (a Cluster's: per master).
func (e *environ) redisOptions(f *benchFlags, set map[string]bool, pool int) (bench.RedisOptions, int) {
	o, code := e.redisAddress(f, set, pool)
	if code >= 0 || !set["redis-server-name"] {
		return o, code
	}
	switch {
	case f.redisServerName == "":
		return o, e.usageErr("--redis-server-name: want the host name Redis's TLS certificate carries, found none")
	case o.TLS == nil:
		return o, e.usageErr("--redis-server-name %q is the name in Redis's TLS certificate: add --redis-tls (or write the addresses rediss://)", f.redisServerName)
	}
	o.TLS.ServerName = f.redisServerName
	return o, -1
}

// redisAddress builds the RedisOptions of every flag but
// --redis-server-name.
func (e *environ) redisAddress(f *benchFlags, set map[string]bool, pool int) (bench.RedisOptions, int) {
	o := bench.RedisOptions{Username: f.user, Password: f.password, Timeout: f.timeout, PoolSize: pool}
	cfg, err := tlsFiles("redis-", f.redisCAFile, f.redisCert, f.redisKey)
	if err != nil {
		return o, e.usageErr("%v", err)
	}
	switch {
	case cfg != nil && set["redis-tls"] && !f.redisTLS:
		return o, e.usageErr("--redis-tls=false with --redis-ca-file or --redis-cert-file: those are for TLS; drop them, or --redis-tls=false")
	case cfg == nil && f.redisTLS:
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	o.TLS = cfg
	switch {
	case (set["sentinel-user"] || set["sentinel-password"]) && !set["redis-sentinel"]:
		return o, e.usageErr("--sentinel-user and --sentinel-password are the sentinels' own: give them with --redis-sentinel")
	case set["sentinel-user"] && f.sentinelPassword == "":
		return o, e.usageErr("--sentinel-user %q needs --sentinel-password", f.sentinelUser)
	case set["redis-cluster"] && set["redis-sentinel"]:
		return o, e.usageErr("give --redis-cluster or --redis-sentinel, not both")
	case set["redis-cluster"] && (set["host"] || set["port"]):
		return o, e.usageErr("give --redis-cluster, or --host and --port, not both")
	case set["redis-sentinel"] && (set["host"] || set["port"]):
		return o, e.usageErr("give --redis-sentinel, or --host and --port, not both")
	case set["redis-cluster"]:
		addrs := splitAddrs(f.redisCluster)
		if strings.Contains(f.redisCluster, "@") { // not repeated: it holds a password
			return o, e.usageErr("--redis-cluster: credentials do not go in the addresses: give them with --user and --password")
		}
		if err := checkAddrs(addrs); err != nil {
			return o, e.usageErr("--redis-cluster %q: %v", f.redisCluster, err)
		}
		o.ClusterAddrs = config.Store{Addrs: addrs}.HostPorts()
		return o, e.schemeTLS(&o, addrs, set, f)
	case set["redis-sentinel"]:
		master, addrs, err := parseSentinel(f.redisSentinel)
		switch {
		case errors.Is(err, errCredentialsInAddrs):
			return o, e.usageErr("--redis-sentinel: %v: give the sentinels' with --sentinel-user and --sentinel-password, the master's with --user and --password", err)
		case err != nil:
			return o, e.usageErr("--redis-sentinel %v", err)
		}
		o.SentinelMaster, o.SentinelAddrs = master, config.Store{Addrs: addrs}.HostPorts()
		o.SentinelUsername, o.SentinelPassword = f.sentinelUser, f.sentinelPassword
		return o, e.schemeTLS(&o, addrs, set, f)
	}
	if f.port < 1 || f.port > 65535 {
		return o, e.usageErr("--port %d: want 1 to 65535", f.port)
	}
	if f.host == "" {
		return o, e.usageErr("--host: want a host name or address")
	}
	o.Addr = net.JoinHostPort(f.host, strconv.Itoa(f.port))
	return o, -1
}

// schemeTLS turns TLS on for addresses written rediss://host:port, as
// serve does, unless --redis-tls=false says otherwise (a usage error).
func (e *environ) schemeTLS(o *bench.RedisOptions, addrs []string, set map[string]bool, f *benchFlags) int {
	if !(config.Store{Addrs: addrs}).UsesTLS() {
		return -1
	}
	if set["redis-tls"] && !f.redisTLS {
		return e.usageErr("--redis-tls=false with rediss:// addresses: write them host:port, or drop --redis-tls=false")
	}
	if o.TLS == nil {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return -1
}

// redisMismatch returns err, a failed first contact with the Redis of o,
// or in its place one that says so when that Redis (its first seed node)
// speaks the other protocol than the one dialed: TLS, or plaintext.
func (e *environ) redisMismatch(o bench.RedisOptions, err error) error {
	addr := o.Addr
	switch {
	case o.SentinelMaster != "":
		addr = o.SentinelAddrs[0]
		if u := unknownMaster(e.ctx, &redis.FailoverOptions{MasterName: o.SentinelMaster, SentinelAddrs: o.SentinelAddrs, TLSConfig: o.TLS,
			SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword}); u != nil {
			return fmt.Errorf("--redis-sentinel: %w", u)
		}
	case addr == "":
		addr = o.ClusterAddrs[0]
	}
	switch {
	case !otherProtocol(e.ctx, addr, o.TLS != nil):
		return err
	case o.TLS != nil:
		return fmt.Errorf("Redis at %s answers without TLS: drop --redis-tls (and --redis-ca-file, --redis-cert-file, --redis-key-file)", addr)
	}
	return fmt.Errorf("Redis at %s speaks TLS: add --redis-tls (and --redis-ca-file if its CA is not the system's)", addr)
}

// benchTarget opens the target the flags name and finds its policy.
func (e *environ) benchTarget(f *benchFlags, set map[string]bool, conc int) (bench.Target, bench.TargetInfo, *floodgate.Policy, []string, int) {
	var info bench.TargetInfo
	notes := []string{}
	only := func(target string, names ...string) int {
		for _, n := range names {
			if set[n] {
				return e.usageErr("--%s applies to another target, not --target %s", n, target)
			}
		}
		if target == "redis" || f.redisStats {
			return -1
		}
		for _, n := range redisConn {
			if set[n] {
				return e.usageErr("--%s names the Redis of --target redis, or the service's Redis with --redis-stats: add --redis-stats to read what the run costs it", n)
			}
		}
		return -1
	}
	switch f.target {
	case "redis":
		if code := only("redis", append(serviceAccess, "url", "addr", "policy-name", "domain", "descriptor")...); code >= 0 {
			return nil, info, nil, nil, code
		}
		p, code := e.benchPolicy(f, set)
		if code >= 0 {
			return nil, info, nil, nil, code
		}
		o, code := e.redisOptions(f, set, conc+1)
		if code >= 0 {
			return nil, info, nil, nil, code
		}
		// go-redis logs failed dials itself; the error below says it all.
		redis.SetLogger(discardRedisLog{})
		t, err := bench.OpenRedis(e.ctx, o, p)
		if err != nil {
			return nil, info, nil, nil, e.errorf("bench: %v", e.redisMismatch(o, err))
		}
		addr := o.Addr
		switch {
		case o.SentinelMaster != "":
			addr = "sentinel " + o.SentinelMaster + "@" + strings.Join(o.SentinelAddrs, ",")
		case addr == "":
			addr = "cluster " + strings.Join(o.ClusterAddrs, ",")
		}
		info = bench.TargetInfo{Kind: "redis", Address: addr, PolicyName: p.Name, Policy: p.String()}
		return t, info, p, notes, -1

	case "http":
		if code := only("http", append(redisPolicy, "addr", "domain", "descriptor", "grpc-tls")...); code >= 0 {
			return nil, info, nil, nil, code
		}
		if f.policyName == "" {
			return nil, info, nil, nil, e.usageErr("--policy-name: name the service's policy to check (GET /v1/policies lists them)")
		}
		acc, err := e.access(f)
		if err != nil {
			return nil, info, nil, nil, e.usageErr("%v", err)
		}
		base := e.serviceURL(f)
		svc, err := bench.FetchService(e.ctx, base, acc)
		if err != nil {
			return nil, info, nil, nil, e.errorf("bench: %v", err)
		}
		p, err := svc.Policy(f.policyName)
		if err != nil {
			return nil, info, nil, nil, e.errorf("bench: --policy-name: %v", err)
		}
		t, err := bench.NewHTTP(base, f.policyName, conc, acc)
		if err != nil {
			return nil, info, nil, nil, e.usageErr("--url: %v", err)
		}
		info = bench.TargetInfo{Kind: "http", Address: base, PolicyName: p.Name, Policy: p.String()}
		return t, info, p, notes, -1

	case "grpc":
		if code := only("grpc", append(redisPolicy, "policy-name")...); code >= 0 {
			return nil, info, nil, nil, code
		}
		if f.domain == "" {
			return nil, info, nil, nil, e.usageErr("--domain: name the Envoy domain (GET /v1/policies lists them)")
		}
		if len(f.descriptor) == 0 {
			return nil, info, nil, nil, e.usageErr("--descriptor: give the descriptor's entries, KEY=VALUE or KEY for the request's key")
		}
		if n := countKeyEntries(f.descriptor); n > 1 {
			return nil, info, nil, nil, e.usageErr("--descriptor: %d entries take the request's key; give at most one as KEY alone", n)
		}
		info = bench.TargetInfo{Kind: "grpc", Address: f.addr, Domain: f.domain}
		for _, en := range f.descriptor {
			info.Descriptor = append(info.Descriptor, en.String())
		}
		acc, err := e.access(f)
		if err != nil {
			return nil, info, nil, nil, e.usageErr("%v", err)
		}
		var policy *floodgate.Policy
		base := e.serviceURL(f)
		rule, err := bench.FetchRule(e.ctx, base, f.domain, f.descriptor, acc)
		if errors.Is(err, bench.ErrUnreachable) {
			notes = append(notes, fmt.Sprintf("accuracy unknown: could not ask the service which rule applies (%v); give --url", err))
		} else {
			if err != nil {
				return nil, info, nil, nil, e.errorf("bench: %v", err)
			}
			switch {
			case rule.Unlimited:
				notes = append(notes, "the rule "+rule.Path+" is unlimited: every request passes")
			default:
				p, err := floodgate.ParsePolicy(rule.Policy, rule.Text)
				if err != nil {
					return nil, info, nil, nil, e.errorf("bench: the rule %s's policy %q: %v", rule.Path, rule.Text, err)
				}
				policy = &p
				info.PolicyName, info.Policy = p.Name, p.String()
			}
			if rule.Shadow {
				notes = append(notes, "the rule "+rule.Path+" is in shadow mode: the service answers OK to requests its policy denies")
			}
			if rule.Quota {
				notes = append(notes, "the rule "+rule.Path+" is in quota mode: alone, its denials do not make the answer OVER_LIMIT")
			}
		}
		t, err := bench.NewGRPC(f.addr, f.domain, f.descriptor, acc)
		if err != nil {
			return nil, info, nil, nil, e.usageErr("--addr %s: %v", f.addr, err)
		}
		return t, info, policy, notes, -1
	}
	return nil, info, nil, nil, e.usageErr("--target %q: want redis, http or grpc", f.target)
}

func countKeyEntries(es []bench.Entry) int {
	n := 0
	for _, e := range es {
		if e.FromKey {
			n++
		}
	}
	return n
}

func (e *environ) serviceURL(f *benchFlags) string {
	if u := e.env(f.url, EnvURL); u != "" {
		return u
	}
	return defaultURL
}

// benchPolicy builds the redis target's policy from --policy, or from
// --algorithm (or --threshold) and the parameters.
func (e *environ) benchPolicy(f *benchFlags, set map[string]bool) (*floodgate.Policy, int) {
	params := []string{"algorithm", "threshold", "limit", "window", "burst", "resolution", "min-interval", "decay", "align"}
	if set["policy"] {
		for _, n := range params {
			if set[n] {
				return nil, e.usageErr("give --policy or --%s and the other parameters, not both", n)
			}
		}
		p, err := floodgate.ParsePolicy(benchPolicyName, f.policy)
		if err != nil {
			return nil, e.usageErr("--policy %q: %v", f.policy, err)
		}
		return &p, -1
	}
	alg := f.algorithm
	if alg == "" {
		alg = string(floodgate.FixedWindow)
	}
	if !slices.Contains(storekit.Algorithms(), floodgate.Algorithm(alg)) {
		var names []string
		for _, a := range storekit.Algorithms() {
			names = append(names, string(a))
		}
		return nil, e.usageErr("--algorithm %q: want one of %s", alg, strings.Join(names, ", "))
	}
	limit, window := "100", time.Minute
	if set["threshold"] {
		if set["limit"] || set["window"] {
			return nil, e.usageErr("--threshold is per minute: give --threshold, or --limit with --window, not both")
		}
		if f.threshold < 0 {
			return nil, e.usageErr("--threshold %d: want allowed requests per minute, 0 or more", f.threshold)
		}
		limit = strconv.FormatInt(f.threshold, 10)
	}
	if set["limit"] {
		limit = f.limit
	}
	if set["window"] {
		window = f.window
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s", alg, limit, window)
	if set["burst"] {
		fmt.Fprintf(&b, " burst %d", f.burst)
	}
	if set["resolution"] {
		fmt.Fprintf(&b, " resolution %s", f.resolution)
	}
	if set["min-interval"] {
		fmt.Fprintf(&b, " min_interval %s", f.minInterval)
	}
	if set["decay"] {
		fmt.Fprintf(&b, " decay %s", strconv.FormatFloat(f.decay, 'g', -1, 64))
	}
	if set["align"] {
		fmt.Fprintf(&b, " align %s", f.align)
	}
	p, err := floodgate.ParsePolicy(benchPolicyName, b.String())
	if err != nil {
		return nil, e.usageErr("the policy of --algorithm and its parameters (%q): %v", b.String(), err)
	}
	return &p, -1
}
