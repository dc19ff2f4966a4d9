// Package memstore is floodgate's embedded Store: limiter state in process
// memory, for one process (or for tests). It decides exactly as SPEC.md
// says, like every store, and is the fastest: no allocation per decision
// for a key it already holds.
//
// # Design
//
// Keys are spread over shards by a seeded hash (hash/maphash); each shard is
// a map behind its own mutex, so goroutines deciding for different keys
// rarely meet. A key's state is forgotten lazily, when a decision finds it
// empty, and by one sweeper goroutine that walks the shards every sweep
// interval; Close stops it.
//
// # Bounded memory
//
// A Store holds a bounded number of entries (one per policy and key): by
// default a quarter of the memory the process may use divided by
// EntryBytes (DefaultSizing), or what WithMaxKeys says; WithUnbounded
// lifts the bound. The bound is divided among the shards. A full shard
// makes room only by forgetting state that decides nothing any more: an
// entry that is empty (equivalent to no state, see algo.State.Empty) and,
// after those, one whose state is empty but whose tracked usage is still
// retained. It never forgets a state that still counts: when every entry
// of the shard holds one, a new key is refused with an error wrapping
// ErrFull (and so floodgate.ErrUnavailable), for the caller's failure
// policy to decide, while the keys already held go on being decided
// exactly. Stats counts what was swept, evicted and refused.
//
// # Budgets
//
// A Store implements storekit.BudgetStore: groups of policies and keys
// decided in one atomic step (every member's shard locked, in a fixed
// order, around one call of the twin), partial grants, reservations,
// settles, refunds and calendar windows, as SPEC.md defines them
// (docs/budgets.md). It keeps each state's birth beside it for settles.
//
// A Store is safe for concurrent use by multiple goroutines.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/algo"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
)

// Defaults of the options.
const (
	DefaultShards        = 64
	DefaultSweepInterval = time.Minute
)

// Making room in a full shard (makeRoom).
const (
	// evictSample is how many chains of entries a full shard samples
	// first, looking for one to forget.
	evictSample = 8

	// scanCredit is how many entries a full shard may visit in its scans
	// per new key it is asked to hold, on average: a scan of a shard of n
	// entries waits until n is earned.
	scanCredit = 64

	// spareCap is how many evictable entries (empty state, usage kept) a
	// scan remembers for the insertions that follow it.
	spareCap = 32
)

// ErrFull is wrapped by the error Take returns for a new key that the
// store has no room for: its bound is reached in the key's shard and
// every entry there holds state that still limits, which the store never
// forgets to make room. It wraps floodgate.ErrUnavailable, so a failure
// policy (package failure) decides such requests as configured; keys the
// store already holds are still decided exactly.
var ErrFull = fmt.Errorf("memstore: %w", storekit.ErrFull)

// Store is an in-memory floodgate.Store. Create it with New.
type Store struct {
	clock     storekit.Clock // nil: the monotonic clock below
	mono      time.Time      // the anchor of the default clock, with its monotonic reading
	monoWall  atomic.Int64   // µs since the epoch at mono, moved forward by resync
	seed      maphash.Seed
	shards    []shard
	mask      uint64
	maxKeyLen int

	closed    atomic.Bool
	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}

	policies *storekit.Cache[bool] // what Take validated: is it a calendar window
	lists    listings              // the snapshots of paged listings (ListKeys)

	bound   int   // most entries held; 0: no bound
	errFull error // wraps ErrFull; made once, so that a refusal allocates nothing

	evictions atomic.Uint64
	refused   atomic.Uint64
	swept     atomic.Uint64
}

type shard struct {
	mu    sync.Mutex
	m     map[uint64]*entry // guarded by mu; by the key's hash, then along next
	limit int               // most entries (keys × policies) held; 0: no bound
	n     int               // entries held, guarded by mu

	// What a full shard knows to make room (makeRoom), guarded by mu.
	// Invariant: every entry held has st.Expires ≥ nextEmpty, but those in
	// spare. It holds because a step under the entry's own policy never
	// moves Expires back while the state is live (an empty state's next
	// expiry is after now, so after nextEmpty too), insert and takeSlow
	// lower nextEmpty for new entries and changed policies, and scan sets
	// it afresh.
	nextEmpty int64    // µs: no entry outside spare becomes evictable before
	spare     []victim // evictable entries (empty state, usage kept) a scan saw
	credit    int      // entries scans may still visit (scanCredit)

	_ [64]byte // keep shards on separate cache lines
}

// victim is an entry a scan found evictable, and its key's hash.
type victim struct {
	h uint64
	e *entry
}

// entry is the state of one (policy, key). Entries whose keys have the
// same hash (the same key under several policies, or, rarely, two keys)
// are chained through next. An entry belongs to its policy's name: a policy
// changed under the same name finds it, and keeps its state when the two
// read it alike (algo.SameShape).
type entry struct {
	key    string
	policy *prepared // the policy last applied
	st     algo.State
	born   int64 // µs: the state's birth (SPEC.md, "State birth"), for settles
	next   *entry
	use    *keyUsage // nil until the policy tracks usage
}

// keyUsage is the tracked usage of an entry (SPEC.md, "Per-key usage
// metadata" and "Per-key usage series").
type keyUsage struct {
	first, last      int64 // µs
	requests, denied int64
	// until is when the usage goes, unless the state lives longer (µs):
	// the later of last + retention and the end of the newest bucket's
	// counting.
	until  int64
	series *keySeries // nil: the policy keeps no series
}

// keep reports whether e holds anything at now: limiter state or tracked
// usage within its retention.
func (e *entry) keep(now int64) bool {
	return !e.st.Empty(now) || e.use != nil && now < e.use.until
}

// Option configures a Store.
type Option func(*config) error

type config struct {
	clock         storekit.Clock
	shards        int
	maxKeys       int  // 0: not set
	unbounded     bool // WithUnbounded
	maxKeyLen     int
	sweepInterval time.Duration
}

// WithClock makes the store read time from c instead of its default clock;
// floodgatetest.ManualClock is one, for tests and replays.
//
// The default clock is the system's monotonic clock, anchored to the wall
// clock when the store is created: it never steps backwards when the wall
// clock is set back (NTP, a VM restored), and it costs one clock read per
// decision instead of time.Now's two. The sweeper moves it forward when
// the wall clock has run ahead (a machine that slept), never back.
func WithClock(c storekit.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return errors.New("memstore: WithClock: nil clock")
		}
		cfg.clock = c
		return nil
	}
}

// WithMaxKeys bounds the entries the store holds (one per policy and key)
// at n ≥ 1, instead of the default bound (DefaultSizing). The bound is
// divided among the shards. A full shard forgets empty state to make room,
// never state that still limits: a new key that finds no room is refused
// with ErrFull (see the package's "Bounded memory"). Of WithMaxKeys and
// WithUnbounded, the last given applies.
func WithMaxKeys(n int) Option {
	return func(cfg *config) error {
		if n < 1 {
			return fmt.Errorf("memstore: WithMaxKeys(%d): must be ≥ 1", n)
		}
		cfg.maxKeys, cfg.unbounded = n, false
		return nil
	}
}

// WithUnbounded lifts the bound on the entries the store holds: it grows
// with the number of keys holding state, without limit (about 135 to 310
// bytes per key, docs/operations.md), so a flood of distinct keys can
// exhaust the process's memory. Use it only where the keys are known to be
// few. Of WithMaxKeys and WithUnbounded, the last given applies.
func WithUnbounded() Option {
	return func(cfg *config) error {
		cfg.maxKeys, cfg.unbounded = 0, true
		return nil
	}
}

// WithMaxKeyLen sets the longest key accepted, in bytes (n ≥ 1); the
// default is storekit.DefaultMaxKeyLen.
func WithMaxKeyLen(n int) Option {
	return func(cfg *config) error {
		if n < 1 {
			return fmt.Errorf("memstore: WithMaxKeyLen(%d): must be ≥ 1", n)
		}
		cfg.maxKeyLen = n
		return nil
	}
}

// WithShards sets the number of shards, a power of two from 1 to 65536;
// the default is DefaultShards.
func WithShards(n int) Option {
	return func(cfg *config) error {
		if n < 1 || n > 1<<16 || n&(n-1) != 0 {
			return fmt.Errorf("memstore: WithShards(%d): must be a power of two from 1 to 65536", n)
		}
		cfg.shards = n
		return nil
	}
}

// WithSweepInterval sets how often the sweeper walks the store to forget
// empty state (d > 0); the default is DefaultSweepInterval. Decisions
// never depend on it: state is also expired when it is next touched.
func WithSweepInterval(d time.Duration) Option {
	return func(cfg *config) error {
		if d <= 0 {
			return fmt.Errorf("memstore: WithSweepInterval(%s): must be > 0", d)
		}
		cfg.sweepInterval = d
		return nil
	}
}

// New returns a Store and starts its sweeper; call Close to stop it. An
// invalid option is an error naming it.
//
// The store is bounded by default: it holds at most DefaultSizing().MaxKeys
// entries, that is a quarter (MemoryFraction) of the memory the process
// may use — the least of its cgroup's memory limit, GOMEMLIMIT and the
// machine's physical memory, or FallbackMemory when none can be read —
// divided by EntryBytes (512) per entry: 524,288 entries per GiB of limit.
// WithMaxKeys sets another bound, WithUnbounded none; Stats().Bound tells
// the bound in force.
func New(opts ...Option) (*Store, error) {
	cfg := config{
		shards:        DefaultShards,
		maxKeyLen:     storekit.DefaultMaxKeyLen,
		sweepInterval: DefaultSweepInterval,
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	bound := cfg.maxKeys
	if bound == 0 && !cfg.unbounded {
		bound = DefaultSizing().MaxKeys
	}
	n := cfg.shards
	if bound > 0 && bound < n {
		// Fewer shards than keys, so that every shard holds at least one.
		for n > bound {
			n /= 2
		}
	}
	s := &Store{
		clock:     cfg.clock,
		seed:      maphash.MakeSeed(),
		shards:    make([]shard, n),
		mask:      uint64(n - 1),
		maxKeyLen: cfg.maxKeyLen,
		policies:  storekit.NewCache(0, func(p *floodgate.Policy) (bool, error) { return p.Align == "calendar", nil }),
		bound:     bound,
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	s.errFull = fmt.Errorf("%w: every entry of a new key's shard holds state that still limits (bound %d entries)", ErrFull, bound)
	s.mono = time.Now()
	s.monoWall.Store(s.mono.UnixMicro())
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[uint64]*entry)
		sh.nextEmpty = math.MaxInt64
		if bound > 0 {
			// Limits that sum to exactly bound.
			sh.limit = bound / n
			if i < bound%n {
				sh.limit++
			}
			sh.credit = sh.limit // one scan's worth to start with
		}
	}
	go s.sweep(cfg.sweepInterval)
	return s, nil
}

// now returns the store's time in µs.
func (s *Store) now() int64 {
	if s.clock == nil {
		return s.monoWall.Load() + int64(time.Since(s.mono)/time.Microsecond)
	}
	return s.clock.Now().UnixMicro()
}

// resync moves the default clock forward to the wall clock when the wall
// clock has run more than a second ahead of it (the machine slept, or its
// clock was set forward); it never moves it back.
func (s *Store) resync() {
	if s.clock != nil {
		return
	}
	if ahead := time.Now().UnixMicro() - s.now(); ahead > int64(time.Second/time.Microsecond) {
		s.monoWall.Add(ahead)
	}
}

// hash returns the key's hash, which picks its shard and keys the shard's
// map, so that a decision hashes the key once.
func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

func (s *Store) shardOf(h uint64) *shard { return &s.shards[h&s.mask] }

// prepared is a policy as the store validated it (storekit.Cache), the
// policy every decision of its entries applies; its Value says whether it
// is a calendar window, which only takeBudget decides.
type prepared = storekit.Prepared[bool]

// find returns the entry of key (whose hash is h) under the policy named
// name, or nil. The shard must be locked.
func (sh *shard) find(h uint64, name, key string) *entry {
	for e := sh.m[h]; e != nil; e = e.next {
		if e.key == key && e.policy.Policy.Name == name {
			return e
		}
	}
	return nil
}

// Take decides req (see floodgate.Store). The context is not consulted: a
// decision never waits for anything but a shard's mutex.
func (s *Store) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if req.Group != nil || req.AtMost || req.Refund || req.Reserve != nil || req.Settle != nil {
		return s.takeBudget(&req)
	}
	if req.Policy == nil || req.Key == "" || len(req.Key) > s.maxKeyLen || req.N < 1 || req.N > floodgate.MaxCost || s.closed.Load() {
		return floodgate.Decision{}, s.badRequest(&req)
	}
	now := s.now()
	if now < 0 || now > algo.MaxNow {
		return floodgate.Decision{}, errClock(now)
	}
	h := s.hash(req.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	e := sh.find(h, req.Policy.Name, req.Key)
	if e == nil || e.policy.Source != req.Policy || e.policy.Value {
		sh.mu.Unlock()
		return s.takeSlow(sh, h, &req, now)
	}
	p := &e.policy.Policy
	var d floodgate.Decision
	tracked := p.Track && !req.Peek
	live := tracked && e.keep(now) // before the step: usage expires with the state it had
	algo.StepBorn(p, &e.st, &e.born, now, req.N, req.Peek, &d)
	if d.Allowed {
		d.Granted = req.N
	}
	if tracked {
		e.track(p, now, req.N, d.Allowed, live)
	}
	sh.mu.Unlock()
	return d, nil
}

// badRequest returns the error of a request Take refuses.
func (s *Store) badRequest(req *floodgate.Request) error {
	if s.closed.Load() {
		return floodgate.ErrClosed
	}
	return storekit.CheckRequest(req, s.maxKeyLen)
}

// errClock is the error of a decision whose clock reads a time at which
// the algorithms' integer arithmetic would not be exact.
func errClock(now int64) error {
	return fmt.Errorf("%w: memstore: clock reads %s, outside 1970 to 2155", floodgate.ErrUnavailable,
		time.UnixMicro(now).UTC().Format(time.RFC3339))
}

// adopt makes pr the policy of e: when it is another policy than the one
// e was last decided under (another ID) and the two disagree on the
// state's shape, e's state is reset. The shard must be locked.
func (e *entry) adopt(pr *prepared) {
	if e.policy == pr {
		return
	}
	if e.policy.ID != pr.ID && !algo.SameShape(&e.policy.Policy, &pr.Policy) {
		e.st.Reset()
	}
	e.policy = pr
}

// takeSlow decides for a (policy, key) the store does not hold, or holds
// under another policy value than req's: it prepares the policy (the
// first time, validating it) outside the lock. A peek, or an add that
// records nothing and tracks nothing, creates no entry.
func (s *Store) takeSlow(sh *shard, h uint64, req *floodgate.Request, now int64) (floodgate.Decision, error) {
	pr, err := s.policies.Get(req.Policy)
	if err != nil {
		return floodgate.Decision{}, err
	}
	if pr.Value {
		return s.takeBudget(req) // a calendar window
	}
	p := &pr.Policy
	var fresh *entry
	if !req.Peek {
		fresh = &entry{key: req.Key, policy: pr}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, p.Name, req.Key)
	if e == nil && req.Peek {
		var none algo.State
		var d floodgate.Decision
		algo.Step(p, &none, now, req.N, true, &d)
		if d.Allowed {
			d.Granted = req.N
		}
		return d, nil
	}
	if e != nil {
		e.adopt(pr)
	} else {
		e = fresh
	}
	var d floodgate.Decision
	tracked := p.Track && !req.Peek
	live := tracked && e.keep(now)
	algo.StepBorn(p, &e.st, &e.born, now, req.N, req.Peek, &d)
	if d.Allowed {
		d.Granted = req.N
	}
	if tracked {
		e.track(p, now, req.N, d.Allowed, live)
	}
	if e == fresh && (e.st.Live() || e.use != nil) {
		if err := s.insert(sh, h, e, now); err != nil && e.st.Live() {
			// No room for state that would limit: refused. (A new key
			// that recorded usage only gets its exact decision, without
			// the usage.)
			s.refused.Add(1)
			return floodgate.Decision{}, err
		}
	} else if e != fresh {
		// Its policy may have changed, moving its expiry back.
		sh.nextEmpty = min(sh.nextEmpty, e.st.Expires)
	}
	return d, nil
}

// track adds one add's usage. live tells whether e held anything before
// the add (keep): usage that expired with its state, or its retention, is
// gone even while the entry waits to be swept, and the add starts it
// afresh (SPEC.md, per-key usage metadata).
func (e *entry) track(p *floodgate.Policy, now, n int64, allowed, live bool) {
	u := e.use
	if u == nil {
		u = &keyUsage{first: now}
		e.use = u
	} else if !live {
		*u = keyUsage{first: now}
	}
	u.last = max(u.last, now)
	u.requests = algo.SatAdd(u.requests, n)
	if !allowed {
		u.denied = algo.SatAdd(u.denied, n)
	}
	u.until = u.last + int64(p.Retention/time.Microsecond)
	if p.SeriesResolution == 0 {
		u.series = nil
		return
	}
	// The add is recorded at the key's last add, which a clock that went
	// back does not move.
	res, keep := int64(p.SeriesResolution/time.Microsecond), int64(p.SeriesRetention/time.Microsecond)
	if u.series == nil || u.series.res != res {
		u.series = &keySeries{res: res}
	}
	u.series.record(u.last, keep, n, !allowed)
	u.until = max(u.until, u.series.k*res+keep)
}

// insert adds e under hash h, making room first when the shard is full
// (makeRoom). When there is no room, e is not added and insert returns
// s.errFull. The shard must be locked.
func (s *Store) insert(sh *shard, h uint64, e *entry, now int64) error {
	if sh.limit > 0 {
		sh.credit = min(sh.credit+scanCredit, sh.limit)
		if sh.n >= sh.limit && !s.makeRoom(sh, now) {
			return s.errFull
		}
	}
	e.next = sh.m[h]
	sh.m[h] = e
	sh.n++
	sh.nextEmpty = min(sh.nextEmpty, e.st.Expires)
	return nil
}

// makeRoom removes one entry of the full shard sh, never one whose state
// still counts. In order of preference: an entry that holds nothing at
// now (counted as swept); else one whose state is empty but whose tracked
// usage is still retained (evicted: its usage is lost, no decision
// changes). A state that is empty is, exactly, one that decides every
// later request as no state would (algo.State.Empty); any other state
// still limits, and is kept. makeRoom reports whether it made room.
//
// It looks in three places, each of bounded cost:
//
//  1. evictSample chains of the map, from a random place;
//  2. spare, the evictable entries the last scan saw (each entry is
//     taken from it at most once);
//  3. a scan of every entry of the shard (scan), which removes all that
//     hold nothing and refills spare. A scan runs only when it can find
//     something — some entry's state may have emptied since the last one
//     (now ≥ nextEmpty) — and when the shard has earned it: each new key
//     it is asked to hold (insert) earns scanCredit entry visits, up to
//     one scan's worth, and a scan of n entries spends n.
//
// So over k new keys on a shard of limit L, scans visit at most L + 64k
// entries: constant work per new key, amortized, and one call costs at
// most a scan of the shard, as the sweeper makes every sweep interval.
// A full shard whose entries all limit refuses at the cost of step 1
// (nextEmpty is in the future). makeRoom may refuse while an entry is
// evictable only when the sample missed it and fewer than L/64 new keys
// came since a scan: a scan that freed m places is followed by m
// insertions that earn 64 each, so it takes a shard where scans free
// almost nothing (nearly all its entries limit) for a refusal to pass
// over an entry that emptied meanwhile.
// The shard must be locked.
func (s *Store) makeRoom(sh *shard, now int64) bool {
	if s.evictSampled(sh, now) || s.evictSpare(sh, now) {
		return true
	}
	if now < sh.nextEmpty || sh.credit < sh.n {
		return false
	}
	sh.credit -= sh.n
	s.swept.Add(uint64(sh.scan(now)))
	return sh.n < sh.limit || s.evictSpare(sh, now)
}

// evictSampled looks at evictSample chains of sh and removes an entry that
// holds nothing at now, or else one whose state is empty (its usage is
// kept): whichever it finds first. The shard must be locked.
func (s *Store) evictSampled(sh *shard, now int64) bool {
	var cand *entry
	var candHash uint64
	seen := 0
	for h, head := range sh.m {
		for e := head; e != nil; e = e.next {
			if !e.keep(now) {
				sh.remove(h, e)
				s.swept.Add(1)
				return true
			}
			if cand == nil && e.st.Empty(now) {
				cand, candHash = e, h
			}
		}
		if seen++; seen >= evictSample {
			break
		}
	}
	if cand == nil {
		return false
	}
	sh.remove(candHash, cand)
	s.evictions.Add(1)
	return true
}

// evictSpare removes an entry of sh.spare that is still held and still
// empty at now. Entries of spare written since the scan limit again: they
// leave spare, and nextEmpty accounts for them. The shard must be locked.
func (s *Store) evictSpare(sh *shard, now int64) bool {
	for len(sh.spare) > 0 {
		last := len(sh.spare) - 1
		v := sh.spare[last]
		sh.spare[last] = victim{}
		sh.spare = sh.spare[:last]
		if !sh.holds(v.h, v.e) {
			continue // reset or swept since
		}
		if !v.e.st.Empty(now) {
			sh.nextEmpty = min(sh.nextEmpty, v.e.st.Expires)
			continue
		}
		sh.remove(v.h, v.e)
		if v.e.keep(now) {
			s.evictions.Add(1)
		} else {
			s.swept.Add(1)
		}
		return true
	}
	return false
}

// holds reports whether entry e is held under hash h. The shard must be
// locked.
func (sh *shard) holds(h uint64, e *entry) bool {
	for x := sh.m[h]; x != nil; x = x.next {
		if x == e {
			return true
		}
	}
	return false
}

// scan walks every entry of sh: it removes those that hold nothing at now
// and returns how many; it remembers in spare up to spareCap of those
// whose state is empty but whose usage is retained; and it sets nextEmpty
// to the earliest expiry of the others. The shard must be locked.
func (sh *shard) scan(now int64) int {
	clear(sh.spare)
	sh.spare = sh.spare[:0]
	next := int64(math.MaxInt64)
	removed := 0
	for h, head := range sh.m {
		for e := head; e != nil; {
			after := e.next
			switch {
			case !e.keep(now):
				sh.remove(h, e)
				removed++
			case e.st.Empty(now) && len(sh.spare) < spareCap:
				sh.spare = append(sh.spare, victim{h, e})
			default:
				next = min(next, e.st.Expires)
			}
			e = after
		}
	}
	sh.nextEmpty = next
	return removed
}

// remove unlinks entry e, whose key's hash is h. The shard must be locked.
func (sh *shard) remove(h uint64, e *entry) {
	head := sh.m[h]
	if head == e {
		if e.next == nil {
			delete(sh.m, h)
		} else {
			sh.m[h] = e.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	e.next = nil
	sh.n--
}

// Reset forgets the state and usage of key under policy p.
func (s *Store) Reset(ctx context.Context, p *floodgate.Policy, key string) error {
	if s.closed.Load() {
		return floodgate.ErrClosed
	}
	if p == nil {
		return fmt.Errorf("%w: nil policy", floodgate.ErrInvalidPolicy)
	}
	if err := storekit.CheckKey(key, s.maxKeyLen); err != nil {
		return err
	}
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	if e := sh.find(h, p.Name, key); e != nil {
		sh.remove(h, e)
	}
	sh.mu.Unlock()
	return nil
}

// Close stops the sweeper. Operations after Close return floodgate.ErrClosed.
// Close is idempotent and always returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.done
	})
	return nil
}

// sweep forgets empty entries every interval until Close.
func (s *Store) sweep(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.resync()
			s.Sweep()
		}
	}
}

// Sweep forgets every entry that holds nothing at the store's current time
// and returns how many it removed. The sweeper calls it every sweep
// interval; tests and callers with a manual clock may call it directly.
func (s *Store) Sweep() int {
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		now := s.now()
		sh.mu.Lock()
		removed += sh.scan(now)
		sh.mu.Unlock()
	}
	s.swept.Add(uint64(removed))
	return removed
}

// Stats are counters of a Store, for metrics and logs. A key held under
// several policies is one entry per policy.
type Stats struct {
	// Entries is the number of entries held now, including empty ones not
	// swept yet.
	Entries int

	// Bound is the most entries the store holds (WithMaxKeys, or the
	// default of DefaultSizing); 0 when it is unbounded (WithUnbounded).
	Bound int

	// Evictions counts entries removed to make room whose state was empty
	// but whose tracked usage was still retained: their usage records are
	// lost; no decision changed. State that still limits is never evicted.
	Evictions uint64

	// Refused counts the requests for a new key that Take refused with an
	// error wrapping ErrFull, the key's shard being full of state that
	// still limits. A rising count means the bound is too small for the
	// keys in use, or a flood of new keys: the failure policy decides
	// those requests. (A request for a new key under a tracked policy
	// that records nothing but usage is decided, without its usage, when
	// there is no room.)
	Refused uint64

	// Swept counts entries that held nothing, removed by the sweeper and
	// to make room.
	Swept uint64
}

// Stats returns the store's counters. It locks each shard in turn, briefly.
func (s *Store) Stats() Stats {
	st := Stats{Bound: s.bound, Evictions: s.evictions.Load(), Refused: s.refused.Load(), Swept: s.swept.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Entries += sh.n
		sh.mu.Unlock()
	}
	return st
}

// Interface guards.
var (
	_ floodgate.Store      = (*Store)(nil)
	_ storekit.BudgetStore = (*Store)(nil)
	_ usage.Lister         = (*Store)(nil)
)
