package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/rlheader"
	"github.com/floodgatehq/floodgate/storekit"
)

// ErrInvalidConfig is wrapped by the errors of New and ClientIP for a
// configuration they cannot use. Each such error names the field, the
// value and what is allowed.
var ErrInvalidConfig = errors.New("httplimit: invalid configuration")

func configError(field, value, allowed string) error {
	return fmt.Errorf("%w: %s = %s: %s", ErrInvalidConfig, field, value, allowed)
}

// Rule is one policy applied on a route: a limiter and the key function
// that tells whose quota a request uses.
type Rule struct {
	// Limiter decides, through its store and policy. Required. Give it a
	// store wrapped by package failure (failure.Wrap) to choose what
	// happens when the store fails or is slow: a timeout, a breaker, and
	// fail open, fail closed or a fallback store.
	Limiter *floodgate.Limiter

	// Key returns the request's key for this rule. Required.
	Key KeyFunc
}

// Config configures the middleware. Its zero value, with Rules set, sends
// the IETF fields and Retry-After, and answers 400 when a key function
// fails.
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
	// Atomic decides them all in one step instead.
	Rules []Rule

	// Atomic decides every rule in one atomic step through Store (SPEC.md,
	// "Atomic groups"): a request passes only if every rule admits it, and
	// is spent on every rule or none, so that a later rule denying no
	// longer spends the earlier rules' quota. Each rule's member is its
	// Limiter's policy (Limiter.Policy: the first, for a Limiter over
	// several) and its key; two rules must not give one policy the same
	// key. The response reports the binding rule with the group's numbers;
	// the other rules' RuleDecisions carry the group's Allowed and
	// Degraded only. Where a sharded store cannot decide the keys in one
	// step (storekit.ErrCrossSlot: a Redis Cluster, keys in different
	// slots; see Policy.HashTag) the rules are decided one after the other
	// as without Atomic.
	Atomic bool

	// Store is the store of every rule's Limiter, required with Atomic:
	// it must implement storekit.BudgetStore (memstore and redisstore do,
	// and package failure's wrapper forwards it).
	Store floodgate.Store

	// Headers selects the response header fields; the zero value means
	// rlheader.Default (RateLimit-Policy, RateLimit and Retry-After).
	Headers rlheader.Fields

	// KeyErrorStatus is the status of a request whose key function
	// fails, or returns a key the store refuses (empty, or longer than the
	// store's maximum; rules before it have then been decided): 400 Bad
	// Request (the zero value means 400) or 500 Internal Server Error. The
	// body is an RFC 9457 problem.
	KeyErrorStatus int

	// Denied answers denied requests; nil means DeniedHandler (429 with
	// a quota-exceeded problem). The rate limit header fields are set
	// before it runs, and Decisions(r.Context()) gives the decisions.
	Denied http.Handler

	// Shadow decides and reports (header fields, OnDecision) but never
	// blocks: denied requests, key errors and store failures all reach the
	// next handler. Retry-After is not sent, since the response is not a
	// denial. Use it to try a policy on live traffic.
	Shadow bool

	// OnDecision, when set, is called once per request, after every rule
	// is decided and before the response is chosen, with one RuleDecision
	// per rule in route order. Every degraded decision (Decision.Degraded:
	// a failure policy decided) and every key or store error is visible
	// there. It runs on the request's goroutine, so it should be quick; it
	// may keep the slice. Keys are never passed to it.
	OnDecision func(r *http.Request, decisions []RuleDecision)

	// Now is the clock of X-RateLimit-Reset with XRateLimitResetUnix; nil
	// means time.Now. Decisions use their store's clock.
	Now func() time.Time
}

// RuleDecision is what one rule decided for one request.
type RuleDecision struct {
	// Policy is the rule's policy. It must not be modified. Other deciders
	// (such as luascript's scripts) leave it nil and set Name.
	Policy *floodgate.Policy

	// Name names the decision when Policy is nil, in RateLimit and in a
	// problem's violated-policies.
	Name string

	// Decision is the decision. Degraded is set when a failure policy made
	// it (see package failure): allowed without numbers (fail open),
	// denied without numbers (fail closed: the middleware answers 503), or
	// a fallback store's decision.
	Decision floodgate.Decision

	// Err is why the rule has no decision: a key error (wrapping ErrKey)
	// or the store's error when the store is not wrapped by a failure
	// policy (the middleware then answers 503). Nil for a decision.
	Err error
}

// item returns the decision as rlheader sees it.
func (r *RuleDecision) item() rlheader.Item {
	return rlheader.Item{Policy: r.Policy, Name: r.Name, Decision: r.Decision, Unknown: r.Err != nil}
}

// failedClosed reports whether the decision is a failure policy's denial
// (or a store error): the limiter could not decide, so the request gets a
// 503, not a 429.
func (r *RuleDecision) failedClosed() bool {
	d := &r.Decision
	return r.Err != nil && !errors.Is(r.Err, ErrKey) || d.Degraded && !d.Allowed && d.Limit == 0
}

// rule is a validated Rule with its policy.
type rule struct {
	lim    *floodgate.Limiter
	key    KeyFunc
	policy *floodgate.Policy // lim's policy
}

type middleware struct {
	rules      []rule
	headers    rlheader.Fields // resolved
	policyHdr  string          // the RateLimit-Policy value, or ""
	keyStatus  int             // 400 or 500
	denied     http.Handler
	shadow     bool
	onDecision func(*http.Request, []RuleDecision)
	now        func() time.Time
	atomic     floodgate.Store // Config.Store with Atomic, else nil
}

// New returns the middleware of c: a function that wraps a handler so
// that every request is decided by every rule first. A request that every
// rule admits reaches the handler with the rate limit header fields set;
// a denied one gets c.Denied (429 by default); one whose key cannot be
// found gets c.KeyErrorStatus; one a rule could not decide (a store error,
// or a failure policy that fails closed) gets 503 Service Unavailable with
// Retry-After. The middleware is safe for concurrent use.
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
		headers:    c.Headers.Resolve(),
		keyStatus:  http.StatusBadRequest,
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
		m.rules = append(m.rules, rule{lim: r.Limiter, key: r.Key, policy: &p})
	}
	if c.Atomic {
		switch {
		case c.Store == nil:
			bad("Store", "nil", "the store of the rules' limiters, required with Atomic")
		case !storekit.HasBudgets(c.Store):
			bad("Store", fmt.Sprintf("%T", c.Store), "with Atomic, a store that implements storekit.BudgetStore (memstore, redisstore)")
		case len(c.Rules) > storekit.MaxMembers:
			bad("Rules", strconv.Itoa(len(c.Rules))+" rules", fmt.Sprintf("with Atomic, at most %d", storekit.MaxMembers))
		}
		m.atomic = c.Store
	}
	if why := c.Headers.Check(); why != "" {
		bad("Headers", c.Headers.String(), why)
	}
	switch c.KeyErrorStatus {
	case 0, http.StatusBadRequest:
	case http.StatusInternalServerError:
		m.keyStatus = c.KeyErrorStatus
	default:
		bad("KeyErrorStatus", strconv.Itoa(c.KeyErrorStatus), "0 (meaning 400), 400 or 500")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if m.headers&rlheader.IETF != 0 {
		items := make([]rlheader.Item, len(m.rules))
		for i := range m.rules {
			items[i].Policy = m.rules[i].policy
		}
		m.policyHdr = rlheader.PolicyField(items)
	}
	return m, nil
}

// maxStackRules is how many rules the middleware decides without
// allocating its results.
const maxStackRules = 4

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var keysBuf [maxStackRules]string
	var resBuf [maxStackRules]RuleDecision
	var itemBuf [maxStackRules]rlheader.Item
	keys, results, items := keysBuf[:0], resBuf[:0], itemBuf[:0]
	if len(m.rules) > maxStackRules {
		keys, results = make([]string, 0, len(m.rules)), make([]RuleDecision, 0, len(m.rules))
		items = make([]rlheader.Item, 0, len(m.rules))
	}

	keyFailed := false
	for i := range m.rules {
		ru := &m.rules[i]
		key, err := ru.key(r)
		if err == nil && key == "" {
			err = keyError("the key function returned an empty key")
		}
		res := RuleDecision{Policy: ru.policy}
		if err != nil {
			res.Err = wrapKeyError(err)
			keyFailed = true
		}
		keys = append(keys, key)
		results = append(results, res)
	}

	bind := -1 // with Atomic, the binding rule of a group decision
	if !keyFailed || m.shadow {
		if m.atomic != nil {
			bind = m.decideGroup(r.Context(), keys, results)
		} else {
			m.decide(r.Context(), keys, results)
		}
	}
	closed, retry := false, time.Duration(0)
	for i := range results {
		res := &results[i]
		if errors.Is(res.Err, ErrKey) {
			keyFailed = true
		}
		if res.failedClosed() {
			closed = true
			retry = max(retry, res.Decision.RetryAfter)
		}
		it := res.item()
		if bind >= 0 && i != bind {
			it.Unknown = true // the group's numbers are the binding rule's
		}
		items = append(items, it)
	}

	if m.onDecision != nil {
		m.onDecision(r, slices.Clone(results))
	}

	h := w.Header()
	if keyFailed && !m.shadow {
		if m.policyHdr != "" {
			h["Ratelimit-Policy"] = []string{m.policyHdr}
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
		sel &^= rlheader.RetryAfter
	}
	var now time.Time
	if sel&rlheader.XRateLimitResetUnix != 0 {
		now = m.now()
	}
	bi := rlheader.Set(h, sel|noneIfEmpty(sel), now, m.policyHdr, items)
	switch {
	case m.shadow:
	case bi >= 0 && !results[bi].Decision.Allowed:
		m.denied.ServeHTTP(w, r.WithContext(WithDecisions(r.Context(), slices.Clone(results))))
		return
	case closed:
		h["Retry-After"] = []string{rlheader.RetryAfterValue(retry)}
		WriteProblem(w, Problem{
			Title:  http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable,
			Detail: "The rate limiter is unavailable: retry later.",
		})
		return
	}
	next.ServeHTTP(w, r)
}

// noneIfEmpty keeps rlheader.Set from reading an empty selection (the
// middleware's own, with every field turned off) as the default.
func noneIfEmpty(sel rlheader.Fields) rlheader.Fields {
	if sel == 0 {
		return rlheader.None
	}
	return 0
}

// wrapKeyError makes err wrap ErrKey.
func wrapKeyError(err error) error {
	if errors.Is(err, ErrKey) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrKey, err)
}

// decideGroup fills results for the rules whose key was found with one
// group decision (Config.Atomic), and returns the binding rule's index, or
// -1 when there is none: no rule to decide, the store failed (every
// member's Err is set), or the store cannot decide the keys in one step,
// when they are decided one after the other (decide).
func (m *middleware) decideGroup(ctx context.Context, keys []string, results []RuleDecision) int {
	var buf [maxStackRules]int
	idx := buf[:0]
	for i := range results {
		if results[i].Err != nil {
			continue
		}
		if !utf8.ValidString(keys[i]) {
			results[i].Err = keyError("the key is not valid UTF-8")
			continue
		}
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return -1
	}
	req := floodgate.Request{Policy: m.rules[idx[0]].policy, Key: keys[idx[0]], N: 1}
	if len(idx) > 1 {
		req.Group = make([]floodgate.Request, 0, len(idx)-1)
		for _, i := range idx[1:] {
			req.Group = append(req.Group, floodgate.Request{Policy: m.rules[i].policy, Key: keys[i]})
		}
	}
	d, err := m.atomic.Take(ctx, req)
	switch {
	case errors.Is(err, storekit.ErrCrossSlot):
		m.decide(ctx, keys, results)
		return -1
	case err != nil:
		if errors.Is(err, floodgate.ErrInvalidKey) {
			err = wrapKeyError(err)
		}
		for _, i := range idx {
			results[i].Err = err
		}
		return -1
	}
	member, limit := storekit.SplitBinding(&req, d.Binding)
	if member < 0 {
		member, limit = 0, 0
	}
	for _, i := range idx {
		results[i].Decision = floodgate.Decision{Allowed: d.Allowed, Degraded: d.Degraded}
	}
	b := idx[member]
	d.Binding = limit
	results[b].Decision = d
	return b
}

// decide fills results for the rules whose key was found. Rules are added
// to until one denies (or cannot decide), and peeked after that.
func (m *middleware) decide(ctx context.Context, keys []string, results []RuleDecision) {
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
		switch {
		case err == nil:
			res.Decision = d
			blocked = blocked || !d.Allowed
		case errors.Is(err, floodgate.ErrInvalidKey):
			res.Err = wrapKeyError(err) // an empty, overlong or non-UTF-8 key: the request's fault
		default:
			res.Err = err
			blocked = true
		}
	}
}
