// Package storekit is the kit of a floodgate.Store's author: the optional
// capabilities a store may implement (BatchStore, BudgetStore, Pinger,
// Router), the checks every store makes on a request, the clock stores
// read, the bounds SPEC.md puts on policies, calendar window bounds, and
// Cache, a bounded cache of what a store derives from each
// policy it decides under, keyed by the policy's identity.
//
// Callers of a store need none of it: they use floodgate.Limiter.
//
// Every exported function and method of this package is safe for
// concurrent use.
package storekit

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/floodgatehq/floodgate"
)

// Bounds of SPEC.md, as floodgate.Policy.Validate enforces them.
const (
	// DefaultMaxKeyLen is the longest key, in bytes, that stores accept
	// unless configured otherwise: 1 KiB.
	DefaultMaxKeyLen = 1024

	// MaxLimits is the most limits one SlidingWindow or AR1 policy may have.
	MaxLimits = 16

	// MaxNameLen is the longest policy name, in bytes.
	MaxNameLen = 128

	// MaxDuration is the longest window, interval, resolution, period or
	// retention: 100 years of 365 days.
	MaxDuration = 100 * 365 * 24 * time.Hour
)

// Algorithms lists every algorithm in SPEC.md order.
func Algorithms() []floodgate.Algorithm {
	return []floodgate.Algorithm{
		floodgate.SlidingWindow, floodgate.AR1, floodgate.FixedWindow,
		floodgate.TokenBucket, floodgate.SlidingLog, floodgate.GCRA,
	}
}

// CountsDenied reports whether p records denied requests: *p.CountDenied,
// or the algorithm's default when it is nil (on for SlidingLog only).
func CountsDenied(p *floodgate.Policy) bool {
	if p.CountDenied != nil {
		return *p.CountDenied
	}
	return p.Algorithm == floodgate.SlidingLog
}

// CheckRequest returns the error a store must return for req's members,
// cost and operation, or nil: an error wrapping floodgate.ErrInvalidKey for
// an empty key or one longer than maxKeyLen bytes, floodgate.ErrInvalidCost
// for a cost outside 1 to floodgate.MaxCost (for a settle, outside 1 to the
// reservation's N), floodgate.ErrInvalidPolicy for a nil policy, and
// ErrInvalidRequest for a request that is not one operation on 1 to 16
// distinct members (SPEC.md, "Atomic groups"): a group member with fields
// other than Policy and Key, two members with the same policy name and key,
// more than one of AtMost, Refund, Reserve and Settle, Peek with anything
// but AtMost, or a settle whose members are not its reservation's. It does
// not validate the policies themselves (Cache.Get does). The error never
// contains a key.
//
// A store that does not implement BudgetStore should refuse a request with
// Group or a budget field set rather than decide it as a plain add: it
// may call CheckPlain.
func CheckRequest(req *floodgate.Request, maxKeyLen int) error {
	if req.Policy == nil {
		return fmt.Errorf("%w: no policy in request", floodgate.ErrInvalidPolicy)
	}
	if err := CheckKey(req.Key, maxKeyLen); err != nil {
		return err
	}
	if req.N < 1 || req.N > floodgate.MaxCost {
		return fmt.Errorf("%w: %d is outside 1 to 2^53-1", floodgate.ErrInvalidCost, req.N)
	}
	if req.Group == nil && !req.AtMost && !req.Refund && req.Reserve == nil && req.Settle == nil {
		return nil // the plain add or peek
	}
	return checkBudget(req, maxKeyLen)
}

// checkBudget checks the group and the operation of a request.
func checkBudget(req *floodgate.Request, maxKeyLen int) error {
	if len(req.Group)+1 > MaxMembers {
		return fmt.Errorf("%w: %d members, at most %d", ErrInvalidRequest, len(req.Group)+1, MaxMembers)
	}
	for i := range req.Group {
		m := &req.Group[i]
		if m.Policy == nil {
			return fmt.Errorf("%w: no policy in group member %d", floodgate.ErrInvalidPolicy, i+1)
		}
		if err := CheckKey(m.Key, maxKeyLen); err != nil {
			return fmt.Errorf("group member %d: %w", i+1, err)
		}
		if m.N != 0 || m.Peek || m.Group != nil || m.AtMost || m.Refund || m.Reserve != nil || m.Settle != nil {
			return fmt.Errorf("%w: group member %d sets more than Policy and Key (the request's own fields apply to the group)", ErrInvalidRequest, i+1)
		}
		if m.Policy.Name == req.Policy.Name && m.Key == req.Key {
			return fmt.Errorf("%w: group member %d repeats member 0's policy %q and key", ErrInvalidRequest, i+1, m.Policy.Name)
		}
		for j := range i {
			if o := &req.Group[j]; o.Policy.Name == m.Policy.Name && o.Key == m.Key {
				return fmt.Errorf("%w: group member %d repeats member %d's policy %q and key", ErrInvalidRequest, i+1, j+1, m.Policy.Name)
			}
		}
	}
	ops := 0
	for _, set := range []bool{req.AtMost, req.Refund, req.Reserve != nil, req.Settle != nil} {
		if set {
			ops++
		}
	}
	switch {
	case ops > 1:
		return fmt.Errorf("%w: more than one of AtMost, Refund, Reserve and Settle", ErrInvalidRequest)
	case req.Peek && ops == 1 && !req.AtMost:
		return fmt.Errorf("%w: Peek with Refund, Reserve or Settle (a peek records nothing)", ErrInvalidRequest)
	}
	if r := req.Settle; r != nil {
		members := len(req.Group) + 1
		switch {
		case !r.Decision.Allowed:
			return fmt.Errorf("%w: settle of a denied reservation, which holds nothing", ErrInvalidRequest)
		case req.N > r.N:
			return fmt.Errorf("%w: settle of %d units, more than the reservation's %d", floodgate.ErrInvalidCost, req.N, r.N)
		case len(r.Names) != members || len(r.GroupKeys) != members-1 || len(r.Holds) != HoldWords*members:
			return fmt.Errorf("%w: settle with %d members, not the reservation's", ErrInvalidRequest, members)
		case r.Names[0] != req.Policy.Name || r.Key != req.Key:
			return fmt.Errorf("%w: settle with member 0 other than the reservation's", ErrInvalidRequest)
		}
		for i := range req.Group {
			if r.Names[i+1] != req.Group[i].Policy.Name || r.GroupKeys[i] != req.Group[i].Key {
				return fmt.Errorf("%w: settle with member %d other than the reservation's", ErrInvalidRequest, i+1)
			}
		}
	}
	return nil
}

// CheckPlain returns an error wrapping errors.ErrUnsupported for a request
// with Group or a budget field set (AtMost, Refund, Reserve, Settle) or a
// calendar window policy, for stores that do not implement BudgetStore and
// must not decide such a request as a plain add.
func CheckPlain(req *floodgate.Request) error {
	if req.Group != nil || req.AtMost || req.Refund || req.Reserve != nil || req.Settle != nil ||
		req.Policy != nil && req.Policy.Align == "calendar" {
		return fmt.Errorf("storekit: the store does not implement groups, reservations, refunds, partial grants or calendar windows: %w", errors.ErrUnsupported)
	}
	return nil
}

// MaxMembers is the most members of one group (SPEC.md, "Atomic groups"):
// Request.Group holds at most MaxMembers - 1.
const MaxMembers = 16

// HoldWords is how many numbers each member has in Reservation.Holds: the
// reserve's now, the state's born and gcra's tat (µs and remainder).
const HoldWords = 4

// ErrInvalidRequest is wrapped by CheckRequest's error for a request that
// is not one well-formed operation on distinct members.
var ErrInvalidRequest = errors.New("storekit: invalid request")

// BudgetStore is implemented by stores that decide the fields of
// floodgate.Request beyond a plain add or peek: Group (atomic groups),
// AtMost (partial grants), Reserve, Settle and Refund, and calendar windows
// (SPEC.md's sections of those names). A floodgate.Limiter hands a group,
// a budget operation or a calendar policy only to a store whose Budgets
// reports true; with any other it returns an error wrapping
// errors.ErrUnsupported.
//
// Such a store also sets Decision.Granted and, for a group,
// Decision.Binding as the flattened index of the binding member's binding
// limit (see FlatBinding), and keeps each state's born (SPEC.md, "State
// birth") whatever operation recorded it.
type BudgetStore interface {
	floodgate.Store

	// Budgets reports whether the store decides the budget fields. A
	// wrapper (package failure) forwards the answer of the store it wraps.
	Budgets() bool
}

// HasBudgets reports whether store implements BudgetStore and its Budgets
// reports true.
func HasBudgets(store floodgate.Store) bool {
	b, ok := store.(BudgetStore)
	return ok && b.Budgets()
}

// FlatBinding returns a group decision's Binding: the index of the binding
// member's own binding limit among the members' limits flattened in member
// order, where each SlidingWindow or AR1 policy has len(Limits) limits and
// every other policy one. member is the binding member's index in req
// (0 for req itself, i+1 for req.Group[i]).
func FlatBinding(req *floodgate.Request, member int, binding int32) int32 {
	var off int32
	for i := 0; i < member; i++ {
		p := req.Policy
		if i > 0 {
			p = req.Group[i-1].Policy
		}
		off += int32(limitCount(p))
	}
	return off + binding
}

// SplitBinding inverts FlatBinding: the member and its own limit index of
// a group decision's Binding, for req's members; member is -1 when binding
// is out of range.
func SplitBinding(req *floodgate.Request, binding int32) (member int, limit int32) {
	for i := 0; i <= len(req.Group); i++ {
		p := req.Policy
		if i > 0 {
			p = req.Group[i-1].Policy
		}
		n := int32(limitCount(p))
		if binding < n {
			return i, binding
		}
		binding -= n
	}
	return -1, 0
}

// limitCount returns how many limits p has: len(Limits) for SlidingWindow
// and AR1, else 1.
func limitCount(p *floodgate.Policy) int {
	if p.Algorithm == floodgate.SlidingWindow || p.Algorithm == floodgate.AR1 {
		return len(p.Limits)
	}
	return 1
}

// CheckKey returns an error wrapping floodgate.ErrInvalidKey when key is
// empty, longer than maxKeyLen bytes or not valid UTF-8 (as the Limiter,
// the HTTP API and the gRPC API refuse it: every surface of floodgate
// agrees on what a key is). The error gives the length, never the key.
func CheckKey(key string, maxKeyLen int) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", floodgate.ErrInvalidKey)
	}
	if len(key) > maxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds the maximum of %d", floodgate.ErrInvalidKey, len(key), maxKeyLen)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: key of %d bytes is not valid UTF-8", floodgate.ErrInvalidKey, len(key))
	}
	return nil
}

// Clock tells a store the time. Stores read it once per decision and work
// in whole microseconds (SPEC.md, "Time").
type Clock interface {
	Now() time.Time
}

// SystemClock is the Clock of the operating system, time.Now.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// BatchStore is implemented by stores that can decide many requests in one
// round trip (the Redis store pipelines them, one round trip per node).
// Test for it with a type assertion.
type BatchStore interface {
	floodgate.Store

	// TakeBatch decides every request of reqs as Take would, writing the
	// outcome of reqs[i] to out[i]; out must be at least as long as reqs.
	// Each request succeeds or fails on its own. A store never retries a
	// request that may have been applied, so an error for one request
	// means its outcome is unknown, never that it was counted twice.
	TakeBatch(ctx context.Context, reqs []floodgate.Request, out []Outcome)
}

// Outcome is the outcome of one request of BatchStore.TakeBatch.
type Outcome struct {
	Decision floodgate.Decision
	Err      error
}

// Pinger is implemented by stores that can check that their backend is
// reachable (the Redis store): a readiness check. Test for it with a type
// assertion.
type Pinger interface {
	// Ping returns nil when the backend answers and can decide, else an
	// error wrapping floodgate.ErrUnavailable (or floodgate.ErrClosed
	// after Close).
	Ping(ctx context.Context) error
}

// ErrFull is wrapped by the error of a store that refuses a new key
// because it is full (a bounded memory store whose every entry still
// limits). It wraps floodgate.ErrUnavailable: the request is not decided.
// It is no failure of the store, which goes on deciding the keys it holds:
// a failure policy (package failure) decides the refused request by its
// mode but does not count it against the store's circuit breaker.
var ErrFull = fmt.Errorf("%w: store full, a new key refused", floodgate.ErrUnavailable)

// ErrCrossSlot is wrapped by the error of a sharded store (a Redis Cluster)
// for a group whose members' keys would be decided on different shards: it
// refuses the group before deciding anything, and never decides it in
// parts. A group over one key always shares a shard; keys that differ share
// one when the group's policies set HashTag and the keys begin with the
// same "{tag}" ("{org7}" and "{org7}user3"). It is a bad request, not a
// failure of the store: a failure policy does not degrade it.
var ErrCrossSlot = errors.New("storekit: the group's keys hash to different Redis Cluster slots (set hash_tag on its policies and begin its keys with one {tag})")

// Sharded is implemented by stores whose keys may live on several backend
// nodes (the Redis store on a Cluster): Sharded reports whether they do
// now. Such a store decides a group only when its members' keys share a
// slot (ErrCrossSlot), so a caller that groups keys it does not choose
// (package rls, for Envoy's atomic domains) refuses to start on it. Test
// for it with a type assertion; a store without it is on one node.
type Sharded interface {
	Sharded() bool
}

// Router is implemented by stores whose keys live on several backend nodes
// (the Redis store on a Cluster): Node names the node that decides key
// under policy p (a master's address), so that a failure policy judges each
// node on its own and a failing shard never degrades keys on healthy ones.
// A store on one node returns "". Test for it with a type assertion.
type Router interface {
	Node(ctx context.Context, p *floodgate.Policy, key string) string
}
