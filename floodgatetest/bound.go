package floodgatetest

import (
	"math"
	"time"

	"github.com/floodgatehq/floodgate"
)

// MaxAdmitted returns an upper bound on the total cost one key can be
// admitted under p by requests stamped from first to last (µs, inclusive),
// starting from empty state, whatever the order and the demand: the
// "ideal" of SPEC.md against which concurrency tests and floodgate bench
// measure over-admission. For several limits it is the least of their
// bounds.
func MaxAdmitted(p *floodgate.Policy, first, last int64) int64 {
	if last < first {
		last = first
	}
	span := last - first
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	switch p.Algorithm {
	case floodgate.SlidingWindow:
		// Buckets whose indexes lie within ⌊window/resolution⌋ of each other
		// all count at the last admission into any of them, so each such
		// group holds at most max.
		best := int64(math.MaxInt64)
		for _, l := range p.Limits {
			res, win := us(l.Resolution), us(l.Window)
			buckets := floorDiv(last, res) - floorDiv(first, res) + 1
			group := win / res
			best = min(best, int64(l.Max)*ceilDiv(buckets, group))
		}
		return best
	case floodgate.AR1:
		// A slot starts from at most max/decay of the previous one's count
		// and ends at most at max.
		best := math.Inf(1)
		for _, l := range p.Limits {
			res := us(l.Resolution)
			slots := float64(floorDiv(last, res) - floorDiv(first, res))
			best = math.Min(best, l.Max+slots*l.Max*(1-1/l.Decay))
		}
		return int64(math.Floor(best + 1e-9))
	case floodgate.FixedWindow:
		w := us(p.Window)
		if p.Align == floodgate.AlignFirst {
			return p.Max * (span/w + 1)
		}
		return p.Max * (floorDiv(last, w) - floorDiv(first, w) + 1)
	case floodgate.TokenBucket:
		w := us(p.Window)
		if span < w {
			return p.Burst + (p.Max-p.Burst)*span/w
		}
		return p.Max * (span/w + 1)
	case floodgate.SlidingLog:
		// Entries within one interval all count at the last of them.
		return p.Max * ceilDiv(span+1, us(p.Interval))
	case floodgate.GCRA:
		// tat advances count/period per unit admitted and stays within
		// burst·T of now.
		hi := p.Burst + span*p.Rate.Count/us(p.Rate.Period)
		return hi
	}
	return 0
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
