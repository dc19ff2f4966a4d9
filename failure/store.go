package failure

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// Store is a floodgate.Store that applies a failure policy to another:
// its Take never fails because the store did (see the package
// documentation); it returns an error only for a request the store refused
// (floodgate.ErrInvalidPolicy, ErrInvalidKey, ErrInvalidCost), after Close
// (ErrClosed), when the caller's context ended, and (wrapping
// ErrSaturated) when the timeout cut the call while the caller said it was
// saturated (WithSaturation). It is a
// storekit.BatchStore when the store it wraps is one, passes Ping on, and
// reports the wrapped store's Budgets (storekit.BudgetStore).
//
// A group (Request.Group) is one request: when the store fails it, the
// failure policy makes one decision for the whole group, never one per
// member. An allowed degraded add, partial grant or reservation is granted
// its N in full (Open, or a fallback that fails too); a degraded
// reservation holds nothing in any store (Limiter.Settle then gives back
// nothing), unless the fallback store made it. A fallback without budgets
// is not asked to decide a group or a budget operation: that request fails
// open. Create it with Wrap.
type Store struct {
	g      *Guard
	inner  floodgate.Store
	batch  storekit.BatchStore // inner as a BatchStore, or nil
	router storekit.Router     // inner as a Router, or nil
}

// Wrap returns store under policy p. It returns an error wrapping
// ErrInvalidPolicy, naming each field at fault, when p cannot be used.
// The Store owns store: Close closes it (not p.Fallback).
func Wrap(store floodgate.Store, p Policy, opts ...Option) (*Store, error) {
	if store == nil {
		return nil, errors.New("failure: Wrap: nil store")
	}
	g, err := NewGuard(p, opts...)
	if err != nil {
		return nil, err
	}
	s := &Store{g: g, inner: store}
	s.batch, _ = store.(storekit.BatchStore)
	s.router, _ = store.(storekit.Router)
	return s, nil
}

// Guard returns the store's guard: its policy, SetPolicy for a reload, and
// the state of its breakers.
func (s *Store) Guard() *Guard { return s.g }

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() floodgate.Store { return s.inner }

func (s *Store) node(ctx context.Context, req *floodgate.Request) string {
	if s.router == nil || req.Policy == nil {
		return ""
	}
	return s.router.Node(ctx, req.Policy, req.Key)
}

func opOf(req *floodgate.Request) string {
	if req.Peek {
		return "peek"
	}
	return "take"
}

// Take decides req through the wrapped store, or by the failure policy
// when the store fails, is too slow, or its node's breaker is open.
func (s *Store) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	return s.TakeVia(ctx, req, s.inner.Take)
}

// TakeVia is Take with the store's decision made by take instead of the
// wrapped store's own Take: another path to the same store, such as a
// batcher that pipelines concurrent calls.
func (s *Store) TakeVia(ctx context.Context, req floodgate.Request, take func(context.Context, floodgate.Request) (floodgate.Decision, error)) (floodgate.Decision, error) {
	d, _, err := s.g.Do(ctx, opOf(&req), s.node(ctx, &req), func(ctx context.Context) (floodgate.Decision, error) {
		return take(ctx, req)
	}, s.fallbackOf(s.g.policy.Load(), &req))
	grantDegraded(&req, &d)
	return d, err
}

// Budgets reports whether the wrapped store decides groups and budget
// operations (storekit.BudgetStore).
func (s *Store) Budgets() bool { return storekit.HasBudgets(s.inner) }

// budgetRequest reports whether req is a group or a budget operation.
func budgetRequest(req *floodgate.Request) bool {
	return req.Group != nil || req.AtMost || req.Refund || req.Reserve != nil || req.Settle != nil ||
		req.Policy != nil && req.Policy.Align == "calendar"
}

// errFallbackNoBudgets is the error of a fallback store asked to decide a
// group or budget operation it does not implement.
var errFallbackNoBudgets = fmt.Errorf("failure: fallback store: %w", errors.ErrUnsupported)

// grantDegraded sets the Granted of an allowed degraded add, partial grant
// or reservation (and their peeks) that the failure policy made without a
// store's numbers: the request passes in full.
func grantDegraded(req *floodgate.Request, d *floodgate.Decision) {
	if d.Degraded && d.Allowed && d.Granted == 0 && !req.Refund && req.Settle == nil {
		d.Granted = req.N
	}
}

// TakeBatch decides reqs in one call to the wrapped store (which must be a
// storekit.BatchStore; otherwise one Take each), each request by the
// failure policy when the store fails it or its node's breaker is open.
// The whole batch has one timeout, and each node's share of it is one call
// for the node's breaker (failed when any of its decisions failed). An
// outcome's error is Take's.
func (s *Store) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	if s.batch == nil {
		for i := range reqs {
			d, err := s.Take(ctx, reqs[i])
			out[i] = storekit.Outcome{Decision: d, Err: err}
		}
		return
	}
	p := s.g.policy.Load()
	now := s.g.clock.Now().UnixNano()
	nodes := make([]string, len(reqs))
	probes := make([]bool, len(reqs))
	send := make([]int, 0, len(reqs))
	for i := range reqs {
		nodes[i] = s.node(ctx, &reqs[i])
		ok, probe := true, false
		if !p.Breaker.Disabled {
			ok, probe = s.g.breaker(nodes[i]).admit(now)
		}
		if !ok {
			s.g.observe(opOf(&reqs[i]), nodes[i], 0, ErrBreakerOpen)
			d := s.g.degrade(ctx, p, nodes[i], ErrBreakerOpen, s.fallbackOf(p, &reqs[i]))
			grantDegraded(&reqs[i], &d)
			out[i] = storekit.Outcome{Decision: d}
			continue
		}
		probes[i] = probe
		send = append(send, i)
	}
	if len(send) == 0 {
		return
	}
	// Sent whole (the common case), the batch is decided in place: out[i]
	// is written from res[i] only after res[i] is read.
	sub, res := reqs, out
	if len(send) < len(reqs) {
		sub, res = make([]floodgate.Request, len(send)), make([]storekit.Outcome, len(send))
		for j, i := range send {
			sub[j] = reqs[i]
		}
	}
	cctx := ctx
	var cancel context.CancelFunc
	if p.Timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, p.Timeout)
	}
	start := time.Now()
	s.batch.TakeBatch(cctx, sub, res)
	took := time.Since(start)
	cut := cancel != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) // the policy's timeout cut the batch
	if cancel != nil {
		cancel()
	}
	// Each node's share of the batch is one pipelined round trip: one call
	// for its breaker, failed when any of its decisions failed, so that a
	// round trip that timed out opens no breaker on its own by counting
	// as many failures as it carried decisions.
	type trip struct {
		node          string
		failed, probe bool
		err           error
	}
	var one [1]trip // a batch's nodes are few, most often one: no map
	trips := one[:0]
	for j, i := range send {
		d, err := res[j].Decision, res[j].Err
		if err != nil && (requestError(err) || ctx.Err() != nil) {
			if probes[i] {
				s.g.breaker(nodes[i]).state.Store(open)
			}
			if ctx.Err() != nil && !requestError(err) {
				err = ctx.Err()
			}
			out[i] = storekit.Outcome{Err: err}
			continue
		}
		s.g.observe(opOf(&reqs[i]), nodes[i], took, err)
		if !p.Breaker.Disabled {
			var tr *trip
			for k := range trips {
				if trips[k].node == nodes[i] {
					tr = &trips[k]
					break
				}
			}
			if tr == nil {
				trips = append(trips, trip{node: nodes[i]})
				tr = &trips[len(trips)-1]
			}
			tr.probe = tr.probe || probes[i]
			if err != nil && !errors.Is(err, storekit.ErrFull) && !tr.failed { // see Guard.Do
				tr.failed, tr.err = true, err
			}
		}
		if err != nil {
			if cut && s.g.saturatedNow(nodes[i]) {
				out[i] = storekit.Outcome{Err: saturatedError(err)}
				continue
			}
			d = s.g.degrade(ctx, p, nodes[i], err, s.fallbackOf(p, &reqs[i]))
			grantDegraded(&reqs[i], &d)
		}
		out[i] = storekit.Outcome{Decision: d}
	}
	for _, tr := range trips {
		node := tr.node
		switch s.g.breaker(node).record(s.g.clock.Now().UnixNano(), &p.Breaker, tr.failed, tr.probe) {
		case +1:
			s.g.log.Warn("store failing: circuit breaker open, the failure policy decides without it",
				"node", nodeName(node), "mode", p.Mode.String(), "open_for", p.Breaker.OpenFor.String(), "error", tr.err)
			s.g.changed(node, true)
		case -1:
			s.g.log.Info("store recovered: circuit breaker closed", "node", nodeName(node))
			s.g.changed(node, false)
		}
	}
}

// Refused returns the decision the failure policy gives req when it was
// not sent to the store at all, for cause (such as a service's overload
// bound): as for a failing store — Degraded; allowed in Open mode, denied
// in Closed mode, the fallback store's in Fallback mode. The breakers do
// not count it: the store was not asked.
func (s *Store) Refused(ctx context.Context, req floodgate.Request, cause error) floodgate.Decision {
	p := s.g.policy.Load()
	d := s.g.degrade(ctx, p, s.node(ctx, &req), cause, s.fallbackOf(p, &req))
	grantDegraded(&req, &d)
	return d
}

func (s *Store) fallbackOf(p *Policy, req *floodgate.Request) func(context.Context) (floodgate.Decision, error) {
	if p.Fallback == nil {
		return nil
	}
	r, fb := *req, p.Fallback
	if budgetRequest(&r) && !storekit.HasBudgets(fb) {
		return func(context.Context) (floodgate.Decision, error) { return floodgate.Decision{}, errFallbackNoBudgets }
	}
	return func(ctx context.Context) (floodgate.Decision, error) { return fb.Take(ctx, r) }
}

// Reset forgets key's state under p in the wrapped store, within the
// policy's timeout. Its error is the store's: a reset is not degraded.
func (s *Store) Reset(ctx context.Context, p *floodgate.Policy, key string) error {
	if t := s.g.policy.Load().Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	return s.inner.Reset(ctx, p, key)
}

// Close closes the wrapped store.
func (s *Store) Close() error { return s.inner.Close() }

// Ping checks the wrapped store's backend when it is a storekit.Pinger;
// otherwise it returns nil.
func (s *Store) Ping(ctx context.Context) error {
	if p, ok := s.inner.(storekit.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Interface guards.
var (
	_ storekit.BatchStore  = (*Store)(nil)
	_ storekit.BudgetStore = (*Store)(nil)
	_ storekit.Pinger      = (*Store)(nil)
)
