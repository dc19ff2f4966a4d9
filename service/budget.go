package service

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/storekit"
)

// The budget operations of the service (docs/budgets.md): a batch decided
// as one atomic group, partial grants, and reservations settled through
// signed tokens. They go to the store under the failure policy but never
// through the over-limit cache, which knows nothing of groups and grants;
// a settle drops the cache's entries of its members on this process.

// GroupVerdict is the outcome of CheckGroup: the group's one decision,
// made on every member or none.
type GroupVerdict struct {
	// Decision is the group's. Its Binding is the binding member's own
	// limit index (in that member's Policy.Limits), not the flattened one
	// the store returns.
	Decision floodgate.Decision
	// Member is the index of the binding member among the items, and
	// Policy its policy.
	Member int
	Policy *floodgate.Policy
	// Policies are every member's policies, in item order.
	Policies []*floodgate.Policy
}

// CheckGroup decides items as one atomic group (SPEC.md, "Atomic groups"):
// allowed only if every item's policy admits, and spent on every member or
// none. Every item has the same cost (the group's) and the same AtMost;
// there are 1 to 16 items, no two with the same policy and key. With peek
// nothing is recorded. The error is a *RequestError for a bad request (on
// a Redis Cluster, keys that cannot share a slot are one: code cross_slot,
// which names the hash_tag option, wrapping storekit.ErrCrossSlot), or one
// wrapping ErrNoBudgets when the store has no groups.
func (s *Service) CheckGroup(ctx context.Context, items []Item, peek bool) (GroupVerdict, error) {
	st := s.state.Load()
	if err := s.budgetsOK(); err != nil {
		return GroupVerdict{}, err
	}
	reqs, err := s.requests(st, items, peek, true)
	if err != nil {
		return GroupVerdict{}, err
	}
	if err := checkGroup(reqs); err != nil {
		return GroupVerdict{}, err
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].N != reqs[0].N {
			return GroupVerdict{}, &RequestError{Code: "invalid_cost", Field: fmt.Sprintf("requests[%d].cost", i),
				Msg: fmt.Sprintf("cost %d: every request of an atomic batch has the group's cost, requests[0]'s %d", reqs[i].N, reqs[0].N)}
		}
		if reqs[i].AtMost != reqs[0].AtMost {
			return GroupVerdict{}, &RequestError{Code: "invalid_request", Field: fmt.Sprintf("requests[%d].at_most", i),
				Msg: fmt.Sprintf("at_most %v: every request of an atomic batch has the group's at_most, requests[0]'s %v", reqs[i].AtMost, reqs[0].AtMost)}
		}
	}
	req := group(reqs)
	d, err := s.takeBudget(ctx, req)
	if err != nil {
		return GroupVerdict{}, err
	}
	v := groupVerdict(&req, d)
	if !peek {
		for _, p := range v.Policies {
			s.obs.Decision(p.Name, d.Allowed, false, d.Degraded)
		}
	}
	return v, nil
}

// CheckAtMost is Check (or Peek) of items of which some ask for a partial
// grant (Item.AtMost): each item is decided on its own, an AtMost one
// granting as many units as pass, at most its cost, in
// Decision.Granted. The error is a *RequestError for a bad request, or
// one wrapping ErrNoBudgets when the store has no partial grants.
func (s *Service) CheckAtMost(ctx context.Context, items []Item, peek bool) (Verdict, error) {
	st := s.state.Load()
	if err := s.budgetsOK(); err != nil {
		return Verdict{}, err
	}
	reqs, err := s.requests(st, items, peek, false)
	if err != nil {
		return Verdict{}, err
	}
	res := Verdict{Allowed: true, Items: make([]ItemDecision, len(reqs))}
	outs := make([]storekit.Outcome, len(reqs))
	asked := s.clock.Now()
	if err := s.takeBatch(ctx, st, reqs, outs); err != nil {
		for i := range outs {
			outs[i].Err = err
		}
	}
	for i := range reqs {
		if outs[i].Err != nil {
			outs[i].Decision, outs[i].Err = s.overloadMode(ctx, st, &reqs[i], outs[i].Err)
		}
		if err := budgetError(outs[i].Err, fmt.Sprintf("requests[%d]", i)); err != nil {
			return Verdict{}, err
		}
	}
	for i := range reqs {
		d := s.settle(st, &reqs[i], outs[i].Decision, nil, asked)
		res.Items[i] = ItemDecision{Policy: reqs[i].Policy, Decision: d}
		if !d.Allowed {
			res.Allowed = false
		}
		if !peek {
			s.obs.Decision(reqs[i].Policy.Name, d.Allowed, false, d.Degraded)
		}
	}
	return res, nil
}

// ErrNoBudgets is wrapped by the error of a budget operation (an atomic
// batch, a partial grant, a reservation) on a store that does not
// implement them (storekit.BudgetStore).
var ErrNoBudgets = fmt.Errorf("service: the store does not implement atomic groups, partial grants or reservations: %w", errors.ErrUnsupported)

// budgetsOK returns ErrNoBudgets when the store has no budgets.
func (s *Service) budgetsOK() error {
	if !storekit.HasBudgets(s.raw) {
		return ErrNoBudgets
	}
	return nil
}

// requests checks items as decideItems does and returns their requests.
// An item's AtMost sets the request's. one reports a group: the errors of
// a single item name requests[0] all the same when there are several.
func (s *Service) requests(st *state, items []Item, peek, atomic bool) ([]floodgate.Request, error) {
	lim := st.cfg.Bounds
	if len(items) == 0 {
		return nil, &RequestError{Code: "no_items", Msg: "no requests: give a policy and a key"}
	}
	if len(items) > lim.MaxBatch {
		return nil, &RequestError{Code: "too_many_items", Field: "requests",
			Msg: fmt.Sprintf("%d requests in one batch; at most %d (limits.max_batch)", len(items), lim.MaxBatch)}
	}
	reqs := make([]floodgate.Request, len(items))
	for i, it := range items {
		field := func(f string) string {
			if len(items) == 1 && !atomic {
				return f
			}
			return fmt.Sprintf("requests[%d].%s", i, f)
		}
		p, ok := st.policies[it.Policy]
		if !ok {
			s.obs.UnknownPolicy()
			return nil, &RequestError{Code: "unknown_policy", Field: field("policy"),
				Msg: fmt.Sprintf("no policy named %q (GET /v1/policies lists them)", clip(it.Policy))}
		}
		if err := CheckKey(it.Key, lim.MaxKeyBytes); err != nil {
			return nil, &RequestError{Code: "invalid_key", Field: field("key"), Msg: err.Error()}
		}
		n := it.Cost
		if n == 0 {
			n = 1
		}
		if n < 1 || n > floodgate.MaxCost {
			return nil, &RequestError{Code: "invalid_cost", Field: field("cost"),
				Msg: fmt.Sprintf("cost %d: want an integer from 1 to 2^53-1", it.Cost)}
		}
		reqs[i] = floodgate.Request{Policy: p, Key: it.Key, N: n, Peek: peek, AtMost: it.AtMost}
	}
	return reqs, nil
}

// group makes requests (of one cost and operation) one group request:
// the first is member 0, the others its Group.
func group(reqs []floodgate.Request) floodgate.Request {
	req := reqs[0]
	if len(reqs) > 1 {
		req.Group = make([]floodgate.Request, len(reqs)-1)
		for i, r := range reqs[1:] {
			req.Group[i] = floodgate.Request{Policy: r.Policy, Key: r.Key}
		}
	}
	return req
}

// groupVerdict splits a group decision's flattened Binding.
func groupVerdict(req *floodgate.Request, d floodgate.Decision) GroupVerdict {
	v := GroupVerdict{Decision: d, Policies: []*floodgate.Policy{req.Policy}}
	for i := range req.Group {
		v.Policies = append(v.Policies, req.Group[i].Policy)
	}
	m, b := storekit.SplitBinding(req, d.Binding)
	if m < 0 {
		m, b = 0, 0
	}
	v.Member, v.Policy, v.Decision.Binding = m, v.Policies[m], b
	return v
}

// takeBudget decides one budget request through the failure policy,
// within the bound on store calls (never the over-limit cache), and turns
// the store's refusals into *RequestErrors.
func (s *Service) takeBudget(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	ctx, span := tracer.Start(ctx, "floodgate.store")
	defer span.End()
	st := s.state.Load()
	d, err, qerr := s.take(ctx, st, req)
	if qerr != nil {
		d, err = s.overloadMode(ctx, st, &req, qerr)
	}
	if span.IsRecording() {
		span.SetAttributes(decisionAttrs(&req, d)...)
	}
	if err := budgetError(err, "requests"); err != nil {
		return floodgate.Decision{}, err
	}
	return d, nil
}

// overloadMode answers a request the bound on store calls refused (err
// wrapping ErrOverloaded, counted already) as the overload mode says: the
// error itself (backpressure), or the failure policy's decision. Any other
// err comes back as it is.
func (s *Service) overloadMode(ctx context.Context, st *state, req *floodgate.Request, err error) (floodgate.Decision, error) {
	if !errors.Is(err, ErrOverloaded) || st.cfg.Overload.Mode != config.OverloadFailurePolicy {
		return floodgate.Decision{}, err
	}
	return s.guarded.Refused(ctx, *req, err), nil
}

// budgetError turns a store's refusal of a budget request into a
// *RequestError (field names what was refused), and returns other errors
// as they are (the caller's context ended, the store is closed). A nil
// err is nil.
func budgetError(err error, field string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storekit.ErrCrossSlot):
		return &RequestError{Code: "cross_slot", Field: field, Err: err,
			Msg: "the keys of this atomic group hash to different Redis Cluster slots, and a group is decided in one slot or not at all: " +
				"set hash_tag on the group's policies (hash_tag in the text form, \"hash_tag\": true in JSON) and begin every key with the same {tag}, such as {org7}user3"}
	case errors.Is(err, errors.ErrUnsupported):
		return fmt.Errorf("%w (%v)", ErrNoBudgets, err)
	case errors.Is(err, storekit.ErrInvalidRequest), errors.Is(err, floodgate.ErrInvalidCost),
		errors.Is(err, floodgate.ErrInvalidKey), errors.Is(err, floodgate.ErrInvalidPolicy):
		return &RequestError{Code: "invalid_request", Field: field, Msg: err.Error(), Err: err}
	}
	return err
}

// tokenKey returns cfg's reservation token key, or a random one drawn
// once per process when the configuration has none.
func tokenKey(cfg *config.Config) ([]byte, error) {
	key, err := cfg.Budgets.TokenKeyBytes()
	if err != nil {
		return nil, err
	}
	if key == nil {
		return processTokenKey, nil
	}
	return key, nil
}

// processTokenKey signs tokens when the configuration has no key: drawn at
// start, so tokens die with the process.
var processTokenKey = func() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}()

// Refund gives back the cost of items (one item, or a group of several
// with one cost) to each member's live state, newest first, never beyond
// full, creating no state (SPEC.md's refund), and returns the decision a
// peek of 1 gets after it. It is an admin action: whoever may refund may
// give any key any budget. The error is a *RequestError for a bad request,
// or one wrapping ErrNoBudgets when the store has no refunds.
func (s *Service) Refund(ctx context.Context, items []Item) (GroupVerdict, error) {
	st := s.state.Load()
	if err := s.budgetsOK(); err != nil {
		return GroupVerdict{}, err
	}
	for i := range items {
		items[i].AtMost = false
	}
	reqs, err := s.requests(st, items, false, len(items) > 1)
	if err != nil {
		return GroupVerdict{}, err
	}
	if err := checkGroup(reqs); err != nil {
		return GroupVerdict{}, err
	}
	req := group(reqs)
	req.Refund = true
	d, err := s.takeBudget(ctx, req)
	if err == nil && d.Degraded {
		err = fmt.Errorf("%w: the store failed; nothing is known to be given back", floodgate.ErrUnavailable)
	}
	if err != nil {
		return GroupVerdict{}, err
	}
	for _, q := range reqs {
		s.cache.drop(q.Policy, q.Key)
	}
	return groupVerdict(&req, d), nil
}
