package algo

import (
	"math"
	"math/bits"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// Bound returns the most cost SPEC.md lets an exact limiter admit to one
// key under p, starting from no state, through requests of cost each
// decided from first to last (µs since the Unix epoch, both included),
// whatever their number and order: the bound concurrency tests and
// floodgate bench hold stores to (floodgatetest.MaxAdmitted). It is what
// the twin admits when demand exceeds the limit throughout, for every
// algorithm but ar1, whose bound is only a bound (docs/algorithms.md,
// "What a limiter may admit", gives the formulas). count_denied can only
// lower what passes, so the bound ignores it. The result is a multiple of
// cost.
func Bound(p *floodgate.Policy, cost, first, last int64) int64 {
	if cost < 1 {
		return 0
	}
	last = max(last, first)
	span := last - first
	var n int64 // requests
	switch p.Algorithm {
	case floodgate.FixedWindow:
		w := us(p.Window)
		k := p.Max / cost
		if p.Align == "calendar" {
			n = mulSat(k, calendarWindows(p, first, last))
			break
		}
		if p.Align == floodgate.AlignFirst {
			n = mulSat(k, span/w+1)
		} else {
			n = mulSat(k, floorDiv(last, w)-floorDiv(first, w)+1)
		}
	case floodgate.SlidingWindow:
		n = math.MaxInt64
		for _, l := range p.Limits {
			n = min(n, slidingWindowBound(int64(l.Max)/cost, us(l.Window), us(l.Resolution), first, last))
		}
	case floodgate.SlidingLog:
		n = slidingLogBound(p.Max/cost, us(p.Window), us(p.MinInterval), span)
	case floodgate.TokenBucket:
		if cost > p.Burst {
			return 0
		}
		w := us(p.Window)
		refill := p.Max - p.Burst // token·µs units gained per µs
		full := (p.Burst*w + refill*(w-1)) / (cost * w)
		rest := span % w
		n = addSat(mulSat(full, span/w), (p.Burst*w+refill*rest)/(cost*w))
	case floodgate.GCRA:
		n = gcraBound(p.Max, us(p.Window), p.Burst, cost, span)
	case floodgate.AR1:
		best := math.Inf(1)
		for _, l := range p.Limits {
			res := us(l.Resolution)
			slots := float64(floorDiv(last, res) - floorDiv(first, res))
			// Counts below 1e-6 read as 0: allow that much per slot.
			best = math.Min(best, l.Max+slots*l.Max*(1-1/l.Decay)+1e-6*(slots+1))
		}
		n = int64(math.Min(math.Floor(best/float64(cost)+1e-9), float64(floodgate.MaxCost)))
	}
	return mulSat(max(n, 0), cost)
}

// slidingWindowBound is one sliding_window limit's bound, in requests of k
// per generation: a generation admits k in one bucket, which expires at
// ⌊t/res⌋·res + win; from the second generation on, every generation
// starts on a bucket boundary, ⌊win/res⌋·res after the previous one.
func slidingWindowBound(k, win, res, first, last int64) int64 {
	if k <= 0 {
		return 0
	}
	gens := int64(1)
	if g1 := floorDiv(first, res)*res + win; g1 <= last {
		gens += 1 + (last-g1)/(win/res*res)
	}
	return mulSat(k, gens)
}

// slidingLogBound is sliding_log's bound in requests, k of which fit in the
// log: the j-th admission comes at the earliest min_interval after the
// previous one and interval after the (j−k)-th.
func slidingLogBound(k, interval, minInterval, span int64) int64 {
	switch {
	case k <= 0:
		return 0
	case minInterval == 0:
		return mulSat(k, span/interval+1)
	case mulSat(minInterval, k) >= interval:
		return span/minInterval + 1
	}
	return addSat(mulSat(k, span/interval), min(k, span%interval/minInterval+1))
}

// gcraBound is GCRA's bound in requests: the j-th admission (from 0) comes
// at the earliest (j+1)·cost·T − burst·T after the first, so
// ⌊(span·count + burst·period) / (cost·period)⌋ pass, all exact.
func gcraBound(count, period, burst, cost, span int64) int64 {
	if cost > burst {
		return 0
	}
	hi, lo := bits.Mul64(uint64(span), uint64(count))
	lo, carry := bits.Add64(lo, uint64(burst*period), 0)
	hi += carry
	d := uint64(cost * period)
	if hi >= d {
		return floodgate.MaxCost
	}
	q, _ := bits.Div64(hi, lo, d)
	return int64(min(q, uint64(floodgate.MaxCost)))
}

// mulSat returns a·b for a, b ≥ 0, saturating at MaxInt64.
func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// addSat returns a+b for a, b ≥ 0, saturating at MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// calendarWindows returns how many windows of calendar policy p overlap
// [first, last]: 1 plus the boundaries crossed.
func calendarWindows(p *floodgate.Policy, first, last int64) int64 {
	b, err := storekit.CalendarBounds(p, first)
	if err != nil {
		return math.MaxInt64 // not a calendar policy that loads: no bound
	}
	n := int64(1)
	for b[2] <= last {
		n++
		if b, err = storekit.CalendarBounds(p, b[2]); err != nil {
			return math.MaxInt64
		}
	}
	return n
}
