package floodgate

import (
	"context"
	"fmt"
	"time"
)

// Store decides requests and keeps the state they need: in process memory
// (memstore), in Redis (redisstore), or anywhere else that can pass the
// conformance suite in floodgatetest. Every implementation decides exactly
// as SPEC.md says, atomically per (policy, key).
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

// Request is one operation on one (policy, key).
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
// cost for Store.Take.
func checkCost(n int64) error {
	if n < 1 || n > MaxCost {
		return fmt.Errorf("%w: %d is outside 1 to 2^53-1", ErrInvalidCost, n)
	}
	return nil
}

// CheckRequest returns the error a store must return for req's key and cost,
// or nil: ErrInvalidKey for an empty key or one longer than maxKeyLen bytes,
// ErrInvalidCost for a cost outside 1 to MaxCost, ErrInvalidPolicy for a nil
// policy. It does not validate the policy itself. The error never contains
// the key.
func CheckRequest(req *Request, maxKeyLen int) error {
	if req.Policy == nil {
		return fmt.Errorf("%w: no policy in request", ErrInvalidPolicy)
	}
	if err := CheckKey(req.Key, maxKeyLen); err != nil {
		return err
	}
	return checkCost(req.N)
}

// CheckKey returns an error wrapping ErrInvalidKey when key is empty or
// longer than maxKeyLen bytes. The error gives the length, never the key.
func CheckKey(key string, maxKeyLen int) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > maxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds the maximum of %d", ErrInvalidKey, len(key), maxKeyLen)
	}
	return nil
}

// DefaultMaxKeyLen is the longest key, in bytes, that stores accept unless
// configured otherwise: 1 KiB.
const DefaultMaxKeyLen = 1024

// Clock tells a store the time. Stores read it once per decision and work in
// whole microseconds (SPEC.md, "Time").
type Clock interface {
	Now() time.Time
}

// SystemClock is the Clock of the operating system, time.Now.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// UsageLister is implemented by stores that keep per-key usage for policies
// with Track set (SPEC.md, "Per-key usage metadata"). Test for it with a
// type assertion.
type UsageLister interface {
	// TopKeys returns up to limit keys of the named policy with tracked
	// usage, sorted by the given order (largest or most recent first, then
	// by key). Keys whose usage has expired are not listed.
	TopKeys(ctx context.Context, policy string, by UsageOrder, limit int) ([]KeyUsage, error)
}

// UsageOrder is the sort order of UsageLister.TopKeys.
type UsageOrder uint8

const (
	// ByRequests sorts by the total cost asked, largest first.
	ByRequests UsageOrder = iota + 1
	// ByDenied sorts by the total cost denied, largest first.
	ByDenied
	// ByLastSeen sorts by the time of the last add, most recent first.
	ByLastSeen
)

// String returns "requests", "denied" or "last_seen".
func (o UsageOrder) String() string {
	switch o {
	case ByRequests:
		return "requests"
	case ByDenied:
		return "denied"
	case ByLastSeen:
		return "last_seen"
	}
	return fmt.Sprintf("UsageOrder(%d)", uint8(o))
}

// ParseUsageOrder parses "requests", "denied" or "last_seen".
func ParseUsageOrder(s string) (UsageOrder, error) {
	for _, o := range []UsageOrder{ByRequests, ByDenied, ByLastSeen} {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("floodgate: sort order %s: must be requests, denied or last_seen", quote(s))
}

// KeyUsage is the tracked usage of one key under one policy. Only adds
// count; peeks do not.
type KeyUsage struct {
	Key       string
	FirstSeen time.Time // the first add, by the store's clock
	LastSeen  time.Time // the last add
	Requests  int64     // sum of the costs asked
	Denied    int64     // sum of the costs denied
}

// Less reports whether a sorts before b in order by: larger (or more
// recent) first, then by key. Stores use it so that every store lists keys
// in the same order.
func (o UsageOrder) Less(a, b *KeyUsage) bool {
	switch o {
	case ByRequests:
		if a.Requests != b.Requests {
			return a.Requests > b.Requests
		}
	case ByDenied:
		if a.Denied != b.Denied {
			return a.Denied > b.Denied
		}
	case ByLastSeen:
		if !a.LastSeen.Equal(b.LastSeen) {
			return a.LastSeen.After(b.LastSeen)
		}
	}
	return a.Key < b.Key
}

// BatchStore is implemented by stores that can decide many requests in one
// round trip (the Redis store pipelines them, one round trip per node).
// Test for it with a type assertion.
type BatchStore interface {
	Store

	// TakeBatch decides every request of reqs as Take would, writing the
	// outcome of reqs[i] to out[i]; out must be at least as long as reqs.
	// Each request succeeds or fails on its own. A store never retries a
	// request that may have been applied, so an error for one request
	// means its outcome is unknown, never that it was counted twice.
	TakeBatch(ctx context.Context, reqs []Request, out []BatchResult)
}

// BatchResult is the outcome of one request of BatchStore.TakeBatch.
type BatchResult struct {
	Decision Decision
	Err      error
}
