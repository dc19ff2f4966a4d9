package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// memCase is one limiter of the memory measurement: how to build it and
// which Redis keys it writes for one limited key (user).
type memCase struct {
	name   string
	policy string // what it is configured with, for the table
	new    func(ctx context.Context, c *redis.Client) (limiter, error)
	keysOf func(user string) []string
}

// memParams: limits far out of reach (one request per key is made), and
// horizons of an hour or more, so that no key expires while it is measured.
// GCRA's state lives one emission interval after a key's only request,
// hence 10 per hour (6 minutes).
var memParams = params{
	gcra:  gcraParams{count: 10, period: time.Hour, burst: 1_000_000},
	fixed: fixedParams{max: 1_000_000_000, window: time.Hour},
}

func fgKeys(parts ...string) func(string) []string {
	return func(user string) []string {
		ks := make([]string, len(parts))
		for i, p := range parts {
			ks[i] = "fg:" + policyName + ":{" + user + "}:" + p
		}
		return ks
	}
}

func fgCase(name, text string, parts ...string) memCase {
	return memCase{
		name:   name,
		policy: text,
		new: func(ctx context.Context, c *redis.Client) (limiter, error) {
			return newFloodgate(ctx, c, text)
		},
		keysOf: fgKeys(parts...),
	}
}

func peerCase(lib library, policy, prefix string) memCase {
	return memCase{
		name:   lib.name,
		policy: policy,
		new: func(ctx context.Context, c *redis.Client) (limiter, error) {
			return lib.new(ctx, c, memParams)
		},
		keysOf: func(user string) []string { return []string{prefix + user} },
	}
}

func memCases() []memCase {
	p := memParams
	return []memCase{
		fgCase("floodgate gcra", gcraText(p.gcra), "gc"),
		fgCase("floodgate fixed_window", fixedText(p.fixed), "fw"),
		fgCase("floodgate token_bucket", "token_bucket 1000000/1h burst 1000", "tb"),
		fgCase("floodgate sliding_window", "sliding_window 1000000/1h resolution 1m", "sw", "sw1"),
		fgCase("floodgate sliding_log", "sliding_log 1000000/1h", "sl", "sl1"),
		fgCase("floodgate ar1", "ar1 1000000/1h decay 2", "ar"),
		peerCase(redisRateLib(), fmt.Sprintf("GCRA Limit{Rate: %d, Period: %s, Burst: %d}", p.gcra.count, p.gcra.period, p.gcra.burst), "rate:"),
		peerCase(ululeLib(), fmt.Sprintf("fixed window Rate{Period: %s, Limit: %d}", p.fixed.window, p.fixed.max), "limiter:"),
		peerCase(throttledLib(), fmt.Sprintf("GCRA RateQuota{MaxRate: PerHour(%d), MaxBurst: %d}", p.gcra.count, p.gcra.burst-1), "throttled:"),
	}
}

type memResult struct {
	name, policy    string
	keysPerLimited  int
	dbsize          int64
	usageAvg        float64 // MEMORY USAGE per limited key (sum over its keys), averaged over the sample
	usedDelta       int64   // used_memory after - before
	usedPerKey      float64 // usedDelta / limited keys
	exampleUser     string
	example         []string // one line per Redis key of exampleUser
	sampleKeysCount int
}

func userKey(i int) string { return fmt.Sprintf("user-%06d", i) }

// measureMemory creates n limited keys (one allowed request each) through
// mc on an emptied server and measures them.
func measureMemory(ctx context.Context, admin *redis.Client, addr string, mc memCase, n, sample, conc int) (memResult, error) {
	res := memResult{name: mc.name, policy: mc.policy}
	// A first decision loads the limiter's scripts (the script cache is
	// server memory that FLUSHALL keeps); then start from an empty keyspace.
	c := newClient(addr, 128)
	lim, err := mc.new(ctx, c)
	if err == nil {
		err = lim.decide(ctx, []string{"warmup"}, make([]bool, 1))
	}
	c.Close()
	if err != nil {
		return res, fmt.Errorf("%s: warm-up: %w", mc.name, err)
	}
	if err := admin.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
		return res, err
	}
	time.Sleep(500 * time.Millisecond)
	before, err := usedMemory(ctx, admin)
	if err != nil {
		return res, err
	}

	c = newClient(addr, 128)
	lim, err = mc.new(ctx, c)
	if err != nil {
		c.Close()
		return res, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := make([]bool, 1)
			keys := make([]string, 1)
			for i := g; i < n; i += conc {
				keys[0] = userKey(i)
				if err := lim.decide(ctx, keys, ok); err != nil {
					errs <- err
					return
				}
				if !ok[0] {
					errs <- fmt.Errorf("%s: the only request of %s denied", mc.name, keys[0])
					return
				}
			}
		}()
	}
	wg.Wait()
	c.Close()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	// Let the server drop the closed connections and finish rehashing its
	// dictionaries (serverCron) before reading used_memory.
	time.Sleep(1500 * time.Millisecond)
	after, err := usedMemory(ctx, admin)
	if err != nil {
		return res, err
	}
	res.usedDelta = after - before
	res.usedPerKey = float64(res.usedDelta) / float64(n)
	if res.dbsize, err = admin.DBSize(ctx).Result(); err != nil {
		return res, err
	}
	res.keysPerLimited = len(mc.keysOf(userKey(0)))
	if want := int64(n * res.keysPerLimited); res.dbsize != want {
		return res, fmt.Errorf("%s: DBSIZE %d after %d limited keys, want %d", mc.name, res.dbsize, n, want)
	}

	var total int64
	for s := range sample {
		for _, k := range mc.keysOf(userKey(s * (n / sample))) {
			u, err := admin.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				return res, fmt.Errorf("%s: MEMORY USAGE %s: %w", mc.name, k, err)
			}
			total += u
		}
	}
	res.sampleKeysCount = sample
	res.usageAvg = float64(total) / float64(sample)

	res.exampleUser = userKey(123)
	for _, k := range mc.keysOf(res.exampleUser) {
		line, err := describeKey(ctx, admin, k)
		if err != nil {
			return res, err
		}
		res.example = append(res.example, line)
	}
	return res, nil
}

// describeKey: key, type/encoding, MEMORY USAGE, PTTL and the value.
func describeKey(ctx context.Context, a *redis.Client, k string) (string, error) {
	typ, err := a.Type(ctx, k).Result()
	if err != nil {
		return "", err
	}
	enc, _ := a.ObjectEncoding(ctx, k).Result()
	usage, _ := a.MemoryUsage(ctx, k, 0).Result()
	pttl, _ := a.PTTL(ctx, k).Result()
	var val string
	switch typ {
	case "string":
		v, err := a.Get(ctx, k).Result()
		if err != nil {
			return "", err
		}
		val = strconv.Quote(v)
	case "hash":
		m, err := a.HGetAll(ctx, k).Result()
		if err != nil {
			return "", err
		}
		var parts []string
		for f, v := range m {
			parts = append(parts, fmt.Sprintf("%s=%q", f, v))
		}
		slices.Sort(parts)
		val = "{" + strings.Join(parts, " ") + "}"
	case "list":
		l, err := a.LRange(ctx, k, 0, -1).Result()
		if err != nil {
			return "", err
		}
		q := make([]string, len(l))
		for i, v := range l {
			q[i] = strconv.Quote(v)
		}
		val = "[" + strings.Join(q, " ") + "]"
	default:
		val = "?"
	}
	return fmt.Sprintf("%s  %s/%s  %d B  ttl %s  %s", k, typ, enc, usage, pttl.Round(time.Second), val), nil
}

func usedMemory(ctx context.Context, a *redis.Client) (int64, error) {
	return infoInt(ctx, a, "memory", "used_memory")
}

func infoField(ctx context.Context, a *redis.Client, section, field string) (string, error) {
	s, err := a.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s: no %s", section, field)
}

func infoInt(ctx context.Context, a *redis.Client, section, field string) (int64, error) {
	v, err := infoField(ctx, a, section, field)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}
