package algo

import (
	"math"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// zeroBelow is SPEC.md's threshold: an AR(1) count below it is 0.
const zeroBelow = 1e-6

// ar1: SPEC.md "ar1" and rule 11. State: per limit a slot s0 and a float
// count C0; at slot s the count is C0 / decay^(s-s0). Counts are never
// rewritten by reads, only by a recording add.
func ar1(p *floodgate.Policy, s *State, now, n int64, peek bool, d *floodgate.Decision) {
	limits := p.Limits
	live := s.Expires != 0 && s.X != nil && len(s.X.AR) == len(limits)
	fn := float64(n)

	// Pass 1: the decayed counts and the verdict.
	var counts [storekit.MaxLimits]float64
	allowed := true
	for i := range limits {
		if live {
			c := s.X.AR[i]
			counts[i] = decayed(c.Count, limits[i].Decay, floorDiv(now, us(limits[i].Resolution))-c.Slot)
		}
		if counts[i]+fn > limits[i].Max {
			allowed = false
		}
	}
	record := allowed || storekit.CountsDenied(p)

	// Pass 2: on the counts after the call.
	var remaining, reset, retry, bindRem int64
	binding := int32(-1)
	for i := range limits {
		l := &limits[i]
		res := us(l.Resolution)
		slot := floorDiv(now, res)
		c := counts[i]
		if record {
			c += fn
		}
		rem := int64(0)
		if x := l.Max - c; x > 0 {
			rem = int64(math.Floor(x))
		}
		if i == 0 || rem < remaining {
			remaining = rem
		}
		denies := counts[i]+fn > l.Max
		if (allowed || denies) && better(rem, bindRem, binding) {
			binding, bindRem = int32(i), rem
		}
		if c > 0 {
			j := firstSlot(c, l.Decay, 0, -1)
			reset = max(reset, (slot+j)*res-now)
		}
		if !allowed {
			var wait int64
			switch {
			case c+fn <= l.Max:
				wait = 0
			case fn > l.Max:
				wait = -1
			default:
				j := firstSlot(c, l.Decay, fn, l.Max)
				wait = (slot+j)*res - now
			}
			retry = combineRetry(retry, wait)
		}
	}
	limit := int64(limits[binding].Max)

	if record && !peek {
		x := s.extra()
		if len(x.AR) != len(limits) {
			x.AR = make([]ARCount, len(limits))
		}
		for i := range limits {
			x.AR[i] = ARCount{Slot: floorDiv(now, us(limits[i].Resolution)), Count: counts[i] + fn}
		}
		s.TLast, s.Expires = now, now+reset
	}
	decide(d, allowed, binding, limit, remaining, retry, reset)
}

// decayed returns c after k ≥ 0 slots of decay d: c / d^k, and 0 once it
// falls below 1e-6.
func decayed(c, d float64, k int64) float64 {
	if k > 0 {
		c /= powInt(d, k)
	}
	if c < zeroBelow {
		return 0
	}
	return c
}

// powInt returns d^k for k ≥ 0 by binary exponentiation: a fixed sequence
// of correctly rounded multiplications, which the Lua twin repeats to the
// last bit (math.Pow and C's pow may differ in the last place).
func powInt(d float64, k int64) float64 {
	result := 1.0
	for k > 0 {
		if k&1 == 1 {
			result *= d
		}
		k >>= 1
		if k > 0 {
			d *= d
		}
	}
	return result
}

// firstSlot returns the smallest j ≥ 1 at which the count c, decayed j
// slots (v = c / d^j), satisfies v < 1e-6 or v + n ≤ quota: the retry scan
// of SPEC.md rule 11, or with quota < 0 the reset scan (v < 1e-6 only).
// Both conditions only become true as j grows. The search starts from the
// logarithmic estimate and steps to the exact answer, so it returns what the
// plain scan j = 1, 2, … returns without its cost for decays close to 1.
func firstSlot(c, d, n, quota float64) int64 {
	at := func(j int64) bool {
		v := c / powInt(d, j)
		return v < zeroBelow || v+n <= quota
	}
	target := zeroBelow
	if quota-n > target {
		target = quota - n
	}
	j := int64(1)
	if c > target {
		if est := math.Log(c/target) / math.Log(d); est > 1 {
			j = int64(est)
		}
	}
	for j > 1 && at(j-1) {
		j--
	}
	for !at(j) {
		j++
	}
	return j
}
