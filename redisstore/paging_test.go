package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
)

// TestListKeysClusterPaging is issue 13's paging must-show: 50,000 tracked
// keys on a 3-master Cluster listed completely through cursors, each
// exactly once, in order, with the server work of every page bounded: at
// most 10 SCANs, and no more key reads than they can return, whatever
// the number of keys. The work of each page is read from INFO
// commandstats of every master (reset before the page) and logged.
func TestListKeysClusterPaging(t *testing.T) {
	if testing.Short() {
		t.Skip("50,000 keys")
	}
	cl := redistest.StartCluster(t, 3)
	c := clusterClient(t, cl)
	s := newStore(t, c, redisstore.WithPrefix("paging"))
	ctx := context.Background()
	// A window from the first decision: one aligned to the clock would
	// expire its keys, and their usage, at the hour's end.
	p, err := floodgate.ParsePolicy("paging", "fixed_window 1000/1h align first track")
	if err != nil {
		t.Fatal(err)
	}
	const n = 50_000
	reqs := make([]floodgate.Request, 0, 1000)
	out := make([]storekit.Outcome, 1000)
	for i := 0; i < n; i++ {
		reqs = append(reqs, floodgate.Request{Policy: &p, Key: fmt.Sprintf("user-%05d", i), N: int64(1 + i%997)})
		if len(reqs) == cap(reqs) || i == n-1 {
			s.TakeBatch(ctx, reqs, out)
			for j := range reqs {
				if out[j].Err != nil {
					t.Fatalf("TakeBatch: %v", out[j].Err)
				}
			}
			reqs = reqs[:0]
		}
	}
	admins := make([]*redis.Client, len(cl.Nodes))
	for i, node := range cl.Nodes {
		admins[i] = client(t, node)
	}
	q := usage.Query{Policy: p.Name, By: usage.ByRequests, Limit: 1000}
	seen := make(map[string]bool, n)
	var last *usage.Record
	type work struct{ scans, reads, snapshotWrites, usec, longest float64 }
	var pages []work
	var maxWork work
	start := time.Now()
	for {
		for _, a := range admins {
			if err := a.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		page, err := s.ListKeys(ctx, q)
		if err != nil {
			t.Fatalf("page %d: %v", len(pages)+1, err)
		}
		var w work
		for _, a := range admins {
			for cmd, st := range commandStats(t, a) {
				switch cmd {
				case "scan":
					w.scans += st[0]
				case "hmget", "hgetall", "zrange":
					w.reads += st[0]
				case "zadd", "hset":
					w.snapshotWrites += st[0]
				}
				if cmd != "config|resetstat" && cmd != "info" {
					w.usec += st[1]
					if st[0] > 0 {
						w.longest = max(w.longest, st[1]/st[0])
					}
				}
			}
		}
		pages = append(pages, w)
		maxWork = work{max(maxWork.scans, w.scans), max(maxWork.reads, w.reads), max(maxWork.snapshotWrites, w.snapshotWrites), max(maxWork.usec, w.usec), max(maxWork.longest, w.longest)}
		// Bounded, whatever n: 10 SCANs of COUNT 1000, which return at
		// most a few thousand keys each; the usage hashes they find read
		// once each; a page read is one ZRANGE and one HMGET.
		if w.scans > 10 || w.reads > 10*3000 {
			t.Fatalf("page %d: %v SCANs and %v reads, beyond the bound of a page", len(pages), w.scans, w.reads)
		}
		for i := range page.Records {
			r := &page.Records[i]
			if seen[r.Key] {
				t.Fatalf("page %d: key %s listed twice", len(pages), r.Key)
			}
			seen[r.Key] = true
			if last != nil && !q.Less(last, r) {
				t.Fatalf("page %d: %+v after %+v: out of order", len(pages), *r, *last)
			}
			last = r
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	took := time.Since(start)
	if len(seen) != n {
		t.Fatalf("listed %d keys, want %d", len(seen), n)
	}
	scanning, total := 0, work{}
	for _, w := range pages {
		if w.scans > 0 {
			scanning++
		}
		total.scans += w.scans
		total.reads += w.reads
		total.snapshotWrites += w.snapshotWrites
		total.usec += w.usec
	}
	t.Logf("%d keys on 3 masters listed in %d pages of at most %d (%d of them scanning) in %s", n, len(pages), q.Limit, scanning, took.Round(time.Millisecond))
	t.Logf("server work per page, at most: %.0f SCANs, %.0f reads (HMGET/ZRANGE), %.0f snapshot writes (ZADD/HSET of at most 500 members), %.0f µs of redis-server time; the slowest command kind averaged %.0f µs a call", maxWork.scans, maxWork.reads, maxWork.snapshotWrites, maxWork.usec, maxWork.longest)
	t.Logf("server work of the whole listing: %.0f SCANs, %.0f reads, %.0f snapshot writes, %.0f µs (%.1f µs a page on average)", total.scans, total.reads, total.snapshotWrites, total.usec, total.usec/float64(len(pages)))
}

// commandStats returns INFO commandstats of one server: calls and usec by
// command.
func commandStats(t *testing.T, c *redis.Client) map[string][2]float64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]float64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st [2]float64
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st[0] = x
			case "usec":
				st[1] = x
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

// TestUsageExpiresOnServerClock is issue 13's reproduction of expired
// usage on the server's clock (the conformance suite's
// UsageExpiresWithState replays it with a caller's clock on every store):
// fixed_window 100/1s align first track; two adds, 1.3 s of quiet, one add:
// the key shows one request, first seen at the last add.
func TestUsageExpiresOnServerClock(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv))
	ctx := context.Background()
	p, err := floodgate.ParsePolicy("b1", "fixed_window 100/1s align first track")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1300 * time.Millisecond)
	before := time.Now()
	if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "k", N: 1}); err != nil {
		t.Fatal(err)
	}
	us, err := s.TopKeys(ctx, p.Name, usage.ByRequests, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Requests != 1 || us[0].FirstSeen.Before(before.Add(-time.Second)) {
		t.Errorf("TopKeys = %+v; want k with 1 request, first seen at the last add", us)
	}
}
