package floodgatetest

import (
	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/algo"
)

// MaxAdmitted returns the most cost SPEC.md lets an exact store admit to
// one key under p, from no state, through requests of cost each decided
// from first to last (µs since the Unix epoch, both included), whatever
// their number, order and interleaving: a store that admits more has
// over-admitted. Concurrency tests and floodgate bench hold stores to it;
// docs/algorithms.md gives the formula of each algorithm. It is exactly
// what a saturating client gets, for every algorithm but ar1, whose bound
// is only an upper bound.
func MaxAdmitted(p *floodgate.Policy, cost, first, last int64) int64 {
	return algo.Bound(p, cost, first, last)
}
