package floodgate

import (
	"context"
	"fmt"
)

// Store decides requests and keeps the state they need: in process memory
// (memstore), in Redis (redisstore), or anywhere else that can pass the
// conformance suite in floodgatetest. Every implementation decides exactly
// as SPEC.md says, atomically per (policy, key). Package storekit holds
// what a store's author needs beyond this interface: optional
// capabilities, request checks, clocks and a bounded cache of what a store
// derives from each policy.
//
// Stores are safe for concurrent use by multiple goroutines.
type Store interface {
	// Take decides req: an add of req.N, or a peek when req.Peek is set.
	// A denial is a Decision with Allowed false, never an error. Errors are
	// for bad requests (ErrInvalidPolicy, ErrInvalidKey, ErrInvalidCost),
	// for a closed store (ErrClosed) and for a backend that failed
	// (ErrUnavailable, or the context's error).
	Take(ctx context.Context, req Request) (Decision, error)

	// Reset forgets the state of key under policy p, as if the key had
	// never been seen; tracked usage is forgotten too.
	Reset(ctx context.Context, p *Policy, key string) error

	// Close releases the store's resources: background goroutines, but not
	// a client the caller passed in. Operations after Close return
	// ErrClosed. Close is idempotent.
	Close() error
}

// Request is one operation on one (policy, key), or on a group of them, as
// a Limiter hands it to its Store.
//
// The plain operation is an add of N (SPEC.md, "Operations on one (policy,
// key)"), or a peek with Peek. Group makes it one atomic step over several
// members (SPEC.md, "Atomic groups"), and at most one of AtMost, Refund,
// Reserve and Settle changes what it does (SPEC.md, "Partial grants" and
// "Reserve, settle, refund"). Only stores that implement
// storekit.BudgetStore, and report true from Budgets, read Group and the
// fields after it; a Limiter hands them to no other store, and store authors
// check them with storekit.CheckRequest.
type Request struct {
	// Policy is the policy to apply. It must be valid (stores return an
	// error wrapping ErrInvalidPolicy otherwise) and must not be modified
	// while a store uses it.
	Policy *Policy

	// Key identifies who is limited: a user, an IP address, an API token.
	// It is 1 byte up to the store's maximum key length, any bytes.
	Key string

	// N is the cost, 1 to MaxCost.
	N int64

	// Peek asks for the decision an add of N would get now, recording
	// nothing and creating no state. With AtMost it is SPEC.md's
	// peek_at_most; it goes with no other operation.
	Peek bool

	// Group holds the further members of a group: each one's Policy and
	// Key (every other field zero), 0 to 15 of them, none repeating the
	// policy name and key of another member or of the request itself,
	// which is member 0. N, Peek and the fields below apply to the whole
	// group: allowed only if every member admits, spent on every member
	// or none. Nil decides the one (Policy, Key). A store must not keep
	// the slice after Take returns (a Limiter reuses it).
	Group []Request

	// AtMost grants as many units as pass now, at most N (SPEC.md's
	// add_at_most, or peek_at_most with Peek): the Decision's Granted says
	// how many, and with none the request is an add of 1, denied.
	AtMost bool

	// Refund gives back N units to each member's live state, newest first,
	// never beyond full; it creates no state. The Decision is what a peek
	// of 1 gets right after.
	Refund bool

	// Reserve makes the add of N a reservation: the store fills in
	// *Reserve (its Decision, Key, N, Names, GroupKeys and Holds), which
	// Settle later hands back. A denied reservation holds nothing.
	Reserve *Reservation

	// Settle gives back N units (1 to Settle.N: the reservation's n minus
	// the units used) of the reservation *Settle to the states it spent
	// from, where they still count; the request's Policy, Key and Group
	// must be the reservation's members, in order. The Decision is what a
	// peek of 1 gets right after. Stores keep no record of reservations:
	// refusing a second settle is the caller's part (Limiter.Settle does).
	Settle *Reservation
}

// checkCost returns an error wrapping ErrInvalidCost when n is not a valid
// cost.
func checkCost(n int64) error {
	if n < 1 || n > MaxCost {
		return fmt.Errorf("%w: %d is outside 1 to 2^53-1", ErrInvalidCost, n)
	}
	return nil
}
