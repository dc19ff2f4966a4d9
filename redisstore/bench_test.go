package redisstore_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// BenchmarkGroup: what one decision over two policies of one key costs on
// Redis, as one group (one FCALL of group.lua, all-or-nothing) and as two
// single decisions one after the other (two FCALLs, what a caller without
// groups does, and not atomic), with one single decision for scale. Every
// decision is allowed: the limits are far above what a run adds. Run in
// parallel over 1,000 keys.
//
//	go test -run '^$' -bench BenchmarkGroup -benchtime 3s -count 5 ./redisstore
func BenchmarkGroup(b *testing.B) {
	srv := redistest.StartServer(b)
	s := newStore(b, client(b, srv))
	ctx := context.Background()
	if err := s.Preload(ctx); err != nil {
		b.Fatal(err)
	}
	minute := mustPolicy(b, "minute", "gcra 60000000/1m burst 60000000")
	month := mustPolicy(b, "month", "fixed_window 1000000000/720h")
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "tenant" + strconv.Itoa(i)
	}
	run := func(b *testing.B, decide func(key string) (floodgate.Decision, error)) {
		if _, err := srv.Do(b, "CONFIG", "RESETSTAT"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { b.ReportMetric(commandMicros(b, srv)/float64(b.N), "redis-µs/op") })
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				d, err := decide(keys[i%len(keys)])
				if err != nil || !d.Allowed {
					b.Errorf("%+v, %v", d, err)
					return
				}
				i++
			}
		})
	}
	b.Run("single", func(b *testing.B) {
		run(b, func(key string) (floodgate.Decision, error) {
			return s.Take(ctx, floodgate.Request{Policy: &minute, Key: key, N: 1})
		})
	})
	b.Run("two-singles", func(b *testing.B) {
		run(b, func(key string) (floodgate.Decision, error) {
			if d, err := s.Take(ctx, floodgate.Request{Policy: &minute, Key: key, N: 1}); err != nil || !d.Allowed {
				return d, err
			}
			return s.Take(ctx, floodgate.Request{Policy: &month, Key: key, N: 1})
		})
	})
	b.Run("group", func(b *testing.B) {
		run(b, func(key string) (floodgate.Decision, error) {
			return s.Take(ctx, floodgate.Request{Policy: &minute, Key: key, N: 1, Group: []floodgate.Request{{Policy: &month, Key: key}}})
		})
	})
	b.Run("reserve+settle", func(b *testing.B) {
		run(b, func(key string) (floodgate.Decision, error) {
			r := &floodgate.Reservation{}
			d, err := s.Take(ctx, floodgate.Request{Policy: &minute, Key: key, N: 10, Reserve: r, Group: []floodgate.Request{{Policy: &month, Key: key}}})
			if err != nil || !d.Allowed {
				return d, err
			}
			return s.Take(ctx, floodgate.Request{Policy: &minute, Key: key, N: 4, Settle: r, Group: []floodgate.Request{{Policy: &month, Key: key}}})
		})
	})
}

var usec = regexp.MustCompile(`cmdstat_\w+:calls=\d+,usec=(\d+),`)

// commandMicros returns the µs Redis spent in commands since the last
// CONFIG RESETSTAT (INFO commandstats): the server's cost, which the
// machine's load disturbs less than the wall clock.
func commandMicros(b *testing.B, srv *redistest.Server) float64 {
	info, err := srv.Do(b, "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, m := range usec.FindAllStringSubmatch(info.(string), -1) {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil {
			total += v
		}
	}
	return total
}

// BenchmarkTakeBatch: the client's side of a pipelined batch of 16
// decisions (one TakeBatch), run in parallel over 1,000 keys, every
// decision allowed; ns/op is per batch, and redis-µs/op the server's time
// for its FCALL. For profiles of the client path:
//
//	go test -run '^$' -bench BenchmarkTakeBatch -benchtime 3s -cpuprofile /tmp/tb.prof ./redisstore
func BenchmarkTakeBatch(b *testing.B) {
	s, p, keys := benchDecisions(b)
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]floodgate.Request, 16)
		out := make([]storekit.Outcome, 16)
		i := 0
		for pb.Next() {
			for j := range reqs {
				reqs[j] = floodgate.Request{Policy: &p, Key: keys[(i+j)%len(keys)], N: 1}
			}
			s.TakeBatch(ctx, reqs, out)
			for j := range out {
				if out[j].Err != nil || !out[j].Decision.Allowed {
					b.Errorf("%+v", out[j])
					return
				}
			}
			i += len(reqs)
		}
	})
}

// BenchmarkTake: the client's side of single decisions (Take), run in
// parallel over 1,000 keys, every decision allowed; redis-µs/op is the
// server's time per FCALL. For profiles of the client path:
//
//	go test -run '^$' -bench 'BenchmarkTake$' -benchtime 3s -cpuprofile /tmp/take.prof ./redisstore
func BenchmarkTake(b *testing.B) {
	s, p, keys := benchDecisions(b)
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: keys[i%len(keys)], N: 1})
			if err != nil || !d.Allowed {
				b.Errorf("%+v, %v", d, err)
				return
			}
			i++
		}
	})
}

// BenchmarkNode: what naming a key's master costs on a Cluster (Node, which
// the failure policy and the service's bound call for every decision).
//
//	go test -run '^$' -bench BenchmarkNode -count 6 ./redisstore
func BenchmarkNode(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	s := newStore(b, clusterClient(b, cl))
	ctx := context.Background()
	p := mustPolicy(b, "api", "gcra 1000000/1s burst 1000000000 track")
	if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "warm", N: 1}); err != nil {
		b.Fatal(err) // the slot map loaded
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if s.Node(ctx, &p, keys[i%len(keys)]) == "" {
			b.Fatal("no node")
		}
	}
}

// benchDecisions starts a server for a benchmark of decisions and returns
// a store on it (its library loaded), a gcra policy that allows every
// decision, and 1,000 keys; it reports the server's command time per
// operation as redis-µs/op.
func benchDecisions(b *testing.B) (*redisstore.Store, floodgate.Policy, []string) {
	srv := redistest.StartServer(b)
	s := newStore(b, client(b, srv))
	if err := s.Preload(context.Background()); err != nil {
		b.Fatal(err)
	}
	p := mustPolicy(b, "api", "gcra 1000000/1s burst 1000000000")
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	if _, err := srv.Do(b, "CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { b.ReportMetric(commandMicros(b, srv)/float64(b.N), "redis-µs/op") })
	return s, p, keys
}
