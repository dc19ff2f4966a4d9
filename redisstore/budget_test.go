package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
)

func mustPolicy(t testing.TB, name, text string) floodgate.Policy {
	t.Helper()
	p, err := floodgate.ParsePolicy(name, text)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCrossSlotRefused: on a Cluster, a group over keys on different slots
// is refused before anything is decided, with an error wrapping
// storekit.ErrCrossSlot that names hash_tag and no key; the same group
// with hash_tag and one leading tag is decided, and so is a group of two
// policies over one key.
func TestCrossSlotRefused(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, clusterClient(t, cl))
	ctx := context.Background()
	user, org := mustPolicy(t, "user", "fixed_window 5/1m"), mustPolicy(t, "org", "fixed_window 10/1m")
	keys := dbsize(t, cl.Nodes...)
	_, err := s.Take(ctx, floodgate.Request{Policy: &user, Key: "secret-user-1", N: 1,
		Group: []floodgate.Request{{Policy: &org, Key: "secret-org-9"}}})
	if !errors.Is(err, storekit.ErrCrossSlot) || !strings.Contains(err.Error(), "hash_tag") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("group over two slots: %v, want an error wrapping ErrCrossSlot naming hash_tag and no key", err)
	}
	if n := keys(); n != 0 {
		t.Fatalf("a refused group wrote %d keys", n)
	}
	d, err := s.Take(ctx, floodgate.Request{Policy: &user, Key: "k", N: 1, Group: []floodgate.Request{{Policy: &org, Key: "k"}}})
	if err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("group of two policies over one key: %+v, %v", d, err)
	}
	user.HashTag, org.HashTag = true, true
	d, err = s.Take(ctx, floodgate.Request{Policy: &user, Key: "{org9}user1", N: 1, Group: []floodgate.Request{{Policy: &org, Key: "{org9}"}}})
	if err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("hash_tag group: %+v, %v", d, err)
	}
}

// TestGroupTwoProcesses: 64 goroutines on each of two Store values (two
// processes) add to a group of two policies over one key; exactly what the
// same adds admit one by one passes, and both policies spent the same.
func TestGroupTwoProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	a, b := newStore(t, client(t, srv)), newStore(t, client(t, srv))
	ctx := context.Background()
	// One window per policy that the test cannot leave: a day long, the
	// fixed one from the first decision (midnight would end one aligned to
	// the clock).
	p1, p2 := mustPolicy(t, "p1", "fixed_window 100/24h align first"), mustPolicy(t, "p2", "sliding_window 70/24h resolution 1h")
	req := func() floodgate.Request {
		return floodgate.Request{Policy: &p1, Key: "k", N: 1, Group: []floodgate.Request{{Policy: &p2, Key: "k"}}}
	}
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for _, s := range []*redisstore.Store{a, b} {
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 3; i++ {
					d, err := s.Take(ctx, req())
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	// One by one, the same 384 adds (on another key) admit min(100, 70) = 70.
	one := 0
	for i := 0; i < 2*64*3; i++ {
		r := req()
		r.Key, r.Group[0].Key = "one", "one"
		d, err := a.Take(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			one++
		}
	}
	if admitted != one || one != 70 {
		t.Errorf("%d adds admitted concurrently, %d one by one, want 70 both", admitted, one)
	}
	for _, p := range []*floodgate.Policy{&p1, &p2} {
		d, err := a.Take(ctx, floodgate.Request{Policy: p, Key: "k", N: 1, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		// A peek's remaining is after the add it previews.
		left := d.Remaining
		if d.Allowed {
			left++
		}
		max := p.Max
		if p == &p2 {
			max = int64(p.Limits[0].Max)
		}
		if spent := max - left; spent != 70 {
			t.Errorf("%s spent %d, want 70", p.Name, spent)
		}
	}
}

// TestCalendarDST: a daily window in America/New_York across both 2026
// DST changes (23- and 25-hour days) and a monthly window over the last
// day of February decide the same on Redis as on the Go twin (memstore),
// every field, at instants around each boundary.
func TestCalendarDST(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := floodgatetest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem, err := memstore.New(memstore.WithClock(clock), memstore.WithSweepInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := newStore(t, client(t, srv), redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour))
	ctx := context.Background()
	day := floodgate.Policy{Name: "day", Algorithm: floodgate.FixedWindow, Max: 3, Align: "calendar", Period: "day", TZ: "America/New_York"}
	month := floodgate.Policy{Name: "month", Algorithm: floodgate.FixedWindow, Max: 3, Align: "calendar", Period: "month", TZ: "America/New_York"}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone data:", err)
	}
	steps := 0
	check := func(p *floodgate.Policy, at time.Time, n int64) {
		t.Helper()
		clock.Set(at)
		var ds [2]floodgate.Decision
		for i, s := range []floodgate.Store{mem, red} {
			d, err := s.Take(ctx, floodgate.Request{Policy: p, Key: "k", N: n})
			if err != nil {
				t.Fatalf("%s at %s: %v", p.Name, at, err)
			}
			ds[i] = d
		}
		if ds[0] != ds[1] {
			t.Errorf("%s add %d at %s: Go twin %+v, Redis %+v", p.Name, n, at.Format(time.RFC3339Nano), ds[0], ds[1])
		}
		steps++
	}
	for _, date := range []time.Time{
		time.Date(2026, 3, 7, 0, 0, 0, 0, ny), time.Date(2026, 3, 8, 0, 0, 0, 0, ny), // spring forward: 23 h
		time.Date(2026, 10, 31, 0, 0, 0, 0, ny), time.Date(2026, 11, 1, 0, 0, 0, 0, ny), // fall back: 25 h
	} {
		for _, off := range []time.Duration{-time.Microsecond, 0, time.Hour, 2 * time.Hour, 3 * time.Hour, 22*time.Hour + 59*time.Minute, 23 * time.Hour, 24 * time.Hour, 25 * time.Hour} {
			check(&day, date.Add(off), 1)
			check(&day, date.Add(off), 2)
		}
	}
	for _, at := range []time.Time{
		time.Date(2026, 2, 27, 12, 0, 0, 0, ny), time.Date(2026, 2, 28, 0, 0, 0, 0, ny),
		time.Date(2026, 2, 28, 23, 59, 59, 999999000, ny), time.Date(2026, 3, 1, 0, 0, 0, 0, ny),
		time.Date(2026, 3, 1, 0, 0, 0, 1000, ny), time.Date(2026, 3, 31, 23, 0, 0, 0, ny),
	} {
		check(&month, at, 1)
		check(&month, at, 2)
	}
	// The 23- and 25-hour days themselves: reset_after at local midnight.
	for _, c := range []struct {
		date time.Time
		want time.Duration
	}{{time.Date(2026, 3, 8, 0, 0, 0, 0, ny), 23 * time.Hour}, {time.Date(2026, 11, 1, 0, 0, 0, 0, ny), 25 * time.Hour}} {
		clock.Set(c.date)
		d, err := red.Take(ctx, floodgate.Request{Policy: &day, Key: c.date.Format("d2006-01-02"), N: 1})
		if err != nil || d.ResetAfter != c.want {
			t.Errorf("day of %s: reset_after %v (%v), want %v", c.date.Format(time.DateOnly), d.ResetAfter, err, c.want)
		}
	}
	t.Logf("%d calendar steps: Redis and the Go twin agree", steps)
}

// TestReserveSettleTwoProcesses: 64 goroutines on each of two Store
// values reserve 3 units of a group (a token bucket without refill and a
// fixed window, one key) and settle what they did not use. No decision
// reports a budget below 0 or above its max, and at the end each policy
// has spent exactly the units used.
func TestReserveSettleTwoProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	a, b := newStore(t, client(t, srv)), newStore(t, client(t, srv))
	ctx := context.Background()
	// The fixed window from the first decision: midnight would end one
	// aligned to the clock.
	tb, fw := mustPolicy(t, "tb", "token_bucket 200/24h burst 200"), mustPolicy(t, "fw", "fixed_window 150/24h align first")
	group := func() floodgate.Request {
		return floodgate.Request{Policy: &tb, Key: "k", N: 3, Group: []floodgate.Request{{Policy: &fw, Key: "k"}}}
	}
	var mu sync.Mutex
	used := int64(0)
	var wg sync.WaitGroup
	for si, s := range []*redisstore.Store{a, b} {
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 4; i++ {
					req := group()
					r := &floodgate.Reservation{}
					req.Reserve = r
					d, err := s.Take(ctx, req)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Remaining < 0 || d.Remaining > 150 {
						t.Errorf("reserve: remaining %d outside 0 to 150", d.Remaining)
					}
					if !d.Allowed {
						continue
					}
					u := int64((si + g + i) % 4) // 0 to 3 used
					mu.Lock()
					used += u
					mu.Unlock()
					if u == 3 {
						continue
					}
					st := group()
					st.N, st.Settle = 3-u, r
					d, err = s.Take(ctx, st)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Remaining < 0 || d.Remaining > 150 {
						t.Errorf("settle: remaining %d outside 0 to 150", d.Remaining)
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, c := range []struct {
		p   *floodgate.Policy
		max int64
	}{{&tb, 200}, {&fw, 150}} {
		d, err := a.Take(ctx, floodgate.Request{Policy: c.p, Key: "k", N: 1, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		left := d.Remaining
		if d.Allowed {
			left++
		}
		if spent := c.max - left; spent != used {
			t.Errorf("%s spent %d, the settled reservations used %d", c.p.Name, spent, used)
		}
	}
	t.Logf("%d units used", used)
}

// TestHashTagLayout: under hash_tag, keys that begin with one {tag} share
// its slot and list back as themselves; a key without a leading tag, or
// whose tag is the whole key, keeps a name and a counter of its own.
func TestHashTagLayout(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, clusterClient(t, cl))
	ctx := context.Background()
	// A window from the first decision: an hour's end on the clock would
	// reset the counts the test compares.
	p := floodgate.Policy{Name: "ht", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour, Align: floodgate.AlignFirst, HashTag: true, Track: true}
	keys := []string{"{org7}", "{org7}user3", "{org7}user9", "org7", "{org7}}", "{org7}{x}%", "{}a", "{"}
	for i, key := range keys {
		for j := 0; j <= i; j++ {
			if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: key, N: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each key its own counter: key i was added i+1 times.
	for i, key := range keys {
		d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: key, N: 1, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		if want := max(0, int64(5-(i+1)-1)); d.Remaining != want || d.Allowed != (i+1 < 5) {
			t.Errorf("key %q: %+v, want remaining %d", key, d, want)
		}
	}
	slot := func(k string) int64 {
		r, err := cl.Nodes[0].Do(t, "CLUSTER", "KEYSLOT", k)
		if err != nil {
			t.Fatal(err)
		}
		return r.(int64)
	}
	for _, name := range []string{"fg:ht:{org7}user3}:fw", "fg:ht:{org7}user9}:fw", "fg:ht:{org7}}:fw", "fg:ht:{org7}%7Bx%7D%25}:u"} {
		if slot(name) != slot("org7") {
			t.Errorf("%s is not on org7's slot", name)
		}
	}
	recs, err := s.TopKeys(ctx, "ht", usage.ByRequests, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range recs {
		got[r.Key] = r.Requests
	}
	for i, key := range keys {
		if got[key] != int64(i+1) {
			t.Errorf("listing: key %q has %d requests, want %d (all: %v)", key, got[key], i+1, got)
		}
	}
}
