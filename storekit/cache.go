package storekit

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/floodgatehq/floodgate"
)

// ID returns the identity of policy p: its name and a digest of its
// parameters ("api@3f2a9c0d5e7b1a64"). Two policies with the same ID decide
// alike; a policy changed under the same name gets a new ID. It costs a
// hash of the policy's text form: compute it once per policy (Cache does),
// not per decision.
func ID(p *floodgate.Policy) string {
	sum := sha256.Sum256([]byte(p.String()))
	return p.Name + "@" + hex.EncodeToString(sum[:8])
}

// Prepared is one policy as a store prepared it: a copy of the policy as it
// was validated, its identity, and what the store derived from it.
type Prepared[T any] struct {
	Policy floodgate.Policy  // validated; the store's own copy
	ID     string            // ID(&Policy)
	Value  T                 // what the store's derive function returned
	Source *floodgate.Policy // the address Get was given: a store that meets it again may skip Get
}

// Cache holds, for each policy a store decides under, what the store
// derives from it (a script's arguments, a compiled form) together with the
// policy's identity, so that a decision neither validates the policy nor
// derives anything again. Lookups are by the policy's address, the fast
// path of a store whose callers keep their policies (a Limiter does, and so
// does a service across reloads for a policy that did not change); a
// policy met at a new address is validated, identified and derived again,
// and shares nothing with the old one but its ID.
//
// A Cache holds at most the size it was created with: when a new policy
// would pass it, every entry is forgotten at once and rebuilt on its next
// use. So a caller that keeps minting policies (a reload every second for
// a year) costs the store a bounded amount of memory.
//
// The zero value is not usable; create one with NewCache.
type Cache[T any] struct {
	derive func(*floodgate.Policy) (T, error)
	max    int64

	m sync.Map     // *floodgate.Policy -> *Prepared[T]
	n atomic.Int64 // entries of m, about
}

// DefaultCacheSize is a Cache's size when NewCache is given 0: enough for
// every policy of a large configuration and then some.
const DefaultCacheSize = 4096

// NewCache returns a cache of at most size policies (0 means
// DefaultCacheSize) whose entries are derived by derive. derive is called
// with a valid policy, the Cache's own copy (it may keep the pointer); its
// error is returned by Get.
func NewCache[T any](size int, derive func(*floodgate.Policy) (T, error)) *Cache[T] {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Cache[T]{derive: derive, max: int64(size)}
}

// Get returns what the store prepared for p. It validates p the first time
// it meets its address (an invalid policy gives an error wrapping
// floodgate.ErrInvalidPolicy) and returns the same *Prepared for that
// address until the cache is full. p must not be modified while in use.
func (c *Cache[T]) Get(p *floodgate.Policy) (*Prepared[T], error) {
	if v, ok := c.m.Load(p); ok {
		return v.(*Prepared[T]), nil
	}
	return c.add(p)
}

func (c *Cache[T]) add(p *floodgate.Policy) (*Prepared[T], error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	e := &Prepared[T]{Policy: *p, Source: p}
	e.Policy.Limits = slices.Clone(p.Limits)
	if p.CountDenied != nil {
		cd := *p.CountDenied
		e.Policy.CountDenied = &cd
	}
	e.ID = ID(&e.Policy)
	v, err := c.derive(&e.Policy)
	if err != nil {
		return nil, err
	}
	e.Value = v
	if c.n.Add(1) > c.max {
		c.m.Clear()
		c.n.Store(1)
	}
	actual, _ := c.m.LoadOrStore(p, e)
	return actual.(*Prepared[T]), nil
}

// Len returns how many policies the cache holds, for tests and metrics.
func (c *Cache[T]) Len() int {
	n := 0
	c.m.Range(func(any, any) bool { n++; return true })
	return n
}

// Interner hands out one value per policy identity (ID): a caller that
// builds its policies again and again (a service reloading its
// configuration) interns them, so that a policy that did not change is the
// same value as before and the caches of the stores it is given (Cache,
// keyed by address) keep serving it. It remembers at most the size it was
// created with, then forgets them all at once. The zero value is not
// usable; create one with NewInterner.
type Interner struct {
	mu  sync.Mutex
	m   map[string]*floodgate.Policy
	max int
}

// NewInterner returns an Interner of at most size policies (0 means
// DefaultCacheSize).
func NewInterner(size int) *Interner {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Interner{m: map[string]*floodgate.Policy{}, max: size}
}

// Intern returns the value of p's identity: the one interned before, or a
// copy of p, interned now. p need not be valid (an invalid policy is
// interned like any other; stores still refuse it).
func (in *Interner) Intern(p *floodgate.Policy) *floodgate.Policy {
	id := ID(p)
	in.mu.Lock()
	defer in.mu.Unlock()
	if known := in.m[id]; known != nil {
		return known
	}
	c := *p
	c.Limits = slices.Clone(p.Limits)
	if p.CountDenied != nil {
		cd := *p.CountDenied
		c.CountDenied = &cd
	}
	if len(in.m) >= in.max {
		clear(in.m)
	}
	in.m[id] = &c
	return &c
}
