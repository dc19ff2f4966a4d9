// Package storekit is the kit of a floodgate.Store's author: the optional
// capabilities a store may implement (BatchStore, Pinger), the checks every
// store makes on a request, the clock stores read, the bounds SPEC.md puts
// on policies, and Cache, a bounded cache of what a store derives from each
// policy it decides under, keyed by the policy's identity.
//
// Callers of a store need none of it: they use floodgate.Limiter.
//
// Every exported function and method of this package is safe for
// concurrent use.
package storekit

import (
	"context"
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

// CheckRequest returns the error a store must return for req's key and cost,
// or nil: an error wrapping floodgate.ErrInvalidKey for an empty key or one
// longer than maxKeyLen bytes, floodgate.ErrInvalidCost for a cost outside 1
// to floodgate.MaxCost, floodgate.ErrInvalidPolicy for a nil policy. It does
// not validate the policy itself. The error never contains the key.
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
	return nil
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
	// Ping returns nil when the backend answers, else an error wrapping
	// floodgate.ErrUnavailable (or floodgate.ErrClosed after Close).
	Ping(ctx context.Context) error
}

// ErrFull is wrapped by the error of a store that refuses a new key
// because it is full (a bounded memory store whose every entry still
// limits). It wraps floodgate.ErrUnavailable: the request is not decided.
// It is no failure of the store, which goes on deciding the keys it holds:
// a failure policy (package failure) decides the refused request by its
// mode but does not count it against the store's circuit breaker.
var ErrFull = fmt.Errorf("%w: store full, a new key refused", floodgate.ErrUnavailable)

// Router is implemented by stores whose keys live on several backend nodes
// (the Redis store on a Cluster): Node names the node that decides key
// under policy p (a master's address), so that a failure policy judges each
// node on its own and a failing shard never degrades keys on healthy ones.
// A store on one node returns "". Test for it with a type assertion.
type Router interface {
	Node(ctx context.Context, p *floodgate.Policy, key string) string
}
