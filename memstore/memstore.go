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
// interval; Close stops it. With WithMaxKeys, a shard that is full evicts the
// sampled entry closest to its own expiry.
//
// A Store is safe for concurrent use by multiple goroutines.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
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

// evictSample is how many entries a full shard looks at to choose one to
// evict.
const evictSample = 8

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

	policies *storekit.Cache[struct{}] // what Take validated

	evictions atomic.Uint64
	swept     atomic.Uint64
}

type shard struct {
	mu    sync.Mutex
	m     map[uint64]*entry // guarded by mu; by the key's hash, then along next
	limit int               // most entries (keys × policies) held; 0: no bound
	n     int               // entries held, guarded by mu
	_     [64]byte          // keep shards on separate cache lines
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
	next   *entry
	use    *keyUsage // nil until the policy tracks usage
}

// keyUsage is the tracked usage of an entry (SPEC.md, per-key usage metadata).
type keyUsage struct {
	first, last                 int64 // µs
	requests, denied, retention int64
}

// keep reports whether e holds anything at now: limiter state or tracked
// usage within its retention.
func (e *entry) keep(now int64) bool {
	return !e.st.Empty(now) || e.use != nil && now < e.use.last+e.use.retention
}

// Option configures a Store.
type Option func(*config) error

type config struct {
	clock         storekit.Clock
	shards        int
	maxKeys       int
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

// WithMaxKeys bounds the entries the store holds (one per policy and key):
// n ≥ 1. The bound is divided among the shards; a full shard evicts the
// sampled entry closest to its natural expiry, which forgets that key's
// counts early. Without it the store grows with the number of active keys.
func WithMaxKeys(n int) Option {
	return func(cfg *config) error {
		if n < 1 {
			return fmt.Errorf("memstore: WithMaxKeys(%d): must be ≥ 1", n)
		}
		cfg.maxKeys = n
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
	n := cfg.shards
	if cfg.maxKeys > 0 && cfg.maxKeys < n {
		// Fewer shards than keys, so that every shard holds at least one.
		for n > cfg.maxKeys {
			n /= 2
		}
	}
	s := &Store{
		clock:     cfg.clock,
		seed:      maphash.MakeSeed(),
		shards:    make([]shard, n),
		mask:      uint64(n - 1),
		maxKeyLen: cfg.maxKeyLen,
		policies:  storekit.NewCache(0, func(*floodgate.Policy) (struct{}, error) { return struct{}{}, nil }),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	s.mono = time.Now()
	s.monoWall.Store(s.mono.UnixMicro())
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*entry)
		if cfg.maxKeys > 0 {
			// Limits that sum to exactly maxKeys.
			s.shards[i].limit = cfg.maxKeys / n
			if i < cfg.maxKeys%n {
				s.shards[i].limit++
			}
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
// policy every decision of its entries applies.
type prepared = storekit.Prepared[struct{}]

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
	if e == nil || e.policy.Source != req.Policy {
		sh.mu.Unlock()
		return s.takeSlow(sh, h, &req, now)
	}
	p := &e.policy.Policy
	var d floodgate.Decision
	tracked := p.Track && !req.Peek
	live := tracked && e.keep(now) // before the step: usage expires with the state it had
	algo.Step(p, &e.st, now, req.N, req.Peek, &d)
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
	algo.Step(p, &e.st, now, req.N, req.Peek, &d)
	if tracked {
		e.track(p, now, req.N, d.Allowed, live)
	}
	if e == fresh && (e.st.Live() || e.use != nil) {
		s.insert(sh, h, e, now)
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
	u.retention = int64(p.Retention / time.Microsecond)
	u.requests = algo.SatAdd(u.requests, n)
	if !allowed {
		u.denied = algo.SatAdd(u.denied, n)
	}
}

// insert adds e under hash h, evicting an entry first when the shard is
// full. The shard must be locked.
func (s *Store) insert(sh *shard, h uint64, e *entry, now int64) {
	if sh.limit > 0 && sh.n >= sh.limit {
		s.evict(sh, now)
	}
	e.next = sh.m[h]
	sh.m[h] = e
	sh.n++
}

// evict removes one entry of a full shard: an empty one if the sample holds
// one, else the one whose state would have expired first (it has the least
// left to forget). The shard must be locked.
func (s *Store) evict(sh *shard, now int64) {
	var victim *entry
	var victimHash uint64
	seen := 0
	for h, head := range sh.m {
		for e := head; e != nil; e = e.next {
			if !e.keep(now) {
				sh.remove(h, e)
				s.swept.Add(1)
				return
			}
			if victim == nil || e.st.Expires < victim.st.Expires {
				victim, victimHash = e, h
			}
		}
		if seen++; seen >= evictSample {
			break
		}
	}
	if victim != nil {
		sh.remove(victimHash, victim)
		s.evictions.Add(1)
	}
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
		for h, head := range sh.m {
			for e := head; e != nil; {
				next := e.next
				if !e.keep(now) {
					sh.remove(h, e)
					removed++
				}
				e = next
			}
		}
		sh.mu.Unlock()
	}
	s.swept.Add(uint64(removed))
	return removed
}

// Stats are counters of a Store.
type Stats struct {
	Entries   int    // entries held now, one per (policy, key), including empty ones not yet swept
	Evictions uint64 // entries evicted by WithMaxKeys while they still held state
	Swept     uint64 // empty entries removed by sweeping and by eviction sampling
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{Evictions: s.evictions.Load(), Swept: s.swept.Load()}
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
	_ floodgate.Store = (*Store)(nil)
	_ usage.Lister    = (*Store)(nil)
)
