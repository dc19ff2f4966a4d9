// Package failure is floodgate's one failure policy: what a decision
// becomes when its store fails or is too slow. It wraps any floodgate.Store
// (Wrap) so that every caller — a Limiter, the net/http middleware, the
// rate limit service — gets the same behaviour: a timeout per store call,
// a circuit breaker per backend node that opens on a failure rate, then
// fail open, fail closed or a fallback store, with every such decision
// flagged Degraded, counted and logged (at most a line a second). Guard is
// the same policy for deciders that are not stores (a custom Redis script).
//
// # Degraded decisions
//
// A decision the failure policy makes has Degraded set:
//
//	Open      Allowed, with no numbers (Limit 0): the request passes.
//	Closed    denied, with no numbers (Limit 0) and RetryAfter set to
//	          Policy.RetryAfter: a transport answers 503, not 429.
//	Fallback  the fallback store's decision, numbers included; when the
//	          fallback fails too, as Open.
//
// A decision with no numbers never claims a remaining quota: package
// rlheader leaves it out of the RateLimit fields.
//
// # The breaker
//
// Each backend node (a Redis Cluster master; the whole store when it has
// no nodes, see storekit.Router) has its own breaker, so a failing shard
// never degrades keys on healthy ones. It opens when, over the last
// Breaker.Window, at least Breaker.MinCalls calls were made and at least
// Breaker.FailureRatio of them failed; while open, the node's requests are
// decided by the failure policy at once, without waiting for a timeout.
// After Breaker.OpenFor one call goes through as a probe: its success
// closes the breaker, its failure opens it again. Breaker changes are
// logged and reported to the Observer.
//
// A Store and a Guard are safe for concurrent use by multiple goroutines.
package failure

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// Mode says what a decision becomes when the store cannot make it.
type Mode uint8

const (
	// Open lets the request through (Allowed, Degraded, no numbers). It is
	// the zero value: a rate limiter that is down should not take the
	// service behind it down too.
	Open Mode = iota

	// Closed denies the request (Degraded, no numbers, RetryAfter set):
	// transports answer 503 Service Unavailable with Retry-After.
	Closed

	// Fallback asks Policy.Fallback, typically a memory store, and fails
	// open when that fails too.
	Fallback
)

// String returns "open", "closed" or "fallback".
func (m Mode) String() string {
	switch m {
	case Open:
		return "open"
	case Closed:
		return "closed"
	case Fallback:
		return "fallback"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses "open", "closed" or "fallback".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Open, Closed, Fallback} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: mode %q: want open, closed or fallback", ErrInvalidPolicy, clip(s))
}

// Defaults of Policy and Breaker.
const (
	DefaultTimeout      = 50 * time.Millisecond
	DefaultRetryAfter   = time.Second
	DefaultWindow       = 10 * time.Second
	DefaultMinCalls     = 20
	DefaultFailureRatio = 0.5
	DefaultOpenFor      = time.Second
)

// ErrInvalidPolicy is wrapped by the errors of Wrap, NewGuard and SetPolicy
// for a policy they cannot use; each names the field, the value and what is
// allowed.
var ErrInvalidPolicy = errors.New("failure: invalid policy")

// Policy is a failure policy. Its zero value fails open after
// DefaultTimeout, with a breaker of the default settings.
type Policy struct {
	// Mode chooses what a decision the store could not make becomes.
	Mode Mode

	// Timeout bounds each store call, as a context deadline: 0 means
	// DefaultTimeout; a negative Timeout sets none (the caller's context
	// and the store's own timeouts still apply). A store honours a deadline
	// only as far as its client does: give a go-redis client
	// ContextTimeoutEnabled: true and MaxRetries: -1.
	Timeout time.Duration

	// RetryAfter is the RetryAfter of a Closed decision, whole seconds from
	// 1s; 0 means DefaultRetryAfter.
	RetryAfter time.Duration

	// Breaker configures the breakers.
	Breaker Breaker

	// Fallback decides in the store's place in Fallback mode (required
	// then), with the same request. It is typically a memstore: sized for
	// one process, it limits each process on its own while the shared
	// store is down.
	Fallback floodgate.Store
}

// Breaker configures the circuit breakers (see the package documentation).
// Zero fields take the defaults.
type Breaker struct {
	// Disabled turns the breakers off: every request waits for its store
	// call.
	Disabled bool

	// Window is how far back failures are counted: 1s to 10m; 0 means
	// DefaultWindow.
	Window time.Duration

	// MinCalls is the fewest calls within Window for the breaker to judge:
	// ≥ 1; 0 means DefaultMinCalls.
	MinCalls int

	// FailureRatio is the share of failed calls within Window that opens
	// the breaker: above 0, at most 1; 0 means DefaultFailureRatio.
	FailureRatio float64

	// OpenFor is how long an open breaker decides without the store before
	// it lets a probe through: 10ms to 1m; 0 means DefaultOpenFor.
	OpenFor time.Duration
}

// resolved returns p with its defaults filled in, or an error naming each
// field at fault.
func (p Policy) resolved() (Policy, error) {
	var errs []error
	bad := func(field, value, allowed string) {
		errs = append(errs, fmt.Errorf("%w: %s = %s: %s", ErrInvalidPolicy, field, value, allowed))
	}
	if p.Mode > Fallback {
		bad("Mode", p.Mode.String(), "Open, Closed or Fallback")
	}
	if p.Mode == Fallback && p.Fallback == nil {
		bad("Fallback", "nil", "a store, in Fallback mode")
	}
	if p.Timeout == 0 {
		p.Timeout = DefaultTimeout
	}
	switch {
	case p.RetryAfter == 0:
		p.RetryAfter = DefaultRetryAfter
	case p.RetryAfter < time.Second || p.RetryAfter%time.Second != 0:
		bad("RetryAfter", p.RetryAfter.String(), "whole seconds ≥ 1s, or 0 (meaning 1s)")
	}
	b := &p.Breaker
	if b.Window == 0 {
		b.Window = DefaultWindow
	}
	if b.Window < time.Second || b.Window > 10*time.Minute {
		bad("Breaker.Window", b.Window.String(), "from 1s to 10m, or 0 (meaning 10s)")
	}
	if b.MinCalls == 0 {
		b.MinCalls = DefaultMinCalls
	}
	if b.MinCalls < 1 {
		bad("Breaker.MinCalls", strconv.Itoa(b.MinCalls), "an integer ≥ 1, or 0 (meaning 20)")
	}
	if b.FailureRatio == 0 {
		b.FailureRatio = DefaultFailureRatio
	}
	if !(b.FailureRatio > 0 && b.FailureRatio <= 1) {
		bad("Breaker.FailureRatio", strconv.FormatFloat(b.FailureRatio, 'g', -1, 64), "a ratio above 0, at most 1, or 0 (meaning 0.5)")
	}
	if b.OpenFor == 0 {
		b.OpenFor = DefaultOpenFor
	}
	if b.OpenFor < 10*time.Millisecond || b.OpenFor > time.Minute {
		bad("Breaker.OpenFor", b.OpenFor.String(), "from 10ms to 1m, or 0 (meaning 1s)")
	}
	return p, errors.Join(errs...)
}

// Observer receives the failure policy's events, for metrics. Its methods
// are called concurrently, on the request path, and must not block. Nodes
// are backend addresses (a bounded set); keys are never passed.
type Observer interface {
	// StoreCall reports one call to the store (op "take", "peek" or
	// "reset"), on node, how long it took and its error: nil on success,
	// one wrapping context.DeadlineExceeded when the timeout cut it,
	// ErrBreakerOpen when the breaker kept it from being made.
	StoreCall(op, node string, took time.Duration, err error)

	// BreakerChanged reports a node's breaker opening or closing.
	BreakerChanged(node string, open bool)
}

// ErrBreakerOpen is the cause of a decision made without calling the store
// because the node's breaker was open.
var ErrBreakerOpen = errors.New("failure: store failing, not called (circuit open)")

// Option configures a Store or a Guard beyond its Policy.
type Option func(*options)

type options struct {
	log       *slog.Logger
	obs       Observer
	clock     storekit.Clock
	saturated func(node string) bool
}

// ErrSaturated is wrapped by the error of a store call the policy's
// timeout cut while the caller reported itself saturated (WithSaturation):
// the wait was the caller's machine as much as the store, so the decision
// is left to the caller (a service answers it with backpressure) instead
// of being made by the failure mode. The call was sent: the store may
// have counted it. The breaker counts it as a failure all the same, so a
// store that stops answering under load still opens its breaker.
var ErrSaturated = errors.New("failure: store call timed out while the caller was saturated")

// WithSaturation asks saturated, when the policy's timeout cuts a store
// call to node ("" for a store without nodes), whether the caller's own
// bound on calls to that node is full (decisions waiting for a call). When
// it says so,
// Take returns an error wrapping ErrSaturated and the store's error
// instead of a degraded decision (TakeBatch sets it as the outcome's
// error, Guard.Do returns it as err). saturated is called concurrently and
// must not block. Without this option every failure is the policy's to
// decide.
func WithSaturation(saturated func(node string) bool) Option {
	return func(o *options) { o.saturated = saturated }
}

// WithLogger sends the policy's log lines (a store failing, at most once a
// second with how many were held back; a breaker opening or closing) to l;
// the default is slog.Default(). Keys are never logged.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithObserver reports every store call and breaker change to obs.
func WithObserver(obs Observer) Option { return func(o *options) { o.obs = obs } }

// WithClock times the breakers and the log throttle with c instead of the
// system clock, for tests.
func WithClock(c storekit.Clock) Option { return func(o *options) { o.clock = c } }

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
