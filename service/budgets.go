package service

import "github.com/floodgatehq/floodgate/storekit"

// Budgets reports whether the service's store, and its fallback store when
// it has one, decide refunds, calendar windows and the other budget fields
// of floodgate.Request (storekit.BudgetStore). A request with those fields
// must not reach a store without them, which would decide it as a plain
// add: engines check this first (package rls, for Envoy's negative hits and
// calendar months).
func (s *Service) Budgets() bool {
	return storekit.HasBudgets(s.raw) && (s.fallback == nil || storekit.HasBudgets(s.fallback))
}
