package rls_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/rls"
)

// countersEngine returns a newEngine on srv whose store keeps the
// descriptors' fixed windows as native counters (redisstore.WithCounters,
// SPEC.md "Counters"), each engine under its own key prefix; after the
// test it reports how many function calls and counter commands srv ran.
func countersEngine(srv *redistest.Server) newEngine {
	n := 0
	return func(t testing.TB, files ...string) (*rls.Engine, *floodgatetest.ManualClock) {
		t.Helper()
		n++
		c := redisClient(t, srv)
		clock := floodgatetest.NewManualClock(time.Unix(1714825800, 0))
		store, err := redisstore.New(c, redisstore.WithPrefix(fmt.Sprintf("cnt%d", n)), redisstore.WithClock(clock),
			redisstore.WithMinTTL(time.Hour), redisstore.WithCounters())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		cfg, err := parse(files...)
		if err != nil {
			t.Fatal(err)
		}
		return engineOn(t, cfg, store, clock), clock
	}
}

// TestCounters: envoyproxy/ratelimit's API answers on a Redis store with
// counters as on the memory store — hits, checks of 0 hits under the
// check-only twin, negative hits, overrides sharing a counter, atomic
// domains beside plain ones — and hits and checks are native commands,
// not function calls.
func TestCounters(t *testing.T) {
	srv := redistest.StartServer(t)
	newEngine := countersEngine(srv)
	t.Run("NegativeHits", func(t *testing.T) { testNegativeHits(t, newEngine) })
	t.Run("OverrideSharesCounter", func(t *testing.T) { testOverrideSharesCounter(t, newEngine) })
	// Hits and checks of 0 hits are native commands (a refund is a
	// function: counter.lua).
	fcalls, incrs, gets := srv.Calls(t, "fcall"), srv.Calls(t, "incrby"), srv.Calls(t, "get")
	t.Run("HitsAddendZero", func(t *testing.T) { testHitsAddendZero(t, newEngine) })
	if d := srv.Calls(t, "fcall") - fcalls; d != 0 {
		t.Errorf("%d function calls for hits and checks, want 0", d)
	}
	if srv.Calls(t, "incrby") == incrs || srv.Calls(t, "get") == gets {
		t.Error("no INCRBY or no GET: the counters were not used")
	}
	t.Run("AtomicDomain", func(t *testing.T) {
		eng, _ := newEngine(t, atomicOwn, atomicDomain("a"), atomicDomain("n"))
		fcalls := srv.Calls(t, "fcall")
		testAtomicDomain(t, eng)
		if srv.Calls(t, "fcall") == fcalls {
			t.Error("no function call: the atomic domain's groups were not decided by group.lua")
		}
	})
}
