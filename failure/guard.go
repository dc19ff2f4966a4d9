package failure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/throttle"
	"github.com/floodgatehq/floodgate/storekit"
)

// Guard applies a failure policy to calls that decide: a store's Take (see
// Store, which is built on a Guard) or anything else that answers with a
// floodgate.Decision, such as a custom Redis script. Create it with
// NewGuard.
type Guard struct {
	policy atomic.Pointer[Policy] // resolved
	log    *slog.Logger
	obs    Observer
	clock  storekit.Clock

	saturated func(node string) bool // WithSaturation's, or nil

	breakers sync.Map // node -> *breaker

	// failLog and fallbackLog keep a failing store from writing a log line
	// per request.
	failLog, fallbackLog throttle.Log
}

// NewGuard returns a Guard applying p. It returns an error wrapping
// ErrInvalidPolicy, naming each field at fault, when p cannot be used.
func NewGuard(p Policy, opts ...Option) (*Guard, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	g := &Guard{log: o.log, obs: o.obs, clock: o.clock, saturated: o.saturated}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.clock == nil {
		g.clock = storekit.SystemClock{}
	}
	if err := g.SetPolicy(p); err != nil {
		return nil, err
	}
	return g, nil
}

// SetPolicy replaces the policy (a configuration reload); calls in flight
// finish under the old one. The breakers keep their state. An invalid
// policy is an error wrapping ErrInvalidPolicy, and the old one stays.
func (g *Guard) SetPolicy(p Policy) error {
	r, err := p.resolved()
	if err != nil {
		return err
	}
	g.policy.Store(&r)
	return nil
}

// Policy returns the policy in force, with its defaults filled in.
func (g *Guard) Policy() Policy { return *g.policy.Load() }

// Breakers returns the state of the breaker of every node the guard has
// seen calls for lately, for readiness and metrics.
func (g *Guard) Breakers() []BreakerState {
	g.forget(g.clock.Now().UnixNano())
	var out []BreakerState
	g.breakers.Range(func(_, v any) bool {
		out = append(out, v.(*breaker).snapshot())
		return true
	})
	return out
}

func (g *Guard) breaker(node string) *breaker {
	if v, ok := g.breakers.Load(node); ok {
		return v.(*breaker)
	}
	now := g.clock.Now().UnixNano()
	g.forget(now) // a new node: one may have left (a Cluster failover)
	b := &breaker{node: node}
	b.used.Store(now)
	v, _ := g.breakers.LoadOrStore(node, b)
	return v.(*breaker)
}

// forgetAfter is how long a node's breaker is kept without a call asking
// for the node: a Cluster master that failed over, or whose slots moved,
// is forgotten, so that its breaker, open or not, no longer shows in
// readiness and metrics.
const forgetAfter = time.Minute

// forget drops the breakers of nodes no call has asked for in
// forgetAfter, as of now (ns).
func (g *Guard) forget(now int64) {
	g.breakers.Range(func(k, v any) bool {
		b := v.(*breaker)
		if now-b.used.Load() <= int64(forgetAfter) {
			return true
		}
		g.breakers.Delete(k)
		if b.state.Load() != closed {
			g.log.Info("store node no longer asked for: its open circuit breaker is forgotten", "node", nodeName(b.node))
			g.changed(b.node, false)
		}
		return true
	})
}

// requestError reports whether err is the request's fault (or the
// caller's), not the store's: it is returned as it is, never degraded, and
// never counted against the breaker. A group the store cannot decide in
// one step (storekit.ErrCrossSlot), a malformed group or budget operation
// (storekit.ErrInvalidRequest) and one the store does not implement
// (errors.ErrUnsupported) are the request's.
func requestError(err error) bool {
	return errors.Is(err, floodgate.ErrInvalidPolicy) || errors.Is(err, floodgate.ErrInvalidKey) ||
		errors.Is(err, floodgate.ErrInvalidCost) || errors.Is(err, floodgate.ErrClosed) ||
		errors.Is(err, storekit.ErrCrossSlot) || errors.Is(err, storekit.ErrInvalidRequest) ||
		errors.Is(err, errors.ErrUnsupported)
}

// Do decides by call under the policy: call gets a context bounded by the
// policy's timeout, unless node's breaker is open. It returns the
// decision, and the cause when the policy made it (Degraded set): the
// store's error, or ErrBreakerOpen. fallback, used in Fallback mode, may
// be nil there only when Policy.Fallback is to be ignored (the decision is
// then as Open).
//
// err is set, and the decision void, for a request the store refused
// (an error wrapping floodgate.ErrInvalidPolicy, ErrInvalidKey,
// ErrInvalidCost or ErrClosed) and when ctx itself ended: neither is a
// store failure. It is also set, wrapping ErrSaturated, when the timeout
// cut the call while the caller was saturated (WithSaturation); the
// breaker counted that one as a failure.
func (g *Guard) Do(ctx context.Context, op, node string, call, fallback func(context.Context) (floodgate.Decision, error)) (d floodgate.Decision, cause, err error) {
	p := g.policy.Load()
	b := g.breaker(node)
	now := g.clock.Now()
	ok, probe := true, false
	if !p.Breaker.Disabled {
		ok, probe = b.admit(now.UnixNano())
	}
	if !ok {
		g.observe(op, node, 0, ErrBreakerOpen)
		return g.degrade(ctx, p, node, ErrBreakerOpen, fallback), ErrBreakerOpen, nil
	}
	start := time.Now()
	cctx := ctx
	var dc *deadlineCtx
	if p.Timeout > 0 {
		dc = newDeadlineCtx(ctx, p.Timeout)
		cctx = dc
	}
	d, err = call(cctx)
	cut := false // the policy's timeout cut the call
	if dc != nil {
		cut = err != nil && errors.Is(dc.Err(), context.DeadlineExceeded)
		dc.release()
	}
	took := time.Since(start)
	if err != nil && (requestError(err) || ctx.Err() != nil) {
		if probe {
			b.state.Store(open) // not judged: let the next probe try
		}
		if ctx.Err() != nil && !requestError(err) {
			err = ctx.Err()
		}
		return floodgate.Decision{}, nil, err
	}
	g.observe(op, node, took, err)
	if !p.Breaker.Disabled {
		// A full store refused a new key: it answered, and goes on
		// deciding the keys it holds.
		failed := err != nil && !errors.Is(err, storekit.ErrFull)
		switch b.record(g.clock.Now().UnixNano(), &p.Breaker, failed, probe) {
		case +1:
			g.log.Warn("store failing: circuit breaker open, the failure policy decides without it",
				"node", nodeName(node), "mode", p.Mode.String(), "open_for", p.Breaker.OpenFor.String(), "error", err)
			g.changed(node, true)
		case -1:
			g.log.Info("store recovered: circuit breaker closed", "node", nodeName(node))
			g.changed(node, false)
		}
	}
	if err == nil {
		return d, nil, nil
	}
	if cut && g.saturatedNow(node) {
		return floodgate.Decision{}, nil, saturatedError(err)
	}
	return g.degrade(ctx, p, node, err, fallback), err, nil
}

// saturatedNow reports whether the caller says its calls to node are
// saturated (WithSaturation).
func (g *Guard) saturatedNow(node string) bool { return g.saturated != nil && g.saturated(node) }

// saturatedError is the error of a call the timeout cut under saturation.
func saturatedError(err error) error { return fmt.Errorf("%w: %w", ErrSaturated, err) }

func (g *Guard) observe(op, node string, took time.Duration, err error) {
	if g.obs != nil {
		g.obs.StoreCall(op, node, took, err)
	}
}

func (g *Guard) changed(node string, open bool) {
	if g.obs != nil {
		g.obs.BreakerChanged(node, open)
	}
}

func nodeName(node string) string {
	if node == "" {
		return "store"
	}
	return node
}

// degrade makes the decision the policy gives a request the store could
// not decide.
func (g *Guard) degrade(ctx context.Context, p *Policy, node string, cause error, fallback func(context.Context) (floodgate.Decision, error)) floodgate.Decision {
	if ok, held := g.failLog.Allow(g.clock.Now()); ok && cause != ErrBreakerOpen {
		// One line a second at most: "suppressed" counts those held back.
		msg := "store failed; the failure policy decides"
		if errors.Is(cause, storekit.ErrFull) {
			msg = "store full: a new key refused, every key it holds still limited; the failure policy decides the new one"
		}
		g.log.Warn(msg, "node", nodeName(node), "mode", p.Mode.String(), "error", cause, "suppressed", held)
	}
	switch p.Mode {
	case Closed:
		return floodgate.Decision{Degraded: true, RetryAfter: p.RetryAfter}
	case Fallback:
		if fallback == nil {
			break
		}
		// A deadline of its own: the request's may have passed already.
		fctx := context.WithoutCancel(ctx)
		if p.Timeout > 0 {
			var cancel context.CancelFunc
			fctx, cancel = context.WithTimeout(fctx, p.Timeout)
			defer cancel()
		}
		d, err := fallback(fctx)
		if err == nil {
			d.Degraded = true
			return d
		}
		if ok, held := g.fallbackLog.Allow(g.clock.Now()); ok {
			g.log.Error("fallback store failed too; failing open", "error", err, "suppressed", held)
		}
	}
	return floodgate.Decision{Allowed: true, Degraded: true}
}
