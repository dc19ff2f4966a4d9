package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
)

// storeTarget is a Target over an in-process store: memstore is exact, so
// a run against it must score an accuracy of 1.
type storeTarget struct {
	s floodgate.Store
	p *floodgate.Policy
}

func (t storeTarget) Take(ctx context.Context, key string, n int64) (Outcome, error) {
	d, err := t.s.Take(ctx, floodgate.Request{Policy: t.p, Key: key, N: n})
	return Outcome{Allowed: d.Allowed, Degraded: d.Degraded}, err
}

func (t storeTarget) Close() error { return nil }

func newMemTarget(t *testing.T, p *floodgate.Policy) storeTarget {
	t.Helper()
	m, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return storeTarget{s: m, p: p}
}

// funcTarget is a Target made of a function.
type funcTarget func(ctx context.Context, key string, n int64) (Outcome, error)

func (f funcTarget) Take(ctx context.Context, key string, n int64) (Outcome, error) {
	return f(ctx, key, n)
}

func (f funcTarget) Close() error { return nil }

func mustRun(t *testing.T, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// Policies of every algorithm that refill within a run of a few hundred
// ms, so that the twins see windows end, buckets expire and tokens come
// back while requests are in flight.
var fastPolicies = []string{
	"fixed_window 20/30ms",
	"fixed_window 20/30ms align first",
	"sliding_window 10/20ms resolution 5ms, 30/100ms resolution 20ms",
	"sliding_log 15/25ms",
	"sliding_log 15/25ms min_interval 1ms count_denied false",
	"token_bucket 40/50ms burst 10",
	"gcra 500/1s burst 8",
	"ar1 6/5ms decay 2",
}

// TestExactStoreScoresOne: against memstore, which is exact, every
// algorithm scores an accuracy of exactly 1 with demand above the limit,
// on one hot key shared by every worker and on many keys, with costs of
// 1 and 2: no over- and no under-admission.
func TestExactStoreScoresOne(t *testing.T) {
	for _, text := range fastPolicies {
		for _, c := range []struct {
			name string
			keys int
			dist Distribution
			cost int64
		}{{"hot key", 1, Uniform, 1}, {"per worker", 0, PerWorker, 2}, {"zipf", 200, Zipf, 1}} {
			t.Run(text+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				p := mustPolicy(t, text)
				rep := mustRun(t, Config{
					Target: newMemTarget(t, p), Policy: p, Concurrency: 4, Iterations: 400,
					Keys: c.keys, Distribution: c.dist, Cost: c.cost,
				})
				a := rep.Accuracy
				if a == nil || a.Ratio == nil {
					t.Fatalf("accuracy %+v: want a ratio", a)
				}
				if a.Over() {
					t.Fatalf("accuracy %+v: over-admission reported for an exact store", a)
				}
				if a.Ideal > a.Bound {
					t.Fatalf("accuracy %+v: an ideal above the bound", a)
				}
				// The twins are exact for keys with one request in flight
				// at a time, but for the algorithms whose state is anchored
				// at the request that created it (package documentation,
				// "A known limit"); elsewhere they estimate.
				anchored := p.Algorithm == floodgate.TokenBucket || p.Algorithm == floodgate.FixedWindow && p.Align == floodgate.AlignFirst
				if c.dist == PerWorker && !anchored && (*a.Ratio != 1 || a.OverAdmitted != 0 || a.UnderAdmitted != 0) {
					t.Fatalf("accuracy %+v (ratio %v), want exactly 1", a, ratioOf(a))
				}
				if rep.Denied == 0 || rep.Allowed == 0 {
					t.Fatalf("allowed %d, denied %d: the demand should exceed the limit", rep.Allowed, rep.Denied)
				}
				if a.Admitted != rep.Allowed*c.cost || a.Admitted > a.Bound {
					t.Errorf("admitted %d, allowed %d × cost %d, bound %d", a.Admitted, rep.Allowed, c.cost, a.Bound)
				}
			})
		}
	}
}

func ratioOf(a *Accuracy) any {
	if a == nil || a.Ratio == nil {
		return nil
	}
	return *a.Ratio
}

// TestOverAdmissionIsReported: a limiter that admits everything, and one
// with the seed's off-by-one (max+1 per window, vector RT-01), are both
// reported as over-admission, by exactly what they admitted too much.
func TestOverAdmissionIsReported(t *testing.T) {
	p := mustPolicy(t, "fixed_window 10/1h align first")
	t.Run("admits everything", func(t *testing.T) {
		yes := funcTarget(func(context.Context, string, int64) (Outcome, error) { return Outcome{Allowed: true}, nil })
		rep := mustRun(t, Config{Target: yes, Policy: p, Concurrency: 3, Iterations: 50, Cost: 1})
		a := rep.Accuracy
		if !a.Over() || a.OverAdmitted != 150-30 || a.OverKeys != 3 || a.BeyondBound != 120 || a.Ideal != 30 || a.Bound != 30 {
			t.Fatalf("accuracy %+v: want 120 over-admitted on 3 keys, all beyond the bound", a)
		}
		if *a.Ratio != 5 {
			t.Errorf("ratio %v, want 5", *a.Ratio)
		}
		var text bytes.Buffer
		rep.WriteText(&text)
		if !strings.Contains(text.String(), "OVER-ADMISSION") || !strings.Contains(text.String(), "120 more than SPEC.md allows for the keys' spans") ||
			!strings.Contains(text.String(), "the twins place the excess at 120 on 3 of 3 keys") {
			t.Errorf("the summary does not shout:\n%s", text.String())
		}
	})
	t.Run("off by one", func(t *testing.T) {
		loose := *p
		loose.Max++
		// 400 requests drawn at random among 5 keys: that one of them gets
		// fewer than the 11 it takes to be over has a chance of 2·10^-25
		// (with the 120 this test used to send, about 1 run in 500).
		rep := mustRun(t, Config{Target: newMemTarget(t, &loose), Policy: p, Concurrency: 4, Iterations: 100, Keys: 5, Distribution: Uniform, Cost: 1})
		a := rep.Accuracy
		if !a.Over() || a.OverAdmitted != int64(a.Keys) || a.OverKeys != a.Keys || a.BeyondBound != int64(a.Keys) {
			t.Fatalf("accuracy %+v: want one request over on every key", a)
		}
	})
	t.Run("degraded answers", func(t *testing.T) {
		// A service failing open admits everything, flagged degraded: the
		// failure policy's answers are left out of accuracy, and said so.
		open := funcTarget(func(context.Context, string, int64) (Outcome, error) {
			return Outcome{Allowed: true, Degraded: true}, nil
		})
		rep := mustRun(t, Config{Target: open, Policy: p, Concurrency: 2, Iterations: 20, Cost: 1})
		a := rep.Accuracy
		if a.Over() || a.Admitted != 0 || a.Keys != 0 || rep.Degraded != 40 || rep.Allowed != 40 {
			t.Fatalf("accuracy %+v, degraded %d, allowed %d: want the 40 degraded answers left out", a, rep.Degraded, rep.Allowed)
		}
		if len(rep.Notes) == 0 || !strings.Contains(strings.Join(rep.Notes, "\n"), "accuracy leaves them out") {
			t.Errorf("notes %q: want one about the degraded answers", rep.Notes)
		}
	})
	t.Run("admits nothing", func(t *testing.T) {
		no := funcTarget(func(context.Context, string, int64) (Outcome, error) { return Outcome{}, nil })
		rep := mustRun(t, Config{Target: no, Policy: p, Concurrency: 2, Iterations: 20, Cost: 1})
		a := rep.Accuracy
		if a.Over() || a.UnderAdmitted != 20 || a.UnderKeys != 2 || *a.Ratio != 0 {
			t.Fatalf("accuracy %+v: want 20 under-admitted on 2 keys, ratio 0", a)
		}
	})
}

// fakeClock is a clock that moves only when told to, or when a worker
// sleeps until a later time. With one worker a run on it is a
// deterministic simulation.
type fakeClock struct {
	mu sync.Mutex
	t  time.Duration
}

func (c *fakeClock) now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t += d
	c.mu.Unlock()
}

func (c *fakeClock) sleepUntil(ctx context.Context, t time.Duration) bool {
	c.mu.Lock()
	c.t = max(c.t, t)
	c.mu.Unlock()
	return ctx.Err() == nil
}

func (c *fakeClock) wallStartUS() int64 { return base }

// slowTarget takes service to answer every request, on clock c.
func slowTarget(c *fakeClock, service time.Duration) funcTarget {
	return func(context.Context, string, int64) (Outcome, error) {
		c.advance(service)
		return Outcome{Allowed: true}, nil
	}
}

// TestOpenLoopMeasuresFromIntendedStart: a target that takes 10 ms per
// request, sent 1,000 arrivals per second by one worker, falls further
// behind with every arrival; arrival i, due at i ms, is answered at
// 10·(i+1) ms, so its latency is 9i + 10 ms, growing to 451 ms for the
// 50th. Closed loop, the same target shows 10 ms throughout; and open
// loop below its capacity, 10 ms too.
func TestOpenLoopMeasuresFromIntendedStart(t *testing.T) {
	const ms = time.Millisecond
	clk := &fakeClock{}
	rep, err := Run(context.Background(), Config{
		Target: slowTarget(clk, 10*ms), Concurrency: 1, Iterations: 50, Rate: 1000, Cost: 1, clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Latency
	if l.Min != 10000 || l.Max != 451000 {
		t.Errorf("open loop above capacity: latency min %vµs, max %vµs; want 10000 and 451000 (9i+10 ms)", l.Min, l.Max)
	}
	// The median is arrival 24's (rank 25 of 50): 9·24 + 10 = 226 ms.
	if l.P50 < 226000 || l.P50 > 226000*(1+1.0/512) {
		t.Errorf("open loop: p50 %vµs, want 226 ms", l.P50)
	}
	if rep.Workload.Mode != "open" || rep.Decisions != 50 || rep.Unsent != 0 {
		t.Errorf("mode %s, decisions %d, unsent %d; want open, 50, 0", rep.Workload.Mode, rep.Decisions, rep.Unsent)
	}

	clk = &fakeClock{}
	rep = mustRun(t, Config{Target: slowTarget(clk, 10*ms), Concurrency: 1, Iterations: 50, Cost: 1, clock: clk})
	if l := rep.Latency; l.Min != 10000 || l.Max != 10000 {
		t.Errorf("closed loop: latency %v..%vµs, want 10 ms throughout", l.Min, l.Max)
	}

	clk = &fakeClock{}
	rep = mustRun(t, Config{Target: slowTarget(clk, 10*ms), Concurrency: 1, Iterations: 50, Rate: 50, Cost: 1, clock: clk})
	if l := rep.Latency; l.Min != 10000 || l.Max != 10000 {
		t.Errorf("open loop below capacity: latency %v..%vµs, want 10 ms throughout", l.Min, l.Max)
	}
}

// TestOpenLoopUnsent: with a duration, the arrivals due before the end
// that the slow target left no time to send are counted as unsent. Over
// 100 ms at 1,000/s, a 10 ms target answers 10 and leaves 90.
func TestOpenLoopUnsent(t *testing.T) {
	clk := &fakeClock{}
	rep := mustRun(t, Config{Target: slowTarget(clk, 10*time.Millisecond), Concurrency: 1, Duration: 100 * time.Millisecond, Rate: 1000, Cost: 1, clock: clk})
	if rep.Decisions != 10 || rep.Unsent != 90 {
		t.Errorf("decisions %d, unsent %d; want 10 and 90", rep.Decisions, rep.Unsent)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "90 arrivals") }) {
		t.Errorf("notes %q should say 90 arrivals were never sent", rep.Notes)
	}
}

// TestOpenLoopRealClock is the same on the system clock, asserting only
// what sleeping guarantees: two workers that each take at least 5 ms per
// request cannot have sent the last of 40 arrivals (due at 19.5 ms) before
// 95 ms, so its latency from its scheduled time is at least 80 ms, where
// a measurement from the moment of sending would read about 5 ms.
func TestOpenLoopRealClock(t *testing.T) {
	slow := funcTarget(func(context.Context, string, int64) (Outcome, error) {
		time.Sleep(5 * time.Millisecond)
		return Outcome{Allowed: true}, nil
	})
	rep := mustRun(t, Config{Target: slow, Concurrency: 2, Iterations: 20, Rate: 2000, Cost: 1})
	if rep.Decisions != 40 {
		t.Fatalf("decisions %d, want 40", rep.Decisions)
	}
	if rep.Latency.Max < 80000 {
		t.Errorf("max latency %vµs, want at least 80 ms: latency must run from each arrival's scheduled time", rep.Latency.Max)
	}
}

// TestInterrupt: cancelling the context (Ctrl-C) stops the run; the report
// has what was done, requests in flight included, and says so.
func TestInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	target := funcTarget(func(ctx context.Context, _ string, _ int64) (Outcome, error) {
		if n.Add(1) == 100 {
			cancel()
		}
		return Outcome{Allowed: true}, ctx.Err() // a request in flight still finishes
	})
	rep, err := Run(ctx, Config{Target: target, Concurrency: 2, Duration: time.Hour, Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || rep.Decisions < 100 || rep.Errors != 0 {
		t.Errorf("interrupted %v, decisions %d, errors %d: want true, ≥ 100, 0", rep.Interrupted, rep.Decisions, rep.Errors)
	}
}

// TestEveryRequestFails: a target that only fails stops the run early
// with its error.
func TestEveryRequestFails(t *testing.T) {
	bad := funcTarget(func(context.Context, string, int64) (Outcome, error) {
		return Outcome{}, errors.New("HTTP 404 unknown_policy: no such policy")
	})
	rep, err := Run(context.Background(), Config{Target: bad, Concurrency: 2, Duration: time.Hour, Cost: 1})
	if err == nil || !strings.Contains(err.Error(), "unknown_policy") {
		t.Fatalf("err = %v, want the target's error", err)
	}
	if rep == nil || rep.Errors < abortAfter || rep.FirstError == "" {
		t.Fatalf("report %+v: want the errors counted", rep)
	}
}

// TestProgressLines: off a terminal, progress comes as plain lines with
// decisions/s, allowed, denied, errors, p99 and the time left.
func TestProgressLines(t *testing.T) {
	var out syncBuffer
	p := mustPolicy(t, "gcra 100/1s burst 5")
	runUntil(t, Config{
		Target: slowStore(newMemTarget(t, p), time.Millisecond), Policy: p, Concurrency: 2, Duration: 10 * time.Second,
		Cost: 1, Progress: &out, ProgressMode: ProgressLines, ProgressEvery: 20 * time.Millisecond,
	}, func() bool { return strings.Count(out.String(), "\n") >= 2 })
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	line := regexp.MustCompile(`^ +\d+\.\ds  [\d,.]+ decisions/s  allowed [\d,]+  denied [\d,]+  errors 0  p99 [\d.]+(µs|ms|s)  [\d.]+m?s left$`)
	if len(lines) < 2 {
		t.Fatalf("%d progress lines:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		if !line.MatchString(l) {
			t.Errorf("progress line %q does not match %s", l, line)
		}
	}
	if strings.Contains(out.String(), "\r") {
		t.Error("plain progress lines must not use \\r")
	}
}

// TestProgressTTY: on a terminal, one line redrawn in place with \r, and
// erased at the end so that the summary starts on a clean line.
func TestProgressTTY(t *testing.T) {
	var out syncBuffer
	p := mustPolicy(t, "gcra 100/1s burst 5")
	runUntil(t, Config{
		Target: slowStore(newMemTarget(t, p), time.Millisecond), Policy: p, Concurrency: 2, Duration: 10 * time.Second,
		Cost: 1, Progress: &out, ProgressMode: ProgressTTY,
	}, func() bool { return strings.Contains(out.String(), "decisions/s") })
	s := out.String()
	if strings.Contains(s, "\n") || !strings.HasPrefix(s, "\r") || !strings.HasSuffix(s, "\r\x1b[K") || !strings.Contains(s, "decisions/s") {
		t.Errorf("terminal progress %q: want lines redrawn with \\r, no newline, erased at the end", s)
	}
}

// runUntil runs cfg until done reports true (polled every 10 ms), then
// stops it as Ctrl-C does: a run that ends on what it printed, not on how
// much a loaded machine let it print in a fixed time. A run of
// cfg.Duration that ends before done fails the test.
func runUntil(t *testing.T, cfg Config, done func() bool) *Report {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rep *Report
		err error
	}
	ran := make(chan result, 1)
	go func() {
		rep, err := Run(ctx, cfg)
		ran <- result{rep, err}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-ran:
			t.Fatalf("the run ended (%v) before what the test waits for", r.err)
		case <-tick.C:
		}
		if done() {
			break
		}
	}
	cancel()
	r := <-ran
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	return r.rep
}

// slowStore delays every answer of t by d.
func slowStore(t Target, d time.Duration) funcTarget {
	return func(ctx context.Context, key string, n int64) (Outcome, error) {
		time.Sleep(d)
		return t.Take(ctx, key, n)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// schema is the JSON report's schema, field by field: docs/bench.md
// documents every one, and a change here is a change of the stable
// output.
var schema = map[string][]string{
	"":           {"version", "target", "workload", "interrupted", "elapsed_s", "requests", "decisions", "decisions_per_s", "allowed", "denied", "errors", "first_error", "degraded", "backpressure", "unsent", "latency_us", "accuracy", "redis", "notes"},
	"target":     {"kind", "address", "policy_name", "policy", "domain", "descriptor"},
	"workload":   {"mode", "concurrency", "rate", "iterations", "duration_s", "keys", "distribution", "zipf_s", "cost"},
	"latency_us": {"min", "mean", "p50", "p90", "p99", "p999", "max"},
	"accuracy":   {"ratio", "admitted", "ideal", "bound", "keys", "over_admitted", "over_keys", "under_admitted", "under_keys", "beyond_bound"},
	"redis":      {"servers", "cpu_s", "cpu_us_per_decision", "decisions_per_cpu_s", "commands", "commands_per_decision", "reads", "reads_per_decision"},
}

// TestJSONSchema: the --json report has exactly the documented fields, in
// the documented order, with numbers where numbers are documented; and
// docs/bench.md names every field.
func TestJSONSchema(t *testing.T) {
	p := mustPolicy(t, "gcra 10/1s burst 3")
	rep := mustRun(t, Config{
		Target: newMemTarget(t, p), Policy: p, Concurrency: 2, Iterations: 20, Cost: 1,
		Info: TargetInfo{Kind: "grpc", Address: "127.0.0.1:8081", PolicyName: "p", Policy: p.String(), Domain: "d", Descriptor: []string{"k"}},
	})
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	checkObject(t, buf.Bytes(), "")
	var m map[string]any
	json.Unmarshal(buf.Bytes(), &m)
	if m["version"] != float64(ReportVersion) {
		t.Errorf("version %v, want %d", m["version"], ReportVersion)
	}
	for _, k := range []string{"elapsed_s", "requests", "decisions", "decisions_per_s", "allowed", "denied", "errors", "degraded", "backpressure", "unsent"} {
		if _, ok := m[k].(float64); !ok {
			t.Errorf("%s is %T, want a number", k, m[k])
		}
	}
	if r := m["accuracy"].(map[string]any)["ratio"]; r != 1.0 {
		t.Errorf("accuracy.ratio = %v, want 1", r)
	}
	if notes, ok := m["notes"].([]any); !ok || len(notes) != 0 {
		t.Errorf("notes = %v, want an empty list", m["notes"])
	}

	if v, ok := m["redis"]; !ok || v != nil {
		t.Errorf("redis = %v, want null without Config.Server", v)
	}

	// Without a policy, accuracy is null; with a Server, redis is an
	// object.
	rep = mustRun(t, Config{Target: newMemTarget(t, p), Concurrency: 1, Iterations: 3, Cost: 1,
		Server: &fakeServer{step: ServerCounters{Servers: 1, CPU: time.Millisecond, Commands: 5, Reads: 2}}})
	buf.Reset()
	rep.WriteJSON(&buf)
	checkObject(t, buf.Bytes(), "")
	json.Unmarshal(buf.Bytes(), &m)
	if v, ok := m["accuracy"]; !ok || v != nil {
		t.Errorf("accuracy = %v, want null without a policy", v)
	}

	doc, err := os.ReadFile("../../docs/bench.md")
	if err != nil {
		t.Fatal(err)
	}
	for obj, fields := range schema {
		for _, f := range fields {
			name := f
			if obj != "" {
				name = obj + "." + f
			}
			if !bytes.Contains(doc, []byte("`"+name+"`")) {
				t.Errorf("docs/bench.md does not document `%s`", name)
			}
		}
	}
}

// checkObject checks that data, an object at path obj of the schema, has
// exactly its fields in order, and recurses into the nested objects.
func checkObject(t *testing.T, data []byte, obj string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q: not an object", obj)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		k := tok.(string)
		keys = append(keys, k)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		if _, nested := schema[k]; nested && obj == "" && string(raw) != "null" {
			checkObject(t, raw, k)
		}
	}
	if !slices.Equal(keys, schema[obj]) {
		t.Errorf("object %q has fields\n%q\nwant\n%q", obj, keys, schema[obj])
	}
}

// base is a start time that is a multiple of every duration of the tests'
// policies, as the vectors' replay base is.
const base = 1_699_992_000_000_000

func mustPolicy(t testing.TB, text string) *floodgate.Policy {
	t.Helper()
	p, err := floodgate.ParsePolicy("p", text)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestBackpressureCounted: backpressure answers are counted apart — not
// allowed, not denied, not degraded, not errors — and left out of
// accuracy, which stays exact: a store that refuses every third request
// before deciding it scores no over-admission.
func TestBackpressureCounted(t *testing.T) {
	p := mustPolicy(t, "fixed_window 50/1h")
	m := newMemTarget(t, p)
	var n atomic.Int64
	target := funcTarget(func(ctx context.Context, key string, cost int64) (Outcome, error) {
		if n.Add(1)%3 == 0 {
			return Outcome{Backpressure: true}, nil
		}
		return m.Take(ctx, key, cost)
	})
	rep := mustRun(t, Config{Target: target, Policy: p, Concurrency: 4, Iterations: 75, Keys: 1, Distribution: Uniform, Cost: 1})
	if rep.Backpressure != 100 || rep.Degraded != 0 || rep.Errors != 0 {
		t.Errorf("backpressure %d, degraded %d, errors %d; want 100, 0, 0", rep.Backpressure, rep.Degraded, rep.Errors)
	}
	if rep.Allowed != 50 || rep.Denied != 150 || rep.Decisions != 200 || rep.Requests != 300 {
		t.Errorf("allowed %d, denied %d, decisions %d, requests %d; want 50, 150, 200, 300", rep.Allowed, rep.Denied, rep.Decisions, rep.Requests)
	}
	if a := rep.Accuracy; a == nil || a.Over() || a.OverAdmitted != 0 {
		t.Errorf("accuracy %+v: want no over-admission", a)
	}
	var buf bytes.Buffer
	rep.WriteText(&buf)
	if !strings.Contains(buf.String(), "backpressure 100") {
		t.Errorf("the text report does not show the backpressure answers:\n%s", buf.String())
	}
}

// fakeServer is a ServerStats whose counters grow by step at each Read,
// or that fails with err; servers, when set, are the Servers of the
// second Read on.
type fakeServer struct {
	step    ServerCounters
	now     ServerCounters
	err     error
	servers int
	changed string // Changed from the second Read on
	n       int
}

func (f *fakeServer) Read(context.Context) (ServerCounters, error) {
	if f.err != nil {
		return ServerCounters{}, f.err
	}
	f.n++
	f.now.Servers = f.step.Servers
	if f.n > 1 && f.servers > 0 {
		f.now.Servers = f.servers
	}
	if f.n > 1 {
		f.now.Changed = f.changed
	}
	f.now.CPU += f.step.CPU
	f.now.Commands += f.step.Commands
	if f.step.Reads < 0 {
		f.now.Reads = -1
	} else {
		f.now.Reads += f.step.Reads
	}
	return f.now, nil
}

// TestRedisCost: the report's Redis figures are the difference of the
// server's counters from before the run to after it, per decision; reads
// the server does not report are null; a failed read, or a different
// number of servers after the run, leaves the figures out with a note
// that says why, and the run stands.
func TestRedisCost(t *testing.T) {
	p := mustPolicy(t, "gcra 1000/1s burst 1000")
	run := func(srv ServerStats) *Report {
		return mustRun(t, Config{Target: newMemTarget(t, p), Policy: p, Concurrency: 2, Iterations: 50, Cost: 1, Server: srv})
	}
	rep := run(&fakeServer{step: ServerCounters{Servers: 3, CPU: 2 * time.Millisecond, Commands: 250, Reads: 100}})
	c := rep.Redis
	if rep.Decisions != 100 || c == nil || c.Servers != 3 || c.CPUSeconds != 0.002 || c.CPUPerDecision != 20 || c.DecisionsPerCPUSecond != 50000 ||
		c.Commands != 250 || c.CommandsPerDecision != 2.5 || c.Reads == nil || *c.Reads != 100 || *c.ReadsPerDecision != 1 {
		t.Fatalf("decisions %d, redis %+v: want 3 servers, 20 µs, 50,000 a core-second, 2.5 commands and 1 read a decision", rep.Decisions, c)
	}
	var buf bytes.Buffer
	rep.WriteText(&buf)
	if want := "redis      cpu 20.00 µs/decision (one core: 50,000 decisions/s)   commands 2.50/decision   reads 1.00/decision   (3 servers)"; !strings.Contains(buf.String(), want) {
		t.Errorf("text report:\n%s\nwant the line %q", buf.String(), want)
	}

	if c := run(&fakeServer{step: ServerCounters{Servers: 1, CPU: time.Millisecond, Commands: 100, Reads: -1}}).Redis; c == nil || c.Reads != nil || c.ReadsPerDecision != nil || c.CommandsPerDecision != 1 {
		t.Errorf("reads unknown: redis %+v, want null reads", c)
	}
	for _, f := range []struct {
		srv  *fakeServer
		want string
	}{
		{&fakeServer{err: errors.New("NOPERM no INFO")}, "its counters could not be read: NOPERM no INFO"},
		{&fakeServer{step: ServerCounters{Servers: 3}, servers: 2}, "3 servers before the run and 2 after"},
		{&fakeServer{step: ServerCounters{Servers: 1}, changed: "127.0.0.1:1 restarted"}, "the servers changed during the run (127.0.0.1:1 restarted)"},
	} {
		rep := run(f.srv)
		if rep.Redis != nil || rep.Decisions != 100 || !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, f.want) }) {
			t.Errorf("redis %+v, decisions %d, notes %q: want no figures, the run, and a note with %q", rep.Redis, rep.Decisions, rep.Notes, f.want)
		}
	}
}

// degradeTarget answers every other request with the failure policy's
// allowance (Degraded), the others through its inner target.
type degradeTarget struct {
	Target
	n atomic.Int64
}

func (d *degradeTarget) Take(ctx context.Context, key string, n int64) (Outcome, error) {
	if d.n.Add(1)%2 == 0 {
		return Outcome{Allowed: true, Degraded: true}, nil
	}
	return d.Target.Take(ctx, key, n)
}

// TestRedisCostLeavesDegradedOut: Redis's figures divide by the decisions
// Redis made, not by the failure policy's answers, and a note says so.
func TestRedisCostLeavesDegradedOut(t *testing.T) {
	p := mustPolicy(t, "gcra 1000/1s burst 1000")
	rep := mustRun(t, Config{Target: &degradeTarget{Target: newMemTarget(t, p)}, Policy: p, Concurrency: 1, Iterations: 100, Cost: 1,
		Server: &fakeServer{step: ServerCounters{Servers: 1, CPU: 2 * time.Millisecond, Commands: 250, Reads: 50}}})
	c := rep.Redis
	if rep.Decisions != 100 || rep.Degraded != 50 || c == nil || c.CPUPerDecision != 40 || c.CommandsPerDecision != 5 || *c.ReadsPerDecision != 1 {
		t.Errorf("decisions %d, degraded %d, redis %+v: want 40 µs, 5 commands and 1 read for each of the 50 decisions Redis made", rep.Decisions, rep.Degraded, c)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "the 50 degraded answers") }) {
		t.Errorf("notes %q: want the one about degraded answers", rep.Notes)
	}
}

// TestParseInfo: the counters of a Redis 7 INFO reply, CPU summed; reads
// unknown when a server does not report them; a reply without the CPU or
// the commands is an error.
func TestParseInfo(t *testing.T) {
	info := "# Server\r\nrun_id:abc123\r\n# Replication\r\nrole:master\r\n# Stats\r\ntotal_connections_received:3\r\ntotal_commands_processed:1234\r\ntotal_reads_processed:456\r\n\r\n# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500001\r\nused_cpu_sys_children:9.000000\r\n"
	c, err := parseInfo(info)
	if err != nil || c != (ServerCounters{Servers: 1, CPU: 1750001 * time.Microsecond, Commands: 1234, Reads: 456, runID: "abc123", role: "master"}) {
		t.Errorf("parseInfo = %+v, %v", c, err)
	}
	c, err = parseInfo(strings.Replace(info, "total_reads_processed:456\r\n", "", 1))
	if err != nil || c.Reads != -1 {
		t.Errorf("without reads: %+v, %v; want reads -1", c, err)
	}
	if _, err := parseInfo(strings.Replace(info, "used_cpu_user", "x", 1)); err == nil {
		t.Error("without used_cpu_user: no error")
	}
	if _, err := parseInfo(strings.Replace(info, "1234", "12x", 1)); err == nil || !strings.Contains(err.Error(), "total_commands_processed") {
		t.Errorf("a bad count: %v, want an error naming it", err)
	}
}

// TestRedisStats: against a real redis-server, two Reads with nothing in
// between differ by nothing at all (the Reads' own INFO left out), a
// command between them by exactly one command and one read; a server
// that turned replica since the first Read is named in Changed.
func TestRedisStats(t *testing.T) {
	srv := redistest.StartServer(t)
	other := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	st := NewRedisStats(c)
	read := func() ServerCounters {
		t.Helper()
		v, err := st.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, b := read(), read()
	if b.Servers != 1 || b.Commands != a.Commands || b.Reads != a.Reads || b.Changed != "" || b.CPU < a.CPU {
		t.Fatalf("two Reads: %+v then %+v, want the same commands and reads", a, b)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if d := read(); d.Commands != b.Commands+1 || d.Reads != b.Reads+1 {
		t.Errorf("a SET between two Reads: %+v then %+v, want one command and one read more", b, d)
	}
	host, port, _ := strings.Cut(other.Addr, ":")
	if err := c.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ReplicaOf(ctx, "NO", "ONE")
	if d := read(); !strings.Contains(d.Changed, srv.Addr+" is a slave now, not a master (a failover)") {
		t.Errorf("after REPLICAOF: Changed %q, want the server named as a replica", d.Changed)
	}
}

// TestRedisStatsSentinel: behind sentinels, Reads go to the master they
// name; after a failover the master is named as changed, so the run's
// figures are left out rather than mixing two servers' counters.
func TestRedisStatsSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sn.MasterName, SentinelAddrs: sn.Addrs})
	defer c.Close()
	ctx := context.Background()
	st := NewRedisStats(c)
	st.master = sn.MasterName
	a, err := st.Read(ctx)
	if err != nil || a.Servers != 1 || a.Changed != "" {
		t.Fatalf("the first Read: %+v, %v", a, err)
	}
	sn.Sentinels[0].Must(t, "SENTINEL", "FAILOVER", sn.MasterName)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := st.Read(ctx)
		if err == nil && b.Changed != "" {
			if !strings.Contains(b.Changed, `the master "`+sn.MasterName+`"`) {
				t.Errorf("after the failover: Changed %q, want the master named", b.Changed)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after SENTINEL FAILOVER the Reads still see the same master (last: %+v, %v)", b, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
