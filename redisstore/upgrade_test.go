package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
)

// v1Scripts are the scripts of the version before the compact states (the
// text forms "<start> <count> <t_last>" and "<TAT> <FRAC> <t_last>
// <count>"), kept in testdata/v1 as they were, by algorithm.
func v1Scripts(t testing.TB) map[floodgate.Algorithm]string {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile("testdata/v1/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	common := read("common")
	return map[floodgate.Algorithm]string{
		floodgate.FixedWindow: common + "\n" + read("fixed_window"),
		floodgate.GCRA:        common + "\n" + read("gcra"),
	}
}

// upgraded is a redisstore.Store that decides its first calls with the
// scripts of the previous version, then with its own: an upgrade in the
// middle of a run, with state written by one version read by the next.
type upgraded struct {
	*redisstore.Store
	old      map[floodgate.Algorithm]string
	switchAt int
	calls    int
	old1     bool // the old scripts decided
	new1     bool // the new scripts decided after them
}

func (u *upgraded) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	u.calls++
	src, ok := u.old[req.Policy.Algorithm]
	if ok && u.calls <= u.switchAt {
		u.old1 = true
		return redisstore.TakeWith(ctx, u.Store, src, req)
	}
	u.new1 = u.new1 || u.old1
	return u.Store.Take(ctx, req)
}

// TestUpgradeDifferential: state written by the previous version's scripts
// decides, after the upgrade, exactly as memstore decides (and so exactly
// as if it had never been written in the old form).
func TestUpgradeDifferential(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv)
	old := v1Scripts(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FLOODGATE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (rerun with FLOODGATE_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x09de))
	runs, ops := 400, 120
	if testing.Short() {
		runs = 80
	}
	tried := 0
	for i := 0; i < runs; i++ {
		clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
		mem, err := memstore.New(memstore.WithClock(clock), memstore.WithSweepInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		red := newStore(t, c, redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix(fmt.Sprintf("u%d-%d", seed%1e6, i)))
		u := &upgraded{Store: red, old: old, switchAt: rng.IntN(ops)}
		floodgatetest.Differential(t, floodgatetest.RandChooser{R: rng}, mem, u, clock, fmt.Sprintf("up%d", i), ops)
		if u.new1 {
			tried++
		}
		mem.Close()
	}
	t.Logf("%d gcra and fixed_window policies upgraded mid-run: memstore and the upgraded redisstore agree", tried)
}

// TestCompactState: the states most keys hold are stored as integers
// (Redis's int encoding, the smallest string there is), the others in at
// most 28 bytes (one 48-byte allocation), and each decides as before.
func TestCompactState(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros + 123_456))
	s := newStore(t, client(t, srv), redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour))
	ctx := context.Background()
	type step struct {
		dus      int64 // clock step before the add, µs
		n        int64
		encoding string
		length   int64
	}
	for _, tc := range []struct {
		policy string
		part   string
		steps  []step
	}{
		{"gcra 10/1h burst 1000000", "gc", []step{
			{0, 1, "int", 19},           // found no state: t_last and n
			{5, 1, "embstr", 28},        // TAT was ahead: four 7-byte fields
			{800_000_000, 3, "int", 19}, // TAT (720 s ahead) passed: fresh again
		}},
		{"gcra 3/1s burst 5", "gc", []step{ // T is not whole µs
			{0, 2, "int", 19},
			{1, 1, "embstr", 28},
		}},
		{"fixed_window 1000000000/1h align first", "fw", []step{
			{0, 1, "int", 20},    // "-": the window opened at t_last
			{7, 4, "embstr", 21}, // a later add in the same window
			{3_600_000_000, 999, "int", 20},
			{0, 1, "embstr", 21}, // count 1000: fields
		}},
		{"fixed_window 1000000000/1h", "fw", []step{ // align epoch
			{0, 1, "int", 19},   // the window holding t_last
			{7, 900, "int", 19}, // count 901
			{0, 99, "embstr", 21},
		}},
	} {
		p, err := floodgate.ParsePolicy("c", tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("k%d", len(tc.policy))
		redisKey := "fg:{c:" + key + "}:" + tc.part
		for i, st := range tc.steps {
			clock.Advance(time.Duration(st.dus) * time.Microsecond)
			if d, err := s.Take(ctx, floodgate.Request{Policy: &p, Key: key, N: st.n}); err != nil || !d.Allowed {
				t.Fatalf("%s step %d: %v, %v", tc.policy, i, d, err)
			}
			enc, err := srv.Do(t, "OBJECT", "ENCODING", redisKey)
			if err != nil {
				t.Fatal(err)
			}
			length, err := srv.Do(t, "STRLEN", redisKey)
			if err != nil {
				t.Fatal(err)
			}
			if enc != st.encoding || length != st.length {
				t.Errorf("%s step %d: stored as %v of %v bytes, want %s of %d", tc.policy, i, enc, length, st.encoding, st.length)
			}
		}
		if err := s.Reset(ctx, &p, key); err != nil {
			t.Fatal(err)
		}
	}
}
