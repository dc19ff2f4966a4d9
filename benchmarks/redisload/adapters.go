package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// limiter is what every library is reduced to: decide one request of cost
// 1 for each of keys (in one call: several keys only for a batching
// adapter), writing whether each was allowed into ok. An error is a failure
// of the run, never a denial.
type limiter interface {
	decide(ctx context.Context, keys []string, ok []bool) error
}

// gcraParams: a sustained rate of count per period, and a burst: how many
// requests a fresh key may make at once.
type gcraParams struct {
	count  int64
	period time.Duration
	burst  int64
}

// fixedParams: at most max requests per key per window, the window opened
// by the key's first request.
type fixedParams struct {
	max    int64
	window time.Duration
}

// params are the limits every library of a measurement gets.
type params struct {
	gcra  gcraParams
	fixed fixedParams
}

// library is one contender: a name, how many requests it decides per call
// (1, or the batch size of a batching adapter), and a constructor on a
// go-redis client.
type library struct {
	name  string
	batch int
	new   func(ctx context.Context, c *redis.Client, p params) (limiter, error)
}

// The floodgate policy name and key prefix (the default, "fg") every
// floodgate key uses: fg:api:{<key>}:<part>.
const policyName = "api"

func gcraText(p gcraParams) string {
	return fmt.Sprintf("gcra %d/%s burst %d", p.count, p.period, p.burst)
}

func fixedText(p fixedParams) string {
	// align first: the window opens at the key's first request, as ulule's
	// does (its counter expires one period after the request creating it).
	return fmt.Sprintf("fixed_window %d/%s align first", p.max, p.window)
}

// counterText is fixedText as a store WithCounters keeps it (SPEC.md,
// "Counters"): aligned to the epoch, counting denied requests, as ulule's
// INCRBY does.
func counterText(p fixedParams) string {
	return fmt.Sprintf("fixed_window %d/%s count_denied true", p.max, p.window)
}

// loadLibraries are the contenders of the throughput measurement, in table
// order.
func loadLibraries(batch int) []library {
	return []library{
		floodgateLib("floodgate-gcra", 1, func(p params) string { return gcraText(p.gcra) }),
		floodgateLib(fmt.Sprintf("floodgate-gcra-batch%d", batch), batch, func(p params) string { return gcraText(p.gcra) }),
		floodgateLib("floodgate-fixed_window", 1, func(p params) string { return fixedText(p.fixed) }),
		floodgateLib(fmt.Sprintf("floodgate-fixed_window-batch%d", batch), batch, func(p params) string { return fixedText(p.fixed) }),
		floodgateLib("floodgate-gcra-callerclock", 1, func(p params) string { return gcraText(p.gcra) }, redisstore.WithClock(storekit.SystemClock{})),
		floodgateLib("floodgate-fixed_window-callerclock", 1, func(p params) string { return fixedText(p.fixed) }, redisstore.WithClock(storekit.SystemClock{})),
		floodgateLib("floodgate-fixed_window-counters", 1, func(p params) string { return counterText(p.fixed) }, redisstore.WithClock(storekit.SystemClock{}), redisstore.WithCounters()),
		floodgateLib(fmt.Sprintf("floodgate-fixed_window-counters-batch%d", batch), batch, func(p params) string { return counterText(p.fixed) }, redisstore.WithClock(storekit.SystemClock{}), redisstore.WithCounters()),
		redisRateLib(),
		ululeLib(),
		throttledLib(),
	}
}

// floodgateLib is floodgate's redisstore with the policy text(p), named
// "api", default options (prefix "fg", no usage tracking) and opts, scripts
// loaded by Preload. With batch 1 each decision is one Store.Take (one
// FCALL); otherwise each call is one Store.TakeBatch of batch requests (one
// pipelined round trip). The "callerclock" ones send this process's clock
// with each call (redisstore.WithClock; floodgate serve's store.clock:
// service) instead of reading the server's TIME.
func floodgateLib(name string, batch int, text func(params) string, opts ...redisstore.Option) library {
	return library{name: name, batch: batch, new: func(ctx context.Context, c *redis.Client, p params) (limiter, error) {
		return newFloodgate(ctx, c, text(p), opts...)
	}}
}

func newFloodgate(ctx context.Context, c *redis.Client, text string, opts ...redisstore.Option) (limiter, error) {
	pol, err := floodgate.ParsePolicy(policyName, text)
	if err != nil {
		return nil, err
	}
	st, err := redisstore.New(c, opts...)
	if err != nil {
		return nil, err
	}
	if err := st.Preload(ctx); err != nil {
		return nil, err
	}
	return &fgLimiter{st: st, p: &pol}, nil
}

type fgLimiter struct {
	st *redisstore.Store
	p  *floodgate.Policy
}

func (f *fgLimiter) decide(ctx context.Context, keys []string, ok []bool) error {
	if len(keys) == 1 {
		d, err := f.st.Take(ctx, floodgate.Request{Policy: f.p, Key: keys[0], N: 1})
		ok[0] = d.Allowed
		return err
	}
	var reqBuf [32]floodgate.Request
	var outBuf [32]storekit.Outcome
	reqs, out := reqBuf[:0], outBuf[:0]
	if len(keys) > len(reqBuf) {
		reqs, out = make([]floodgate.Request, 0, len(keys)), make([]storekit.Outcome, 0, len(keys))
	}
	for _, k := range keys {
		reqs = append(reqs, floodgate.Request{Policy: f.p, Key: k, N: 1})
	}
	out = out[:len(keys)]
	f.st.TakeBatch(ctx, reqs, out)
	for i := range out {
		if out[i].Err != nil {
			return out[i].Err
		}
		ok[i] = out[i].Decision.Allowed
	}
	return nil
}

// redisRateLib is github.com/go-redis/redis_rate/v10: GCRA in one Lua
// script (EVALSHA, EVAL on NOSCRIPT) on the key "rate:<key>", its state the
// theoretical arrival time in seconds since 2017 as a Lua number.
// Limit{Rate, Period, Burst}: Rate per Period, a fresh key may make Burst at
// once (the same admissions as floodgate's gcra with the same numbers).
func redisRateLib() library {
	return library{name: "redis_rate", batch: 1, new: func(_ context.Context, c *redis.Client, p params) (limiter, error) {
		return &redisRate{
			l:   redis_rate.NewLimiter(c),
			lim: redis_rate.Limit{Rate: int(p.gcra.count), Period: p.gcra.period, Burst: int(p.gcra.burst)},
		}, nil
	}}
}

type redisRate struct {
	l   *redis_rate.Limiter
	lim redis_rate.Limit
}

func (r *redisRate) decide(ctx context.Context, keys []string, ok []bool) error {
	res, err := r.l.Allow(ctx, keys[0], r.lim)
	if err != nil {
		return err
	}
	ok[0] = res.Allowed > 0
	return nil
}

// ululeLib is github.com/ulule/limiter/v3 on its drivers/store/redis: a
// fixed window per key, one Lua script (EVALSHA: INCRBY, PEXPIRE on the
// first request, else PTTL) on the key "limiter:<key>" (its default
// prefix). Rate{Period, Limit}; Reached once the count passes Limit.
func ululeLib() library {
	return library{name: "ulule", batch: 1, new: func(_ context.Context, c *redis.Client, p params) (limiter, error) {
		st, err := ulredis.NewStore(c) // loads its scripts
		if err != nil {
			return nil, err
		}
		return ululeLimiter{ulule.New(st, ulule.Rate{Period: p.fixed.window, Limit: p.fixed.max})}, nil
	}}
}

type ululeLimiter struct{ l *ulule.Limiter }

func (u ululeLimiter) decide(ctx context.Context, keys []string, ok []bool) error {
	c, err := u.l.Get(ctx, keys[0])
	if err != nil {
		return err
	}
	ok[0] = !c.Reached
	return nil
}

// throttledLib is github.com/throttled/throttled/v2's GCRA on its
// store/goredisstore.v9 with the key prefix "throttled:" (its example's).
// A decision of an existing key is two round trips: a pipeline of TIME and
// GET, then a compare-and-swap by EVAL (the script text every time); a new
// key's is SETNX then EXPIRE instead of the EVAL. RateQuota{MaxRate,
// MaxBurst}: MaxRate is the emission interval, MaxBurst the requests beyond
// the first, so MaxBurst = burst - 1. Its compare-and-swap retry limit
// (default 10, then an error) is raised as in the in-process benchmarks.
func throttledLib() library {
	return library{name: "throttled", batch: 1, new: func(_ context.Context, c *redis.Client, p params) (limiter, error) {
		st, err := goredisstore.NewCtx(c, "throttled:")
		if err != nil {
			return nil, err
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
			MaxRate:  throttled.PerDuration(int(p.gcra.count), p.gcra.period),
			MaxBurst: int(p.gcra.burst - 1),
		})
		if err != nil {
			return nil, err
		}
		rl.SetMaxCASAttemptsLimit(1 << 30)
		return throttledLimiter{rl}, nil
	}}
}

type throttledLimiter struct{ rl *throttled.GCRARateLimiterCtx }

func (t throttledLimiter) decide(ctx context.Context, keys []string, ok []bool) error {
	limited, _, err := t.rl.RateLimitCtx(ctx, keys[0], 1)
	if err != nil {
		return err
	}
	ok[0] = !limited
	return nil
}

// newClient is the go-redis client every library gets: one pool of
// poolSize connections (pipelines on the same pool), no retries (floodgate
// requires it; the same for all), default timeouts.
func newClient(addr string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:             addr,
		PoolSize:         poolSize,
		PipelinePoolSize: -1,
		MaxRetries:       -1,
	})
}
