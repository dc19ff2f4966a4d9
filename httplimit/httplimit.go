package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/floodgatehq/floodgate"
)

// Defaults of Config and Failure.
const (
	// DefaultTimeout bounds the store calls of one request when
	// Failure.Timeout is zero.
	DefaultTimeout = 50 * time.Millisecond

	// DefaultFailClosedRetryAfter is the Retry-After of a fail-closed 503
	// when Failure.RetryAfter is zero.
	DefaultFailClosedRetryAfter = time.Second
)

// ErrInvalidConfig is wrapped by the errors of New and ClientIP for a
// configuration they cannot use. Each such error names the field, the
// value and what is allowed.
var ErrInvalidConfig = errors.New("httplimit: invalid configuration")

func configError(field, value, allowed string) error {
	return fmt.Errorf("%w: %s = %s: %s", ErrInvalidConfig, field, value, allowed)
}

// FailureMode says what happens to a request when a store fails: it
// returns an error, or does not answer within Failure.Timeout.
type FailureMode uint8

const (
	// FailOpen lets the request through, as if the failed policy had
	// allowed it. It is the zero value: a rate limiter that is down
	// should not take the service down with it.
	FailOpen FailureMode = iota

	// FailClosed answers 503 Service Unavailable with a Retry-After of
	// Failure.RetryAfter, unless another policy denied the request (it
	// gets its 429).
	FailClosed

	// FailFallback asks the rule's Fallback limiter instead (typically
	// one on a memstore, with a policy sized for one instance). If the
	// fallback fails too, the request is let through.
	FailFallback
)

// String returns "fail-open", "fail-closed" or "fallback".
func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	case FailFallback:
		return "fallback"
	}
	return "FailureMode(" + strconv.Itoa(int(m)) + ")"
}

// Failure is the failure policy: what the middleware does when a store
// cannot decide. Its zero value fails open after DefaultTimeout.
type Failure struct {
	// Mode chooses what happens to the request; the zero value is
	// FailOpen.
	Mode FailureMode

	// Timeout bounds all the store calls of one request together, as a
	// context deadline: 0 means DefaultTimeout; a negative Timeout sets
	// no deadline (the request's own context and the store's timeouts
	// still apply). A store honours a deadline only as far as its client
	// does: give a go-redis client ContextTimeoutEnabled: true (or read,
	// write and dial timeouts no longer than Timeout), and MaxRetries: -1.
	Timeout time.Duration

	// RetryAfter is the Retry-After of a FailClosed 503, whole seconds
	// from 1s; 0 means DefaultFailClosedRetryAfter.
	RetryAfter time.Duration
}

// timeout returns the effective timeout; ≤ 0 for none.
func (f Failure) timeout() time.Duration {
	if f.Timeout == 0 {
		return DefaultTimeout
	}
	return f.Timeout
}

func (f Failure) retryAfter() time.Duration {
	if f.RetryAfter == 0 {
		return DefaultFailClosedRetryAfter
	}
	return f.RetryAfter
}

// Rule is one policy applied on a route: a limiter and the key function
// that tells whose quota a request uses.
type Rule struct {
	// Limiter decides, through its store and policy. Required.
	Limiter *floodgate.Limiter

	// Key returns the request's key for this rule. Required.
	Key KeyFunc

	// Fallback decides in the limiter's place when its store fails and
	// Failure.Mode is FailFallback (it is then required), with the same
	// key. Its policy may differ, typically sized for one instance of a
	// service whose shared store is down; responses then report the
	// fallback's policy in RateLimit.
	Fallback *floodgate.Limiter
}

// Config configures the middleware. Its zero value, with Rules set,
// fails open after 50ms, sends the IETF fields and Retry-After, and
// answers 400 when a key function fails.
type Config struct {
	// Rules are the policies applied to every request, in route order:
	// at least one. A request passes only if every rule admits it.
	//
	// Rules are decided one after the other, each consuming from its
	// policy, until one denies; the rules after it are only peeked (they
	// consume nothing, and report whether they would have denied too). So
	// a request denied by rule i has still consumed from rules 0 to i-1:
	// put the rule most likely to deny first. The alternative, peeking
	// every rule before adding to any, takes two round trips per rule
	// and still consumes partially when another request gets in between.
	Rules []Rule

	// Headers selects the response header fields; the zero value means
	// DefaultHeaders (RateLimit-Policy, RateLimit and Retry-After).
	Headers Headers

	// KeyErrorStatus is the status of a request whose key function
	// fails, or returns a key the store refuses (empty, or longer than the
	// store's maximum; rules before it have then been decided): 400 Bad
	// Request (the zero value means 400) or 500 Internal Server Error. The
	// body is an RFC 9457 problem.
	KeyErrorStatus int

	// Failure is the failure policy for store errors and timeouts.
	Failure Failure

	// Denied answers denied requests; nil means DeniedHandler (429 with
	// a quota-exceeded problem). The rate limit header fields are set
	// before it runs, and Results(r.Context()) gives the decisions.
	Denied http.Handler

	// Shadow decides and reports (header fields, OnDecision) but never
	// blocks: denied requests, key errors and fail-closed failures all
	// reach the next handler. Retry-After is not sent, since the response
	// is not a denial. Use it to try a policy on live traffic.
	Shadow bool

	// OnDecision, when set, is called once per request, after every rule
	// is decided and before the response is chosen, with one Result per
	// rule in route order. Every degraded decision (a store error handled
	// by the failure policy) and every key error is visible there. It
	// runs on the request's goroutine, so it should be quick; it may keep
	// results. Keys are never passed to it.
	OnDecision func(r *http.Request, results []Result)

	// Now is the clock of X-RateLimit-Reset with XRateLimitResetUnix; nil
	// means time.Now. Decisions use their store's clock.
	Now func() time.Time
}

// Result is what one rule decided for one request.
type Result struct {
	// Policy is the policy that decided: the rule's, or its fallback's
	// when Fallback is set. It must not be modified. Other deciders (such
	// as luascript's scripts) leave it nil and set Name.
	Policy *floodgate.Policy

	// Name names the result when Policy is nil, in RateLimit and in a
	// problem's violated-policies.
	Name string

	// Decision is the decision. When the store failed it is made by the
	// failure policy and Decision.Degraded is set: allowed for FailOpen,
	// denied for FailClosed, the fallback's for FailFallback.
	Decision floodgate.Decision

	// Err is why the decision is degraded (the store's error, wrapping
	// floodgate.ErrUnavailable or the context's error; joined with the
	// fallback's when that failed too), or why the rule has no decision
	// (a key error, wrapping ErrKey). Nil for a decision of the store.
	Err error

	// Fallback reports that Decision was made by the rule's fallback
	// limiter after the store failed.
	Fallback bool
}

// Known reports whether the result's numbers describe a real decision,
// of the store or of a fallback: only known results are reported in
// header fields and can deny.
func (r Result) Known() bool { return r.Err == nil || r.Fallback }

// itemName is the result's RateLimit item name.
func (r Result) itemName() string {
	if r.Policy != nil {
		return ItemName(r.Policy, int(r.Decision.Binding))
	}
	return r.Name
}

// rule is a validated Rule with its policies.
type rule struct {
	lim, fallback *floodgate.Limiter
	key           KeyFunc
	policy        *floodgate.Policy // lim's policy
	fbPolicy      *floodgate.Policy // fallback's policy, or nil
}

type middleware struct {
	rules      []rule
	headers    Headers // never 0
	policyHdr  string  // the RateLimit-Policy value, or ""
	keyStatus  int     // 400 or 500
	failure    Failure // validated
	timeout    time.Duration
	retryAfter string // fail-closed Retry-After value
	denied     http.Handler
	shadow     bool
	onDecision func(*http.Request, []Result)
	now        func() time.Time
}

// New returns the middleware of c: a function that wraps a handler so
// that every request is decided by every rule first. A request that every
// rule admits reaches the handler with the rate limit header fields set;
// a denied one gets c.Denied (429 by default); one whose key cannot be
// found gets c.KeyErrorStatus. The middleware is safe for concurrent use.
//
// New returns an error wrapping ErrInvalidConfig, naming each field at
// fault, when c cannot be used.
func New(c Config) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(c)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

func newMiddleware(c Config) (*middleware, error) {
	var errs []error
	bad := func(field, value, allowed string) {
		errs = append(errs, configError(field, value, allowed))
	}
	if len(c.Rules) == 0 {
		bad("Rules", "[]", "at least one rule")
	}
	m := &middleware{
		headers:    c.Headers.orDefault(),
		keyStatus:  http.StatusBadRequest,
		failure:    c.Failure,
		timeout:    c.Failure.timeout(),
		denied:     c.Denied,
		shadow:     c.Shadow,
		onDecision: c.OnDecision,
		now:        c.Now,
	}
	if m.denied == nil {
		m.denied = DeniedHandler
	}
	if m.now == nil {
		m.now = time.Now
	}
	for i, r := range c.Rules {
		field := fmt.Sprintf("Rules[%d]", i)
		if r.Key == nil {
			bad(field+".Key", "nil", "a KeyFunc, such as RemoteIP()")
		}
		if r.Limiter == nil {
			bad(field+".Limiter", "nil", "a *floodgate.Limiter")
			continue
		}
		p := r.Limiter.Policy()
		ru := rule{lim: r.Limiter, key: r.Key, policy: &p}
		if r.Fallback != nil {
			fp := r.Fallback.Policy()
			ru.fallback, ru.fbPolicy = r.Fallback, &fp
		} else if c.Failure.Mode == FailFallback {
			bad(field+".Fallback", "nil", "a *floodgate.Limiter when Failure.Mode is FailFallback")
		}
		m.rules = append(m.rules, ru)
	}
	if why := c.Headers.check(); why != "" {
		bad("Headers", c.Headers.String(), why)
	}
	switch c.KeyErrorStatus {
	case 0, http.StatusBadRequest:
	case http.StatusInternalServerError:
		m.keyStatus = c.KeyErrorStatus
	default:
		bad("KeyErrorStatus", strconv.Itoa(c.KeyErrorStatus), "0 (meaning 400), 400 or 500")
	}
	if err := c.Failure.Validate(); err != nil {
		errs = append(errs, err)
	}
	m.retryAfter = strconv.FormatInt(ceilSeconds(c.Failure.retryAfter()), 10)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if m.headers&IETF != 0 {
		var items []PolicyItem
		for i := range m.rules {
			items = append(items, PolicyItems(m.rules[i].policy)...)
		}
		m.policyHdr = FormatPolicy(items)
	}
	return m, nil
}

// Validate returns nil when f is a usable failure policy, else an error
// wrapping ErrInvalidConfig for each field at fault ("Failure.Mode",
// "Failure.RetryAfter"). New validates Config.Failure with it; luascript
// too.
func (f Failure) Validate() error {
	var errs []error
	if f.Mode > FailFallback {
		errs = append(errs, configError("Failure.Mode", f.Mode.String(), "FailOpen, FailClosed or FailFallback"))
	}
	if f.RetryAfter < 0 || f.RetryAfter%time.Second != 0 {
		errs = append(errs, configError("Failure.RetryAfter", f.RetryAfter.String(), "whole seconds ≥ 1s, or 0 (meaning 1s)"))
	}
	return errors.Join(errs...)
}

// maxStackRules is how many rules the middleware decides without
// allocating its results.
const maxStackRules = 4

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var keysBuf [maxStackRules]string
	var resBuf [maxStackRules]Result
	keys, results := keysBuf[:0], resBuf[:0]
	if len(m.rules) > maxStackRules {
		keys, results = make([]string, 0, len(m.rules)), make([]Result, 0, len(m.rules))
	}

	keyFailed := false
	for i := range m.rules {
		ru := &m.rules[i]
		key, err := ru.key(r)
		if err == nil && key == "" {
			err = keyError("the key function returned an empty key")
		}
		res := Result{Policy: ru.policy}
		if err != nil {
			res.Err = wrapKeyError(err)
			keyFailed = true
		}
		keys = append(keys, key)
		results = append(results, res)
	}

	closed := false
	if !keyFailed || m.shadow {
		closed = m.decide(r.Context(), keys, results)
	}
	for i := range results {
		if errors.Is(results[i].Err, ErrKey) {
			keyFailed = true
		}
	}

	if m.onDecision != nil {
		m.onDecision(r, slices.Clone(results))
	}

	h := w.Header()
	if keyFailed && !m.shadow {
		if m.policyHdr != "" {
			h[headerRateLimitPolicy] = []string{m.policyHdr}
		}
		WriteProblem(w, Problem{
			Title:  http.StatusText(m.keyStatus),
			Status: m.keyStatus,
			Detail: "The request carries no usable rate limit key.",
		})
		return
	}

	sel := m.headers
	if m.shadow {
		sel &^= RetryAfter
	}
	bi := Binding(results)
	if sel != 0 {
		var now time.Time
		if sel&XRateLimitResetUnix != 0 {
			now = m.now()
		}
		setFields(h, sel, now, m.policyHdr, results, bi)
	}
	switch {
	case m.shadow:
	case bi >= 0 && !results[bi].Decision.Allowed:
		m.denied.ServeHTTP(w, r.WithContext(WithResults(r.Context(), slices.Clone(results))))
		return
	case closed:
		h[headerRetryAfter] = []string{m.retryAfter}
		WriteProblem(w, Problem{
			Title:  http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable,
			Detail: "The rate limiter is unavailable: retry later.",
		})
		return
	}
	next.ServeHTTP(w, r)
}

// wrapKeyError makes err wrap ErrKey.
func wrapKeyError(err error) error {
	if errors.Is(err, ErrKey) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrKey, err)
}

// decide fills results for the rules whose key was found, and reports
// whether the request must fail closed. Rules are added to until one
// denies (or fails closed), and peeked after that.
func (m *middleware) decide(parent context.Context, keys []string, results []Result) (closed bool) {
	ctx := parent
	if m.timeout > 0 {
		dc := newDeadlineCtx(parent, m.timeout)
		defer dc.release()
		ctx = dc
	}
	blocked := false
	for i := range m.rules {
		res := &results[i]
		if res.Err != nil {
			continue
		}
		ru := &m.rules[i]
		var d floodgate.Decision
		var err error
		if blocked {
			d, err = ru.lim.Peek(ctx, keys[i], 1)
		} else {
			d, err = ru.lim.Allow(ctx, keys[i])
		}
		if err == nil {
			res.Decision = d
			blocked = blocked || !d.Allowed
			continue
		}
		if errors.Is(err, floodgate.ErrInvalidKey) {
			res.Err = wrapKeyError(err) // an empty or overlong key: the request's fault
			continue
		}
		res.Err = err
		switch m.failure.Mode {
		case FailClosed:
			res.Decision = floodgate.Decision{Degraded: true}
			closed, blocked = true, true
		case FailFallback:
			d, ferr := m.fallback(parent, ru, keys[i], blocked)
			if ferr != nil {
				res.Err = errors.Join(err, ferr)
				res.Decision = floodgate.Decision{Allowed: true, Degraded: true}
				continue
			}
			d.Degraded = true
			res.Decision, res.Policy, res.Fallback = d, ru.fbPolicy, true
			blocked = blocked || !d.Allowed
		default:
			res.Decision = floodgate.Decision{Allowed: true, Degraded: true}
		}
	}
	return closed
}

// fallback asks the rule's fallback limiter, with a deadline of its own:
// the request's may have passed already.
func (m *middleware) fallback(parent context.Context, ru *rule, key string, peek bool) (floodgate.Decision, error) {
	ctx := context.WithoutCancel(parent)
	if m.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.timeout)
		defer cancel()
	}
	if peek {
		return ru.fallback.Peek(ctx, key, 1)
	}
	return ru.fallback.Allow(ctx, key)
}
