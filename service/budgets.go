package service

import (
	"context"
	"fmt"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// Budgets reports whether the service's store, and its fallback store when
// it has one, decide refunds, calendar windows and the other budget fields
// of floodgate.Request (storekit.BudgetStore). A request with those fields
// must not reach a store without them, which would decide it as a plain
// add: engines check this first (package rls, for Envoy's negative hits and
// calendar months).
func (s *Service) Budgets() bool {
	return storekit.HasBudgets(s.raw) && (s.fallback == nil || storekit.HasBudgets(s.fallback))
}

// Groups returns nil when the service's store decides atomic groups of
// members with any keys (memory, Redis on one node). Otherwise it says
// why not: an error wrapping ErrNoBudgets when the store has no groups,
// or one wrapping storekit.ErrCrossSlot when its keys live on several
// nodes (a Redis Cluster), where a group's keys must share a slot.
func (s *Service) Groups() error {
	if !s.Budgets() {
		return ErrNoBudgets
	}
	if sh, ok := s.raw.(storekit.Sharded); ok && sh.Sharded() {
		return fmt.Errorf("service: the store is a Redis Cluster, whose keys are on different slots, and a group is decided in one slot: %w", storekit.ErrCrossSlot)
	}
	return nil
}

// DecideGroup decides reqs, checked store requests of one cost that add
// (no peeks, refunds or other budget operations), as one atomic group
// (SPEC.md, "Atomic groups"): allowed only if every member's policy
// admits, and spent on every member or none. It goes through the failure
// policy, never the over-limit cache, and reports nothing to the
// observer: the caller counts the members under its own labels (package
// rls). Errors are those of CheckGroup: a *RequestError for a bad group
// (1 to 16 distinct members of one cost; cross_slot on a Cluster), one
// wrapping ErrNoBudgets when the store has no groups, the context's.
func (s *Service) DecideGroup(ctx context.Context, reqs []floodgate.Request) (GroupVerdict, error) {
	if err := s.budgetsOK(); err != nil {
		return GroupVerdict{}, err
	}
	if len(reqs) == 0 {
		return GroupVerdict{}, &RequestError{Code: "no_items", Msg: "an empty group"}
	}
	if err := checkGroup(reqs); err != nil {
		return GroupVerdict{}, err
	}
	for i, r := range reqs {
		if r.N != reqs[0].N || r.Peek || r.Refund || r.AtMost || r.Reserve != nil || r.Settle != nil || r.Group != nil {
			return GroupVerdict{}, &RequestError{Code: "invalid_request", Field: fmt.Sprintf("requests[%d]", i),
				Msg: fmt.Sprintf("a group member adds the group's cost, requests[0]'s %d, and nothing else", reqs[0].N)}
		}
	}
	req := group(reqs)
	d, err := s.takeBudget(ctx, req)
	if err != nil {
		return GroupVerdict{}, err
	}
	return groupVerdict(&req, d), nil
}
