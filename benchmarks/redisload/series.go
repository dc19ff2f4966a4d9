package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/redisstore"
)

// seriesPattern is a day of one tracked key's traffic: at each minute m
// (0 to 1439) of the day for which cost(m) > 0, one add of that cost.
type seriesPattern struct {
	name    string
	minutes int // how long the traffic lasts; 0 means a day
	cost    func(m int) int64
	// denied tells whether the pattern's adds are denied (their cost
	// above the policy's max, 1000 per minute).
	denied string
}

// seriesPatterns are the days measured: sparse and dense, with everyday
// counts and with counts past 16,383 per minute (3-byte varints, so that
// the packed chunks pass hash-max-listpack-value).
var seriesPatterns = []seriesPattern{
	{"one add", 0, func(m int) int64 { return b2i(m == 0) }, "allowed"},
	{"sparse: every 30 minutes", 0, func(m int) int64 { return b2i(m%30 == 0) * 3 }, "allowed"},
	{"every 5 minutes", 0, func(m int) int64 { return b2i(m%5 == 0) * 20 }, "allowed"},
	{"dense: every minute", 0, func(m int) int64 { return 100 }, "allowed"},
	{"dense: every minute, one in 7 denied", 0, func(m int) int64 {
		if m%7 == 0 {
			return 1500
		}
		return 100
	}, "1 in 7"},
	{"dense: every minute, 50,000 a minute", 0, func(m int) int64 { return 50_000 }, "all (above the max)"},
	{"dense: every minute for 36 hours (the first 12 expired)", 36 * 60, func(m int) int64 { return 100 }, "allowed"},
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// seriesResult is the measure of one pattern.
type seriesResult struct {
	name, denied                   string
	buckets                        int
	usage, state, trackOnly, plain float64 // MEMORY USAGE, averaged over the keys
	encoding, plainEncoding        string
	fields, plainFields            int64
}

// measureSeries drives each pattern through floodgate (fixed_window
// 1000/1m track 1m for 24h) on nkeys keys, on a caller's clock over one
// day, then reads MEMORY USAGE (SAMPLES 0) of each key's usage hash and
// state key, and builds, for the same buckets, the plain hash SPEC'd as
// the yardstick: one field per non-empty bucket (its minute number since
// the epoch) holding its requests, and "<minute>:d" holding its denied
// when not 0. It also measures a key tracked without a series (track).
func measureSeries(ctx context.Context, admin *redis.Client, addr string, nkeys int) ([]seriesResult, error) {
	const base = floodgatetest.BaseMicros // a minute boundary
	var out []seriesResult
	for _, pat := range seriesPatterns {
		if err := admin.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
			return nil, err
		}
		c := newClient(addr, 4)
		clock := floodgatetest.NewManualClock(time.UnixMicro(base))
		st, err := redisstore.New(c, redisstore.WithClock(clock), redisstore.WithMinTTL(48*time.Hour))
		if err != nil {
			return nil, err
		}
		series, err := floodgate.ParsePolicy("api", "fixed_window 1000/1m track 1m for 24h")
		if err != nil {
			return nil, err
		}
		plain, err := floodgate.ParsePolicy("tr", "fixed_window 1000/1m track")
		if err != nil {
			return nil, err
		}
		r := seriesResult{name: pat.name, denied: pat.denied}
		minutes := pat.minutes
		if minutes == 0 {
			minutes = 1440
		}
		for m := 0; m < minutes; m++ {
			n := pat.cost(m)
			if n == 0 {
				continue
			}
			if m >= minutes-1440 {
				r.buckets++ // one that counts at the end
			}
			clock.SetMicros(base + int64(m)*60_000_000 + 1_000_000)
			for k := 0; k < nkeys; k++ {
				for _, p := range []*floodgate.Policy{&series, &plain} {
					if _, err := st.Take(ctx, floodgate.Request{Policy: p, Key: userKey(k), N: n}); err != nil {
						return nil, err
					}
				}
			}
		}
		c.Close()
		for k := 0; k < nkeys; k++ {
			key := userKey(k)
			u := "fg:api:{" + key + "}:u"
			usage, err := admin.MemoryUsage(ctx, u, 0).Result()
			if err != nil {
				return nil, fmt.Errorf("%s: MEMORY USAGE %s: %w", pat.name, u, err)
			}
			state, _ := admin.MemoryUsage(ctx, "fg:api:{"+key+"}:fw", 0).Result()
			// Without a retention, plain track keeps usage as long as the
			// state: a key all of whose adds are denied keeps none.
			track, err := admin.MemoryUsage(ctx, "fg:tr:{"+key+"}:u", 0).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, err
			}
			r.usage += float64(usage)
			r.state += float64(state)
			r.trackOnly += float64(track)
			if k == 0 {
				r.encoding, _ = admin.ObjectEncoding(ctx, u).Result()
				r.fields, _ = admin.HLen(ctx, u).Result()
			}
			// The plain hash of the buckets that count.
			ph := "plain:" + key
			var fields []any
			for m := minutes - 1440; m < minutes; m++ {
				n := pat.cost(m)
				if n == 0 {
					continue
				}
				minute := strconv.FormatInt(base/60_000_000+int64(m), 10)
				fields = append(fields, minute, n)
				if n > 1000 {
					fields = append(fields, minute+":d", n)
				}
			}
			for lo := 0; lo < len(fields); lo += 1000 {
				if err := admin.HSet(ctx, ph, fields[lo:min(lo+1000, len(fields))]...).Err(); err != nil {
					return nil, err
				}
			}
			p, err := admin.MemoryUsage(ctx, ph, 0).Result()
			if err != nil {
				return nil, err
			}
			r.plain += float64(p)
			if k == 0 {
				r.plainEncoding, _ = admin.ObjectEncoding(ctx, ph).Result()
				r.plainFields, _ = admin.HLen(ctx, ph).Result()
			}
		}
		n := float64(nkeys)
		r.usage, r.state, r.trackOnly, r.plain = r.usage/n, r.state/n, r.trackOnly/n, r.plain/n
		out = append(out, r)
	}
	return out, nil
}

func printSeries(w io.Writer, rs []seriesResult, nkeys int) {
	fmt.Fprintf(w, "Redis bytes per tracked key with a usage series (`fixed_window 1000/1m track 1m for 24h`): a day of each pattern on %d keys, on a caller's clock; MEMORY USAGE (SAMPLES 0) averaged over the keys. `track` alone: the same key under `fixed_window 1000/1m track`. Plain hash: one field per non-empty bucket (its minute number) holding its requests, and `<minute>:d` its denied when not 0.\n\n", nkeys)
	fmt.Fprintln(w, "| day of traffic | denied | non-empty buckets | usage hash (B) | its encoding, fields | `track` alone (B) | plain hash (B) | its encoding, fields | usage hash / plain hash |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | --- | ---: | ---: | --- | ---: |")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %s, %d | %.0f | %.0f | %s, %d | %.2f |\n", r.name, r.denied, r.buckets, r.usage, r.encoding, r.fields,
			r.trackOnly, r.plain, r.plainEncoding, r.plainFields, r.usage/r.plain)
	}
	fmt.Fprintln(w)
}
