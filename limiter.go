package floodgate

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// Limiter applies one policy to many keys through a Store. It is the front
// door for Go callers: Allow to drop excess requests, Wait to delay them,
// Peek to look without consuming, Reset to forget a key.
//
// A Limiter is safe for concurrent use by multiple goroutines. It keeps its
// own copy of the policy, so the caller may reuse the Policy value it
// passed. Several Limiters may share one Store.
type Limiter struct {
	store  Store
	policy *Policy // validated, owned, never modified

	// For tests: the time Wait compares deadlines against, and its sleep.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

// NewLimiter returns a Limiter applying p through store. It returns an error
// wrapping ErrInvalidPolicy when p is not valid.
func NewLimiter(store Store, p Policy) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("floodgate: NewLimiter: nil store")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Limits = slices.Clone(p.Limits)
	return &Limiter{store: store, policy: &p, now: time.Now, sleep: sleep}, nil
}

// Policy returns a copy of the limiter's policy.
func (l *Limiter) Policy() Policy {
	p := *l.policy
	p.Limits = slices.Clone(p.Limits)
	return p
}

// errKeyUTF8 is the error of a key that is not valid UTF-8.
var errKeyUTF8 = fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)

// checkKey refuses a key that is not valid UTF-8, as the service's HTTP
// and gRPC APIs do (JSON and protobuf strings cannot carry other bytes):
// every surface of floodgate agrees on what a key is. Stores check the
// rest (empty, too long).
func checkKey(key string) error {
	if !utf8.ValidString(key) {
		return errKeyUTF8
	}
	return nil
}

// Allow is AllowN(ctx, key, 1): it consumes one unit if the request passes.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	if err := checkKey(key); err != nil {
		return Decision{}, err
	}
	return l.store.Take(ctx, Request{Policy: l.policy, Key: key, N: 1})
}

// AllowN decides a request of cost n for key, consuming n units if it
// passes. A denial is a Decision with Allowed false, not an error. n must
// be from 1 to MaxCost: any other n, 0 and negative ones included, is an
// error wrapping ErrInvalidCost and decides nothing (use Peek to look and
// Reset to forget a key). A key that is not valid UTF-8 is an error
// wrapping ErrInvalidKey, as an empty or overlong one is. Another error
// means the store could not decide (see Store.Take).
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	if n < 1 || n > MaxCost {
		return Decision{}, checkCost(n)
	}
	if err := checkKey(key); err != nil {
		return Decision{}, err
	}
	return l.store.Take(ctx, Request{Policy: l.policy, Key: key, N: n})
}

// Peek returns the decision AllowN(ctx, key, n) would get now, recording
// nothing and creating no state. n must be from 1 to MaxCost, as for
// AllowN.
func (l *Limiter) Peek(ctx context.Context, key string, n int64) (Decision, error) {
	if n < 1 || n > MaxCost {
		return Decision{}, checkCost(n)
	}
	if err := checkKey(key); err != nil {
		return Decision{}, err
	}
	return l.store.Take(ctx, Request{Policy: l.policy, Key: key, N: n, Peek: true})
}

// Reset forgets key's state under the limiter's policy.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return l.store.Reset(ctx, l.policy, key)
}

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until a request of cost n for key passes, and consumes it.
// While denied it sleeps the decision's RetryAfter and tries again (another
// caller may take the capacity first; there is no reservation). It returns
// at once, with the last decision, an error wrapping ErrNeverAllowed when n
// exceeds what the policy can ever admit at once, and one wrapping
// ErrWouldExceedDeadline when the wait would pass ctx's deadline; it returns
// ctx.Err() when ctx is done while waiting. n must be at least 1.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	if n < 1 {
		return Decision{}, checkCost(n)
	}
	if err := checkKey(key); err != nil {
		return Decision{}, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		d, err := l.store.Take(ctx, Request{Policy: l.policy, Key: key, N: n})
		if err != nil || d.Allowed {
			return d, err
		}
		if d.RetryAfter == Never {
			return d, fmt.Errorf("%w: cost %d under policy %s", ErrNeverAllowed, n, quote(l.policy.Name))
		}
		wait := max(d.RetryAfter, time.Microsecond)
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(l.now()) < wait {
			return d, fmt.Errorf("%w: needs %s", ErrWouldExceedDeadline, wait)
		}
		if err := l.sleep(ctx, wait); err != nil {
			return d, err
		}
	}
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
