package cli

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/internal/auth"
	"github.com/floodgatehq/floodgate/internal/buildinfo"
	"github.com/floodgatehq/floodgate/internal/connlimit"
	"github.com/floodgatehq/floodgate/internal/telemetry"
	"github.com/floodgatehq/floodgate/internal/tracing"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/transport/envoyrls"
	"github.com/floodgatehq/floodgate/transport/httpapi"
	"github.com/floodgatehq/floodgate/transport/reqlog"
)

type serveFlags struct {
	config, http, grpc, redisURL, redisCluster, redisSentinel string
	logFormat, logLevel                                       string
	watch                                                     time.Duration
	drain                                                     time.Duration
	storeWait                                                 time.Duration
	startDegraded, readReplicas                               bool
	shutdownDelay                                             time.Duration
	dashboard                                                 bool
	accessLogSample                                           float64
	debugAddr                                                 string
	adminTokenFile                                            string
}

// serveFlagSet returns serve's flags, set into f (docs/operations.md's
// table of them is generated from it).
func (e *environ) serveFlagSet(f *serveFlags) *flag.FlagSet {
	fs := e.flags("serve", "[flags]",
		"Runs the rate limit service: the HTTP/JSON API and Envoy's gRPC rate limit API.\n"+
			"With no flags: the memory store, HTTP on 127.0.0.1:8080, gRPC on 127.0.0.1:8081, and a\n"+
			"small built-in set of example policies. --redis, --redis-cluster or --redis-sentinel\n"+
			"share state between replicas. SIGHUP, or a change of the configuration files (or of\n"+
			"the token files they name), reloads the configuration (an invalid one is refused and\n"+
			"the old one kept); SIGTERM turns /readyz to 503, keeps serving for --shutdown-delay,\n"+
			"then drains requests in flight and stops. `floodgate config defaults` prints every\n"+
			"configuration field at its default, commented.\n\n"+
			"Admin endpoints (/v1/reset, /v1/keys, /v1/stats) need the admin token; with none they\n"+
			"answer 403 (admin.allow_loopback: true opens them to loopback callers). The decision\n"+
			"APIs take anyone unless clients.tokens_file or a listener's client_ca is set; serve\n"+
			"warns at start about every listener beyond loopback that takes anyone or has no TLS\n"+
			"(listen.http_tls, listen.grpc_tls). docs/operations.md, Security, says what to set.")
	fs.StringVar(&f.config, "config", "", "configuration `file or directory` (YAML; Envoy domain files load as they are)")
	fs.StringVar(&f.http, "http", "", "HTTP listen `address` (default from the configuration, else 127.0.0.1:8080)")
	fs.StringVar(&f.grpc, "grpc", "", "gRPC listen `address` (default from the configuration, else 127.0.0.1:8081)")
	fs.StringVar(&f.redisURL, "redis", "", "Redis `URL`: redis://[user:password@]host:port[/db], rediss:// for TLS")
	fs.StringVar(&f.redisCluster, "redis-cluster", "", "Redis Cluster seed `nodes`, comma separated host:port (rediss://host:port for TLS)")
	fs.StringVar(&f.redisSentinel, "redis-sentinel", "", "Redis Sentinel: `MASTER@host:port,host:port` (the sentinels; rediss://host:port for TLS; a password of their own: FLOODGATE_REDIS_SENTINEL_PASSWORD)")
	fs.BoolVar(&f.readReplicas, "redis-read-from-replicas", false, "with a Redis Cluster or Sentinel: send peeks (read-only) to the replicas too, adds to the masters; a\nreplica lags, so a peek may see a count from a moment ago (store.read_from_replicas)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.DurationVar(&f.watch, "watch", 2*time.Second, "how often to look for changed configuration files (0: only on SIGHUP)")
	fs.DurationVar(&f.drain, "drain", 15*time.Second, "how long SIGTERM waits for requests in flight")
	fs.DurationVar(&f.storeWait, "store-wait", 10*time.Second, "how long to wait at start for a Redis store that does not answer yet, or refuses writes (a replica, a full server), to decide; then exit, unless --start-degraded")
	fs.BoolVar(&f.startDegraded, "start-degraded", false, "start even if Redis cannot decide within --store-wait: unready (/readyz 503), deciding by the failure mode until it can")
	fs.Float64Var(&f.accessLogSample, "access-log-sample", 0, "share of requests written to the access log at level info, 0 to 1 (keys as salted digests, never as they came); every request is logged at level debug")
	fs.StringVar(&f.debugAddr, "debug-addr", "", "serve net/http/pprof on this `address` (off by default; keep it on loopback)")
	fs.DurationVar(&f.shutdownDelay, "shutdown-delay", 0, "on SIGTERM, answer /readyz with 503 (gRPC health NOT_SERVING) at once but keep serving\nfor this long before draining, so that load balancers stop sending first (Kubernetes: the time\nendpoints take to drop the pod)")
	fs.BoolVar(&f.dashboard, "dashboard", true, "serve the live dashboard at /dashboard on the HTTP listener (--dashboard=false: leave it out)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "read the admin token from this `file` (16+ characters; re-read when it changes)")
	return fs
}

func (e *environ) serve(args []string) int {
	var f serveFlags
	fs := e.serveFlagSet(&f)
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return e.errorf("serve takes no arguments, found %q", fs.Arg(0))
	}
	if f.accessLogSample < 0 || f.accessLogSample > 1 {
		return e.badUsage("serve", "--access-log-sample %v: want a share from 0 to 1", f.accessLogSample)
	}
	if f.debugAddr != "" {
		if err := config.CheckAddr(f.debugAddr, true); err != nil {
			return e.badUsage("serve", "--debug-addr: %v", err)
		}
	}
	log, err := newLogger(e.stderr, f.logFormat, f.logLevel)
	if err != nil {
		return e.errorf("%v", err)
	}
	path := e.env(f.config, EnvConfig)
	cfg, err := e.loadConfig(path, f)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return 1
	}
	// The files as they were read, for --watch: a change while the
	// service starts (waiting for its store, say) is a change to apply.
	return e.run(cfg, path, f, log, fingerprint(watchedFiles(path, cfg)...))
}

// storeOverride returns the store that --redis, --redis-cluster or
// --redis-sentinel (or their variables) name, checked, in place of the
// files'; nil when none is given.
func (e *environ) storeOverride(f serveFlags) (*config.StoreOverride, error) {
	redisURL, cluster, sentinel := e.env(f.redisURL, EnvRedisURL), e.env(f.redisCluster, EnvRedisCluster), e.env(f.redisSentinel, EnvRedisSentinel)
	// from names the flag, or else the variable, a store came from.
	from := func(flagValue, flag, env string) string {
		if flagValue != "" {
			return flag
		}
		return env
	}
	given := 0
	for _, v := range []string{redisURL, cluster, sentinel} {
		if v != "" {
			given++
		}
	}
	if given > 1 {
		return nil, errors.New("floodgate: give one of --redis, --redis-cluster and --redis-sentinel")
	}
	switch {
	case redisURL != "":
		if err := config.CheckRedisURL(redisURL); err != nil {
			return nil, fmt.Errorf("floodgate: %s: %w", from(f.redisURL, "--redis", EnvRedisURL), err)
		}
		return &config.StoreOverride{From: from(f.redisURL, "--redis", EnvRedisURL), Type: "redis", URL: redisURL}, nil
	case cluster != "":
		addrs := splitAddrs(cluster)
		if err := checkAddrs(addrs); err != nil {
			return nil, fmt.Errorf("floodgate: %s: %w", from(f.redisCluster, "--redis-cluster", EnvRedisCluster), err)
		}
		return &config.StoreOverride{From: from(f.redisCluster, "--redis-cluster", EnvRedisCluster), Type: "redis-cluster", Addrs: addrs}, nil
	case sentinel != "":
		master, addrs, err := parseSentinel(sentinel)
		switch {
		case errors.Is(err, errCredentialsInAddrs):
			return nil, fmt.Errorf("floodgate: %s: %w: the sentinels' password is %s (store.sentinel_password), the master's %s (store.password)",
				from(f.redisSentinel, "--redis-sentinel", EnvRedisSentinel), err, EnvSentinelPassword, EnvRedisPassword)
		case err != nil:
			return nil, fmt.Errorf("floodgate: %s %w", from(f.redisSentinel, "--redis-sentinel", EnvRedisSentinel), err)
		}
		return &config.StoreOverride{From: from(f.redisSentinel, "--redis-sentinel", EnvRedisSentinel), Type: "redis-sentinel", Addrs: addrs, Master: master}, nil
	}
	return nil, nil
}

// loadConfig reads the configuration (or the built-in one) and applies the
// flags and environment over it.
func (e *environ) loadConfig(path string, f serveFlags) (*config.Config, error) {
	store, err := e.storeOverride(f)
	if err != nil {
		return nil, err
	}
	var cfg *config.Config
	if path == "" {
		cfg, err = config.ParseWith(store, builtin()...)
	} else {
		cfg, err = config.LoadWith(path, store)
	}
	if err != nil {
		return nil, err
	}
	if v := e.env(f.http, EnvHTTP); v != "" {
		cfg.Listen.HTTP = v
	}
	if v := e.env(f.grpc, EnvGRPC); v != "" {
		cfg.Listen.GRPC = v
	}
	if f.readReplicas {
		if cfg.Store.Type != "redis-cluster" && cfg.Store.Type != "redis-sentinel" {
			return nil, fmt.Errorf("floodgate: --redis-read-from-replicas: applies to a Redis Cluster (--redis-cluster or store.type redis-cluster) or to Sentinel (--redis-sentinel or store.type redis-sentinel), whose replicas it reads; found store type %q", cmp.Or(cfg.Store.Type, "memory"))
		}
		cfg.Store.ReadFromReplicas = true
	}
	if v := e.getenv(EnvRedisPassword); v != "" {
		cfg.Store.Password = v
	}
	if v := e.getenv(EnvSentinelPassword); v != "" {
		if cfg.Store.Type != "redis-sentinel" {
			return nil, fmt.Errorf("floodgate: %s: applies to a store behind Sentinel (--redis-sentinel or store.type redis-sentinel), found store type %q", EnvSentinelPassword, cmp.Or(cfg.Store.Type, "memory"))
		}
		cfg.Store.SentinelPassword = v
	}
	if cfg.Store.SentinelUsername != "" && cfg.Store.SentinelPassword == "" {
		return nil, fmt.Errorf("floodgate: store.sentinel_username %q needs a password: store.sentinel_password or %s", cfg.Store.SentinelUsername, EnvSentinelPassword)
	}
	if err := e.adminToken(cfg, f); err != nil {
		return nil, err
	}
	for _, l := range []struct{ addr, source string }{
		{cfg.Listen.HTTP, "HTTP listen address (--http, " + EnvHTTP + ", listen.http)"},
		{cfg.Listen.GRPC, "gRPC listen address (--grpc, " + EnvGRPC + ", listen.grpc)"},
	} {
		if err := config.CheckAddr(l.addr, true); err != nil {
			return nil, fmt.Errorf("floodgate: %s: %w", l.source, err)
		}
	}
	if v := strings.TrimSpace(e.getenv(EnvCalendarMonth)); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			if len(v) > 32 {
				v = v[:32] + "…"
			}
			return nil, fmt.Errorf("floodgate: %s %q: want true or false", EnvCalendarMonth, v)
		}
		cfg.Envoy.CalendarMonth = on
	}
	if v := e.getenv(EnvKeySecret); v != "" {
		if len(v) < 16 {
			return nil, fmt.Errorf("floodgate: %s: want at least 16 bytes", EnvKeySecret)
		}
		cfg.Store.HashKeysSecret = v
	}
	if v := strings.TrimSpace(e.getenv(EnvTokenKey)); v != "" {
		if len(v) < config.MinTokenKey {
			return nil, fmt.Errorf("floodgate: %s: a key of %d bytes; want at least %d", EnvTokenKey, len(v), config.MinTokenKey)
		}
		cfg.Budgets.TokenKey, cfg.Budgets.TokenKeyFile = v, ""
	}
	return cfg, nil
}

// adminToken settles the admin token: from --admin-token-file, else
// FLOODGATE_ADMIN_TOKEN, else the configuration's admin.token_file or
// admin.token (flags win over the environment, which wins over the file).
// Every source goes through the same validation, config.CheckToken.
func (e *environ) adminToken(cfg *config.Config, f serveFlags) error {
	file, source := cfg.Admin.TokenFile, "admin.token_file"
	env := strings.TrimSpace(e.getenv(EnvAdminToken))
	switch {
	case f.adminTokenFile != "":
		file, source = f.adminTokenFile, "--admin-token-file"
	case env != "":
		if err := config.CheckToken(env); err != nil {
			return fmt.Errorf("floodgate: %s: %w", EnvAdminToken, err)
		}
		cfg.Admin.Token, cfg.Admin.TokenFile = env, ""
		return nil
	}
	if file == "" {
		return nil // admin.token, checked when the file was read, or none
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("floodgate: %s: %w", source, err)
	}
	tok := strings.TrimSpace(string(data))
	if err := config.CheckToken(tok); err != nil {
		return fmt.Errorf("floodgate: %s %s: %w", source, file, err)
	}
	cfg.Admin.Token, cfg.Admin.TokenFile = tok, file
	return nil
}

// checkAddrs reports what is wrong with the addresses of a flag.
func checkAddrs(addrs []string) error { return config.CheckAddrs(addrs) }

// errCredentialsInAddrs is parseSentinel's error for addresses that hold
// credentials (user:password@), which it does not repeat.
var errCredentialsInAddrs = errors.New("credentials do not go in the sentinels' addresses")

// parseSentinel reads MASTER@host:port,host:port (--redis-sentinel, of
// serve and of bench): the master's name and the sentinels' addresses,
// each host:port, redis://host:port or rediss://host:port (TLS), all with
// TLS or none. The error starts with the value, quoted, for the flag's
// name to go before it; errCredentialsInAddrs, for addresses that hold a
// password, does not.
func parseSentinel(v string) (master string, addrs []string, err error) {
	master, list, ok := strings.Cut(v, "@")
	if ok && strings.Contains(list, "@") {
		return "", nil, errCredentialsInAddrs
	}
	if !ok || master == "" || strings.TrimSpace(list) == "" {
		return "", nil, fmt.Errorf("%q: want MASTER@host:port,host:port, the master's name and its sentinels", v)
	}
	addrs = splitAddrs(list)
	if err := checkAddrs(addrs); err != nil {
		return "", nil, fmt.Errorf("%q: %w", v, err)
	}
	return master, addrs, nil
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// run serves until the context ends. loaded is the fingerprint of the
// configuration's files (watchedFiles) when cfg was read from them.
func (e *environ) run(cfg *config.Config, path string, f serveFlags, log *slog.Logger, loaded string) int {
	redis.SetLogger(&redisLogger{log: log}) // go-redis's own lines, through slog and throttled
	traceShutdown, tracingOn, err := tracing.Setup(e.ctx, Version())
	if err != nil {
		return e.errorf("%v (the OTEL_* environment variables)", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := traceShutdown(sctx); err != nil {
			log.Warn("flushing traces", "error", err)
		}
	}()
	if tracingOn {
		log.Info("tracing on: spans go to the OTLP endpoint of the OTEL_* environment")
	}
	opened, err := openStore(cfg)
	if err != nil {
		return e.errorf("opening the store (%s): %v", e.storeOrigin(f, path, cfg), err)
	}
	defer opened.close()
	store := opened.store
	if err := probeStore(e.ctx, opened, f.storeWait, log); err != nil {
		origin := e.storeOrigin(f, path, cfg)
		switch {
		case errors.Is(err, errStoreMisconfigured):
			switch {
			case hostnameMismatch(err):
				origin += "; TLS: the server's certificate names another host than the one dialed: set store.tls.server_name to a name it carries"
			case tlsProblem(err):
				origin += "; TLS: store.tls.ca_file verifies the server, store.tls.cert_file and key_file are the client's certificate"
			}
			return e.errorf("%v (%s): fix it and start again", err, origin)
		case e.ctx.Err() != nil:
			return 1
		case !f.startDegraded && refusalOf(err) != nil:
			r := refusalOf(err)
			// Redis ends some refusals with a full stop ("… > 'maxmemory'.").
			return e.errorf("the store (%s) %s %s (--store-wait): %s; %s; --start-degraded starts anyway, unready, deciding by the failure mode (%s)",
				origin, r.failed, f.storeWait, strings.TrimSuffix(err.Error(), "."), r.advice, cfg.Failure.Mode)
		case !f.startDegraded:
			return e.errorf("the store (%s) did not answer within %s (--store-wait): %v; --start-degraded starts anyway, unready, deciding by the failure mode (%s)",
				origin, f.storeWait, err, cfg.Failure.Mode)
		}
		what := "the store does not answer"
		if r := refusalOf(err); r != nil {
			what = r.degraded
		}
		log.Warn("starting degraded: "+what+"; unready, deciding by the failure mode until it decides",
			"store", origin, "mode", cfg.Failure.Mode.String(), "error", err)
	}
	var fallback floodgate.Store
	if cfg.Failure.Mode == failure.Fallback {
		m, _ := memstore.New()
		defer m.Close()
		fallback = m
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := telemetry.New(reg)
	if err != nil {
		return e.errorf("metrics: %v", err)
	}
	bi := buildinfo.Read()
	metrics.BuildInfo(bi.Version, bi.Revision, bi.GoVersion)
	if opened.memory != nil {
		metrics.WatchMemoryStore(memoryStats(opened.memory))
		logMemoryBound(log, opened.memory, cfg.Store.MaxKeys)
	}
	svc, err := service.New(cfg, service.Options{Store: store, Fallback: fallback, Observer: metrics, Logger: log, MaxInflight: opened.poolSize})
	if err != nil {
		return e.errorf("%v", err)
	}
	metrics.WatchQueue(svc.Queued)
	metrics.WatchLinks(storeLinks(svc))
	if mi, batching := svc.MaxInflight(); mi > 0 {
		from := "overload.max_inflight"
		switch {
		case cfg.Overload.MaxInflight > 0:
		case batching:
			from = "store.batching's default"
		default:
			from = "the Redis connection pool's size"
		}
		log.Info("store calls bounded", "max_inflight", mi, "from", from, "max_queue", cfg.Overload.MaxQueue,
			"queue_wait", cfg.Overload.QueueWait.String(), "overload_mode", cfg.Overload.Mode.String(), "batching", batching)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		return e.errorf("%v", err)
	}

	httpTLS, err := listenerTLS(cfg.Listen.HTTPTLS, httpProtos, log)
	if err != nil {
		return e.errorf("HTTP TLS (listen.http_tls): %v", err)
	}
	grpcTLS, err := listenerTLS(cfg.Listen.GRPCTLS, grpcProtos, log)
	if err != nil {
		return e.errorf("gRPC TLS (listen.grpc_tls): %v", err)
	}
	clients := &auth.Clients{}
	if err := clients.Load(cfg.Clients.TokensFile); err != nil {
		return e.errorf("clients.tokens_file: %v", err)
	}
	if w := fdWarning(cfg); w != "" {
		log.Warn(w)
	}
	httpLn, err := listen(cfg.Listen.HTTP, cfg)
	if err != nil {
		return e.errorf("HTTP: %v (choose another address with --http or %s)", err, EnvHTTP)
	}
	grpcLn, err := listen(cfg.Listen.GRPC, cfg)
	if err != nil {
		httpLn.Close()
		return e.errorf("gRPC: %v (choose another address with --grpc or %s)", err, EnvGRPC)
	}
	for name, ln := range map[string]*connlimit.Listener{"http": httpLn, "grpc": grpcLn} {
		if err := metrics.Listener(name, ln); err != nil {
			httpLn.Close()
			grpcLn.Close()
			return e.errorf("metrics: %v", err)
		}
	}
	var handler http.Handler = httpapi.Handler(svc, httpapi.Options{
		Clients:   clients,
		Auth:      metrics,
		Metrics:   promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		EnvoyJSON: envoyrls.JSONHandler(eng, cfg.Bounds.MaxBodyBytes),
		Envoy:     eng,
		Logger:    log,
		Stats:     metrics.Snapshot,
		History:   metrics.History(),
		Version:   Version(),
		Dashboard: f.dashboard,
		Requests:  metrics,
		Access:    reqlog.AccessLog{Logger: log, Sample: f.accessLogSample},
	})
	var unready atomic.Bool // set on SIGTERM: /readyz answers 503 from then on
	handler = readyzUnless(&unready, handler)
	httpSrv := newHTTPServer(cfg, handler, httpTLS, log)
	gopts := append(grpcOptions(cfg, grpcTLS), grpc.ChainUnaryInterceptor(
		envoyrls.Interceptor(metrics, reqlog.AccessLog{Logger: log, Sample: f.accessLogSample}),
		envoyrls.Authenticate(clients, func() string { return svc.Config().Admin.Token }, metrics),
	))
	grpcSrv := grpc.NewServer(gopts...)
	envoyrls.Register(grpcSrv, eng)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(grpcSrv, healthSrv)

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		serve := httpSrv.Serve
		if httpTLS != nil {
			serve = func(ln net.Listener) error { return httpSrv.ServeTLS(ln, "", "") }
		}
		if err := serve(httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("HTTP: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := grpcSrv.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errs <- fmt.Errorf("gRPC: %w", err)
		}
	}()

	log.Info("floodgate serving", "version", Version(), "http", httpLn.Addr().String(), "grpc", grpcLn.Addr().String(),
		"store", storeSummary(cfg.Store), "policies", len(cfg.Policies), "domains", len(cfg.Domains), "config", configName(path),
		"http_tls", cfg.Listen.HTTPTLS.String(), "grpc_tls", cfg.Listen.GRPCTLS.String(), "clients", len(clients.Names()),
		"admin", adminMode(cfg.Admin), "max_connections", cfg.Bounds.MaxConnections)
	for _, w := range exposureWarnings(cfg, httpLn.Addr(), grpcLn.Addr()) {
		log.Warn(w)
	}
	scheme := "http"
	if httpTLS != nil {
		scheme = "https"
	}
	if len(cfg.Policies) > 0 && !cfg.ClientAuth() && httpTLS == nil {
		try := fmt.Sprintf(`curl -d '{"policy":"%s","key":"alice"}' http://%s/v1/check`, cfg.Policies[0].Name, httpLn.Addr())
		if f.logFormat == "json" {
			log.Info("try it", "command", try)
		} else {
			// Plain, so that it can be copied: the text handler would
			// escape the quotes.
			fmt.Fprintf(e.stderr, "try it: %s\n", try)
		}
	}
	if f.dashboard {
		log.Info("dashboard", "url", fmt.Sprintf("%s://%s/dashboard", scheme, httpLn.Addr()))
	}

	ctx, stop := context.WithCancel(e.ctx)
	defer stop()
	if f.debugAddr != "" {
		dbg, err := serveDebug(ctx, f.debugAddr, log)
		if err != nil {
			return e.errorf("--debug-addr: %v", err)
		}
		log.Info("debug listener: net/http/pprof", "addr", dbg)
	}
	go watchHealth(ctx, svc, healthSrv)
	go e.reloads(ctx, svc, eng, clients, path, f, log, loaded)

	select {
	case <-ctx.Done():
		if f.shutdownDelay > 0 {
			unready.Store(true)
			healthSrv.Shutdown() // NOT_SERVING, and it stays so
			log.Info("shutting down: unready, serving on for the shutdown delay", "shutdown_delay", f.shutdownDelay)
			t := time.NewTimer(f.shutdownDelay)
			select {
			case <-t.C:
			case err := <-errs:
				t.Stop()
				log.Error("server failed", "error", err)
			}
		}
	case err := <-errs:
		log.Error("server failed", "error", err)
		stop()
	}
	log.Info("shutting down: draining requests in flight", "drain", f.drain)
	healthSrv.Shutdown()
	dctx, cancel := context.WithTimeout(context.Background(), f.drain)
	defer cancel()
	done := make(chan struct{})
	go func() { grpcSrv.GracefulStop(); close(done) }()
	if err := httpSrv.Shutdown(dctx); err != nil {
		log.Warn("HTTP requests still in flight at the drain deadline", "error", err)
	}
	select {
	case <-done:
	case <-dctx.Done():
		grpcSrv.Stop()
	}
	wg.Wait()
	log.Info("stopped")
	return 0
}

// adminMode says how the admin endpoints are guarded, for the start line.
func adminMode(a config.Admin) string {
	switch {
	case a.Token != "":
		return "token"
	case a.AllowLoopback:
		return "loopback"
	}
	return "off"
}

func configName(path string) string {
	if path == "" {
		return "built-in examples"
	}
	return path
}

// watchHealth keeps the gRPC health status in step with readiness.
func watchHealth(ctx context.Context, svc *service.Service, h *health.Server) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if err := svc.Ready(ctx); err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		h.SetServingStatus("", st)
		h.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchedFiles are the files cfg was read from (path, a file or a
// directory) and those it names: the admin token file, the client tokens
// file and the budgets' token key file.
func watchedFiles(path string, cfg *config.Config) []string {
	var files []string
	if path != "" {
		files = append(files, path)
	}
	for _, p := range []string{cfg.Admin.TokenFile, cfg.Clients.TokensFile, cfg.Budgets.TokenKeyFile} {
		if p != "" {
			files = append(files, p)
		}
	}
	return files
}

// reloads reloads the configuration on SIGHUP and when its files change
// (watchedFiles) from loaded, their fingerprint when the configuration in
// force was read: a change made while the service started is applied at
// the first look.
func (e *environ) reloads(ctx context.Context, svc *service.Service, eng *rls.Engine, clients *auth.Clients, path string, f serveFlags, log *slog.Logger, loaded string) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watched := func() []string { return watchedFiles(path, svc.Config()) }
	var tick <-chan time.Time
	last := loaded
	if f.watch > 0 {
		t := time.NewTicker(f.watch)
		defer t.Stop()
		tick = t.C
	}
	for {
		why := ""
		select {
		case <-ctx.Done():
			return
		case <-hup:
			why = "SIGHUP"
			if tick != nil {
				last = fingerprint(watched()...) // the change SIGHUP applies is not one to apply again
			}
		case <-tick:
			fp := fingerprint(watched()...)
			if fp == last {
				continue
			}
			last, why = fp, "files changed"
		}
		if len(watched()) == 0 {
			log.Info("reload requested; the built-in configuration does not change", "reason", why)
			continue
		}
		cfg, err := e.loadConfig(path, f)
		if err != nil {
			log.Error("configuration refused; the previous one stays in force", "reason", why, "path", path)
			var es config.Errors
			if errors.As(err, &es) {
				for _, x := range es {
					log.Error("configuration error", "at", fmt.Sprintf("%s:%d", x.File, x.Line), "field", x.Path, "problem", x.Msg)
				}
			} else {
				log.Error("configuration error", "problem", err.Error())
			}
			svc.ReloadFailed()
			continue
		}
		before := svc.Config()
		table, err := eng.Compile(cfg)
		if err == nil && storeChanged(svc.Config().Store, cfg.Store) {
			err = checkNewStore(ctx, cfg, log)
		}
		if err == nil {
			if err = clients.Load(cfg.Clients.TokensFile); err != nil {
				err = fmt.Errorf("clients.tokens_file: %w", err)
			}
		}
		if err == nil {
			err = svc.Reload(cfg)
		} else {
			svc.ReloadFailed()
		}
		if err != nil {
			log.Error("configuration refused; the previous one stays in force", "reason", why, "error", err)
			continue
		}
		eng.Swap(table)
		if before.Listen != cfg.Listen || connBounds(before.Bounds) != connBounds(cfg.Bounds) {
			log.Warn("the listen section or the connection limits changed; they take effect at the next start")
		}
		log.Info("configuration reloaded", append([]any{"reason", why, "clients", len(clients.Names()), "admin", adminMode(cfg.Admin)},
			reloadSummary(before, cfg)...)...)
	}
}

// storeSummary names the store for the start-up line: its type and, for
// Redis, the settings that change how decisions are made there (the
// service's clock, counters).
func storeSummary(s config.Store) string {
	out := s.Type
	if s.Type == "memory" || s.Type == "" {
		return cmp.Or(out, "memory")
	}
	if s.Clock == "service" {
		out += ", clock service"
	}
	if s.Counters {
		out += ", counters"
	}
	return out
}

// connBounds are the bounds fixed when the listeners start.
func connBounds(b config.RequestBounds) config.RequestBounds {
	b.MaxBatch, b.MaxKeyBytes, b.MaxDescriptors = 0, 0, 0
	return b
}

// storeChanged reports whether a reload changes the store's settings,
// which take effect at the next start only.
func storeChanged(a, b config.Store) bool {
	return a.Type != b.Type || a.URL != b.URL || !slices.Equal(a.Addrs, b.Addrs) || a.Master != b.Master ||
		a.Username != b.Username || a.Password != b.Password || a.SentinelUsername != b.SentinelUsername || a.SentinelPassword != b.SentinelPassword || a.Prefix != b.Prefix ||
		a.HashKeysSecret != b.HashKeysSecret || a.MaxKeys != b.MaxKeys || a.TLS != b.TLS || a.Clock != b.Clock || a.Counters != b.Counters ||
		a.ReadFromReplicas != b.ReadFromReplicas
}

// checkNewStore probes the store settings of a reloaded configuration,
// which apply at the next start: a configuration whose store no retry can
// mend (a wrong password, say) is refused now, like an invalid file,
// rather than found at the next restart; one whose store does not answer
// yet is applied with a warning.
func checkNewStore(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	st, err := openStore(cfg)
	if err != nil {
		return fmt.Errorf("the new store settings: %w", err)
	}
	defer st.close()
	err = probeStore(ctx, st, 2*time.Second, slog.New(slog.DiscardHandler))
	if errors.Is(err, errStoreMisconfigured) {
		return fmt.Errorf("the new store settings: %w", err)
	}
	attrs := []any{"new_store_answers", err == nil}
	if err != nil {
		// Not answering yet, a replica, full: it may be mended by then.
		attrs = append(attrs, "error", err)
	}
	log.Warn("the store settings changed; they take effect at the next start (the store in use stays)", attrs...)
	return nil
}

// fingerprint is a hash of the files' names and contents (a directory's
// files, for a directory): it changes whenever a file is added, removed,
// edited, or swapped behind a symlink (as Kubernetes updates ConfigMaps
// and Secrets).
func fingerprint(paths ...string) string {
	h := sha256.New()
	for _, path := range paths {
		var files []string
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					files = append(files, p)
				}
				return nil
			})
		} else {
			files = []string{path}
		}
		sort.Strings(files)
		for _, p := range files {
			data, err := os.ReadFile(p)
			fmt.Fprintf(h, "%s\x00%d\x00%v\x00", p, len(data), err != nil)
			h.Write(data)
		}
	}
	return string(h.Sum(nil))
}

// reloadSummary says what a reload changes, as log attributes: the
// policies added, removed and changed (by name), the domains added and
// removed, and the counts in force. Keys never appear: there are none in a
// configuration.
func reloadSummary(old, cfg *config.Config) []any {
	ids := func(c *config.Config) map[string]string {
		m := map[string]string{}
		for i := range c.Policies {
			m[c.Policies[i].Name] = storekit.ID(&c.Policies[i])
		}
		return m
	}
	was, now := ids(old), ids(cfg)
	var added, removed, changed []string
	for n, id := range now {
		switch w, ok := was[n]; {
		case !ok:
			added = append(added, n)
		case w != id:
			changed = append(changed, n)
		}
	}
	for n := range was {
		if _, ok := now[n]; !ok {
			removed = append(removed, n)
		}
	}
	domains := func(c *config.Config) map[string]bool {
		m := map[string]bool{}
		for _, d := range c.Domains {
			m[d.Name] = true
		}
		return m
	}
	dwas, dnow := domains(old), domains(cfg)
	var dadded, dremoved []string
	for d := range dnow {
		if !dwas[d] {
			dadded = append(dadded, d)
		}
	}
	for d := range dwas {
		if !dnow[d] {
			dremoved = append(dremoved, d)
		}
	}
	list := func(s []string) string {
		if len(s) == 0 {
			return "none"
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}
	out := []any{"policies", len(cfg.Policies), "domains", len(cfg.Domains),
		"policies_added", list(added), "policies_removed", list(removed), "policies_changed", list(changed),
		"domains_added", list(dadded), "domains_removed", list(dremoved)}
	if old.Failure != cfg.Failure {
		out = append(out, "failure_mode", cfg.Failure.Mode.String())
	}
	return out
}

// serveDebug serves net/http/pprof on addr until ctx ends, and returns
// the address it listens on.
func serveDebug(ctx context.Context, addr string, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return ln.Addr().String(), nil
}

// readyzUnless answers GET (and HEAD) /readyz with 503 once unready is
// set, and passes every other request to h.
func readyzUnless(unready *atomic.Bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) && unready.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, `{"status":"not_ready","error":"shutting down"}`)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// storeLinks reads svc's links for the metrics.
func storeLinks(svc *service.Service) func() []telemetry.StoreLink {
	return func() []telemetry.StoreLink {
		links := svc.Links()
		out := make([]telemetry.StoreLink, len(links))
		for i, l := range links {
			out[i] = telemetry.StoreLink{Node: l.Node, Far: l.Far, RoundTrip: l.RoundTrip, Batches: l.Batches}
		}
		return out
	}
}
