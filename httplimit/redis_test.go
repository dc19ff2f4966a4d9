package httplimit_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
)

// redisClient returns a go-redis client for addr set up as the middleware
// needs: context deadlines honoured, no retries (a retried script could
// count twice). The failure policy's timeout bounds every call; the
// client's own timeouts are long: dialing, so that a loaded machine does
// not fail a healthy call, and reading and writing, above hung, so that a
// call the policy's timeout failed to cut shows as hung instead of ending
// at the client's timeout.
func redisClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		DialTimeout:           healthyTimeout,
		ReadTimeout:           2 * hung,
		WriteTimeout:          2 * hung,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFailurePolicyRedis runs each failure mode (package failure) in front
// of a real redis-server that first answers, then hangs (a stalled proxy in
// front of it), then is stopped mid-test. Each mode answers as documented, with every
// degraded decision visible to the hook, and no request hangs.
func TestFailurePolicyRedis(t *testing.T) {
	const timeout = 50 * time.Millisecond
	srv := redistest.StartServer(t)
	for i, mode := range []failure.Mode{failure.Open, failure.Closed, failure.Fallback} {
		t.Run(mode.String(), func(t *testing.T) {
			if i > 0 {
				srv.Restart(t)
			}
			// The client reaches Redis through a proxy that stalls when told
			// to and until told otherwise: however long a loaded machine
			// takes to send the stalled requests, Redis cannot answer them.
			proxy := redistest.StartProxy(t, srv.Addr)
			// The store's time is a manual clock: on the server's, a second
			// passing between the first and the third healthy request (the
			// window opens with the first) would make t=60 below t=59.
			rs, err := redisstore.New(redisClient(t, proxy.Addr), redisstore.WithClock(floodgatetest.NewManualClock(base)))
			if err != nil {
				t.Fatal(err)
			}
			local := newEnv(t)
			// While Redis answers, a generous timeout: a busy machine must
			// not turn a healthy answer into a degraded one. The short
			// timeout applies from the stall on.
			policy := failure.Policy{
				Mode: mode, Timeout: healthyTimeout, Fallback: local.store,
				Breaker: failure.Breaker{Disabled: true}, // every request tries Redis here; TestBreakerStalledRedis has the breaker
			}
			store, err := failure.Wrap(rs, policy)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var degraded []httplimit.RuleDecision
			h := wrap(t, httplimit.Config{
				Rules: []httplimit.Rule{{Limiter: newLimiter(t, store, "shared", "fixed_window 3/1m align first"), Key: clientKey}},
				OnDecision: func(r *http.Request, res []httplimit.RuleDecision) {
					mu.Lock()
					defer mu.Unlock()
					if res[0].Decision.Degraded {
						degraded = append(degraded, res[0])
					}
				},
			})
			timed := func(client string) (int, http.Header, time.Duration) {
				t.Helper()
				start := time.Now()
				rec := do(t, h, get(client))
				took := time.Since(start)
				if took > hung {
					t.Errorf("a request took %v: it hung", took)
				}
				return rec.Code, rec.Header(), took
			}

			// Healthy: Redis decides.
			for n := range 4 {
				code, hdr, _ := timed("healthy")
				if want := map[bool]int{true: 200, false: 429}[n < 3]; code != want {
					t.Fatalf("healthy request %d: status %d, want %d", n+1, code, want)
				}
				if n == 2 && hdr.Get("RateLimit") != `"shared";r=0;t=60` {
					t.Errorf("healthy RateLimit %q", hdr.Get("RateLimit"))
				}
			}
			if len(degraded) != 0 {
				t.Fatalf("degraded decisions while Redis answers: %+v", degraded)
			}

			// Hanging, then stopped: the failure policy decides.
			policy.Timeout = timeout
			if err := store.Guard().SetPolicy(policy); err != nil {
				t.Fatal(err)
			}
			proxy.Stall() // until the proxy closes
			for phase, client := range []string{"stalled", "stopped"} {
				if phase == 1 {
					// Redis stops, and so does the proxy: its connections
					// close, and its port refuses new ones, as the stopped
					// server's would.
					srv.Stop(t)
					proxy.Close()
				}
				for n := range 3 {
					code, hdr, took := timed(client)
					if phase == 0 && took < timeout-5*time.Millisecond {
						t.Errorf("%s request %d took %v: Redis answered while stalled?", client, n+1, took)
					}
					switch mode {
					case failure.Open:
						if code != 200 || hdr.Get("RateLimit") != "" {
							t.Errorf("%s request %d: %d, RateLimit %q; want 200 without RateLimit", client, n+1, code, hdr.Get("RateLimit"))
						}
					case failure.Closed:
						if code != 503 || hdr.Get("Retry-After") != "1" || hdr.Get("RateLimit") != "" {
							t.Errorf("%s request %d: %d, Retry-After %q, RateLimit %q; want 503 with Retry-After 1 and no RateLimit", client, n+1, code, hdr.Get("Retry-After"), hdr.Get("RateLimit"))
						}
					case failure.Fallback:
						want := map[bool]int{true: 200, false: 429}[n < 3] // the fallback's own quota of 3 for this client
						if code != want || hdr.Get("RateLimit-Policy") != `"shared";q=3;w=60` {
							t.Errorf("%s request %d: %d, RateLimit-Policy %q; want %d from the fallback", client, n+1, code, hdr.Get("RateLimit-Policy"), want)
						}
					}
				}
			}
			if len(degraded) != 6 {
				t.Fatalf("%d degraded decisions reached the hook, want 6", len(degraded))
			}
		})
	}
}

// hung is how long a request may take before a test calls it hung: far
// above any timeout of the tests that bounds it and any scheduling delay of
// a loaded machine (seconds), below the read and write timeouts of
// redisClient's clients (a call nothing else cuts ends at those).
const hung = 20 * time.Second

// healthyTimeout is the failure policy's timeout while Redis is meant to
// answer, and redisClient's dial timeout: far above any scheduling delay
// of a loaded machine, so that a healthy call is never cut (and its answer
// degraded).
const healthyTimeout = 10 * time.Second

// breakerLog counts the failure policy's store calls by outcome.
type breakerLog struct {
	mu     sync.Mutex
	called int // calls that reached Redis (answered or not)
	kept   int // calls the open breaker kept from Redis
	opened int
	closed int
}

func (b *breakerLog) StoreCall(op, node string, took time.Duration, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(err, failure.ErrBreakerOpen) {
		b.kept++
	} else {
		b.called++
	}
}

func (b *breakerLog) BreakerChanged(node string, open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if open {
		b.opened++
	} else {
		b.closed++
	}
}

func (b *breakerLog) counts() (called, kept, opened, closed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.called, b.kept, b.opened, b.closed
}

// TestBreakerStalledRedis: behind the middleware, a Redis that stalls
// (behind a stalled proxy) makes the failure policy's breaker open once enough calls
// have timed out; from then on requests are answered by the failure mode
// without calling Redis (so without waiting for the timeout), until a
// probe after OpenFor finds Redis answering again and closes it.
func TestBreakerStalledRedis(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := redistest.StartServer(t)
	// The client reaches Redis through a proxy that stalls when told to and
	// until told otherwise: however long a loaded machine takes to send the
	// stalled requests, Redis cannot answer them.
	proxy := redistest.StartProxy(t, srv.Addr)
	rs, err := redisstore.New(redisClient(t, proxy.Addr))
	if err != nil {
		t.Fatal(err)
	}
	var log breakerLog
	// The breaker's time is a manual clock, so that it stays open for
	// however long the requests below take on a loaded machine.
	clock := floodgatetest.NewManualClock(base)
	// While Redis answers, a generous timeout: a busy machine must not
	// fail a healthy call. The short timeout applies from the stall on
	// (SetPolicy keeps the breaker's state).
	policy := failure.Policy{
		Mode: failure.Closed, Timeout: healthyTimeout,
		Breaker: failure.Breaker{Window: 10 * time.Second, MinCalls: 4, FailureRatio: 0.5, OpenFor: 300 * time.Millisecond},
	}
	store, err := failure.Wrap(rs, policy, failure.WithObserver(&log), failure.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	setTimeout := func(d time.Duration) {
		t.Helper()
		policy.Timeout = d
		if err := store.Guard().SetPolicy(policy); err != nil {
			t.Fatal(err)
		}
	}
	h := wrap(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: newLimiter(t, store, "shared", "fixed_window 100/1m"), Key: clientKey}}})
	if rec := do(t, h, get("a")); rec.Code != 200 {
		t.Fatalf("healthy: %d", rec.Code)
	}

	// Stalled: the next three calls wait for the timeout; the third opens
	// the breaker (4 calls, MinCalls, of which 3 failed, at least half).
	setTimeout(timeout)
	proxy.Stall()
	for n := range 3 {
		start := time.Now()
		rec := do(t, h, get("a"))
		if took := time.Since(start); rec.Code != 503 || took < timeout-5*time.Millisecond || took > hung {
			t.Fatalf("stalled request %d: %d after %v; want 503 after the %v timeout", n+1, rec.Code, took, timeout)
		}
	}
	called, kept, opened, _ := log.counts()
	if called != 4 || kept != 0 || opened != 1 {
		t.Fatalf("after 3 stalled calls: %d called, %d kept, %d opened; want 4, 0, 1", called, kept, opened)
	}
	// Open: answered at once, Redis not called.
	for n := range 20 {
		if rec := do(t, h, get("a")); rec.Code != 503 || rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("request %d with the breaker open: %d", n+1, rec.Code)
		}
	}
	if called2, kept2, _, _ := log.counts(); called2 != called || kept2 != 20 {
		t.Fatalf("with the breaker open: %d more calls reached Redis, %d were kept from it; want 0 and 20", called2-called, kept2)
	}

	// The stall ends and Redis answers again; after OpenFor a probe goes
	// through and closes the breaker: Redis decides again.
	proxy.Resume()
	if rec := do(t, h, get("a")); rec.Code != 503 {
		t.Fatalf("before OpenFor has passed: %d, want 503 (still open)", rec.Code)
	}
	// The generous timeout again: a busy machine must not fail the probe.
	setTimeout(healthyTimeout)
	clock.Advance(300 * time.Millisecond)
	if rec := do(t, h, get("a")); rec.Code != 200 {
		t.Fatalf("the probe after OpenFor: %d, want 200 (Redis decides)", rec.Code)
	}
	if _, _, opened, closed := log.counts(); opened != 1 || closed != 1 {
		t.Errorf("breaker opened %d and closed %d times, want 1 and 1", opened, closed)
	}
}
