package rls_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
)

// atomicDomains are two domains of the same rules, "a" atomic and "n"
// not: user 2 per minute, path 1 per minute, and a shadowed and a quota
// rule.
const atomicOwn = "envoy: {atomic_domains: [a]}\n"

func atomicDomain(name string) string {
	return "domain: " + name + `
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`
}

// TestAtomicDomain: in an atomic domain, a request whose second
// descriptor is over its limit spends nothing on the first, which answers
// OK with the group's remaining; in a plain domain the first is spent.
// Shadowed and quota-mode descriptors are decided on their own, as in a
// plain domain: over their limits, they deny no member.
func TestAtomicDomain(t *testing.T) {
	eng, _ := newService(t, atomicOwn, atomicDomain("a"), atomicDomain("n"))
	testAtomicDomain(t, eng)
}

// TestAtomicDomainRedis: the same on a standalone Redis server, where each
// group is one function call.
func TestAtomicDomainRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redisClient(t, srv)
	// A manual clock: the requests never straddle a minute's end.
	clock := floodgatetest.NewManualClock(time.Unix(1714825800, 0))
	store, err := redisstore.New(c, redisstore.WithPrefix("atomic"), redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg, err := parse(atomicOwn, atomicDomain("a"), atomicDomain("n"))
	if err != nil {
		t.Fatal(err)
	}
	testAtomicDomain(t, engineOn(t, cfg, store, clock))
}

// TestAtomicDomainsRefusedOnRedisCluster: on a 3-master Cluster the Redis
// store is sharded, and envoy.atomic_domains does not compile.
func TestAtomicDomainsRefusedOnRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	store, err := redisstore.New(c, redisstore.WithPrefix("atomic"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg, err := parse(atomicOwn, atomicDomain("a"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rls.New(svc, cfg); !errors.Is(err, storekit.ErrCrossSlot) || !strings.Contains(err.Error(), "envoy.atomic_domains") {
		t.Fatalf("atomic domains on a Redis Cluster: %v; want an error naming envoy.atomic_domains, wrapping storekit.ErrCrossSlot", err)
	}
}

// testAtomicDomain runs TestAtomicDomain's requests on eng, whose clock
// stands still.
func testAtomicDomain(t *testing.T, eng *rls.Engine) {
	t.Helper()
	for _, c := range []struct {
		domain string
		want   []string
	}{
		// user 2/min, path 1/min, shadow 1/min (a shadow's OVER reads OK(0)).
		// In a the group's remaining is the least of its members'.
		{"a", []string{"OK(0) OK(0) OK(0)", "OK(0) OVER OK(0)", "OK(0) OVER OK(0)"}},
		{"n", []string{"OK(1) OK(0) OK(0)", "OK(0) OVER OK(0)", "OVER OVER OK(0)"}},
	} {
		for i, want := range c.want {
			got := ask(t, eng, c.domain, d("user", "u"), d("path", "p"), d("shadow", "s"))
			if s := summaries(got); s != want {
				t.Errorf("%s: request %d: %s; want %s", c.domain, i+1, s, want)
			}
			wantCode := rls.CodeOK
			if i > 0 {
				wantCode = rls.CodeOverLimit
			}
			if got.OverallCode != wantCode {
				t.Errorf("%s: request %d: overall %v; want %v", c.domain, i+1, got.OverallCode, wantCode)
			}
		}
	}
	// The user's own counter (a check of hits 0 peeks it): in a, one
	// spent of 2, the denied groups spent nothing; in n, over.
	check := func(kv ...string) rls.Descriptor {
		zero := uint64(0)
		x := d(kv...)
		x.HitsAddend = &zero
		return x
	}
	if s := summaries(ask(t, eng, "a", check("user", "u"))); s != "OK(1)" {
		t.Errorf("a: user after the denied requests: %s; want OK(1)", s)
	}
	if s := summaries(ask(t, eng, "n", check("user", "u"))); s != "OVER" {
		t.Errorf("n: user after the denied requests: %s; want OVER", s)
	}
	// An over shadow (s is spent) denies no member: the group is spent.
	got := ask(t, eng, "a", d("user", "x"), d("path", "x"), d("shadow", "s"))
	if got.OverallCode != rls.CodeOK || summaries(got) != "OK(0) OK(0) OK(0)" {
		t.Errorf("a: a group and an over shadow: %v %s; want OK overall, OK(0) OK(0) OK(0)", got.OverallCode, summaries(got))
	}
	// An over quota-mode descriptor denies no member either (the answer
	// is OVER_LIMIT because every quota-mode one is over).
	ask(t, eng, "a", d("quota", "q"))
	got = ask(t, eng, "a", d("user", "w"), d("path", "w"), d("quota", "q"))
	if got.OverallCode != rls.CodeOverLimit || summaries(got) != "OK(0) OK(0) OVER" {
		t.Errorf("a: a group and an over quota: %v %s; want OVER_LIMIT overall, OK(0) OK(0) OVER", got.OverallCode, summaries(got))
	}
	if s := summaries(ask(t, eng, "a", check("user", "w"), check("path", "w"))); s != "OK(1) OK(0)" {
		t.Errorf("a: the group beside an over quota: %s; want OK(1) OK(0), spent", s)
	}
	// A descriptor with its own hits_addend is decided on its own: two
	// hits of path p2 pass nothing (2 > 1), user y is spent as a group of one.
	two := uint64(2)
	big := d("path", "p2")
	big.HitsAddend = &two
	got = ask(t, eng, "a", d("user", "y"), big)
	if summaries(got) != "OK(1) OVER" {
		t.Errorf("a: a descriptor with its own hits: %s; want OK(1) OVER", summaries(got))
	}
}

// shardedStore is a memory store that says its keys are on several nodes,
// as the Redis store on a Cluster does.
type shardedStore struct{ *memstore.Store }

func (shardedStore) Sharded() bool { return true }

// TestAtomicDomainsRefusedOnCluster: envoy.atomic_domains does not
// compile on a store whose keys live on several nodes, the error naming
// the field and the reason; without it the same store compiles.
func TestAtomicDomainsRefusedOnCluster(t *testing.T) {
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	plain, err := parse(atomicDomain("a"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(plain, service.Options{Store: shardedStore{mem}})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, plain)
	if err != nil {
		t.Fatalf("no atomic domains on a sharded store: %v", err)
	}
	cfg, err := parse(atomicOwn, atomicDomain("a"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = eng.Compile(cfg) // a reload
	if err == nil || !errors.Is(err, storekit.ErrCrossSlot) || !strings.Contains(err.Error(), "envoy.atomic_domains") || !strings.Contains(err.Error(), "slot") {
		t.Fatalf("reload with atomic domains on a sharded store: %v; want an error naming envoy.atomic_domains and slots", err)
	}
	if _, err := rls.New(svc, cfg); err == nil {
		t.Fatal("start with atomic domains on a sharded store: compiled; want an error")
	}
	svc, err = service.New(cfg, service.Options{Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rls.New(svc, cfg); err != nil {
		t.Fatalf("atomic domains on memory: %v", err)
	}
}
