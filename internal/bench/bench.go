package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgatehq/floodgate"
)

// Target is the system under test: something that decides requests.
// Implementations must be safe for concurrent use.
type Target interface {
	// Take asks for one decision, an add of cost n for key, and reports
	// the outcome. A denial is an Outcome, not an error; errors are for
	// requests whose outcome is unknown (a timeout, a refused connection,
	// a bad answer).
	Take(ctx context.Context, key string, n int64) (Outcome, error)

	// Close releases the target's connections.
	Close() error
}

// Outcome is the answer to one request.
type Outcome struct {
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Degraded is set when a failure policy of the service, not the
	// algorithm, decided (the store was down).
	Degraded bool
	// Backpressure is set when the service refused the request under its
	// overload bound (HTTP 503 or 429 "overloaded", gRPC
	// RESOURCE_EXHAUSTED): it was not decided, and the limiter counted
	// nothing. Allowed is false then.
	Backpressure bool
}

// Distribution says how each request picks its key.
type Distribution int

const (
	// PerWorker gives every worker a key of its own, as the seed's load
	// generator gave every worker a random token.
	PerWorker Distribution = iota
	// Uniform picks each request's key uniformly among Config.Keys.
	Uniform
	// Zipf picks keys with Zipf's law of exponent Config.ZipfS: key 0 is
	// the hottest.
	Zipf
)

// String returns "per_worker", "uniform" or "zipf".
func (d Distribution) String() string {
	switch d {
	case PerWorker:
		return "per_worker"
	case Uniform:
		return "uniform"
	case Zipf:
		return "zipf"
	}
	return "Distribution(" + strconv.Itoa(int(d)) + ")"
}

// ParseDistribution parses "uniform" or "zipf" (per_worker is chosen by
// giving no key count).
func ParseDistribution(s string) (Distribution, error) {
	switch s {
	case "uniform":
		return Uniform, nil
	case "zipf":
		return Zipf, nil
	}
	return 0, fmt.Errorf("%q: want uniform or zipf", s)
}

// ProgressMode says how progress is shown while a run goes on.
type ProgressMode int

const (
	// ProgressOff shows nothing.
	ProgressOff ProgressMode = iota
	// ProgressTTY redraws one line in place (\r), four times a second.
	ProgressTTY
	// ProgressLines prints a plain line every Config.ProgressEvery.
	ProgressLines
)

// Config describes a run. Run fills defaults only where this says so.
type Config struct {
	// Target decides the requests. Run does not close it.
	Target Target

	// Policy is the policy the target applies to every key, for the
	// accuracy figures; nil skips them. It must be valid.
	Policy *floodgate.Policy

	// Info describes the target in the report; Run copies it there.
	Info TargetInfo

	// Server, when set, reads the counters of the servers the target's
	// decisions cost, before the first request and after the last
	// answer, for the report's Redis figures (nil: none). A failed read
	// leaves them out with a note; it does not fail the run.
	Server ServerStats

	// Concurrency is the number of workers, and so the most requests in
	// flight: at least 1.
	Concurrency int

	// Iterations is, in closed loop, the number of requests each worker
	// sends; in open loop the run sends Iterations·Concurrency arrivals.
	// 0 means no limit (Duration must be set).
	Iterations int64

	// Duration is how long to send requests; 0 means no limit (Iterations
	// must be set).
	Duration time.Duration

	// Rate, when above 0, makes the run open-loop: arrivals are scheduled
	// at Rate per second whatever the target's speed, and each request's
	// latency counts from its scheduled time. 0 is closed loop: each
	// worker sends its next request when the previous one is answered.
	Rate float64

	// Keys is the number of distinct keys (Uniform, Zipf); with PerWorker
	// it is ignored and every worker has one.
	Keys         int
	Distribution Distribution
	// ZipfS is the Zipf exponent, above 1 (default 1.1).
	ZipfS float64

	// Cost is every request's cost, 1 to floodgate.MaxCost.
	Cost int64

	// Timeout bounds each request (default 5 s).
	Timeout time.Duration

	// KeyPrefix starts every key, so that a run's keys start with no
	// state; default "bench-" and 8 random hex digits.
	KeyPrefix string

	// Seed seeds the key choices; 0 picks one at random.
	Seed uint64

	// Progress receives the progress display (nil: none), in
	// ProgressMode, every ProgressEvery (default 1 s) in ProgressLines
	// mode.
	Progress      io.Writer
	ProgressMode  ProgressMode
	ProgressEvery time.Duration

	clock clock // nil: the system's; tests set a fake one
}

// TargetInfo describes the target, for the report.
type TargetInfo struct {
	// Kind is "redis", "http" or "grpc".
	Kind string `json:"kind"`
	// Address is where the target was reached (host:port or URL).
	Address string `json:"address"`
	// PolicyName is the policy's name at the target ("" when unknown).
	PolicyName string `json:"policy_name"`
	// Policy is the policy's text form ("" when unknown).
	Policy string `json:"policy"`
	// Domain and Descriptor are the Envoy domain and descriptor entries
	// (grpc only: "" and [] otherwise); the entry written KEY alone takes
	// each request's key.
	Domain     string   `json:"domain"`
	Descriptor []string `json:"descriptor"`
}

// validate checks cfg and fills its defaults.
func (cfg *Config) validate() error {
	switch {
	case cfg.Target == nil:
		return errors.New("no target")
	case cfg.Concurrency < 1:
		return fmt.Errorf("concurrency %d: want at least 1", cfg.Concurrency)
	case cfg.Iterations < 0:
		return fmt.Errorf("iterations %d: want 0 (no limit) or more", cfg.Iterations)
	case cfg.Duration < 0:
		return fmt.Errorf("duration %s: want 0 (no limit) or more", cfg.Duration)
	case cfg.Iterations == 0 && cfg.Duration == 0:
		return errors.New("give a number of iterations or a duration")
	case cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0):
		return fmt.Errorf("rate %v: want arrivals per second above 0 (or 0 for closed loop)", cfg.Rate)
	case cfg.Cost < 1 || cfg.Cost > floodgate.MaxCost:
		return fmt.Errorf("cost %d: want 1 to 2^53-1", cfg.Cost)
	}
	if cfg.Distribution == PerWorker {
		cfg.Keys = cfg.Concurrency
	}
	if cfg.Keys < 1 {
		return fmt.Errorf("keys %d: want at least 1", cfg.Keys)
	}
	if cfg.ZipfS == 0 {
		cfg.ZipfS = 1.1
	}
	if cfg.Distribution == Zipf && !(cfg.ZipfS > 1) {
		return fmt.Errorf("zipf exponent %v: want above 1", cfg.ZipfS)
	}
	if cfg.Policy != nil {
		if err := cfg.Policy.Validate(); err != nil {
			return err
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = time.Second
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = fmt.Sprintf("bench-%08x", rand.Uint32())
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	return nil
}

// clock is the run's time: durations since the run started, and the wall
// clock in µs since the Unix epoch at that start (for the twins, whose
// epoch-aligned windows must match the limiter's).
type clock interface {
	now() time.Duration
	// sleepUntil sleeps until now() ≥ t; false when ctx ended first.
	sleepUntil(ctx context.Context, t time.Duration) bool
	wallStartUS() int64
}

type realClock struct{ start time.Time }

func (c realClock) now() time.Duration { return time.Since(c.start) }
func (c realClock) wallStartUS() int64 { return c.start.UnixMicro() }
func (c realClock) sleepUntil(ctx context.Context, t time.Duration) bool {
	d := t - c.now()
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// run is one run in progress.
type run struct {
	cfg      Config
	clk      clock
	keys     []string
	ledger   *ledger // nil without a policy
	deadline time.Duration
	total    int64 // open loop: arrivals to send, 0 for no limit
	reqCtx   context.Context

	stop      atomic.Bool
	stoppedAt atomic.Int64 // ns since start at which sending stopped (interrupt), 0 if not
	next      atomic.Int64 // open loop: the next arrival to claim
	sent      atomic.Int64 // open loop: arrivals sent
	lastDone  atomic.Int64 // ns since start of the last answer
	answered  atomic.Int64 // answers and errors, for the early abort
	decided   atomic.Int64
	errMu     sync.Mutex
	firstErr  error
	aborted   bool
	workers   []*worker

	server    ServerCounters // Config.Server's counters before the run
	serverErr error          // why they are missing, when they are
}

// worker is one worker's state and counters. The counters are atomic so
// that the progress display reads them while the worker runs.
type worker struct {
	r        *run
	id       int
	rng      *rand.Rand
	zipf     *rand.Zipf
	hist     Histogram
	allowed  atomic.Int64
	denied   atomic.Int64
	errors   atomic.Int64
	degraded atomic.Int64
	pushback atomic.Int64 // backpressure answers
	_        [64]byte     // keep workers' counters on separate cache lines
}

// abortAfter is how many requests in a row must fail, with none answered,
// before a run gives up.
const abortAfter = 20

// Run runs the benchmark cfg describes until its iterations are done, its
// duration has passed or ctx ends (as Ctrl-C does), and returns the report
// of what was done. An error means the run could not start or that every
// request failed; the report is then nil, or holds what was measured.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	clk := cfg.clock
	if clk == nil {
		clk = realClock{start: time.Now()}
	}
	r := &run{cfg: cfg, clk: clk, deadline: cfg.Duration, reqCtx: context.WithoutCancel(ctx)}
	if cfg.Rate > 0 && cfg.Iterations > 0 {
		r.total = cfg.Iterations * int64(cfg.Concurrency)
	}
	r.keys = make([]string, cfg.Keys)
	for i := range r.keys {
		r.keys[i] = cfg.KeyPrefix + "-" + strconv.Itoa(i)
	}
	if cfg.Policy != nil {
		r.ledger = newLedger(cfg.Policy, cfg.Cost, cfg.Keys)
	}
	for i := range cfg.Concurrency {
		w := &worker{r: r, id: i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
		if cfg.Distribution == Zipf {
			w.zipf = rand.NewZipf(w.rng, cfg.ZipfS, 1, uint64(cfg.Keys-1))
		}
		r.workers = append(r.workers, w)
	}

	// Ctrl-C (ctx) stops sending; requests in flight finish (reqCtx).
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		select {
		case <-ctx.Done():
			r.stoppedAt.CompareAndSwap(0, int64(max(clk.now(), 1)))
			r.stop.Store(true)
		case <-watchDone:
		}
	}()

	var progressDone chan struct{}
	stopProgress := make(chan struct{})
	if cfg.Progress != nil && cfg.ProgressMode != ProgressOff {
		progressDone = make(chan struct{})
		go func() {
			defer close(progressDone)
			r.progress(stopProgress)
		}()
	}

	if cfg.Server != nil {
		r.server, r.serverErr = readServer(ctx, cfg)
	}
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg.Rate > 0 {
				w.openLoop(ctx)
			} else {
				w.closedLoop()
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	if progressDone != nil {
		<-progressDone
	}
	rep := r.report(ctx.Err() != nil)
	if cfg.Server != nil {
		r.reportServer(rep)
	}
	if r.aborted {
		return rep, fmt.Errorf("the first %d requests all failed; the first error: %w", abortAfter, r.firstErr)
	}
	return rep, nil
}

// readServer reads cfg.Server's counters within cfg.Timeout; an
// interrupted run (ctx) still reads them.
func readServer(ctx context.Context, cfg Config) (ServerCounters, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Timeout)
	defer cancel()
	return cfg.Server.Read(ctx)
}

// reportServer reads the servers' counters after the run and sets rep's
// Redis figures, or says in a note why they are missing.
func (r *run) reportServer(rep *Report) {
	after, err := readServer(r.reqCtx, r.cfg)
	switch {
	case r.serverErr != nil:
		err = r.serverErr
	case err == nil && after.Servers != r.server.Servers:
		err = fmt.Errorf("%d servers before the run and %d after (a failover or a resharding)", r.server.Servers, after.Servers)
	}
	if err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Redis's figures are missing: its counters could not be read: %v", err))
		return
	}
	if after.Changed != "" {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Redis's figures are missing: the servers changed during the run (%s), so their counters do not measure it", after.Changed))
		return
	}
	// Degraded answers are the failure policy's: Redis made none of them.
	made := rep.Decisions - rep.Degraded
	rep.Redis = redisCost(r.server, after, made)
	rep.Notes = append(rep.Notes, "Redis's figures are the difference of its INFO counters before and after the run: they count everything the servers did meanwhile, other clients' commands included")
	if rep.Degraded > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Redis's figures are per decision Redis made: the %d degraded answers, the failure policy's, are left out", rep.Degraded))
	}
	if r.cfg.Info.Kind != "redis" && made > 0 && rep.Redis.Commands*10 < made {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Redis ran %d commands for %d decisions: right if the service answered most from its over-limit cache; otherwise check that --host and --port (or --redis-cluster) name the service's Redis", rep.Redis.Commands, made))
	}
}

// pick returns the index of the next request's key.
func (w *worker) pick() int {
	switch w.r.cfg.Distribution {
	case Uniform:
		return w.rng.IntN(len(w.r.keys))
	case Zipf:
		return int(w.zipf.Uint64())
	}
	return w.id
}

func (w *worker) closedLoop() {
	r := w.r
	for i := int64(0); r.cfg.Iterations == 0 || i < r.cfg.Iterations; i++ {
		if r.stop.Load() {
			return
		}
		sent := r.clk.now()
		if r.deadline > 0 && sent >= r.deadline {
			return
		}
		w.do(w.pick(), sent, sent)
	}
}

// intended returns the scheduled time of arrival i in open loop.
func (r *run) intended(i int64) time.Duration {
	return time.Duration(float64(i) * 1e9 / r.cfg.Rate)
}

func (w *worker) openLoop(ctx context.Context) {
	r := w.r
	for !r.stop.Load() {
		i := r.next.Add(1) - 1
		if r.total > 0 && i >= r.total {
			return
		}
		at := r.intended(i)
		if r.deadline > 0 && at >= r.deadline {
			return
		}
		if !r.clk.sleepUntil(ctx, at) {
			return
		}
		sent := r.clk.now()
		if r.stop.Load() || r.deadline > 0 && sent >= r.deadline {
			return // due, but the run is over: counted as unsent
		}
		r.sent.Add(1)
		// Latency counts from the scheduled time, not from when a worker
		// got free to send: a slow target cannot hide its queue.
		w.do(w.pick(), at, sent)
	}
}

// do sends one request for key k, scheduled at intended and sent at sent
// (durations since the start), and accounts its outcome.
func (w *worker) do(k int, intended, sent time.Duration) {
	r := w.r
	base := r.clk.wallStartUS()
	sentUS := base + int64(sent/time.Microsecond)
	if r.ledger != nil {
		r.ledger.begin(k, sentUS)
	}
	ctx, cancel := context.WithTimeout(r.reqCtx, r.cfg.Timeout)
	out, err := r.cfg.Target.Take(ctx, r.keys[k], r.cfg.Cost)
	cancel()
	done := r.clk.now()
	r.lastDone.Store(int64(done))
	if r.ledger != nil {
		// A degraded answer came from the service's failure policy: what
		// the limiter counted, if anything, is unknown, as for a failure.
		// A backpressure answer was never sent to the limiter: left out,
		// exactly (it neither admitted nor counted).
		r.ledger.end(k, sentUS, base+int64(done/time.Microsecond), out.Allowed, err == nil && !out.Degraded && !out.Backpressure)
	}
	n := r.answered.Add(1)
	if err != nil {
		w.errors.Add(1)
		r.errMu.Lock()
		if r.firstErr == nil {
			r.firstErr = err
		}
		if n >= abortAfter && r.decided.Load() == 0 && !r.aborted {
			r.aborted = true
			r.stop.Store(true)
		}
		r.errMu.Unlock()
		return
	}
	if out.Backpressure {
		// Answered, but not decided: neither allowed nor denied.
		w.pushback.Add(1)
		w.hist.Record(done - intended)
		return
	}
	r.decided.Add(1)
	w.hist.Record(done - intended)
	if out.Allowed {
		w.allowed.Add(1)
	} else {
		w.denied.Add(1)
	}
	if out.Degraded {
		w.degraded.Add(1)
	}
}

// counts sums the workers' counters.
type counts struct {
	allowed, denied, errors, degraded, backpressure int64
}

func (r *run) counts() counts {
	var c counts
	for _, w := range r.workers {
		c.allowed += w.allowed.Load()
		c.denied += w.denied.Load()
		c.errors += w.errors.Load()
		c.degraded += w.degraded.Load()
		c.backpressure += w.pushback.Load()
	}
	return c
}

// histogram merges the workers' histograms.
func (r *run) histogram() *Histogram {
	h := new(Histogram)
	for _, w := range r.workers {
		h.Merge(&w.hist)
	}
	return h
}

// due returns how many open-loop arrivals were scheduled before t.
func (r *run) due(t time.Duration) int64 {
	n := int64(math.Ceil(t.Seconds() * r.cfg.Rate))
	for n > 0 && r.intended(n-1) >= t {
		n--
	}
	for r.intended(n) < t {
		n++
	}
	if r.total > 0 {
		n = min(n, r.total)
	}
	return n
}
