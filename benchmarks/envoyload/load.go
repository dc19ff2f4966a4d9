package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgatehq/floodgate/benchmarks/internal/procstat"
)

const (
	codeOK        = rls.RateLimitResponse_OK
	codeOverLimit = rls.RateLimitResponse_OVER_LIMIT
)

// client is the neutral load generator's side of the wire: plain gRPC
// clients of Envoy's RLS v3 API (go-control-plane's generated stubs), over
// a few HTTP/2 connections as an Envoy with several workers would open. It
// shares no code with floodgate.
type client struct {
	conns []*grpc.ClientConn
	stubs []rls.RateLimitServiceClient
}

func dial(addr string, n int) (*client, error) {
	c := &client{}
	for range n {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.close()
			return nil, err
		}
		c.conns = append(c.conns, cc)
		c.stubs = append(c.stubs, rls.NewRateLimitServiceClient(cc))
	}
	return c, nil
}

func (c *client) close() {
	for _, cc := range c.conns {
		cc.Close()
	}
}

// check sends one ShouldRateLimit of the bench domain with one descriptor
// {key: value} and hits_addend 1 over connection i (mod the number), and
// returns the overall code.
func (c *client) check(ctx context.Context, i int, key, value string, timeout time.Duration) (rls.RateLimitResponse_Code, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.stubs[i%len(c.stubs)].ShouldRateLimit(ctx, &rls.RateLimitRequest{
		Domain:      domain,
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}}},
		HitsAddend:  1,
	})
	if err != nil {
		return rls.RateLimitResponse_UNKNOWN, err
	}
	return resp.GetOverallCode(), nil
}

// A workload is what the load generator sends.
type workload struct {
	name string
	// descriptor key of the domain's rule: "user" (out of reach) or "hot"
	// (100 per second).
	rule string
	keys int // distinct descriptor values, chosen uniformly
	conc int // closed loop: workers; open loop: the most requests in flight
	rate int // arrivals per second; 0: closed loop
	// the contender every other is held against for the target
	// (the over-limit workload: the local-cache variant).
	baseline string
}

func (w workload) open() bool { return w.rate > 0 }

func (w workload) loop() string {
	if w.open() {
		return fmt.Sprintf("open %d/s (≤%d in flight)", w.rate, w.conc)
	}
	return fmt.Sprintf("closed c=%d", w.conc)
}

func workloads(openRate, openWorkers int) []workload {
	return []workload{
		{name: "hot16", rule: "user", keys: 1, conc: 16, baseline: "ratelimit"},
		{name: "hot64", rule: "user", keys: 1, conc: 64, baseline: "ratelimit"},
		{name: "keys100k", rule: "user", keys: 100_000, conc: 64, baseline: "ratelimit"},
		{name: "overlimit", rule: "hot", keys: 1, conc: 64, baseline: "ratelimit-localcache"},
		{name: "open", rule: "user", keys: 100_000, conc: openWorkers, rate: openRate, baseline: "ratelimit"},
	}
}

func (w workload) describe() string {
	keys := "1 key"
	if w.keys > 1 {
		keys = groupDigits(w.keys) + " keys"
	}
	limit := "under its limit (10^9/min)"
	if w.rule == "hot" {
		limit = "over its limit (100/s)"
	}
	return fmt.Sprintf("%s %s, %s", keys, limit, w.loop())
}

// keyName is the descriptor value of key i.
func keyName(i int) string { return "u" + strconv.Itoa(i) }

// loadResult is what one run measured. Counts and CPU cover the measured
// window [warm-up end, end): responses received in it; latencies are those
// of the requests of the window (closed loop: sent and answered in it; open
// loop: scheduled in it, measured from the scheduled send time).
type loadResult struct {
	ok, overLimit, errors int64
	unsent                int64 // open loop: arrivals never sent (the run ended first)
	firstErr              error
	perSec                float64
	lat                   []time.Duration // sorted
	cpu0, cpu1            procstat.Sample
	window                time.Duration
}

func (r *loadResult) decisions() int64 { return r.ok + r.overLimit }

// runLoad drives cl with w for warmup+duration. At the start and the end of
// the measured window it calls mark (to read CPU counters).
func runLoad(ctx context.Context, cl *client, w workload, warmup, duration time.Duration, seed uint64, mark func() (procstat.Sample, error)) (*loadResult, error) {
	res := &loadResult{window: duration}
	keys := make([]string, w.keys)
	for i := range keys {
		keys[i] = keyName(i)
	}
	var ok, over, errs, unsent atomic.Int64
	var errOnce sync.Once
	start := time.Now()
	mStart := start.Add(warmup)
	end := mStart.Add(duration)
	lats := make([][]time.Duration, w.conc)

	// Read the counters at the window's edges from a goroutine of its own.
	var markErr error
	marks := make(chan struct{})
	go func() {
		defer close(marks)
		if !sleepCtx(ctx, time.Until(mStart)) {
			return
		}
		if res.cpu0, markErr = mark(); markErr != nil {
			return
		}
		if !sleepCtx(ctx, time.Until(end)) {
			return
		}
		res.cpu1, markErr = mark()
	}()

	record := func(code rls.RateLimitResponse_Code, err error, t1 time.Time) {
		if t1.Before(mStart) || !t1.Before(end) {
			return
		}
		switch {
		case err != nil:
			errs.Add(1)
			errOnce.Do(func() { res.firstErr = err })
		case code == codeOK:
			ok.Add(1)
		case code == codeOverLimit:
			over.Add(1)
		default:
			errs.Add(1)
			errOnce.Do(func() { res.firstErr = fmt.Errorf("overall code %v", code) })
		}
	}

	var wg sync.WaitGroup
	if !w.open() {
		for g := range w.conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(g)))
				lat := make([]time.Duration, 0, 1<<14)
				for {
					t0 := time.Now()
					if !t0.Before(end) || ctx.Err() != nil {
						break
					}
					code, err := cl.check(ctx, g, w.rule, keys[r.IntN(len(keys))], 5*time.Second)
					t1 := time.Now()
					record(code, err, t1)
					if !t0.Before(mStart) && t1.Before(end) {
						lat = append(lat, t1.Sub(t0))
					}
				}
				lats[g] = lat
			}()
		}
	} else {
		// Open loop: arrival i is scheduled at start + i/rate; a pool of
		// w.conc workers takes arrivals in order, waits for each one's
		// time, sends it, and measures its latency from that scheduled
		// time, so that a service that falls behind is charged for the
		// wait of every arrival behind it (no coordinated omission).
		// Arrivals still unsent 5 s after the end are counted as unsent.
		total := int64(float64(w.rate) * (warmup + duration).Seconds())
		interval := float64(time.Second) / float64(w.rate)
		var next atomic.Int64
		giveUp := end.Add(5 * time.Second)
		for g := range w.conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(g)))
				lat := make([]time.Duration, 0, 1<<12)
				for {
					i := next.Add(1) - 1
					if i >= total || ctx.Err() != nil {
						break
					}
					sched := start.Add(time.Duration(float64(i) * interval))
					if d := time.Until(sched); d > 0 {
						time.Sleep(d)
					}
					if time.Now().After(giveUp) {
						unsent.Add(1)
						continue
					}
					code, err := cl.check(ctx, g, w.rule, keys[r.IntN(len(keys))], 5*time.Second)
					t1 := time.Now()
					record(code, err, t1)
					if !sched.Before(mStart) && sched.Before(end) {
						lat = append(lat, t1.Sub(sched))
					}
				}
				lats[g] = lat
			}()
		}
	}
	wg.Wait()
	<-marks
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if markErr != nil {
		return nil, markErr
	}
	res.ok, res.overLimit, res.errors, res.unsent = ok.Load(), over.Load(), errs.Load(), unsent.Load()
	res.perSec = float64(res.decisions()) / duration.Seconds()
	for _, l := range lats {
		res.lat = append(res.lat, l...)
	}
	slices.Sort(res.lat)
	return res, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// sleepCtx sleeps for d, or until ctx is done; it reports whether it slept
// the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
