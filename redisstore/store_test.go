package redisstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// client returns a go-redis client of srv without retries (a retried
// script could count twice), closed at the end of the test.
// client is a client of srv that sends a command once and reads its
// reply for up to clientRead: go-redis's 3 s would fail a healthy call on
// a machine that stalled the test for longer.
func client(t testing.TB, srv *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password, MaxRetries: -1,
		ReadTimeout: clientRead, WriteTimeout: clientRead})
	t.Cleanup(func() { c.Close() })
	return c
}

// The tests of a server that is down check that a call's context bounds
// it, not the client's own timeouts. Their clients wait patiently:
// clientWait for a dial and between dial attempts, five attempts, so a
// call that waited for them would take 20 s or more. A call bounded by
// its deadline takes the deadline plus however long a loaded machine
// keeps it from running again (2.3 s is the most seen, two suites at
// once on 2 cores): hung lies far above that and below the client's
// waits, so it tells a hang from a slow machine.
const (
	clientWait = 5 * time.Second
	hung       = 15 * time.Second
	clientRead = time.Minute
)

// patient is a client of srv with clientWait's timeouts, no retries
// and poolSize connections (go-redis's default when 0).
func patient(t testing.TB, srv *redistest.Server, poolSize int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password, MaxRetries: -1, PoolSize: poolSize,
		DialTimeout: clientWait, DialerRetries: 5, DialerRetryTimeout: clientWait, ReadTimeout: clientWait, WriteTimeout: clientWait})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterClient is client's twin for a Cluster.
func clusterClient(t testing.TB, cl *redistest.Cluster) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1, ReadTimeout: clientRead, WriteTimeout: clientRead})
	t.Cleanup(func() { c.Close() })
	return c
}

func newStore(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// paths are the two ways a store reaches its Lua: the function library
// (FCALL, Redis ≥ 7.0) and the scripts of servers without functions
// (EVALSHA), which redisstore.WithScripts forces on Redis 7.
var paths = []struct {
	name string
	opts []redisstore.Option
}{
	{"Functions", nil},
	{"Scripts", []redisstore.Option{redisstore.WithScripts()}},
}

// replayHarness runs the conformance suite through c with a caller-given
// clock (keys live at least an hour of real time: the replayed clock jumps
// while the server's does not) and the store options opts; on a Cluster
// through taggedStore.
func replayHarness(c redis.UniversalClient, keys func() int, opts ...redisstore.Option) floodgatetest.Harness {
	return floodgatetest.Harness{
		NewStore: func(t *testing.T, clock storekit.Clock) floodgate.Store {
			prefix := fmt.Sprintf("t%d", rand.Uint32())
			s := newStore(t, c, append([]redisstore.Option{redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix(prefix)}, opts...)...)
			if _, ok := c.(*redis.ClusterClient); ok {
				// The project's groups over different keys share a
				// slot only with hash_tag (taggedStore).
				return &taggedStore{Store: s}
			}
			return s
		},
		Keys:   func(floodgate.Store) int { return keys() },
		Phases: 3,
	}
}

func dbsize(t testing.TB, servers ...*redistest.Server) func() int {
	return func() int {
		total := 0
		for _, s := range servers {
			n, err := s.Do(t, "DBSIZE")
			if err != nil {
				t.Fatalf("DBSIZE: %v", err)
			}
			total += int(n.(int64))
		}
		return total
	}
}

// The conformance suite, the vectors among it, on both paths: functions
// and scripts. These tests, the TLS one and the differential ones are the
// package's longest: they run in parallel (at most -parallel at a time,
// GOMAXPROCS by default), each path on its own server, whose key count
// the suite checks.

func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			floodgatetest.Run(t, replayHarness(client(t, srv), dbsize(t, srv), path.opts...))
		})
	}
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			cl := redistest.StartCluster(t, 3)
			floodgatetest.Run(t, replayHarness(clusterClient(t, cl), dbsize(t, cl.Nodes...), path.opts...))
		})
	}
}

// TestConformanceTLS: the suite's vectors through TLS, to a standalone
// server that demands a client certificate and to a 3-master Cluster whose
// bus and replication are over TLS too (the client reads the nodes' TLS
// ports in CLUSTER SLOTS): every kind of call crosses TLS; the properties
// under concurrency, the same code over another connection, are
// TestConformanceStandalone's and TestConformanceCluster's. A client that does not trust the CA, or presents no
// certificate, is refused with an error Misconfigured recognises.
func TestConformanceTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	t.Run("Standalone", func(t *testing.T) {
		srv := redistest.StartServer(t, redistest.WithTLS(certs, true))
		c := redis.NewClient(&redis.Options{Addr: srv.TLSAddr, MaxRetries: -1, TLSConfig: certs.ClientConfig(),
			DialTimeout: time.Minute, ReadTimeout: clientRead, WriteTimeout: clientRead})
		t.Cleanup(func() { c.Close() })
		floodgatetest.RunVectors(t, replayHarness(c, dbsize(t, srv)))

		for name, cfg := range map[string]*tls.Config{
			"unknown CA":            {MinVersion: tls.VersionTLS12},
			"no client certificate": {RootCAs: certs.Pool, MinVersion: tls.VersionTLS12},
		} {
			// Refused at once: patient timeouts keep a loaded machine from
			// turning the refusal into a timeout, which is no
			// misconfiguration.
			bad := redis.NewClient(&redis.Options{Addr: srv.TLSAddr, MaxRetries: -1, TLSConfig: cfg,
				DialTimeout: time.Minute, ReadTimeout: clientRead, WriteTimeout: clientRead})
			err := newStore(t, bad).Ping(context.Background())
			bad.Close()
			if err == nil || !redisstore.Misconfigured(err) {
				t.Errorf("%s: Ping = %v; want an error Misconfigured recognises", name, err)
			}
		}
	})
	t.Run("Sentinel", func(t *testing.T) {
		st := redistest.StartSentinel(t, redistest.WithSentinelTLS(certs))
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.MasterName, SentinelAddrs: st.TLSAddrs, MaxRetries: -1, TLSConfig: certs.ClientConfig(),
			DialTimeout: time.Minute, ReadTimeout: clientRead, WriteTimeout: clientRead})
		t.Cleanup(func() { c.Close() })
		lim, err := floodgate.NewLimiter(newStore(t, c), floodgate.Policy{Name: "sentinel", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Hour, Align: floodgate.AlignFirst})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, true, false} {
			if d, err := lim.Allow(context.Background(), "k"); err != nil || d.Allowed != want {
				t.Fatalf("Allow #%d = %v, %v; want allowed %v", i, d, err, want)
			}
		}
		if n, err := st.Master.Do(t, "DBSIZE"); err != nil || n.(int64) != 1 {
			t.Errorf("the master holds %v keys (%v), want the one state key", n, err)
		}
	})
	t.Run("Cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, redistest.WithClusterTLS(certs))
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.TLSAddrs, MaxRetries: -1, TLSConfig: certs.ClientConfig(),
			DialTimeout: time.Minute, ReadTimeout: clientRead, WriteTimeout: clientRead})
		t.Cleanup(func() { c.Close() })
		floodgatetest.RunVectors(t, replayHarness(c, dbsize(t, cl.Nodes...)))
	})
}

// TestSentinel: decisions through a Sentinel failover client reach the
// master and keep their state there.
func TestSentinel(t *testing.T) {
	st := redistest.StartSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.MasterName, SentinelAddrs: st.Addrs, MaxRetries: -1,
		ReadTimeout: clientRead, WriteTimeout: clientRead})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c)
	// A window from the first decision: an hour's end on the clock would
	// start another between two decisions.
	lim, err := floodgate.NewLimiter(s, floodgate.Policy{Name: "sentinel", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Hour, Align: floodgate.AlignFirst})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, want := range []bool{true, true, false} {
		d, err := lim.Allow(ctx, "k")
		if err != nil || d.Allowed != want {
			t.Fatalf("Allow #%d = %v, %v; want allowed %v", i, d, err, want)
		}
	}
	n, err := st.Master.Do(t, "DBSIZE")
	if err != nil || n.(int64) != 1 {
		t.Errorf("the master holds %v keys (%v), want the one state key", n, err)
	}
}

// peekCaughtUp peeks key under p (1 asked) until the peek reports want
// remaining, for up to 30 s while a replica catches up with its master,
// and fails t unless the last peek is allowed with want remaining.
func peekCaughtUp(t *testing.T, s *redisstore.Store, p *floodgate.Policy, key string, want int64) {
	t.Helper()
	var d floodgate.Decision
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if d, err = s.Take(context.Background(), floodgate.Request{Policy: p, Key: key, N: 1, Peek: true}); err != nil {
			t.Fatal(err)
		}
		if d.Remaining == want || time.Now().After(deadline) {
			break
		}
	}
	if !d.Allowed || d.Remaining != want {
		t.Errorf("peek of %s: %v, want allowed with %d remaining once the replica caught up", key, d, want)
	}
}

// TestSentinelReplicas: through go-redis's NewFailoverClusterClient, with
// WithOneMaster, a Sentinel master decides as one server does: random
// decisions agree with memstore's (groups over any keys), a TakeBatch over
// many slots is one joined call, Ping checks the master takes writes, and
// with ReplicaOnly every peek goes to the replica, every add to the
// master. Without WithOneMaster the store takes the client for a
// Cluster's.
func TestSentinelReplicas(t *testing.T) {
	st := redistest.StartSentinel(t)
	failover := func(replicaOnly bool) *redis.ClusterClient {
		c := redis.NewFailoverClusterClient(&redis.FailoverOptions{MasterName: st.MasterName, SentinelAddrs: st.Addrs, MaxRetries: -1,
			ReplicaOnly: replicaOnly, DialTimeout: time.Minute, ReadTimeout: clientRead, WriteTimeout: clientRead})
		t.Cleanup(func() { c.Close() })
		return c
	}
	if !newStore(t, failover(false)).Sharded() {
		t.Error("a cluster client's store without WithOneMaster: Sharded() = false, want true")
	}
	t.Run("Differential", func(t *testing.T) {
		differential(t, failover(false), "one", 10, 150, redisstore.WithOneMaster())
	})

	s := newStore(t, failover(true), redisstore.WithOneMaster())
	if s.Sharded() {
		t.Error("WithOneMaster: Sharded() = true, want false")
	}
	ctx := context.Background()
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	p := floodgate.Policy{Name: "one", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour, Align: floodgate.AlignFirst}
	if n := s.Node(ctx, &p, "k"); n != "" {
		t.Errorf("Node = %q, want \"\" on one master", n)
	}
	keys := make([]string, 20)
	slots := map[int]bool{}
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		slots[redisstore.KeySlot(redisstore.DecisionKeys(s, &p, keys[i])[0])] = true
	}
	if len(slots) < 2 {
		t.Fatalf("the %d keys share one slot", len(keys))
	}
	calls := func(n *redistest.Server, cmd string) int64 { return n.Calls(t, cmd) }
	// The differential's peeks went to the master: count from here.
	masterRO, replicaRO, replicaRW := calls(st.Master, "fcall_ro"), calls(st.Replica, "fcall_ro"), calls(st.Replica, "fcall")
	before := calls(st.Master, "fcall")
	adds := make([]floodgate.Request, len(keys))
	for i, k := range keys {
		adds[i] = floodgate.Request{Policy: &p, Key: k, N: 4}
	}
	out := make([]storekit.Outcome, len(keys))
	s.TakeBatch(ctx, adds, out)
	for i, o := range out {
		if o.Err != nil || !o.Decision.Allowed || o.Decision.Remaining != 96 {
			t.Fatalf("TakeBatch of adds, #%d: %v, %v; want allowed with 96 remaining", i, o.Decision, o.Err)
		}
	}
	if d := calls(st.Master, "fcall") - before; d != 1 {
		t.Errorf("a TakeBatch of %d adds over %d slots made %d FCALLs on the master, want 1 joined call", len(keys), len(slots), d)
	}
	q := floodgate.Policy{Name: "org", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour, Align: floodgate.AlignFirst}
	d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "user7", N: 1, Group: []floodgate.Request{{Policy: &q, Key: "org3"}}})
	if err != nil || !d.Allowed {
		t.Errorf("a group over two slots: %v, %v; want allowed", d, err)
	}

	for _, k := range keys {
		peekCaughtUp(t, s, &p, k, 95) // 4 added, 1 more asked
	}
	if n := calls(st.Replica, "fcall_ro") - replicaRO; n < int64(len(keys)) {
		t.Errorf("%d FCALL_RO on the replica for %d peeks", n, len(keys))
	}
	if n := calls(st.Master, "fcall_ro") - masterRO; n != 0 {
		t.Errorf("%d FCALL_RO on the master, want every peek on the replica", n)
	}
	if n := calls(st.Replica, "fcall") - replicaRW; n != 0 {
		t.Errorf("%d FCALLs on the replica, want every add on the master", n)
	}
}

// testSeed returns the seed of a randomized test, FLOODGATE_SEED's when set
// and else the clock's, and logs how to run the test again with it.
func testSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FLOODGATE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (rerun with FLOODGATE_SEED=%d)", seed, seed)
	return seed
}

// differential runs seeded random sequences through memstore and store
// and demands identical decisions.
func differential(t *testing.T, c redis.UniversalClient, tag string, runs, ops int, opts ...redisstore.Option) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	mem, err := memstore.New(memstore.WithClock(clock), memstore.WithSweepInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var red floodgate.Store = newStore(t, c, append([]redisstore.Option{redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix(fmt.Sprintf("d%d%s", seed%1e6, tag))}, opts...)...)
	if red.(*redisstore.Store).Sharded() {
		// Groups over different keys share a slot only with hash_tag.
		red = &taggedStore{Store: red.(*redisstore.Store), all: true}
	}
	total := 0
	for i := 0; i < runs; i++ {
		total += floodgatetest.Differential(t, floodgatetest.RandChooser{R: rng}, mem, red, clock, fmt.Sprintf("diff%d", i), ops)
	}
	t.Logf("%d random policies, %d operations: memstore and redisstore agree", runs, total)
}

func TestDifferentialStandalone(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	runs := 150 // of 150 operations each, per path; make fuzz searches further
	if testing.Short() {
		runs = 40
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			differential(t, client(t, srv), path.name, runs, 150, path.opts...)
		})
	}
}

func TestDifferentialCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	runs := 30
	if testing.Short() {
		runs = 10
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			differential(t, clusterClient(t, cl), path.name, runs, 150, path.opts...)
		})
	}
}

// FuzzDifferential lets the fuzzer choose policies and operations for
// memstore and redisstore on one server.
func FuzzDifferential(f *testing.F) {
	srv := redistest.StartServer(f)
	c := client(f, srv)
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("fixed window then a token bucket and some gcra"))
	f.Add([]byte{5, 5, 0, 200, 0, 3, 0, 9, 1, 1, 1, 1, 250, 7, 0, 0, 42, 42, 42, 42})
	var run int
	f.Fuzz(func(t *testing.T, data []byte) {
		run++
		clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
		mem, err := memstore.New(memstore.WithClock(clock), memstore.WithSweepInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		red := newStore(t, c, redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix(fmt.Sprintf("f%d", run)))
		floodgatetest.Differential(t, &floodgatetest.ByteChooser{B: data}, mem, red, clock, "fuzz", 200)
	})
}

func TestOptions(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv)
	for _, tc := range []struct {
		opt  redisstore.Option
		want string
	}{
		{redisstore.WithPrefix("a{b"), `redisstore: WithPrefix("a{b"): must be 1 to 64 bytes of A-Z a-z 0-9 _ . - / :`},
		{redisstore.WithPrefix(""), `redisstore: WithPrefix(""): must be 1 to 64 bytes of A-Z a-z 0-9 _ . - / :`},
		{redisstore.WithPrefix("x*"), `redisstore: WithPrefix("x*"): must be 1 to 64 bytes of A-Z a-z 0-9 _ . - / :`},
		{redisstore.WithMaxKeyLen(0), `redisstore: WithMaxKeyLen(0): must be ≥ 1`},
		{redisstore.WithMinTTL(-time.Second), `redisstore: WithMinTTL(-1s): must be ≥ 0`},
		{redisstore.WithHashedKeys([]byte("short")), `redisstore: WithHashedKeys: secret of 5 bytes, want at least 16`},
		{redisstore.WithClock(nil), `redisstore: WithClock: nil clock`},
	} {
		if _, err := redisstore.New(c, tc.opt); err == nil || err.Error() != tc.want {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
	if _, err := redisstore.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// TestHashedKeys: with WithHashedKeys no key appears in Redis as given,
// every stored key has the same length, and decisions are unchanged.
func TestHashedKeys(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv), redisstore.WithHashedKeys([]byte("0123456789abcdef-secret")))
	lim, _ := floodgate.NewLimiter(s, floodgate.Policy{Name: "h", Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 2, Track: true})
	ctx := context.Background()
	for _, key := range []string{"alice@example.com", "203.0.113.7", "x"} {
		if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("Allow(%q) = %v, %v", key, d, err)
		}
	}
	keys, err := srv.Do(t, "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	lengths := map[int]bool{}
	for _, k := range keys.([]any) {
		name := k.(string)
		for _, secret := range []string{"alice", "203.0.113", "example"} {
			if strings.Contains(name, secret) {
				t.Errorf("Redis key %q contains %q", name, secret)
			}
		}
		lengths[len(name)] = true
	}
	if len(keys.([]any)) != 6 || len(lengths) != 2 { // state and usage, three keys
		t.Errorf("keys %v: want 6 keys of 2 lengths", keys)
	}
}

// TestErrors: a store that cannot reach Redis answers with ErrUnavailable
// within the context's deadline; a closed store with ErrClosed.
func TestErrors(t *testing.T) {
	srv := redistest.StartServer(t)
	c := patient(t, srv, 0)
	s := newStore(t, c)
	p := floodgate.Policy{Name: "e", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Second}
	ctx := context.Background()
	srv.Stop(t)
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := s.Take(dctx, floodgate.Request{Policy: &p, Key: "k", N: 1})
	if !errors.Is(err, floodgate.ErrUnavailable) {
		t.Errorf("Take with the server down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > hung {
		t.Errorf("Take with the server down and a deadline of 200ms took %v: it waited for the client", d)
	}
	s.Close()
	if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1}); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("Take after Close: %v", err)
	}
}

// TestPing: Ping answers nil while Redis answers, ErrUnavailable within
// the context's deadline while it is down, nil again once it is back (the
// library loaded again), ErrUnavailable while the server is a replica,
// and ErrClosed after Close.
func TestPing(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv))
	// A down server fails within the short timeout; an up one is given
	// time, so that a loaded machine cannot fail the test.
	ping := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return s.Ping(ctx)
	}
	if err := ping(time.Minute); err != nil {
		t.Fatalf("Ping with Redis up: %v", err)
	}
	srv.Kill(t)
	if err := ping(300 * time.Millisecond); !errors.Is(err, floodgate.ErrUnavailable) {
		t.Errorf("Ping with Redis down: %v, want ErrUnavailable", err)
	}
	srv.Restart(t)
	if err := ping(time.Minute); err != nil {
		t.Errorf("Ping after Redis came back: %v", err)
	}
	// The restarted server keeps nothing: Ping loaded the library.
	if libs, err := srv.Do(t, "FUNCTION", "LIST", "LIBRARYNAME", redisstore.LibraryName()); err != nil || len(libs.([]any)) != 1 {
		t.Errorf("after Ping, the server holds %v (%v), want the library", libs, err)
	}

	// A server that became a replica answers TIME but takes no write:
	// not ready, told apart as a replica; ready again once promoted.
	// Neither Ping wrote a key.
	master := redistest.StartServer(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	if _, err := srv.Do(t, "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	err := ping(time.Minute)
	if !errors.Is(err, floodgate.ErrUnavailable) || !redisstore.ReadOnlyReplica(err) {
		t.Errorf("Ping at a replica: %v, want ErrUnavailable and a replica's refusal", err)
	}
	// Nor when the replica lacks the library (its master has none).
	fresh := redistest.StartServer(t)
	freshMaster := redistest.StartServer(t)
	fh, fp, _ := net.SplitHostPort(freshMaster.Addr)
	if _, err := fresh.Do(t, "REPLICAOF", fh, fp); err != nil {
		t.Fatal(err)
	}
	if err := newStore(t, client(t, fresh)).Ping(context.Background()); !redisstore.ReadOnlyReplica(err) {
		t.Errorf("Ping at a replica without the library: %v, want a replica's refusal", err)
	}
	// Nor on the EVALSHA path, whose scripts a replica runs, refusing
	// only their writes.
	scripts := newStore(t, client(t, srv), redisstore.WithScripts())
	if err := scripts.Ping(context.Background()); !errors.Is(err, floodgate.ErrUnavailable) || !redisstore.ReadOnlyReplica(err) {
		t.Errorf("Ping at a replica on the EVALSHA path: %v, want ErrUnavailable and a replica's refusal", err)
	}
	if _, err := srv.Do(t, "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	if err := ping(time.Minute); err != nil {
		t.Errorf("Ping after the replica was promoted: %v", err)
	}
	if err := scripts.Ping(context.Background()); err != nil {
		t.Errorf("Ping on the EVALSHA path after the replica was promoted: %v", err)
	}
	// There its write changes nothing, even a key of that name, and a
	// server refusing writes (full) is not ready, as on the functions'.
	ready := redisstore.DefaultPrefix + ":ready"
	srv.Must(t, "SET", ready, "kept")
	if err := scripts.Ping(context.Background()); err != nil {
		t.Errorf("Ping on the EVALSHA path with %s set: %v", ready, err)
	}
	if v := srv.Must(t, "GET", ready); v != "kept" {
		t.Errorf("after Ping on the EVALSHA path, %s = %v, want it unchanged", ready, v)
	}
	srv.Must(t, "DEL", ready)
	srv.Must(t, "CONFIG", "SET", "maxmemory", "1")
	if err := scripts.Ping(context.Background()); redisstore.WritesRefused(err) != "OOM" {
		t.Errorf("Ping on the EVALSHA path at a full server: %v, want a refusal naming OOM", err)
	}
	srv.Must(t, "CONFIG", "SET", "maxmemory", "0")
	for _, n := range []*redistest.Server{srv, master} {
		if keys, err := n.Do(t, "DBSIZE"); err != nil || keys.(int64) != 0 {
			t.Errorf("%s holds %v keys (%v) after the pings, want 0", n.Addr, keys, err)
		}
	}

	s.Close()
	if err := ping(300 * time.Millisecond); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("Ping after Close: %v, want ErrClosed", err)
	}
}

// TestReplicas: a cluster of 3 masters with a replica each (slow to
// start, hence shared by the subtests).
func TestReplicas(t *testing.T) {
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	t.Run("PreloadEveryNode", func(t *testing.T) { testPreloadEveryNode(t, cl) })
	t.Run("PeekOnReplica", func(t *testing.T) { testPeekOnReplica(t, cl) })
	t.Run("OneMasterRefused", func(t *testing.T) {
		// WithOneMaster is for a Sentinel's cluster client, over one
		// master: a Cluster's, over three, is refused.
		err := newStore(t, clusterClient(t, cl), redisstore.WithOneMaster()).Preload(context.Background())
		if err == nil || !strings.Contains(err.Error(), "on 3 masters") || !strings.Contains(err.Error(), "WithOneMaster") {
			t.Errorf("Preload with WithOneMaster on a Cluster of 3 masters: %v; want a refusal naming WithOneMaster and the 3 masters", err)
		}
		if !redisstore.Misconfigured(err) {
			t.Errorf("Misconfigured(%v) = false: no retry mends it", err)
		}
	})
}

// testPreloadEveryNode: Preload puts the function library on every
// master, and the replicas receive it from their masters; on the script
// path it puts every script on every master.
func testPreloadEveryNode(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	s := newStore(t, clusterClient(t, cl))
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	for i, node := range cl.Nodes {
		for _, n := range append([]*redistest.Server{node}, cl.Replicas[i]...) {
			// A replica gets the library through replication: wait for it.
			var libs any
			deadline := time.Now().Add(30 * time.Second)
			for {
				var err error
				libs, err = n.Do(t, "FUNCTION", "LIST", "LIBRARYNAME", redisstore.LibraryName())
				if err != nil {
					t.Fatal(err)
				}
				if len(libs.([]any)) == 1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if len(libs.([]any)) != 1 {
				t.Errorf("node %s lacks the library %s", n.Addr, redisstore.LibraryName())
			}
		}
	}

	scripts := newStore(t, clusterClient(t, cl), redisstore.WithScripts())
	if err := scripts.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	shas := redisstore.ScriptSHAs()
	for _, node := range cl.Nodes {
		r, err := node.Do(t, append([]string{"SCRIPT", "EXISTS"}, shas...)...)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range r.([]any) {
			if v.(int64) != 1 {
				t.Errorf("node %s lacks script %s", node.Addr, shas[i])
			}
		}
	}
}

// TestClusterNodeDown: with a master down, decisions for its slots fail
// with ErrUnavailable within the deadline, and the others go on. The
// masters still up keep serving their slots once the cluster has marked
// the stopped one failed (cluster-require-full-coverage no; by default
// they would refuse every key with CLUSTERDOWN some seconds after the
// stop). Calls on them are given a minute, and reads clientRead: they must
// succeed however loaded the machine.
func TestClusterNodeDown(t *testing.T) {
	cl := redistest.StartCluster(t, 3, redistest.WithNodeConfig("cluster-require-full-coverage no"))
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1,
		DialTimeout: clientWait, DialerRetries: 5, DialerRetryTimeout: clientWait, ReadTimeout: clientRead, WriteTimeout: clientRead})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c)
	p := floodgate.Policy{Name: "node", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Minute}
	ctx := context.Background()
	const stopped = 1 // the master stopped
	// Keys on every node, before the failure.
	keys := make([]string, 30)
	onStopped := make([]bool, len(keys))
	wantDown := 0
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		if onStopped[i] = firstOwner(cl, redisstore.KeySlot(redisstore.DecisionKeys(s, &p, keys[i])[0])) == stopped; onStopped[i] {
			wantDown++
		}
		if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: keys[i], N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if wantDown == 0 || wantDown == len(keys) {
		t.Fatalf("%d of %d keys on master %d: want some on it and some on the others", wantDown, len(keys), stopped)
	}
	cl.Nodes[stopped].Stop(t)
	var ok, down int
	var slowest time.Duration
	for i, k := range keys {
		timeout := time.Minute
		if onStopped[i] {
			timeout = 300 * time.Millisecond
		}
		dctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		_, err := s.Take(dctx, floodgate.Request{Policy: &p, Key: k, N: 1})
		cancel()
		took := time.Since(start)
		if !onStopped[i] {
			if err != nil {
				t.Errorf("key %s, on a master up: %v", k, err)
				continue
			}
			ok++
			continue
		}
		// The deadline bounds the call: it does not wait for the
		// client's own dial retries (see hung).
		slowest = max(slowest, took)
		if took > hung {
			t.Errorf("key %s took %v with a deadline of 300ms: it waited for the client", k, took)
		}
		if !errors.Is(err, floodgate.ErrUnavailable) {
			t.Errorf("key %s, on the master down: %v, want ErrUnavailable", k, err)
			continue
		}
		down++
	}
	t.Logf("with one master of three down: %d decided, %d unavailable; slowest call on the master down %v", ok, down, slowest)
	if ok != len(keys)-wantDown || down != wantDown {
		t.Errorf("with one master of three down: %d decided, %d unavailable; want %d and %d", ok, down, len(keys)-wantDown, wantDown)
	}
}

// testPeekOnReplica: with a cluster client that reads from replicas
// (ClusterOptions.ReadOnly), a peek is an FCALL_RO, which go-redis sends
// to a replica because COMMAND INFO flags it readonly; adds still go to
// the masters. A replica lags its master, so the peek converges on the
// count rather than seeing it at once. A TakeBatch of peeks alone goes to
// the replicas as well; one that also adds goes to the masters.
func testPeekOnReplica(t *testing.T, cl *redistest.Cluster) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1, ReadOnly: true, ReadTimeout: clientRead, WriteTimeout: clientRead})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c)
	ctx := context.Background()
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	p := floodgate.Policy{Name: "replica", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour, Align: floodgate.AlignFirst}
	keys := make([]string, 30) // on every master
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		for j := 0; j < 3; j++ {
			if d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: keys[i], N: 1}); err != nil || !d.Allowed {
				t.Fatalf("add: %v, %v", d, err)
			}
		}
	}
	for _, key := range keys {
		peekCaughtUp(t, s, &p, key, 96)
	}
	calls := func(n *redistest.Server, cmd string) int64 { return n.Calls(t, cmd) }
	// A TakeBatch of peeks alone goes to the replicas too; one that adds
	// as well goes to the masters whole, and decides in order.
	replicaCalls := func() (n int64) {
		for i := range cl.Nodes {
			n += calls(cl.Replicas[i][0], "fcall_ro")
		}
		return n
	}
	before := replicaCalls()
	peeks := make([]floodgate.Request, len(keys))
	for i, key := range keys {
		peeks[i] = floodgate.Request{Policy: &p, Key: key, N: 1, Peek: true}
	}
	out := make([]storekit.Outcome, 2*len(keys))
	s.TakeBatch(ctx, peeks, out)
	for i, o := range out[:len(keys)] {
		if o.Err != nil || !o.Decision.Allowed || o.Decision.Remaining != 96 {
			t.Errorf("TakeBatch of peeks, #%d: %v, %v; want allowed with 96 remaining", i, o.Decision, o.Err)
		}
	}
	if got := replicaCalls() - before; got != int64(len(keys)) {
		t.Errorf("a TakeBatch of %d peeks made %d FCALL_RO on the replicas", len(keys), got)
	}
	var mixed []floodgate.Request
	for _, key := range keys {
		mixed = append(mixed, floodgate.Request{Policy: &p, Key: key, N: 1}, floodgate.Request{Policy: &p, Key: key, N: 1, Peek: true})
	}
	s.TakeBatch(ctx, mixed, out)
	for i, o := range out {
		if o.Err != nil || !o.Decision.Allowed || o.Decision.Remaining != 96-int64(i%2) {
			t.Errorf("TakeBatch of adds and peeks, #%d: %v, %v; want allowed with %d remaining", i, o.Decision, o.Err, 96-i%2)
		}
	}
	for i, m := range cl.Nodes {
		r := cl.Replicas[i][0]
		t.Logf("master %s: fcall %d, fcall_ro %d; replica %s: fcall_ro %d", m.Addr, calls(m, "fcall"), calls(m, "fcall_ro"), r.Addr, calls(r, "fcall_ro"))
		if calls(m, "fcall") == 0 || calls(m, "fcall_ro") != 0 {
			t.Errorf("master %s: %d FCALL, %d FCALL_RO; want the adds and no peek", m.Addr, calls(m, "fcall"), calls(m, "fcall_ro"))
		}
		if calls(r, "fcall_ro") == 0 || calls(r, "fcall") != 0 {
			t.Errorf("replica %s: %d FCALL_RO, %d FCALL; want the peeks and no add", r.Addr, calls(r, "fcall_ro"), calls(r, "fcall"))
		}
	}
}

// TestServerWithoutFunctions: on a server that does not know FCALL and
// FUNCTION (as before Redis 7.0; here the commands are renamed away), a
// store switches to scripts by itself: Preload loads them, the first call
// that gets "unknown command" did not run and is sent again, single or
// batched, and the conformance suite passes.
func TestServerWithoutFunctions(t *testing.T) {
	srv := redistest.StartServer(t, redistest.WithArgs(
		"--rename-command", "FCALL", "fcall-renamed-away",
		"--rename-command", "FCALL_RO", "fcall_ro-renamed-away",
		"--rename-command", "FUNCTION", "function-renamed-away"))
	c := client(t, srv)
	ctx := context.Background()
	if err := c.FCall(ctx, "f", nil).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command") {
		t.Fatalf("FCALL on the server: %v, want an unknown command", err)
	}

	// Preload finds no FUNCTION and loads the scripts.
	s := newStore(t, c)
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	shas := redisstore.ScriptSHAs()
	r, err := srv.Do(t, append([]string{"SCRIPT", "EXISTS"}, shas...)...)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range r.([]any) {
		if v.(int64) != 1 {
			t.Errorf("Preload did not load script %s", shas[i])
		}
	}

	// Without Preload: the first call finds no FCALL and is sent again.
	p := floodgate.Policy{Name: "old", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Hour, Align: floodgate.AlignFirst}
	for _, batch := range []bool{false, true} {
		s := newStore(t, c, redisstore.WithPrefix(fmt.Sprintf("old%v", batch)))
		var got []bool
		if batch {
			reqs := make([]floodgate.Request, 4)
			out := make([]storekit.Outcome, 4)
			for i := range reqs {
				reqs[i] = floodgate.Request{Policy: &p, Key: "k", N: 1}
			}
			s.TakeBatch(ctx, reqs, out)
			for _, r := range out {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				got = append(got, r.Decision.Allowed)
			}
		} else {
			for i := 0; i < 4; i++ {
				d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, d.Allowed)
			}
		}
		if fmt.Sprint(got) != "[true true true false]" {
			t.Errorf("batch %v: allowed %v, want [true true true false]: counted twice or lost", batch, got)
		}
	}
	info, err := srv.Do(t, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info.(string), "cmdstat_evalsha:calls=") {
		t.Errorf("no EVALSHA after the switch to scripts:\n%s", info)
	}
	floodgatetest.Run(t, replayHarness(c, dbsize(t, srv)))
}

// TestACLWithoutFunctions: a user whose ACL refuses FCALL, FCALL_RO and
// FUNCTION but allows scripts gets a store that uses scripts, with
// Preload and without it; a refusal inside a function (a command the
// function calls) is an error, never sent again.
func TestACLWithoutFunctions(t *testing.T) {
	srv := redistest.StartServer(t, redistest.WithArgs("--user", "bob", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-fcall_ro", "-function"))
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "bob", Password: "pw", MaxRetries: -1, ReadTimeout: clientRead, WriteTimeout: clientRead})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	p := floodgate.Policy{Name: "acl", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Hour, Align: floodgate.AlignFirst}

	preloaded := newStore(t, c, redisstore.WithPrefix("pre"))
	if err := preloaded.Preload(ctx); err != nil {
		t.Fatalf("Preload with functions refused: %v", err)
	}
	for _, s := range []*redisstore.Store{preloaded, newStore(t, c, redisstore.WithPrefix("lazy"))} {
		var got []bool
		for i := 0; i < 3; i++ {
			d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.Allowed)
		}
		if fmt.Sprint(got) != "[true true false]" {
			t.Errorf("allowed %v, want [true true false]", got)
		}
		if d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1, Peek: true}); err != nil || d.Allowed {
			t.Errorf("peek: %v, %v; want a denial", d, err)
		}
	}

	// A user that may call functions but not SET: the function ran its GET
	// and failed at its SET, so the call is not sent again.
	if _, err := srv.Do(t, "ACL", "SETUSER", "carol", "on", ">pw", "~*", "&*", "+@all", "-set"); err != nil {
		t.Fatal(err)
	}
	c2 := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "carol", Password: "pw", MaxRetries: -1, ReadTimeout: clientRead, WriteTimeout: clientRead})
	t.Cleanup(func() { c2.Close() })
	s := newStore(t, c2, redisstore.WithPrefix("carol"))
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do(t, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1}); !errors.Is(err, floodgate.ErrUnavailable) {
		t.Errorf("Take with SET refused: %v, want ErrUnavailable", err)
	}
	info, err := srv.Do(t, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	if _, rest, ok := strings.Cut(info.(string), "cmdstat_fcall:calls="); !ok || !strings.HasPrefix(rest, "1,") || strings.Contains(info.(string), "cmdstat_eval") {
		t.Errorf("want exactly one FCALL, not sent again\n%s", info)
	}
}
