package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
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

// batchDifferential sends seeded random batches (several random policies,
// keys that may share a slot, repeats of one key within a batch, peeks
// and refunds among the adds, costs beyond the max) through TakeBatch and demands of
// every outcome the decision memstore makes when it takes the same
// requests one after another. It returns the number of decisions.
func batchDifferential(t *testing.T, c redis.UniversalClient, tag string, runs, batches int, opts ...redisstore.Option) int {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0xba7c))
	ch := floodgatetest.RandChooser{R: rng}
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	mem, err := memstore.New(memstore.WithClock(clock), memstore.WithSweepInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := newStore(t, c, append([]redisstore.Option{redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix(fmt.Sprintf("b%d%s", seed%1e6, tag))}, opts...)...)
	ctx := context.Background()
	// A script the server does not have yet is sent again after the
	// batch: loaded, every request is decided in its order.
	if err := red.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	decisions := 0
	for run := 0; run < runs; run++ {
		pols := make([]floodgate.Policy, 3)
		for i := range pols {
			pols[i] = floodgatetest.RandomPolicy(ch, fmt.Sprintf("batch%d_%d", run, i))
		}
		now := floodgatetest.BaseMicros + rng.Int64N(1_000_000_000)
		for b := 0; b < batches; b++ {
			now += []int64{0, rng.Int64N(1000), rng.Int64N(3_000_000), rng.Int64N(200_000_000)}[rng.IntN(4)]
			clock.SetMicros(now)
			reqs := make([]floodgate.Request, 1+rng.IntN(24))
			for i := range reqs {
				n := []int64{1, 1, 1, 2, 3, 1 + rng.Int64N(12), floodgate.MaxCost}[rng.IntN(7)]
				reqs[i] = floodgate.Request{Policy: &pols[rng.IntN(len(pols))], Key: floodgatetest.DiffKeys[rng.IntN(4)], N: n, Peek: rng.IntN(6) == 0}
				// A refund is a call of its own, in its place.
				reqs[i].Refund = !reqs[i].Peek && rng.IntN(10) == 0
			}
			out := make([]storekit.Outcome, len(reqs))
			red.TakeBatch(ctx, reqs, out)
			for i, req := range reqs {
				want, errW := mem.Take(ctx, req)
				got, errG := out[i].Decision, out[i].Err
				want.Granted, got.Granted = 0, 0 // set by stores with budgets only
				if errW != nil || errG != nil || want != got {
					var sb strings.Builder
					for j, r := range reqs {
						fmt.Fprintf(&sb, "  #%d %s key %q n %d peek %v refund %v\n", j, r.Policy.Name, r.Key, r.N, r.Peek, r.Refund)
					}
					t.Fatalf("run %d batch %d: request #%d (%s) decided %v (err %v) in a batch, %v (err %v) one by one; the batch:\n%s",
						run, b, i, req.Policy.String(), got, errG, want, errW, sb.String())
				}
			}
			decisions += len(reqs)
		}
	}
	return decisions
}

// TestBatchDifferential: TakeBatch decides as Take does one request after
// another, on both paths (joined into calls of the batch function, and a
// pipeline of scripts), standalone and on a Cluster (where only decisions
// of one slot are joined). On the Functions path, far fewer FCALLs reach
// the server than there are decisions.
func TestBatchDifferential(t *testing.T) {
	t.Parallel()
	t.Run("Standalone", func(t *testing.T) {
		for _, path := range paths {
			t.Run(path.name, func(t *testing.T) {
				srv := redistest.StartServer(t)
				before := srv.Calls(t, "fcall")
				n := batchDifferential(t, client(t, srv), path.name, 20, 30, path.opts...)
				calls := srv.Calls(t, "fcall") - before
				t.Logf("%d decisions in %d FCALLs", n, calls)
				if path.opts == nil && calls*2 > int64(n) {
					t.Errorf("%d decisions took %d FCALLs: the batches were not joined", n, calls)
				}
			})
		}
	})
	t.Run("Cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		for _, path := range paths {
			t.Run(path.name, func(t *testing.T) {
				batchDifferential(t, clusterClient(t, cl), path.name, 8, 30, path.opts...)
			})
		}
	})
}

// TestBatchErrorIsolated: in a batch joined into one FCALL, a decision
// the server refuses (its state key holds a hash: WRONGTYPE) fails alone;
// the decisions before and after it are made and counted once.
func TestBatchErrorIsolated(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv), redisstore.WithPrefix("iso"))
	ctx := context.Background()
	// A window from the first decision: an hour's end on the clock would
	// reset the counts the test compares.
	p := floodgate.Policy{Name: "iso", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour, Align: floodgate.AlignFirst}
	if _, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "bad", N: 1}); err != nil {
		t.Fatal(err)
	}
	keys, err := srv.Do(t, "KEYS", "iso:*bad*")
	if err != nil || len(keys.([]any)) != 1 {
		t.Fatalf("KEYS iso:*bad* = %v, %v; want the one state key", keys, err)
	}
	bad := keys.([]any)[0].(string)
	if _, err := srv.Do(t, "DEL", bad); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do(t, "HSET", bad, "f", "v"); err != nil {
		t.Fatal(err)
	}
	reqs := []floodgate.Request{
		{Policy: &p, Key: "good", N: 1},
		{Policy: &p, Key: "bad", N: 1},
		{Policy: &p, Key: "good", N: 2},
	}
	out := make([]storekit.Outcome, len(reqs))
	before := srv.Calls(t, "fcall")
	s.TakeBatch(ctx, reqs, out)
	if calls := srv.Calls(t, "fcall") - before; calls != 1 {
		t.Errorf("the batch took %d FCALLs, want 1", calls)
	}
	if err := out[1].Err; !errors.Is(err, floodgate.ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("the decision on a hash: %v, want ErrUnavailable with WRONGTYPE", err)
	}
	for i, want := range map[int]int64{0: 9, 2: 7} {
		if d := out[i].Decision; out[i].Err != nil || !d.Allowed || d.Remaining != want {
			t.Errorf("decision #%d: %v (err %v), want allowed with %d remaining", i, d, out[i].Err, want)
		}
	}
	d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: "good", N: 1, Peek: true})
	if err != nil || d.Remaining != 6 {
		t.Errorf("a peek after the batch: %v, %v; want 6 remaining (3 counted once)", d, err)
	}
}

// TestBatchReadsClockOnce: the decisions of one batch call that read the
// server's clock share one TIME, on a mix of algorithms, keys and peeks,
// and each is decided as a single Take would be.
func TestBatchReadsClockOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := newStore(t, client(t, srv), redisstore.WithPrefix("clk"))
	ctx := context.Background()
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	pols := []floodgate.Policy{
		{Name: "fw", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour},
		{Name: "gc", Algorithm: floodgate.GCRA, Max: 10, Window: time.Hour, Burst: 10},
		{Name: "tb", Algorithm: floodgate.TokenBucket, Max: 10, Window: time.Hour, Burst: 10},
	}
	var reqs []floodgate.Request
	for i := 0; i < 16; i++ {
		reqs = append(reqs, floodgate.Request{Policy: &pols[i%3], Key: fmt.Sprintf("k%d", i), N: 1, Peek: i%5 == 4})
	}
	out := make([]storekit.Outcome, len(reqs))
	fcalls, times := srv.Calls(t, "fcall"), srv.Calls(t, "time")
	s.TakeBatch(ctx, reqs, out)
	if n := srv.Calls(t, "fcall") - fcalls; n != 1 {
		t.Errorf("the batch took %d FCALLs, want 1", n)
	}
	if n := srv.Calls(t, "time") - times; n != 1 {
		t.Errorf("16 decisions on the server's clock in one batch read TIME %d times, want once", n)
	}
	for i, o := range out {
		if o.Err != nil || !o.Decision.Allowed || o.Decision.Remaining != 9 {
			t.Errorf("decision #%d (%s, peek %v): %v (err %v), want allowed with 9 remaining", i, reqs[i].Policy.Name, reqs[i].Peek, o.Decision, o.Err)
		}
	}

	// A second batch reads the clock again: TIME is never kept across calls.
	times = srv.Calls(t, "time")
	s.TakeBatch(ctx, reqs[:2], out)
	if n := srv.Calls(t, "time") - times; n != 1 {
		t.Errorf("a second batch read TIME %d times, want once", n)
	}

	// With the caller's clock, a batch reads no TIME at all.
	c := newStore(t, client(t, srv), redisstore.WithPrefix("clk2"), redisstore.WithClock(storekit.SystemClock{}))
	times = srv.Calls(t, "time")
	c.TakeBatch(ctx, reqs, out)
	if n := srv.Calls(t, "time") - times; n != 0 {
		t.Errorf("a batch on the caller's clock read TIME %d times, want 0", n)
	}
	for i, o := range out {
		if o.Err != nil {
			t.Errorf("decision #%d on the caller's clock: %v", i, o.Err)
		}
	}
}

// cacheStores starts a server for t, runs t in parallel, and returns the
// server, a client of it, a manual clock and two stores on the client
// that read the clock: s (prefix, its library loaded), for requests in a
// batch, and alone (prefix + "1"), for the same requests one by one.
func cacheStores(t *testing.T, prefix string) (srv *redistest.Server, c *redis.Client, clock *floodgatetest.ManualClock, s, alone *redisstore.Store) {
	t.Helper()
	t.Parallel()
	srv = redistest.StartServer(t)
	c = client(t, srv)
	clock = floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s = newStore(t, c, redisstore.WithClock(clock), redisstore.WithPrefix(prefix))
	alone = newStore(t, c, redisstore.WithClock(clock), redisstore.WithPrefix(prefix+"1"))
	if err := s.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	return srv, c, clock, s, alone
}

// sameAlone fails t unless each of reqs, taken one by one on alone,
// is decided as out says the batch decided it.
func sameAlone(t *testing.T, alone *redisstore.Store, reqs []floodgate.Request, out []storekit.Outcome) {
	t.Helper()
	for i, req := range reqs {
		d, err := alone.Take(context.Background(), req)
		if out[i].Decision != d || out[i].Err != err {
			t.Errorf("decision #%d (%s, %s, n %d, peek %v): %+v (err %v) in the batch, %+v (err %v) one by one",
				i, req.Policy.Name, req.Key, req.N, req.Peek, out[i].Decision, out[i].Err, d, err)
		}
	}
}

// TestBatchStateCache: the calls of one batch that share a key (a hot
// key) read its state from Redis once and write it once, after the last
// of them (joinBatch marks them; common.lua, state_get), and every
// decision, the state left and its TTL are what the same requests make
// one by one.
func TestBatchStateCache(t *testing.T) {
	srv, c, clock, s, alone := cacheStores(t, "sc")
	ctx := context.Background()
	pols := []floodgate.Policy{
		{Name: "fw", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour, Align: floodgate.AlignFirst},
		{Name: "gc", Algorithm: floodgate.GCRA, Max: 5, Window: time.Hour, Burst: 5},
		{Name: "tb", Algorithm: floodgate.TokenBucket, Max: 5, Window: time.Hour, Burst: 5},
		{Name: "ar", Algorithm: floodgate.AR1, Limits: []floodgate.Limit{{Max: 5, Resolution: time.Minute, Decay: 2}}},
	}
	parts := []string{"fw", "gc", "tb", "ar"}
	stateKey := func(prefix string, i int, key string) string {
		return fmt.Sprintf("%s:%s:{%s}:%s", prefix, pols[i].Name, key, parts[i])
	}
	// Seven adds of 1 to a hot key under each policy (five allowed, two
	// denied and not counted), the policies taking turns, a peek among
	// them, and one add to a cold key in the middle, which no other
	// decision shares a key with (not marked: GET and SET of its own): 5
	// keys read, 5 written.
	var reqs []floodgate.Request
	for j := 0; j < 8; j++ {
		for i := range pols {
			reqs = append(reqs, floodgate.Request{Policy: &pols[i], Key: "hot", N: 1, Peek: j == 3})
		}
		if j == 4 {
			reqs = append(reqs, floodgate.Request{Policy: &pols[0], Key: "cold", N: 2})
		}
	}
	gets, sets, fcalls := srv.Calls(t, "get"), srv.Calls(t, "set"), srv.Calls(t, "fcall")
	out := make([]storekit.Outcome, len(reqs))
	s.TakeBatch(ctx, reqs, out)
	if n := srv.Calls(t, "fcall") - fcalls; n != 1 {
		t.Fatalf("the batch took %d FCALLs, want 1", n)
	}
	if n := srv.Calls(t, "get") - gets; n != 5 {
		t.Errorf("%d decisions on 5 keys read a state %d times (GET), want 5", len(reqs), n)
	}
	if n := srv.Calls(t, "set") - sets; n != 5 {
		t.Errorf("%d decisions on 5 keys wrote a state %d times (SET), want 5", len(reqs), n)
	}
	compare := func(reqs []floodgate.Request, out []storekit.Outcome) {
		t.Helper()
		sameAlone(t, alone, reqs, out)
		for i := range pols {
			for _, key := range []string{"hot", "cold"} {
				b, a := stateKey("sc", i, key), stateKey("sc1", i, key)
				vb, errB := c.Get(ctx, b).Result()
				va, errA := c.Get(ctx, a).Result()
				if vb != va || (errB == nil) != (errA == nil) {
					t.Errorf("%s: state %x (err %v) after the batch, %x (err %v) one by one", b, vb, errB, va, errA)
				}
				if errB != nil {
					continue
				}
				// The TTLs were set at different moments of the server's
				// clock; a wrong one is wrong by an hour or has none.
				tb, ta := c.PTTL(ctx, b).Val(), c.PTTL(ctx, a).Val()
				if tb <= 0 || ta <= 0 || tb-ta > time.Minute || ta-tb > time.Minute {
					t.Errorf("%s: PTTL %v after the batch, %v one by one", b, tb, ta)
				}
			}
		}
	}
	compare(reqs, out)

	// A batch whose calls read the clock at their own times: fixed_window's
	// first call keeps the key's TTL (KEEPTTL, the window is live), its
	// second opens a new window (PX an hour) and its third keeps that.
	// The states were left with a TTL of 3 hours, so keeping it is wrong
	// by 2 hours.
	long := func(prefix string) *redisstore.Store {
		return newStore(t, c, redisstore.WithClock(clock), redisstore.WithPrefix(prefix), redisstore.WithMinTTL(3*time.Hour))
	}
	clock.SetMicros(floodgatetest.BaseMicros + 10*3_600_000_000)
	for _, prefix := range []string{"sc", "sc1"} {
		if _, err := long(prefix).Take(ctx, floodgate.Request{Policy: &pols[0], Key: "roll", N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	step := func(prefix string) *redisstore.Store {
		cl := &steppingClock{step: 1_000_000}
		cl.now.Store(floodgatetest.BaseMicros + 11*3_600_000_000 - 1_000_000) // 1 s before the window's end
		return newStore(t, c, redisstore.WithClock(cl), redisstore.WithPrefix(prefix))
	}
	roll := []floodgate.Request{{Policy: &pols[0], Key: "roll", N: 1}, {Policy: &pols[0], Key: "roll", N: 1}, {Policy: &pols[0], Key: "roll", N: 1}}
	out = out[:len(roll)]
	step("sc").TakeBatch(ctx, roll, out)
	sameAlone(t, step("sc1"), roll, out)
	if d := out[2].Decision; !d.Allowed || d.Remaining != 3 {
		t.Errorf("the third add, in the new window: %+v, want allowed with 3 remaining", d)
	}
	tb, ta := c.PTTL(ctx, stateKey("sc", 0, "roll")).Val(), c.PTTL(ctx, stateKey("sc1", 0, "roll")).Val()
	if tb <= 0 || tb > time.Hour || ta <= 0 || ta > time.Hour || tb-ta > time.Minute || ta-tb > time.Minute {
		t.Errorf("PTTL %v after the batch, %v one by one; want the new window's hour", tb, ta)
	}
}

// TestBatchStateCacheExisting: the state cache of a batch call on keys
// whose state Redis holds already, with its TTL: writes within a live
// window or bucket keep that TTL (KEEPTTL), and peeks before the first
// write (a state read, or found missing, more than once) change nothing;
// every decision, state and TTL is the one the same requests make one by
// one. And joinBatch marks exactly the decisions whose state is one
// string that another decision of the call shares.
func TestBatchStateCacheExisting(t *testing.T) {
	srv, c, clock, s, alone := cacheStores(t, "se")
	ctx := context.Background()
	fw := floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour, Align: floodgate.AlignFirst}
	tb := floodgate.Policy{Name: "tb", Algorithm: floodgate.TokenBucket, Max: 5, Window: time.Hour, Burst: 5}
	for _, st := range []*redisstore.Store{s, alone} {
		for _, p := range []*floodgate.Policy{&fw, &tb} {
			if _, err := st.Take(ctx, floodgate.Request{Policy: p, Key: "old", N: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	clock.SetMicros(floodgatetest.BaseMicros + 60_000_000) // a minute on: the same window and bucket
	reqs := []floodgate.Request{
		{Policy: &fw, Key: "old", N: 1, Peek: true}, {Policy: &tb, Key: "old", N: 1, Peek: true},
		{Policy: &fw, Key: "new", N: 1, Peek: true}, {Policy: &fw, Key: "new", N: 1, Peek: true},
		{Policy: &fw, Key: "old", N: 2}, {Policy: &tb, Key: "old", N: 2},
		{Policy: &fw, Key: "old", N: 1}, {Policy: &tb, Key: "old", N: 1},
		{Policy: &fw, Key: "new", N: 1},
	}
	gets, sets := srv.Calls(t, "get"), srv.Calls(t, "set")
	out := make([]storekit.Outcome, len(reqs))
	s.TakeBatch(ctx, reqs, out)
	if n := srv.Calls(t, "get") - gets; n != 3 {
		t.Errorf("%d decisions on 3 keys read a state %d times (GET), want 3", len(reqs), n)
	}
	if n := srv.Calls(t, "set") - sets; n != 3 {
		t.Errorf("%d decisions on 3 keys wrote a state %d times (SET), want 3", len(reqs), n)
	}
	sameAlone(t, alone, reqs, out)
	for _, k := range []string{"fw:{old}:fw", "tb:{old}:tb", "fw:{new}:fw"} {
		b, a := "se:"+k, "se1:"+k
		if vb, va := c.Get(ctx, b).Val(), c.Get(ctx, a).Val(); vb != va || vb == "" {
			t.Errorf("%s: state %x after the batch, %x one by one", b, vb, va)
		}
		tb, ta := c.PTTL(ctx, b).Val(), c.PTTL(ctx, a).Val()
		if tb <= 0 || tb > time.Hour || ta <= 0 || tb-ta > time.Minute || ta-tb > time.Minute {
			t.Errorf("%s: PTTL %v after the batch, %v one by one; want the hour set when it was made", b, tb, ta)
		}
	}

	// Marks: a shared fixed_window key (its peek too) and a shared gcra
	// key, not a key used once, nor a shared sliding_window key, whose
	// state is not one string.
	gc := floodgate.Policy{Name: "gc", Algorithm: floodgate.GCRA, Max: 5, Window: time.Hour, Burst: 5}
	sw := floodgate.Policy{Name: "sw", Algorithm: floodgate.SlidingWindow, Limits: []floodgate.Limit{{Max: 5, Window: time.Hour, Resolution: time.Minute}}}
	got := redisstore.BatchKeyCounts(s, []floodgate.Request{
		{Policy: &fw, Key: "a", N: 1}, {Policy: &sw, Key: "a", N: 1}, {Policy: &fw, Key: "b", N: 1},
		{Policy: &gc, Key: "a", N: 1}, {Policy: &fw, Key: "a", N: 1, Peek: true}, {Policy: &sw, Key: "a", N: 1},
		{Policy: &gc, Key: "a", N: 1},
	})
	if want := []int{-1, 2, 1, -1, -1, 2, -1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("key counts sent %v, want %v", got, want)
	}
}
