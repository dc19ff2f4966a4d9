package httplimit_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
)

// redisClient returns a go-redis client for srv set up as the middleware
// needs: context deadlines honoured, no retries (a retried script could
// count twice), a short dial timeout.
func redisClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		DialTimeout:           50 * time.Millisecond,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFailurePolicyRedis runs each failure policy in front of a real
// redis-server that first answers, then hangs (CLIENT PAUSE), then is
// stopped mid-test. No request may take longer than the timeout plus a
// margin, and each policy answers as documented, with every degraded
// decision visible to the hook.
func TestFailurePolicyRedis(t *testing.T) {
	const timeout, margin = 50 * time.Millisecond, 100 * time.Millisecond
	srv := redistest.StartServer(t)
	e := newEnv(t)
	for i, mode := range []httplimit.FailureMode{httplimit.FailOpen, httplimit.FailClosed, httplimit.FailFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			if i > 0 {
				srv.Restart(t)
			}
			store, err := redisstore.New(redisClient(t, srv.Addr))
			if err != nil {
				t.Fatal(err)
			}
			fallback := e.limiter("local-"+mode.String(), "fixed_window 2/1m")
			var mu sync.Mutex
			var degraded []httplimit.Result
			h := wrap(t, httplimit.Config{
				Rules: []httplimit.Rule{{
					Limiter:  newLimiter(t, store, "shared", "fixed_window 3/1m align first"),
					Key:      clientKey,
					Fallback: fallback,
				}},
				Failure: httplimit.Failure{Mode: mode, Timeout: timeout},
				OnDecision: func(r *http.Request, res []httplimit.Result) {
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
				if took > timeout+margin {
					t.Errorf("a request took %v, more than the %v timeout plus %v", took, timeout, margin)
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
			if _, err := srv.Do(t, "CLIENT", "PAUSE", "2000", "ALL"); err != nil {
				t.Fatal(err)
			}
			for phase, client := range []string{"paused", "stopped"} {
				if phase == 1 {
					srv.Stop(t)
				}
				var slowest time.Duration
				defer func() { t.Logf("Redis %s: slowest request %v", client, slowest) }()
				for n := range 3 {
					code, hdr, took := timed(client)
					slowest = max(slowest, took)
					if phase == 0 && took < timeout-5*time.Millisecond {
						t.Errorf("%s request %d took %v: Redis answered while paused?", client, n+1, took)
					}
					switch mode {
					case httplimit.FailOpen:
						if code != 200 || hdr.Get("RateLimit") != "" {
							t.Errorf("%s request %d: %d, RateLimit %q; want 200 without RateLimit", client, n+1, code, hdr.Get("RateLimit"))
						}
					case httplimit.FailClosed:
						if code != 503 || hdr.Get("Retry-After") != "1" {
							t.Errorf("%s request %d: %d, Retry-After %q; want 503 with Retry-After 1", client, n+1, code, hdr.Get("Retry-After"))
						}
					case httplimit.FailFallback:
						want := map[bool]int{true: 200, false: 429}[n < 2] // the fallback's quota is 2
						if code != want || hdr.Get("RateLimit-Policy") != `"shared";q=3;w=60` {
							t.Errorf("%s request %d: %d, RateLimit-Policy %q; want %d from the fallback", client, n+1, code, hdr.Get("RateLimit-Policy"), want)
						}
					}
				}
			}
			if len(degraded) != 6 {
				t.Fatalf("%d degraded decisions reached the hook, want 6", len(degraded))
			}
			for n, r := range degraded {
				if !errors.Is(r.Err, floodgate.ErrUnavailable) || r.Fallback != (mode == httplimit.FailFallback) {
					t.Errorf("degraded decision %d: %+v (%v)", n, r, r.Err)
				}
			}
		})
	}
}
