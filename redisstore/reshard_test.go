package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// TestSlotMigration: while the slot of some keys moves from one master to
// another (CLUSTER SETSLOT … MIGRATING / IMPORTING, MIGRATE, SETSLOT …
// NODE, as redis-cli --cluster reshard does it), decisions on those keys
// are decided, each once: a batch mixing a key already on the first master
// with a new one (which the cluster refuses whole with TRYAGAIN) is
// decided call by call, and a decision tracking usage on a new key (two
// keys, which neither master will take during the migration) waits for
// the migration to end, within its context. A context that ends first
// gets ErrUnavailable, and no hang.
func TestSlotMigration(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	for _, path := range paths {
		// One after the other: each counts the refusals of the cluster's
		// masters, which another's would add to.
		t.Run(path.name, func(t *testing.T) {
			testSlotMigration(t, cl, strings.ToLower(path.name), path.opts...)
		})
	}
}

func testSlotMigration(t *testing.T, cl *redistest.Cluster, name string, opts ...redisstore.Option) {
	ctx := context.Background()
	s := newStore(t, clusterClient(t, cl), append([]redisstore.Option{redisstore.WithTryAgainFor(time.Minute)}, opts...)...)
	// Windows from the first decision: an hour's end on the clock would
	// start another between two decisions the test counts.
	fw := &floodgate.Policy{Name: name + "-fw", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Hour, Align: floodgate.AlignFirst}
	tr := &floodgate.Policy{Name: name + "-tr", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Hour, Align: floodgate.AlignFirst, Track: true}

	// Keys of one slot: old (decided before the migration) and new ones.
	old := "old-" + name
	slot := redisstore.KeySlot(redisstore.DecisionKeys(s, fw, old)[0])
	inSlot := func(p *floodgate.Policy, key string) bool {
		for _, k := range redisstore.DecisionKeys(s, p, key) {
			if redisstore.KeySlot(k) != slot {
				return false
			}
		}
		return true
	}
	var fresh []string
	for i := 0; len(fresh) < 4; i++ {
		k := name + strconv.Itoa(i)
		if inSlot(fw, k) && inSlot(tr, k) {
			fresh = append(fresh, k)
		}
	}
	take := func(ctx context.Context, p *floodgate.Policy, key string) (floodgate.Decision, error) {
		return s.Take(ctx, floodgate.Request{Policy: p, Key: key, N: 1})
	}
	for _, p := range []*floodgate.Policy{fw, tr} {
		if _, err := take(ctx, p, old); err != nil {
			t.Fatal(err)
		}
	}

	// Start the migration from the slot's master to the next.
	a, b, bid := startMigration(t, cl, slot)
	ss := strconv.Itoa(slot)

	// A batch of the old key and a new one: one FCALL over keys on both
	// sides, refused whole, then each decision alone.
	reqs := []floodgate.Request{
		{Policy: fw, Key: old, N: 1}, {Policy: fw, Key: fresh[0], N: 1},
		{Policy: fw, Key: old, N: 1}, {Policy: tr, Key: old, N: 1},
	}
	out := make([]storekit.Outcome, len(reqs))
	s.TakeBatch(ctx, reqs, out)
	for i, want := range []int64{1, 2, 0, 1} {
		if o := out[i]; o.Err != nil || !o.Decision.Allowed || o.Decision.Remaining != want {
			t.Fatalf("batch during the migration, decision %d: %+v, %v; want allowed, %d remaining", i, o.Decision, o.Err, want)
		}
	}

	// A context that ends while the cluster refuses: an error, no hang
	// (the cluster's refusal, or the context's end if it came mid-call).
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := take(short, tr, fresh[1])
	cancel()
	if !errors.Is(err, floodgate.ErrUnavailable) {
		t.Fatalf("a tracked new key with a short context during the migration: %v; want ErrUnavailable", err)
	}

	// Without a deadline, a store stops sending it after its tryAgainFor.
	brief := newStore(t, clusterClient(t, cl), append([]redisstore.Option{redisstore.WithTryAgainFor(30 * time.Millisecond)}, opts...)...)
	if _, err = brief.Take(ctx, floodgate.Request{Policy: tr, Key: fresh[3], N: 1}); !errors.Is(err, floodgate.ErrUnavailable) || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Fatalf("a tracked new key during the migration, sent again for 30 ms: %v; want ErrUnavailable with TRYAGAIN", err)
	}

	// A tracked new key: refused by the importing master until the
	// migration ends (the keys, then the slot's owner everywhere), which it
	// waits for.
	moved := 0
	err = refusedThen(t, b, "TRYAGAIN", 1, func() error {
		_, err := take(ctx, tr, fresh[2])
		return err
	}, func() { moved = finishMigration(t, cl, slot, a, b, bid) })
	if moved == 0 {
		t.Fatal("no key on the migrating master")
	}
	if err != nil {
		t.Fatalf("a tracked new key during the migration: %v", err)
	}

	// Every decision counted once, on the new master; the refused ones
	// (fresh[1] and fresh[3]) not at all.
	for _, c := range []struct {
		p    *floodgate.Policy
		key  string
		want int64 // remaining after one more, -1 for denied
	}{{fw, old, -1}, {fw, fresh[0], 1}, {tr, old, 0}, {tr, fresh[1], 2}, {tr, fresh[2], 1}, {tr, fresh[3], 2}} {
		d, err := take(ctx, c.p, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if c.want < 0 && d.Allowed || c.want >= 0 && (!d.Allowed || d.Remaining != c.want) {
			t.Errorf("%s %s after the migration: allowed %v, %d remaining; want %d remaining (-1: denied)", c.p.Name, c.key, d.Allowed, d.Remaining, c.want)
		}
	}
	if n := len(a.Must(t, "CLUSTER", "GETKEYSINSLOT", ss, "1000").([]any)); n != 0 {
		t.Errorf("%d keys of the slot left on the old master", n)
	}
}

// TestReshardUnderLoad: decisions (single and batched, over one key and
// over several: tracked, a sliding window) keep flowing while redis-cli --cluster reshard moves the slots of their
// keys to another master, and each one that succeeds is counted exactly
// once: a call sent again after TRYAGAIN (or a MOVED or ASK go-redis
// stopped following) had not run. None is refused (the store sends
// refused calls again for a minute here, not a second, so that a slow
// machine cannot fail the test), and none has an unknown outcome.
func TestReshardUnderLoad(t *testing.T) {
	t.Parallel()
	const moved = 16 // slots moved from Nodes[0], its lowest: 0 to 15
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, clusterClient(t, cl), redisstore.WithTryAgainFor(time.Minute))
	ctx := context.Background()
	const max = 1 << 40
	pols := []*floodgate.Policy{
		// Fixed windows from the first decision: an hour's end on the
		// clock would reset the counts the test compares.
		{Name: "fw", Algorithm: floodgate.FixedWindow, Max: max, Window: time.Hour, Align: floodgate.AlignFirst},
		{Name: "tr", Algorithm: floodgate.FixedWindow, Max: max, Window: time.Hour, Align: floodgate.AlignFirst, Track: true},
		{Name: "sw", Algorithm: floodgate.SlidingWindow, Limits: []floodgate.Limit{{Max: max, Window: time.Hour, Resolution: time.Minute}}},
	}
	var keys []string // keys whose slots move, about 100 a slot
	for i := 0; len(keys) < 100*moved; i++ {
		k := "r" + strconv.Itoa(i)
		if redisstore.KeySlot(redisstore.DecisionKeys(s, pols[1], k)[0]) < moved {
			keys = append(keys, k)
		}
	}
	type counter struct{ ok, refused atomic.Int64 }
	counts := make([][]counter, len(pols))
	for i := range counts {
		counts[i] = make([]counter, len(keys))
	}
	// State for every key under fw, and under the policies over several
	// keys (tr: state and usage; sw: state and a limit's buckets) for half
	// of them, the others new, so that the slots have keys to move.
	var first []floodgate.Request
	var firstAt [][2]int
	for ki, k := range keys {
		for pi, p := range pols {
			if pi == 0 || ki%2 == 0 {
				first = append(first, floodgate.Request{Policy: p, Key: k, N: 1})
				firstAt = append(firstAt, [2]int{pi, ki})
			}
		}
	}
	firstOut := make([]storekit.Outcome, len(first))
	s.TakeBatch(ctx, first, firstOut)
	for i, o := range firstOut {
		if o.Err != nil || !o.Decision.Allowed {
			t.Fatalf("before the reshard: %+v, %v", o.Decision, o.Err)
		}
		counts[firstAt[i][0]][firstAt[i][1]].ok.Add(1)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	halt := func() {
		once.Do(func() { close(stop) })
		wg.Wait()
	}
	t.Cleanup(halt) // when Reshard fails or skips the test
	var unknown atomic.Value
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			reqs := make([]floodgate.Request, 4)
			out := make([]storekit.Outcome, 4)
			pick := make([][2]int, 4)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + i%4 // batches of 1 to 4, some keys new, some repeated
				for j := range n {
					pi, ki := rng.IntN(len(pols)), rng.IntN(len(keys))
					pick[j] = [2]int{pi, ki}
					reqs[j] = floodgate.Request{Policy: pols[pi], Key: keys[ki], N: 1}
				}
				if n == 1 {
					d, err := s.Take(ctx, reqs[0])
					out[0] = storekit.Outcome{Decision: d, Err: err}
				} else {
					s.TakeBatch(ctx, reqs[:n], out[:n])
				}
				for j := range n {
					c := &counts[pick[j][0]][pick[j][1]]
					switch o := out[j]; {
					case o.Err == nil && o.Decision.Allowed:
						c.ok.Add(1)
					case redisstore.Refused(o.Err): // TRYAGAIN, or MOVED/ASK after go-redis's redirections
						c.refused.Add(1)
					default:
						unknown.CompareAndSwap(nil, fmt.Sprintf("%+v, %v", o.Decision, o.Err))
					}
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond) // decisions flowing
	cl.Reshard(t, 0, 1, moved)
	halt()
	if u := unknown.Load(); u != nil {
		t.Fatalf("a decision during the reshard neither allowed nor refused: %v", u)
	}
	var ok, refused int64
	for pi, p := range pols {
		for ki, k := range keys {
			c := &counts[pi][ki]
			ok, refused = ok+c.ok.Load(), refused+c.refused.Load()
			d, err := s.Take(ctx, floodgate.Request{Policy: p, Key: k, N: 1, Peek: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := max - 1 - d.Remaining; got != c.ok.Load() {
				t.Errorf("%s %s: counted %d, %d allowed", p.Name, k, got, c.ok.Load())
			}
		}
	}
	for slot := range moved {
		for i, want := range []bool{false, true} {
			n, err := cl.Nodes[i].Do(t, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot))
			if err != nil || (n.(int64) > 0) != want {
				t.Errorf("after the reshard, master %d holds %v keys of slot %d (%v)", i, n, slot, err)
			}
		}
	}
	t.Logf("%d decisions allowed, %d refused", ok, refused)
	if refused > 0 {
		t.Errorf("%d decisions refused (TRYAGAIN, MOVED, ASK) during the reshard", refused)
	}
}

// TestAnsweredBeforeRedirectWait: a cluster client following one call's
// ASK waits first (its retry backoff), and when the context ends
// meanwhile go-redis marks every call of the pipeline with the context's
// error, those already answered too. The answered decision ran and was
// counted: TakeBatch gives its decision, not an error the failure policy
// would decide (letting through a request the limit refused, or refusing
// one it counted). The context ends both ways a caller's does: its
// deadline passes (context.DeadlineExceeded), or it is canceled; the test
// ends it once both masters have answered, whatever the machine's speed.
func TestAnsweredBeforeRedirectWait(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	// A backoff far beyond the test, whatever the machine's speed; the
	// answered call's reply is read for up to clientRead.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1, MinRetryBackoff: time.Hour, MaxRetryBackoff: time.Hour,
		ReadTimeout: clientRead, WriteTimeout: clientRead})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c)
	ctx := context.Background()
	fw := &floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Hour, Align: floodgate.AlignFirst}
	slotOf := func(key string) int { return redisstore.KeySlot(redisstore.DecisionKeys(s, fw, key)[0]) }
	slot := slotOf("moving")
	src := firstOwner(cl, slot)
	endings := []struct {
		name          string
		err           error
		ctx           func() (context.Context, func())
		moving, other string // a new key of the slot that moves; a key on another master
	}{
		{name: "deadline", err: context.DeadlineExceeded, ctx: expiring, moving: "moving"},
		{name: "cancel", err: context.Canceled, ctx: func() (context.Context, func()) { return context.WithCancel(ctx) }},
	}
	for i := 0; endings[1].moving == ""; i++ {
		if k := "moving" + strconv.Itoa(i); slotOf(k) == slot {
			endings[1].moving = k
		}
	}
	for i, e := 0, 0; e < len(endings); i++ {
		if k := "o" + strconv.Itoa(i); firstOwner(cl, slotOf(k)) != src {
			endings[e].other = k
			e++
		}
	}
	// A first decision on each other key, which also loads what its
	// master lacks.
	for _, e := range endings {
		if d, err := s.Take(ctx, floodgate.Request{Policy: fw, Key: e.other, N: 1}); err != nil || d.Remaining != 2 {
			t.Fatalf("before the migration: %+v, %v", d, err)
		}
	}
	srcNode, _, _ := startMigration(t, cl, slot)

	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			// The moving key is new: its master answers ASK, and go-redis
			// waits an hour before following it. The context ends once
			// that master has answered ASK and the other has run its
			// decision: go-redis reads both replies whatever the context
			// (a client without ContextTimeoutEnabled), then waits.
			otherNode := cl.Nodes[firstOwner(cl, slotOf(e.other))]
			asks, fcalls := srcNode.Errors(t, "ASK"), otherNode.Calls(t, "fcall")
			run, end := e.ctx()
			defer end()
			reqs := []floodgate.Request{{Policy: fw, Key: e.other, N: 1}, {Policy: fw, Key: e.moving, N: 1}}
			out := make([]storekit.Outcome, len(reqs))
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.TakeBatch(run, reqs, out)
			}()
			for deadline := time.Now().Add(30 * time.Second); srcNode.Errors(t, "ASK") == asks || otherNode.Calls(t, "fcall") == fcalls; time.Sleep(time.Millisecond) {
				select {
				case <-done:
					t.Fatalf("TakeBatch returned before both masters answered: %+v", out)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the masters did not answer within 30 s")
				}
			}
			end()
			select {
			case <-done:
			case <-time.After(hung):
				t.Fatalf("TakeBatch still waiting %v after its context ended", hung)
			}
			if o := out[0]; o.Err != nil || !o.Decision.Allowed || o.Decision.Remaining != 1 {
				t.Errorf("the answered decision: %+v, %v; want allowed, 1 remaining", o.Decision, o.Err)
			}
			if err := out[1].Err; !errors.Is(err, floodgate.ErrUnavailable) || !errors.Is(err, e.err) {
				t.Errorf("the decision waiting on its ASK: %+v, %v; want ErrUnavailable with the context's error", out[1].Decision, err)
			}
			// Counted once, and the other not at all.
			for _, c := range []struct {
				key  string
				want int64
			}{{e.other, 0}, {e.moving, 2}} {
				d, err := s.Take(ctx, floodgate.Request{Policy: fw, Key: c.key, N: 1, Peek: true})
				if err != nil || d.Remaining != c.want {
					t.Errorf("peek %s: %+v, %v; want %d remaining", c.key, d, err, c.want)
				}
			}
		})
	}
}

// expiring returns a context that ends as a deadline's does, with
// context.DeadlineExceeded, when end is called: a deadline that passes at
// the step the test chooses.
func expiring() (ctx context.Context, end func()) {
	c := &expiringCtx{Context: context.Background(), done: make(chan struct{})}
	return c, func() { c.once.Do(func() { close(c.done) }) }
}

type expiringCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func (c *expiringCtx) Done() <-chan struct{} { return c.done }

func (c *expiringCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestRefusedBeforeRun: a decision a Cluster refuses before running it,
// for a reason that passes, is sent again until the reason passes (within
// its context and the store's retry time), and is then decided once: on a
// slot no master serves (CLUSTERDOWN, as during a failover until a
// replica takes over), and from a client that stopped following
// redirections (ASK, then MOVED, after its MaxRedirects) while the slot
// moves.
func TestRefusedBeforeRun(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	fw := &floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Hour, Align: floodgate.AlignFirst}
	take := func(s *redisstore.Store, key string, d *floodgate.Decision) func() error {
		return func() (err error) {
			*d, err = s.Take(ctx, floodgate.Request{Policy: fw, Key: key, N: 1})
			return err
		}
	}
	// peek checks what would remain after one more decision.
	peek := func(t *testing.T, s *redisstore.Store, key string, want int64) {
		t.Helper()
		d, err := s.Take(ctx, floodgate.Request{Policy: fw, Key: key, N: 1, Peek: true})
		if err != nil || d.Remaining != want {
			t.Errorf("peek %s: %+v, %v; want %d remaining", key, d, err, want)
		}
	}

	t.Run("CLUSTERDOWN", func(t *testing.T) {
		s := newStore(t, clusterClient(t, cl), redisstore.WithTryAgainFor(time.Minute))
		slot := redisstore.KeySlot(redisstore.DecisionKeys(s, fw, "down")[0])
		owner := cl.Nodes[firstOwner(cl, slot)]
		if d, err := s.Take(ctx, floodgate.Request{Policy: fw, Key: "down", N: 1}); err != nil || d.Remaining != 2 {
			t.Fatalf("before: %+v, %v", d, err)
		}
		// The slot's master stops serving it (its keys stay): CLUSTERDOWN
		// until it serves the slot again.
		ss := strconv.Itoa(slot)
		owner.Must(t, "CLUSTER", "DELSLOTS", ss)
		var d floodgate.Decision
		err := refusedThen(t, owner, "CLUSTERDOWN", 1, take(s, "down", &d), func() { owner.Must(t, "CLUSTER", "ADDSLOTS", ss) })
		if err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("a decision refused with CLUSTERDOWN: %+v, %v; want allowed, 1 remaining", d, err)
		}
		peek(t, s, "down", 0) // two decisions counted, not three

		// A batch over two keys of the slot: one FCALL of the batch
		// function, refused whole, then each decision on its own.
		other := ""
		for i := 0; other == ""; i++ {
			if k := "down-" + strconv.Itoa(i); redisstore.KeySlot(redisstore.DecisionKeys(s, fw, k)[0]) == slot {
				other = k
			}
		}
		owner.Must(t, "CLUSTER", "DELSLOTS", ss)
		reqs := []floodgate.Request{{Policy: fw, Key: "down", N: 1}, {Policy: fw, Key: other, N: 1}}
		out := make([]storekit.Outcome, len(reqs))
		err = refusedThen(t, owner, "CLUSTERDOWN", 1, func() error {
			s.TakeBatch(ctx, reqs, out)
			return errors.Join(out[0].Err, out[1].Err)
		}, func() { owner.Must(t, "CLUSTER", "ADDSLOTS", ss) })
		for i, want := range []int64{0, 2} {
			if o := out[i]; o.Err != nil || !o.Decision.Allowed || o.Decision.Remaining != want {
				t.Errorf("batch refused with CLUSTERDOWN, decision %d: %+v, %v; want allowed, %d remaining", i, o.Decision, o.Err, want)
			}
		}
		peek(t, s, other, 1) // counted once
	})

	t.Run("redirections", func(t *testing.T) {
		// A client that follows no redirection: go-redis returns the
		// first MOVED or ASK, as it does after MaxRedirects of them.
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1, MaxRedirects: -1, ReadTimeout: clientRead, WriteTimeout: clientRead})
		t.Cleanup(func() { c.Close() })
		s := newStore(t, c, redisstore.WithTryAgainFor(time.Minute))
		slot := redisstore.KeySlot(redisstore.DecisionKeys(s, fw, "redirect-old")[0])
		fresh := ""
		for i := 0; fresh == ""; i++ {
			if k := "redirect-" + strconv.Itoa(i); redisstore.KeySlot(redisstore.DecisionKeys(s, fw, k)[0]) == slot {
				fresh = k
			}
		}
		if d, err := s.Take(ctx, floodgate.Request{Policy: fw, Key: "redirect-old", N: 1}); err != nil || d.Remaining != 2 {
			t.Fatalf("before: %+v, %v", d, err)
		}
		src, dst, dstID := startMigration(t, cl, slot)
		// The new key is not on src: ASK, until the slot has moved; then
		// src answers MOVED until the client reads the slot map again.
		var d floodgate.Decision
		err := refusedThen(t, src, "ASK", 1, take(s, fresh, &d), func() { finishMigration(t, cl, slot, src, dst, dstID) })
		if err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("a decision refused with ASK: %+v, %v; want allowed, 2 remaining", d, err)
		}
		peek(t, s, fresh, 1) // counted once, on dst
		peek(t, s, "redirect-old", 1)
	})

	t.Run("plain client", func(t *testing.T) {
		// A plain client pointed at a Cluster node: MOVED for the keys of
		// the other masters is a misconfiguration, not sent again.
		// A read that timed out would be no MOVED: the client waits clientRead.
		c := redis.NewClient(&redis.Options{Addr: cl.Nodes[0].Addr, MaxRetries: -1, ReadTimeout: clientRead, WriteTimeout: clientRead})
		t.Cleanup(func() { c.Close() })
		s := newStore(t, c, redisstore.WithTryAgainFor(time.Minute))
		key := ""
		for i := 0; key == ""; i++ {
			if k := "plain-" + strconv.Itoa(i); firstOwner(cl, redisstore.KeySlot(redisstore.DecisionKeys(s, fw, k)[0])) != 0 {
				key = k
			}
		}
		// A store that sent MOVED again would do so until the deadline
		// (its retry time is a minute here), far beyond any stall.
		short, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := s.Take(short, floodgate.Request{Policy: fw, Key: key, N: 1})
		if !redisstore.Misconfigured(err) || !strings.Contains(err.Error(), "MOVED") || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a plain client's decision on another master's key: %v; want MOVED at once, a misconfiguration", err)
		}
	})

	t.Run("Reset", func(t *testing.T) {
		// go-redis sends a DEL refused with TRYAGAIN again a few times in
		// some 50 ms (its MaxRedirects, with a backoff), then gives up.
		s := newStore(t, clusterClient(t, cl), redisstore.WithTryAgainFor(time.Minute))
		tr := &floodgate.Policy{Name: "tr", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Hour, Track: true}
		const key = "reset"
		for range 2 {
			if _, err := s.Take(ctx, floodgate.Request{Policy: tr, Key: key, N: 1}); err != nil {
				t.Fatal(err)
			}
		}
		keys := redisstore.DecisionKeys(s, tr, key) // state, usage
		slot := redisstore.KeySlot(keys[0])
		src, dst, dstID := startMigration(t, cl, slot)
		// The state moves, the usage stays: src refuses a DEL of both
		// until the usage has moved too.
		src.Must(t, "MIGRATE", "127.0.0.1", strings.TrimPrefix(dst.Addr, "127.0.0.1:"), keys[0], "0", "5000")
		// More refusals than go-redis's own attempts at one call (4).
		err := refusedThen(t, src, "TRYAGAIN", 5, func() error { return s.Reset(ctx, tr, key) }, func() { finishMigration(t, cl, slot, src, dst, dstID) })
		if err != nil {
			t.Fatalf("Reset during the migration: %v", err)
		}
		for _, k := range keys {
			if n := dst.Must(t, "EXISTS", k); n != int64(0) {
				t.Errorf("after Reset, %d of a key of its policy on the slot's new master", n)
			}
		}
		if d, err := s.Take(ctx, floodgate.Request{Policy: tr, Key: key, N: 1, Peek: true}); err != nil || d.Remaining != 2 {
			t.Errorf("peek after Reset: %+v, %v; want 2 remaining (the limit's, after one more)", d, err)
		}
	})
}

// refusedThen runs op in a goroutine, waits until srv has refused n more
// calls with kind (an error reply counted in INFO errorstats), then calls
// pass and returns op's error. It fails t when op returns first.
func refusedThen(t *testing.T, srv *redistest.Server, kind string, n int64, op func() error, pass func()) error {
	t.Helper()
	before := srv.Errors(t, kind)
	done := make(chan error, 1)
	go func() { done <- op() }()
	for srv.Errors(t, kind) < before+n {
		select {
		case err := <-done:
			t.Fatalf("done (%v) before %s refused it %d times with %s", err, srv.Addr, n, kind)
		case <-time.After(time.Millisecond):
		}
	}
	pass()
	return <-done
}

// finishMigration ends the migration of slot from src to dst (dstID) as
// redis-cli --cluster reshard does: MIGRATE of every key left on src, then
// SETSLOT … NODE on dst, src and every master. It returns how many keys
// it moved.
func finishMigration(t *testing.T, cl *redistest.Cluster, slot int, src, dst *redistest.Server, dstID string) int {
	t.Helper()
	ss := strconv.Itoa(slot)
	keys, _ := src.Must(t, "CLUSTER", "GETKEYSINSLOT", ss, "1000").([]any)
	if len(keys) > 0 {
		migrate := []string{"MIGRATE", "127.0.0.1", strings.TrimPrefix(dst.Addr, "127.0.0.1:"), "", "0", "5000", "KEYS"}
		for _, k := range keys {
			migrate = append(migrate, k.(string))
		}
		src.Must(t, migrate...)
	}
	for _, n := range append([]*redistest.Server{dst, src}, cl.Nodes...) {
		n.Must(t, "CLUSTER", "SETSLOT", ss, "NODE", dstID)
	}
	return len(keys)
}

// firstOwner returns the index of the master that StartCluster gave slot:
// Nodes[i] owns slots i·16384/n to (i+1)·16384/n - 1.
func firstOwner(cl *redistest.Cluster, slot int) int {
	i := 0
	for (i+1)*16384/len(cl.Nodes) <= slot {
		i++
	}
	return i
}

// startMigration starts moving slot from the master StartCluster gave it
// (src) to the next one (dst), as redis-cli --cluster reshard does: SETSLOT
// IMPORTING on dst, then MIGRATING on src. It returns both and dst's ID.
func startMigration(t *testing.T, cl *redistest.Cluster, slot int) (src, dst *redistest.Server, dstID string) {
	t.Helper()
	i := firstOwner(cl, slot)
	src, dst = cl.Nodes[i], cl.Nodes[(i+1)%len(cl.Nodes)]
	id := func(s *redistest.Server) string {
		r, err := s.Do(t, "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("CLUSTER MYID: %v", err)
		}
		return r.(string)
	}
	srcID, dstID := id(src), id(dst)
	for _, c := range []struct {
		on          *redistest.Server
		state, peer string
	}{{dst, "IMPORTING", srcID}, {src, "MIGRATING", dstID}} {
		if _, err := c.on.Do(t, "CLUSTER", "SETSLOT", strconv.Itoa(slot), c.state, c.peer); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d %s: %v", slot, c.state, err)
		}
	}
	return src, dst, dstID
}
