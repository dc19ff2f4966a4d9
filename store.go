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

// Request is one operation on one (policy, key), as a Limiter hands it to
// its Store.
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
	// nothing and creating no state.
	Peek bool
}

// checkCost returns an error wrapping ErrInvalidCost when n is not a valid
// cost.
func checkCost(n int64) error {
	if n < 1 || n > MaxCost {
		return fmt.Errorf("%w: %d is outside 1 to 2^53-1", ErrInvalidCost, n)
	}
	return nil
}
