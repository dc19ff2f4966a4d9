package httplimit_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/internal/rlheadertest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rlheader"
)

// TestRetryAfterProperty checks SPEC.md's promise for HTTP: a client that
// waits exactly Retry-After seconds is not refused again by the same
// policy. Random policies of all six algorithms (count_denied on, off and
// by default) go through their text form and floodgate.ParsePolicy, a
// single client sends requests at random times on a manual clock, and
// after every 429 with Retry-After: N the clock moves exactly N seconds and
// the same request must pass. A 429 without Retry-After must be a cost the
// policy can never admit: its RateLimit has no t, and it is refused again
// however long the client waits. Every header field of every response is
// checked as a Structured Field List.
func TestRetryAfterProperty(t *testing.T) {
	const policies, requests = 400, 40
	seed := uint64(20260901)
	var denials, retries, nevers int
	for i := range policies {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		random := floodgatetest.RandomPolicy(floodgatetest.RandChooser{R: rng}, "p")
		p, err := floodgate.ParsePolicy("p", random.String())
		if err != nil {
			t.Fatalf("policy %d: %s: %v", i, random, err)
		}
		clock := floodgatetest.NewManualClock(base)
		store, err := memstore.New(memstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := floodgate.NewLimiter(store, p)
		if err != nil {
			t.Fatal(err)
		}
		h := wrap(t, httplimit.Config{
			Rules:   []httplimit.Rule{{Limiter: lim, Key: clientKey}},
			Headers: rlheader.IETF | rlheader.XRateLimit | rlheader.RetryAfter,
		})
		var history []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("policy %q: %s\nhistory:\n%s", p.String(), fmt.Sprintf(format, args...), strings.Join(history, "\n"))
		}
		for range requests {
			clock.Advance(randomGap(rng))
			rec := do(t, h, get("client"))
			history = append(history, fmt.Sprintf("  t=%d µs: %d RateLimit=%s Retry-After=%s",
				clock.Micros()-base.UnixMicro(), rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After")))
			if rec.Code == 200 {
				continue
			}
			if rec.Code != 429 {
				fail("status %d", rec.Code)
			}
			denials++
			_, params := rlheadertest.ParseItem(t, rec.Header().Get("RateLimit"))
			ra := rec.Header().Get("Retry-After")
			if ra == "" {
				nevers++
				if _, ok := params["t"]; ok {
					fail("a 429 without Retry-After has RateLimit t=%d", params["t"])
				}
				clock.Advance(time.Hour)
				if rec := do(t, h, get("client")); rec.Code != 429 || rec.Header().Get("Retry-After") != "" {
					fail("a request refused without Retry-After got %d, Retry-After %q an hour later", rec.Code, rec.Header().Get("Retry-After"))
				}
				continue
			}
			n, err := strconv.ParseInt(ra, 10, 64)
			if err != nil || n < 1 {
				fail("Retry-After %q", ra)
			}
			if params["t"] != n {
				fail("RateLimit t=%d, Retry-After %d: they should name the same moment", params["t"], n)
			}
			clock.Advance(time.Duration(n) * time.Second)
			rec = do(t, h, get("client"))
			history = append(history, fmt.Sprintf("  t=%d µs: retry after %d s: %d", clock.Micros()-base.UnixMicro(), n, rec.Code))
			if rec.Code != 200 {
				fail("refused again after waiting Retry-After: %d s", n)
			}
			retries++
		}
		store.Close()
	}
	t.Logf("%d policies: %d denials, %d retries after Retry-After, %d never-admissible", policies, denials, retries, nevers)
	if retries < policies/4 || nevers == 0 {
		t.Errorf("too few cases exercised: %d retries, %d never-admissible", retries, nevers)
	}
}

// randomGap is the time between two requests: often none, often a few µs
// or ms, sometimes seconds or a minute, so that requests fall inside,
// across and between windows.
func randomGap(rng *rand.Rand) time.Duration {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return time.Duration(rng.Int64N(1000)) * time.Microsecond
	case 2:
		return time.Duration(rng.Int64N(300)) * time.Millisecond
	case 3:
		return time.Duration(rng.Int64N(3_000_000)) * time.Microsecond
	case 4:
		return time.Duration(rng.Int64N(70)) * time.Second
	}
	return time.Duration(rng.Int64N(100)) * time.Millisecond
}
