package floodgate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// Limiter applies one policy, or a group of policies, to many keys through
// a Store. It is the front door for Go callers: Allow to drop excess
// requests, Wait to delay them, Peek to look without consuming, Reset to
// forget a key; AllowAtMost for partial grants, Reserve and Settle for
// costs known only after the work, Refund to give units back.
//
// A Limiter over several policies decides every call on all of them in one
// atomic step (SPEC.md, "Atomic groups"): a request passes only if every
// policy admits it, and is spent on all of them or none. Its Decision is
// the group's: Binding indexes the policies' limits flattened in order.
//
// A Limiter is safe for concurrent use by multiple goroutines. It keeps its
// own copies of the policies, so the caller may reuse the Policy values it
// passed. Several Limiters may share one Store.
type Limiter struct {
	store   Store
	policy  *Policy   // member 0: validated, owned, never modified
	more    []*Policy // further members, likewise
	budgets bool      // the store implements storekit.BudgetStore

	// For tests: the time Wait compares deadlines against, and its sleep.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

// NewLimiter returns a Limiter applying p, and every policy of more, to
// each key through store: a call is allowed only if every policy admits it,
// and spends on all of them or none (SPEC.md, "Atomic groups").
//
// It returns an error wrapping ErrInvalidPolicy when a policy is not
// valid, when two policies share a name (they would share state) or when
// there are more than 16. Several policies, or a calendar window (Align
// "calendar"), need a store that implements storekit.BudgetStore (memstore
// does); with another store the error wraps errors.ErrUnsupported.
func NewLimiter(store Store, p Policy, more ...Policy) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("floodgate: NewLimiter: nil store")
	}
	if len(more)+1 > maxLimits {
		return nil, fmt.Errorf("%w: %d policies in one Limiter, at most %d", ErrInvalidPolicy, len(more)+1, maxLimits)
	}
	l := &Limiter{store: store, budgets: hasBudgets(store), now: time.Now, sleep: sleep}
	names := make(map[string]bool, len(more)+1)
	for i, q := range append([]Policy{p}, more...) {
		if err := q.Validate(); err != nil {
			return nil, err
		}
		if names[q.Name] {
			return nil, fmt.Errorf("%w: policy %s given twice (policies of one name share state)", ErrInvalidPolicy, quote(q.Name))
		}
		names[q.Name] = true
		if q.Align == alignCalendar && !l.budgets {
			return nil, errNoBudgets("NewLimiter: calendar window " + quote(q.Name))
		}
		q.Limits = slices.Clone(q.Limits)
		if q.CountDenied != nil {
			cd := *q.CountDenied
			q.CountDenied = &cd
		}
		if i == 0 {
			l.policy = &q
		} else {
			l.more = append(l.more, &q)
		}
	}
	if len(l.more) > 0 && !l.budgets {
		return nil, errNoBudgets("NewLimiter: a group of policies")
	}
	return l, nil
}

// Policy returns a copy of the limiter's first policy (p of NewLimiter).
func (l *Limiter) Policy() Policy {
	p := *l.policy
	p.Limits = slices.Clone(p.Limits)
	return p
}

// request returns the request of n for key on the first policy; take adds
// the others.
func (l *Limiter) request(key string, n int64) Request {
	return Request{Policy: l.policy, Key: key, N: n}
}

// groups recycles the Group arrays of take: a group decision allocates
// nothing of its own.
var groups = sync.Pool{New: func() any { return new([maxLimits - 1]Request) }}

// take hands req to the store, with every further policy of the limiter
// as req.Group on the same key. Stores do not keep a request's Group past
// Take (floodgate.Request), so the array is reused.
func (l *Limiter) take(ctx context.Context, req Request) (Decision, error) {
	if len(l.more) == 0 {
		return l.store.Take(ctx, req)
	}
	g := groups.Get().(*[maxLimits - 1]Request)
	req.Group = g[:len(l.more)]
	for i, p := range l.more {
		req.Group[i] = Request{Policy: p, Key: req.Key}
	}
	d, err := l.store.Take(ctx, req)
	clear(req.Group)
	groups.Put(g)
	return d, err
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
	return l.take(ctx, l.request(key, 1))
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
	return l.take(ctx, l.request(key, n))
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
	req := l.request(key, n)
	req.Peek = true
	return l.take(ctx, req)
}

// Reset forgets key's state under every policy of the limiter, one after
// the other; it returns the first error, having tried them all.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	err := l.store.Reset(ctx, l.policy, key)
	for _, p := range l.more {
		if e := l.store.Reset(ctx, p, key); err == nil {
			err = e
		}
	}
	return err
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
		d, err := l.take(ctx, l.request(key, n))
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
