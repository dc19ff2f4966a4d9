package floodgate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrSettled is returned, wrapped, by Limiter.Settle for a Reservation that
// was settled before: only the first Settle gives back.
var ErrSettled = errors.New("floodgate: reservation already settled")

// Reservation is the outcome of Limiter.Reserve: its Decision, and for each
// of the limiter's policies the part Settle needs to give back the units
// the caller ends up not using (SPEC.md, "Reserve, settle, refund").
//
// The fields other than Decision are written by the store (through
// Request.Reserve) and read back by it (through Request.Settle); callers
// pass the value to Settle as they got it. A Reservation must not be
// copied. Settle may be called from any goroutine; only the first call
// gives back.
type Reservation struct {
	// Decision is the reservation's decision: an add of N, allowed or not.
	// A denied Reservation holds nothing.
	Decision Decision

	// Key is member 0's key, and N the units reserved (1 to MaxCost).
	Key string
	N   int64

	// Names holds each member's policy name in member order, and
	// GroupKeys the keys of members 1 and after (Request.Group's), so that
	// a store can refuse a settle with other members.
	Names     []string
	GroupKeys []string

	// Holds has four numbers per member, in member order: the reserve's
	// now in µs (after SPEC.md's rule 1), the state's born in µs, and
	// gcra's tat after the reserve (µs, and the remainder in 1/count µs);
	// all 0 for a denied reservation.
	Holds []int64

	settled atomic.Bool
	limiter *Limiter
}

// budgetStore is storekit.BudgetStore's method: a store that reads
// Request.Group and the budget fields.
type budgetStore interface {
	Budgets() bool
}

// hasBudgets reports whether store reads Request.Group and the budget
// fields.
func hasBudgets(store Store) bool {
	b, ok := store.(budgetStore)
	return ok && b.Budgets()
}

// errNoBudgets returns the error of a budget operation on a store that
// does not implement them.
func errNoBudgets(op string) error {
	return fmt.Errorf("floodgate: %s: the store does not implement groups, reservations, refunds, partial grants or calendar windows (storekit.BudgetStore): %w", op, errors.ErrUnsupported)
}

// AllowAtMost admits as many units as pass now, at most n (1 to MaxCost),
// in one atomic step, and reports them in Decision.Granted; with none it is
// AllowN(ctx, key, 1), denied (SPEC.md, "Partial grants"). With several
// policies the grant is the most every policy admits. The store must
// implement storekit.BudgetStore, else the error wraps errors.ErrUnsupported
// and nothing is decided.
func (l *Limiter) AllowAtMost(ctx context.Context, key string, n int64) (Decision, error) {
	if err := l.budgetCall("AllowAtMost", key, n); err != nil {
		return Decision{}, err
	}
	req := l.request(key, n)
	req.AtMost = true
	return l.take(ctx, req)
}

// Reserve is AllowN that also returns what Settle needs to give back the
// units the caller ends up not using: the Reservation's Decision is
// AllowN's. A denied Reservation holds nothing (settling it gives back
// nothing). n must be from 1 to MaxCost. The store must implement
// storekit.BudgetStore, else the error wraps errors.ErrUnsupported and
// nothing is decided; on any error the Reservation is nil.
func (l *Limiter) Reserve(ctx context.Context, key string, n int64) (*Reservation, error) {
	if err := l.budgetCall("Reserve", key, n); err != nil {
		return nil, err
	}
	r := &Reservation{limiter: l}
	req := l.request(key, n)
	req.Reserve = r
	d, err := l.take(ctx, req)
	if err != nil {
		return nil, err
	}
	r.Decision = d
	return r, nil
}

// Settle gives back r's N − used units where they still count (the same
// window, bucket or state: SPEC.md's table), 0 ≤ used ≤ r.N, and returns
// the decision Peek(ctx, key, 1) gets after it. A second Settle of r
// returns an error wrapping ErrSettled and changes nothing; so does a
// Settle whose store call fails (the units may or may not have been given
// back). A used outside 0 to r.N is an error wrapping ErrInvalidCost, and r
// must come from this Limiter's Reserve. Settling a denied reservation, a
// degraded one that no store holds (Decision.Degraded, made by a failure
// policy), or with used = r.N, gives back nothing and returns the peek.
func (l *Limiter) Settle(ctx context.Context, r *Reservation, used int64) (Decision, error) {
	switch {
	case r == nil || r.limiter == nil:
		return Decision{}, fmt.Errorf("floodgate: Settle: not a reservation of Limiter.Reserve")
	case r.limiter != l:
		return Decision{}, fmt.Errorf("floodgate: Settle: a reservation of another Limiter")
	case used < 0 || used > r.N:
		return Decision{}, fmt.Errorf("%w: used %d is outside 0 to the reservation's %d", ErrInvalidCost, used, r.N)
	}
	if !r.settled.CompareAndSwap(false, true) {
		return Decision{}, fmt.Errorf("floodgate: Settle: %w", ErrSettled)
	}
	if !r.Decision.Allowed || used == r.N || len(r.Holds) == 0 {
		// Nothing to give back: denied, all used, or a degraded
		// reservation that no store holds (package failure).
		req := l.request(r.Key, 1)
		req.Peek = true
		return l.take(ctx, req)
	}
	req := l.request(r.Key, r.N-used)
	req.Settle = r
	return l.take(ctx, req)
}

// Refund gives back n units (1 to MaxCost) to key's current state under
// every policy of the limiter, newest first, never beyond full, and returns
// the decision Peek(ctx, key, 1) gets after it. It creates no state, and
// gives back nothing where key has none (SPEC.md, "Reserve, settle,
// refund"). It is for callers that keep their own books; a negative cost is
// never a refund. The store must implement storekit.BudgetStore, else the
// error wraps errors.ErrUnsupported and nothing is changed.
func (l *Limiter) Refund(ctx context.Context, key string, n int64) (Decision, error) {
	if err := l.budgetCall("Refund", key, n); err != nil {
		return Decision{}, err
	}
	req := l.request(key, n)
	req.Refund = true
	return l.take(ctx, req)
}

// budgetCall checks a budget operation's store, key and cost.
func (l *Limiter) budgetCall(op, key string, n int64) error {
	if !l.budgets {
		return errNoBudgets(op)
	}
	if n < 1 || n > MaxCost {
		return checkCost(n)
	}
	return checkKey(key)
}
