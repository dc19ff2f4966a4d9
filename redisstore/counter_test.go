package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// TestConformanceCounters: the conformance suite on a store that keeps
// the fixed windows that count denied requests as counters (SPEC.md,
// "Counters"), in full on the functions' path; its vectors on the
// scripts' (a refund is a script there) and on a Cluster, whose
// concurrency TestCountersDifferential and the service's exactness tests
// check.
func TestConformanceCounters(t *testing.T) {
	t.Parallel()
	harness := func(c redis.UniversalClient, keys func() int, opts ...redisstore.Option) floodgatetest.Harness {
		h := replayHarness(c, keys, append(opts, redisstore.WithCounters())...)
		h.Counters = counted
		return h
	}
	t.Run("Functions", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		floodgatetest.Run(t, harness(client(t, srv), dbsize(t, srv)))
	})
	t.Run("Scripts", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		floodgatetest.RunVectors(t, harness(client(t, srv), dbsize(t, srv), redisstore.WithScripts()))
	})
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		floodgatetest.RunVectors(t, harness(clusterClient(t, cl), dbsize(t, cl.Nodes...)))
	})
}

// counted reports whether a store WithCounters keeps p as counters:
// SPEC.md's words, "a fixed_window policy with align: epoch,
// count_denied: true and no usage tracking".
func counted(p *floodgate.Policy) bool {
	return p.Algorithm == floodgate.FixedWindow && (p.Align == "" || p.Align == floodgate.AlignEpoch) &&
		p.CountDenied != nil && *p.CountDenied && !p.Track
}

// steppingClock moves step µs on at every read, from now.
type steppingClock struct {
	now  atomic.Int64
	step int64
}

func (c *steppingClock) Now() time.Time { return time.UnixMicro(c.now.Add(c.step) - c.step) }

// counterPolicy returns a fixed window the store keeps as counters.
func counterPolicy(name string, max int64, window time.Duration) floodgate.Policy {
	return floodgate.Policy{Name: name, Algorithm: floodgate.FixedWindow, Max: max, Window: window, CountDenied: new(true)}
}

// TestCounters: what SPEC.md's "Counters" says of a store's native
// counters, on a real server: the key and its TTL, native commands and no
// function call, the one exception to rule 1, saturation, the operations
// refused, and the policies left to the functions.
func TestCounters(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := client(t, srv)
	ctx := context.Background()
	base := time.UnixMicro(floodgatetest.BaseMicros) // a multiple of every window here
	clock := floodgatetest.NewManualClock(base)
	s := newStore(t, c, redisstore.WithClock(clock), redisstore.WithCounters(), redisstore.WithPrefix("ct"))
	// The clock is the test's, but a counter's TTL runs on the server's:
	// steps of a few seconds of the clock, which a loaded machine may take
	// longer to send than such a counter lives, run on long, whose
	// counters live an hour at least.
	long := newStore(t, c, redisstore.WithClock(clock), redisstore.WithCounters(), redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix("ct"))
	at := func(us int64) { clock.SetMicros(floodgatetest.BaseMicros + us) }
	takeOn := func(t *testing.T, s *redisstore.Store, p *floodgate.Policy, key string, n int64, peek bool) floodgate.Decision {
		t.Helper()
		d, err := s.Take(ctx, floodgate.Request{Policy: p, Key: key, N: n, Peek: peek})
		if err != nil {
			t.Fatalf("Take(%s, n=%d, peek=%v): %v", key, n, peek, err)
		}
		return d
	}
	take := func(t *testing.T, p *floodgate.Policy, key string, n int64, peek bool) floodgate.Decision {
		t.Helper()
		return takeOn(t, s, p, key, n, peek)
	}

	t.Run("NeedsClock", func(t *testing.T) {
		_, err := redisstore.New(c, redisstore.WithCounters())
		if err == nil || !strings.Contains(err.Error(), "WithClock") {
			t.Fatalf("New(WithCounters) without a clock: %v, want an error naming WithClock", err)
		}
	})

	t.Run("NativeCommands", func(t *testing.T) {
		// An hour's window, 3 s into it: the counter lives to the
		// window's end, 3,597 s on, however slowly the steps are sent.
		p := counterPolicy("native", 5, time.Hour)
		at(3_000_000)
		fcalls, evals, incrs, gets := srv.Calls(t, "fcall")+srv.Calls(t, "fcall_ro"), srv.Calls(t, "evalsha")+srv.Calls(t, "eval"), srv.Calls(t, "incrby"), srv.Calls(t, "get")
		sent := time.Now() // before the PEXPIRE of k{1}
		take(t, &p, "k{1}", 2, false)
		take(t, &p, "k{1}", 1, true)
		out := make([]storekit.Outcome, 3)
		s.TakeBatch(ctx, []floodgate.Request{{Policy: &p, Key: "k{1}", N: 1}, {Policy: &p, Key: "other", N: 1}, {Policy: &p, Key: "k{1}", N: 1, Peek: true}}, out)
		for i, o := range out {
			if o.Err != nil {
				t.Fatalf("TakeBatch %d: %v", i, o.Err)
			}
		}
		if out[2].Decision.Remaining != 1 {
			t.Errorf("the batch's peek after 3 of 5: remaining %d, want 1 (it sees the add before it)", out[2].Decision.Remaining)
		}
		if d := srv.Calls(t, "fcall") + srv.Calls(t, "fcall_ro") - fcalls; d != 0 {
			t.Errorf("%d function calls for counters, want 0", d)
		}
		if d := srv.Calls(t, "evalsha") + srv.Calls(t, "eval") - evals; d != 0 {
			t.Errorf("%d script calls for counters, want 0", d)
		}
		if d := srv.Calls(t, "incrby") - incrs; d != 3 {
			t.Errorf("%d INCRBY for 3 adds", d)
		}
		if d := srv.Calls(t, "get") - gets; d != 2 {
			t.Errorf("%d GET for 2 peeks", d)
		}
		// The key: the policy, the key escaped in its hash tag, the window's
		// index; the count; a TTL to the window's end (3,597 s from now).
		key := fmt.Sprintf("ct:native:{k%%7B1%%7D}:c%d", (floodgatetest.BaseMicros+3_000_000)/3_600_000_000)
		if v := srv.Must(t, "GET", key); v != "3" {
			t.Errorf("GET %s = %v, want 3", key, v)
		}
		// PTTL counts down in real time since that PEXPIRE, however long
		// a loaded machine took to get here.
		ttl := srv.Must(t, "PTTL", key).(int64)
		if least := 3_597_000 - time.Since(sent).Milliseconds() - 1; ttl < least || ttl > 3_597_000 {
			t.Errorf("PTTL %s = %d ms, want the window's end, 3,597,000 ms from the decision (at least %d ms now)", key, ttl, least)
		}
		// Reset deletes it.
		if err := s.Reset(ctx, &p, "k{1}"); err != nil {
			t.Fatal(err)
		}
		if n := srv.Must(t, "EXISTS", key).(int64); n != 0 {
			t.Errorf("after Reset, %s exists", key)
		}
	})

	t.Run("JoinedAdds", func(t *testing.T) {
		// SPEC.md, "Counters": a batch's adds to one counter are one
		// INCRBY of their sum, up to a peek of that counter, each
		// decided as if made alone, in order; a sum stays within
		// MaxCost.
		p := counterPolicy("join", 6, time.Hour)
		q := p
		q.Max = 8 // another limit on the same counter (an Envoy override)
		at(5_000_000)
		reqs := []floodgate.Request{
			{Policy: &p, Key: "hot", N: 2}, {Policy: &p, Key: "cold", N: 1}, {Policy: &q, Key: "hot", N: 3},
			{Policy: &p, Key: "hot", N: 2}, // 7 of 6: denied, and counted
			{Policy: &p, Key: "hot", N: 1, Peek: true},
			{Policy: &q, Key: "hot", N: 1}, {Policy: &q, Key: "hot", N: 1}, // 8 and 9 of 8
			{Policy: &p, Key: "cold", N: 2},
		}
		// Each decision is the one the same request gets alone, in order
		// (on other keys: alone's prefix).
		alone := newStore(t, c, redisstore.WithClock(clock), redisstore.WithCounters(), redisstore.WithPrefix("ct1"))
		batchAlone := func(reqs []floodgate.Request) {
			t.Helper()
			want := make([]storekit.Outcome, len(reqs))
			for i := range reqs {
				want[i].Decision, want[i].Err = alone.Take(ctx, reqs[i])
			}
			out := make([]storekit.Outcome, len(reqs))
			s.TakeBatch(ctx, reqs, out)
			for i := range reqs {
				if out[i] != want[i] {
					t.Errorf("decision %d (%s n=%d peek=%v max %d): %+v, %v in the batch; %+v, %v alone",
						i, reqs[i].Key, reqs[i].N, reqs[i].Peek, reqs[i].Policy.Max, out[i].Decision, out[i].Err, want[i].Decision, want[i].Err)
				}
			}
		}
		incrs, gets := srv.Calls(t, "incrby"), srv.Calls(t, "get")
		batchAlone(reqs)
		if d := srv.Calls(t, "incrby") - incrs; d != 3+7 {
			t.Errorf("%d INCRBY for 7 adds to 2 counters with a peek between, want 3 (and 7 alone)", d)
		}
		if d := srv.Calls(t, "get") - gets; d != 1+1 {
			t.Errorf("%d GET for 1 peek, want 1 (and 1 alone)", d)
		}
		key := fmt.Sprintf("ct:join:{hot}:c%d", (floodgatetest.BaseMicros+5_000_000)/3_600_000_000)
		if v := srv.Must(t, "GET", key); v != "9" {
			t.Errorf("GET %s = %v, want 9", key, v)
		}
		if ttl := srv.Must(t, "PTTL", key).(int64); ttl <= 0 {
			t.Errorf("PTTL %s = %d, want the window's end", key, ttl)
		}

		// Sums stay within MaxCost: 1 and MaxCost-1 are joined, MaxCost
		// is not, nor is 1 after it.
		at(3_600_000_000 + 5_000_000) // the next hour's window, new counters
		incrs = srv.Calls(t, "incrby")
		batchAlone([]floodgate.Request{{Policy: &p, Key: "big", N: 1}, {Policy: &p, Key: "big", N: floodgate.MaxCost - 1},
			{Policy: &p, Key: "big", N: floodgate.MaxCost}, {Policy: &p, Key: "big", N: 1}})
		if d := srv.Calls(t, "incrby") - incrs; d != 3+4 {
			t.Errorf("%d INCRBY for 1, MaxCost-1, MaxCost and 1, want 3 (and 4 alone)", d)
		}
		key = fmt.Sprintf("ct:join:{big}:c%d", (floodgatetest.BaseMicros+3_605_000_000)/3_600_000_000)
		if v, want := srv.Must(t, "GET", key), strconv.FormatInt(2*floodgate.MaxCost+1, 10); v != want {
			t.Errorf("GET %s = %v, want %s", key, v, want)
		}

		// A joined add's error is each add's.
		cut, cancel := context.WithCancel(ctx)
		cancel()
		out := make([]storekit.Outcome, 2)
		s.TakeBatch(cut, []floodgate.Request{{Policy: &p, Key: "hot", N: 1}, {Policy: &p, Key: "hot", N: 1}}, out)
		for i, o := range out {
			if !errors.Is(o.Err, context.Canceled) {
				t.Errorf("joined add %d with its context canceled: %+v, %v; want context.Canceled", i, o.Decision, o.Err)
			}
		}
	})

	t.Run("JoinedAddsOwnTimes", func(t *testing.T) {
		// Adds made at different times (a clock read per request, here
		// a second apart) are each decided at their own, and their
		// counter's TTL runs to the window's end from the earliest.
		mk := func(prefix string) *redisstore.Store {
			cl := &steppingClock{step: 1_000_000}
			cl.now.Store(floodgatetest.BaseMicros + 7_200_000_000 + 10_000_000) // 10 s into an hour's window
			return newStore(t, c, redisstore.WithClock(cl), redisstore.WithCounters(), redisstore.WithPrefix(prefix))
		}
		p := counterPolicy("own", 5, time.Hour)
		reqs := []floodgate.Request{{Policy: &p, Key: "k", N: 2}, {Policy: &p, Key: "k", N: 2}, {Policy: &p, Key: "k", N: 2}}
		alone, joined := mk("cta"), mk("ctj")
		want := make([]storekit.Outcome, len(reqs))
		for i := range reqs {
			want[i].Decision, want[i].Err = alone.Take(ctx, reqs[i])
		}
		sent := time.Now()
		out := make([]storekit.Outcome, len(reqs))
		joined.TakeBatch(ctx, reqs, out)
		for i := range reqs {
			if out[i] != want[i] {
				t.Errorf("add %d: %+v, %v in the batch; %+v, %v alone", i, out[i].Decision, out[i].Err, want[i].Decision, want[i].Err)
			}
		}
		if d := out[0].Decision; d.ResetAfter != 3590*time.Second || out[2].Decision.ResetAfter != 3588*time.Second {
			t.Errorf("reset_after %v and %v, want 3,590 s and 3,588 s (the adds' own times)", d.ResetAfter, out[2].Decision.ResetAfter)
		}
		key := fmt.Sprintf("ctj:own:{k}:c%d", (floodgatetest.BaseMicros+7_210_000_000)/3_600_000_000)
		ttl := srv.Must(t, "PTTL", key).(int64)
		if least := 3_590_000 - time.Since(sent).Milliseconds() - 1; ttl < least || ttl > 3_590_000 {
			t.Errorf("PTTL %s = %d ms, want the window's end from the earliest add, 3,590,000 ms (at least %d ms now)", key, ttl, least)
		}
	})

	t.Run("TTLOncePerSecond", func(t *testing.T) {
		// SPEC.md, "Counters": an add sends its counter's TTL unless the
		// store set it within the last second, and after its INCRBY when
		// the reply shows a new counter.
		p := counterPolicy("ttl", 1000, time.Hour)
		start := int64(2*3_600_000_000 + 1_000_000)
		at(start)
		key := fmt.Sprintf("ct:ttl:{k}:c%d", (floodgatetest.BaseMicros+start)/3_600_000_000)
		hasTTL := func(key, when string) {
			t.Helper()
			if ttl := srv.Must(t, "PTTL", key).(int64); ttl <= 0 {
				t.Errorf("%s: PTTL %s = %d, want the window's end", when, key, ttl)
			}
		}
		adds := int64(0)
		expires := func(when string, want int64, add func()) {
			t.Helper()
			before := srv.Calls(t, "pexpire")
			add()
			if d := srv.Calls(t, "pexpire") - before; d != want {
				t.Errorf("%s: %d PEXPIRE, want %d", when, d, want)
			}
		}
		addK := func() {
			adds++
			if d := take(t, &p, "k", 1, false); !d.Allowed || d.Remaining != 1000-adds {
				t.Errorf("add %d: %+v, want remaining %d", adds, d, 1000-adds)
			}
		}
		expires("3 adds within a second", 1, func() { addK(); addK(); addK() })
		hasTTL(key, "after them")
		at(start + 999_999)
		expires("an add 999,999 µs after the TTL was set", 0, addK)
		at(start + 1_000_000)
		expires("an add a second after", 1, addK)

		// Deleted behind the store's back (another replica's reset, an
		// eviction): the add that makes it again sets its TTL after it.
		srv.Must(t, "DEL", key)
		adds = 0
		expires("the add that makes the counter again", 1, addK)
		hasTTL(key, "made again")
		// A TTL lost (a failover that dropped the PEXPIRE): set again by
		// the first add a second after the store last set it.
		srv.Must(t, "PERSIST", key)
		at(start + 1_900_000)
		expires("an add within the second", 0, addK)
		at(start + 2_000_000)
		expires("an add a second after", 1, addK)
		hasTTL(key, "a second after the TTL was lost")
		// A clock stepped back: the TTL is sent.
		at(start + 1_500_000)
		expires("an add stamped earlier", 1, addK)

		// Batches keep the same rules: a counter made again and a new one.
		at(start + 2_000_000)
		srv.Must(t, "DEL", key)
		other := fmt.Sprintf("ct:ttl:{other}:c%d", (floodgatetest.BaseMicros+start)/3_600_000_000)
		expires("a batch of a counter made again and a new one", 2, func() {
			out := make([]storekit.Outcome, 2)
			s.TakeBatch(ctx, []floodgate.Request{{Policy: &p, Key: "k", N: 1}, {Policy: &p, Key: "other", N: 1}}, out)
			for i, o := range out {
				if o.Err != nil || o.Decision.Remaining != 999 {
					t.Errorf("batch %d: %+v %v, want remaining 999", i, o.Decision, o.Err)
				}
			}
		})
		hasTTL(key, "made again in a batch")
		hasTTL(other, "new in a batch")
		// The store's own reset forgets them: the next add sends its TTL
		// with its INCRBY (one PEXPIRE either way; the count is checked).
		if err := s.Reset(ctx, &p, "k"); err != nil {
			t.Fatal(err)
		}
		adds = 0
		expires("the add after a reset", 1, addK)
		hasTTL(key, "after a reset")
	})

	t.Run("NoRule1", func(t *testing.T) {
		// Within a window, a step stamped earlier counts with its own
		// reset_after; in an earlier window, in that window's counter.
		// On long: the counters outlive the steps.
		p := counterPolicy("back", 3, 10*time.Second)
		at(25_000_000)
		if d := takeOn(t, long, &p, "k", 2, false); d.Remaining != 1 || d.ResetAfter != 5*time.Second {
			t.Fatalf("add 2 at 25 s: %+v", d)
		}
		at(22_000_000)
		if d := takeOn(t, long, &p, "k", 1, false); !d.Allowed || d.Remaining != 0 || d.ResetAfter != 8*time.Second {
			t.Errorf("add 1 at 22 s, after one at 25 s: %+v, want allowed, remaining 0, reset_after 8 s (rule 1 would say 5 s)", d)
		}
		at(15_000_000)
		if d := takeOn(t, long, &p, "k", 1, false); !d.Allowed || d.Remaining != 2 || d.ResetAfter != 5*time.Second {
			t.Errorf("add 1 at 15 s, in the window before: %+v, want allowed, remaining 2, reset_after 5 s (its own window)", d)
		}
		at(26_000_000)
		if d := takeOn(t, long, &p, "k", 1, true); d.Allowed || d.RetryAfter != 4*time.Second {
			t.Errorf("peek at 26 s: %+v, want denied for 4 s (3 of 3 counted in this window)", d)
		}
	})

	t.Run("Saturation", func(t *testing.T) {
		// On long: the counter outlives the steps.
		p := counterPolicy("sat", 10, 10*time.Second)
		at(41_000_000)
		key := fmt.Sprintf("ct:sat:{k}:c%d", (floodgatetest.BaseMicros+41_000_000)/10_000_000)
		srv.Must(t, "SET", key, "9223372036854775000", "PX", "3600000")
		d := takeOn(t, long, &p, "k", floodgate.MaxCost, false)
		if d.Allowed || d.RetryAfter != floodgate.Never {
			t.Errorf("add of MaxCost past INCRBY's range: %+v, want denied for ever", d)
		}
		if d := takeOn(t, long, &p, "k", 1, false); d.Allowed || d.RetryAfter != 9*time.Second || d.Remaining != 0 {
			t.Errorf("add 1 on the saturated count: %+v, want denied for 9 s", d)
		}
		if v := srv.Must(t, "GET", key); v != "9223372036854775001" {
			t.Errorf("the count is %v, want the add of 1 only", v)
		}
		// Two adds joined in a batch, whose sum INCRBY refuses (the
		// first alone would pass): each is denied as on the saturated
		// count, as each would be alone.
		srv.Must(t, "SET", key, "9223372036854775800", "PX", "3600000")
		out := make([]storekit.Outcome, 2)
		long.TakeBatch(ctx, []floodgate.Request{{Policy: &p, Key: "k", N: 5}, {Policy: &p, Key: "k", N: 5}}, out)
		for i, o := range out {
			if o.Err != nil || o.Decision.Allowed || o.Decision.RetryAfter != 9*time.Second || o.Decision.Remaining != 0 {
				t.Errorf("joined add %d of 5 past INCRBY's range: %+v, %v; want denied for 9 s", i, o.Decision, o.Err)
			}
		}
		if v := srv.Must(t, "GET", key); v != "9223372036854775800" {
			t.Errorf("the count is %v, want it left as it was", v)
		}
		// A refund takes from 2^53-1, the twin's saturated count.
		d, err := long.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: floodgate.MaxCost - 5, Refund: true})
		if err != nil || !d.Allowed || d.Remaining != 4 {
			t.Errorf("refund of 2^53-6 from the saturated count: %+v, %v; want 5 left: allowed, remaining 4", d, err)
		}
		if v := srv.Must(t, "GET", key); v != "5" {
			t.Errorf("the count after the refund is %v, want 5", v)
		}
	})

	t.Run("RefundAfterFlush", func(t *testing.T) {
		// A refund's function missing: it is sent again as a script, once.
		p := counterPolicy("flush", 3, time.Minute)
		at(121_000_000)
		take(t, &p, "k", 3, false)
		srv.Must(t, "FUNCTION", "FLUSH")
		d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 2, Refund: true})
		if err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("refund 2 of 3 after FUNCTION FLUSH: %+v, %v; want allowed, remaining 1", d, err)
		}
		if d := take(t, &p, "k", 1, true); d.Remaining != 1 {
			t.Errorf("after the refund, a peek: %+v, want remaining 1 (the refund counted once)", d)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		p := counterPolicy("ref", 3, time.Minute)
		q := p
		q.Name, q.CountDenied = "plain", nil // a fixed window the functions keep
		at(61_000_000)
		for _, r := range []floodgate.Request{
			{Policy: &p, Key: "k", N: 1, Reserve: new(floodgate.Reservation)},
			{Policy: &p, Key: "k", N: 2, AtMost: true},
			{Policy: &q, Key: "k", N: 1, Group: []floodgate.Request{{Policy: &p, Key: "k"}}},
		} {
			_, err := s.Take(ctx, r)
			if !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), "counter") || !strings.Contains(err.Error(), `"ref"`) {
				t.Errorf("%+v: %v, want ErrInvalidPolicy naming the policy and counters", r, err)
			}
		}
		if d := take(t, &p, "k", 1, true); d.Remaining != 2 {
			t.Errorf("after the refused requests, a peek: %+v, want nothing counted", d)
		}
		if d := take(t, &q, "k", 1, false); !d.Allowed {
			t.Errorf("the plain fixed window: %+v", d)
		}
	})

	t.Run("OthersUseFunctions", func(t *testing.T) {
		at(70_000_000)
		incrs, fcalls := srv.Calls(t, "incrby"), srv.Calls(t, "fcall")
		for i, text := range []string{"fixed_window 5/10s", "fixed_window 5/10s count_denied false", "fixed_window 5/10s align first count_denied true",
			"fixed_window 5/10s count_denied true track", "gcra 5/10s count_denied true"} {
			p, err := floodgate.ParsePolicy(fmt.Sprintf("o%d", i), text)
			if err != nil {
				t.Fatal(err)
			}
			take(t, &p, "k", 1, false)
		}
		if d := srv.Calls(t, "incrby") - incrs; d != 0 {
			t.Errorf("%d INCRBY for policies that are not counters", d)
		}
		if d := srv.Calls(t, "fcall") - fcalls; d != 5 {
			t.Errorf("%d FCALL for 5 policies that are not counters", d)
		}
	})
}

// TestCountersConcurrentExact: goroutines sending batches of adds of 1 to
// one hot counter at once, across window edges on the system's clock (the
// adds of a batch joined into one INCRBY): whatever the timing, each
// window allowed exactly min(max, its count), which is what a fixed window
// that counts denied requests decides. The counters are kept an hour
// (WithMinTTL), so that each window's count can be read after.
func TestCountersConcurrentExact(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv), redisstore.WithClock(storekit.SystemClock{}), redisstore.WithCounters(),
		redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix("cx"))
	const max = 500
	p := counterPolicy("hot", max, 10*time.Millisecond)
	ctx := context.Background()
	var allowed, batches atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(300 * time.Millisecond)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]floodgate.Request, 1+g)
			for i := range reqs {
				reqs[i] = floodgate.Request{Policy: &p, Key: "k", N: 1}
			}
			out := make([]storekit.Outcome, len(reqs))
			for time.Now().Before(stop) {
				s.TakeBatch(ctx, reqs, out)
				for i, o := range out {
					if o.Err != nil {
						t.Errorf("add %d of a batch: %v", i, o.Err)
						return
					}
					if o.Decision.Allowed {
						allowed.Add(1)
					}
				}
				batches.Add(1)
				// Now and then a pause, so that on a quick machine
				// some windows stay under max.
				if rand.IntN(4) == 0 {
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	keys := srv.Must(t, "KEYS", "cx:hot:{k}:c*").([]any)
	var want, counted, full int64
	for _, k := range keys {
		n, err := strconv.ParseInt(srv.Must(t, "GET", k.(string)).(string), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		want += min(n, max)
		counted += n
		if n >= max {
			full++
		}
	}
	if got := allowed.Load(); got != want {
		t.Errorf("%d adds allowed, want %d: min(%d, the count) over %d windows", got, want, max, len(keys))
	}
	t.Logf("%d batches, %d adds over %d windows of 10 ms (%d of them at max or over), %d allowed", batches.Load(), counted, len(keys), full, allowed.Load())
}

// TestCountersDifferential: a store's counters decide as the memory store
// does, on random histories in time order of adds, peeks, refunds and
// resets, one by one and in batches, standalone and on a Cluster.
func TestCountersDifferential(t *testing.T) {
	t.Parallel()
	t.Run("Standalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		countersDifferential(t, client(t, srv), 40)
	})
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		countersDifferential(t, clusterClient(t, cl), 15)
	})
}

func countersDifferential(t *testing.T, c redis.UniversalClient, runs int) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0xc0))
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	mem, err := memstore.New(memstore.WithClock(clock), memstore.WithSweepInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := newStore(t, c, redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour), redisstore.WithCounters(), redisstore.WithPrefix(fmt.Sprintf("cd%d", seed%1e6)))
	ctx := context.Background()
	windows := []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second, 10 * time.Second, time.Minute}
	ops := 0
	for run := 0; run < runs; run++ {
		p := counterPolicy(fmt.Sprintf("r%d", run), rng.Int64N(7), windows[rng.IntN(len(windows))])
		q := p
		q.Max++ // the twin of a check: the same counter, another max (package rls)
		now := floodgatetest.BaseMicros + rng.Int64N(1_000_000_000)
		var history []string
		for i := 0; i < 150; i++ {
			now += []int64{0, 0, rng.Int64N(1000), rng.Int64N(3_000_000), rng.Int64N(200_000_000)}[rng.IntN(5)]
			clock.SetMicros(now)
			key := floodgatetest.DiffKeys[rng.IntN(5)]
			pol := []*floodgate.Policy{&p, &q}[rng.IntN(2)]
			n := []int64{1, 1, 1, 2, 3, 1 + rng.Int64N(12), floodgate.MaxCost}[rng.IntN(7)]
			var reqs []floodgate.Request
			switch k := rng.IntN(12); {
			case k == 0:
				history = append(history, fmt.Sprintf("at %d reset %q", now, key))
				for _, s := range []floodgate.Store{mem, red} {
					if err := s.Reset(ctx, &p, key); err != nil {
						t.Fatalf("Reset: %v", err)
					}
				}
				continue
			case k <= 2:
				reqs = []floodgate.Request{{Policy: pol, Key: key, N: n, Refund: true}}
			case k <= 4:
				reqs = []floodgate.Request{{Policy: pol, Key: key, N: n, Peek: true}}
			case k == 5:
				// Adds to one counter are joined (at most MaxCost in
				// all), up to a peek of it.
				for j := 0; j < 2+rng.IntN(6); j++ {
					n := 1 + rng.Int64N(3)
					if rng.IntN(20) == 0 {
						n = floodgate.MaxCost - rng.Int64N(2)
					}
					reqs = append(reqs, floodgate.Request{Policy: []*floodgate.Policy{&p, &q}[rng.IntN(2)], Key: floodgatetest.DiffKeys[rng.IntN(5)], N: n, Peek: rng.IntN(4) == 0})
				}
			default:
				reqs = []floodgate.Request{{Policy: pol, Key: key, N: n}}
			}
			want := make([]storekit.Outcome, len(reqs))
			for j, r := range reqs {
				want[j].Decision, want[j].Err = mem.Take(ctx, r)
				history = append(history, fmt.Sprintf("at %d %q max %d n=%d peek=%v refund=%v", now, r.Key, r.Policy.Max, r.N, r.Peek, r.Refund))
			}
			got := make([]storekit.Outcome, len(reqs))
			if len(reqs) > 1 {
				red.TakeBatch(ctx, reqs, got)
			} else {
				got[0].Decision, got[0].Err = red.Take(ctx, reqs[0])
			}
			for j := range reqs {
				ops++
				if got[j] != want[j] {
					t.Fatalf("%s: memory and counters disagree (batch of %d, request %d):\n  memory:   %+v\n  counters: %+v\nhistory:\n  %s",
						p.String(), len(reqs), j, want[j], got[j], strings.Join(history, "\n  "))
				}
			}
		}
	}
	t.Logf("%d random counter policies, %d decisions: memory and counters agree", runs, ops)
}

// TestCountersSlotMigration: while a slot moves between two masters (as
// redis-cli --cluster reshard moves it), counters of its keys are decided
// once each: a counter still on the old master there, a new one on the
// new master (ASK), in one batch; peeks and refunds alike; after the
// migration every count is where the new master serves it.
func TestCountersSlotMigration(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, clusterClient(t, cl), redisstore.WithClock(clock), redisstore.WithCounters(), redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix("cmig"))
	p := counterPolicy("mig", 3, time.Hour)
	old := "old"
	slot := redisstore.KeySlot(redisstore.DecisionKeys(s, &p, old)[0])
	var fresh []string
	for i := 0; len(fresh) < 2; i++ {
		if k := "k" + strconv.Itoa(i); redisstore.KeySlot(redisstore.DecisionKeys(s, &p, k)[0]) == slot {
			fresh = append(fresh, k)
		}
	}
	if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: old, N: 1}); err != nil {
		t.Fatal(err)
	}

	a, b, bid := startMigration(t, cl, slot)
	reqs := []floodgate.Request{
		{Policy: &p, Key: old, N: 1}, {Policy: &p, Key: fresh[0], N: 1}, {Policy: &p, Key: old, N: 1},
		{Policy: &p, Key: fresh[1], N: 1, Peek: true}, {Policy: &p, Key: fresh[0], N: 1, Peek: true},
	}
	out := make([]storekit.Outcome, len(reqs))
	s.TakeBatch(ctx, reqs, out)
	for i, want := range []int64{1, 2, 0, 2, 1} {
		if o := out[i]; o.Err != nil || !o.Decision.Allowed || o.Decision.Remaining != want {
			t.Fatalf("batch during the migration, decision %d: %+v, %v; want allowed, %d remaining", i, o.Decision, o.Err, want)
		}
	}
	if d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: old, N: 2, Refund: true}); err != nil || d.Remaining != 1 {
		t.Fatalf("refund of 2 of 3 during the migration: %+v, %v; want remaining 1 (a peek of 1 on a count of 1)", d, err)
	}
	if n := finishMigration(t, cl, slot, a, b, bid); n == 0 {
		t.Fatal("no key on the migrating master")
	}
	for _, c := range []struct {
		key  string
		want int64
	}{{old, 1}, {fresh[0], 1}, {fresh[1], 2}} {
		d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: c.key, N: 1, Peek: true})
		if err != nil || d.Remaining != c.want {
			t.Errorf("%s after the migration: %+v, %v; want remaining %d", c.key, d, err, c.want)
		}
	}
	if n := len(a.Must(t, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(slot), "1000").([]any)); n != 0 {
		t.Errorf("%d keys of the slot left on the old master", n)
	}
	if n := len(b.Must(t, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(slot), "1000").([]any)); n != 2 {
		t.Errorf("%d keys of the slot on the new master, want 2 counters (the old key's, fresh[0]'s)", n)
	}
}
