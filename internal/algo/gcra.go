package algo

import (
	"math/bits"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// gcra: SPEC.md "gcra" and rule 7. The emission interval T = period/count
// need not be a whole µs, so the theoretical arrival time is kept exactly
// as A + B/count µs (0 ≤ B < count), and every quantity below
// is such a pair (whole µs, remainder in 1/count µs). Products that may
// exceed 63 bits are formed in 128. Times saturate at satMax µs (the year
// 2255): Validate keeps burst·T within 100 years and stores keep now before
// 2155, so only costs recorded with count_denied far beyond the burst get
// there.
func gcra(p *floodgate.Policy, s *State, now, n int64, peek bool, d *floodgate.Decision) {
	count, period, burst := p.Max, us(p.Window), p.Burst
	bq, br := mulDivMod(burst, period, count) // burst·T

	// base = max(tat, now)
	tq, tr := now, int64(0)
	live := s.Expires != 0 && (s.A > now || s.A == now && s.B > 0) // tat = A + B/count
	if live {
		tq, tr = s.A, s.B
	}
	aq, ar := mulDivMod(n, period, count) // n·T
	nq, nr := addPair(tq, tr, aq, ar, count)

	// allowed iff new - now ≤ burst·T
	allowed := lessEq(nq-now, nr, bq, br)
	record := allowed || storekit.CountsDenied(p)
	if record {
		tq, tr, live = nq, nr, true
	}

	// remaining = ⌊(burst·T - max(0, tat-now)) / T⌋
	var remaining, reset, retry int64
	switch {
	case !live:
		remaining = burst
	case lessEq(bq, br, tq-now, tr):
		remaining = 0
	default:
		xq, xr := bq-(tq-now), br-tr // burst·T - (tat-now) > 0
		if xr < 0 {
			xq, xr = xq-1, xr+count
		}
		remaining = mulAddDiv(xq, count, xr, period)
	}
	if live {
		reset = ceilPair(tq-now, tr)
	}
	if !allowed {
		if n > burst {
			retry = -1
		} else {
			// On the state after the call: max(tat, now) + n·T - burst·T - now.
			xq, xr := now, int64(0)
			if live {
				xq, xr = tq, tr
			}
			xq, xr = addPair(xq, xr, aq, ar, count)
			retry = ceilPair(xq-now-bq, xr-br)
		}
	}
	if record && !peek {
		s.TLast, s.Expires, s.A, s.B = now, now+reset, tq, tr
	}
	decide(d, allowed, 0, count, remaining, retry, reset)
}

// mulDivMod returns ⌊a·b/c⌋ and a·b mod c for a, b ≥ 0, c ≥ 1; a quotient
// of satMax or more saturates to (satMax, 0).
func mulDivMod(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return satMax, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq >= satMax {
		return satMax, 0
	}
	return int64(uq), int64(ur)
}

// mulAddDiv returns ⌊(a·b + d)/c⌋ for a, b, d ≥ 0, c ≥ 1, when it fits in
// 63 bits (callers ensure it does).
func mulAddDiv(a, b, d, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	lo, carry := bits.Add64(lo, uint64(d), 0)
	hi += carry
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// addPair adds two (µs, remainder) pairs; a sum of satMax µs or more
// saturates to (satMax, 0).
func addPair(aq, ar, bq, br, count int64) (q, r int64) {
	q, r = aq+bq, ar+br
	if r >= count {
		q, r = q+1, r-count
	}
	if aq >= satMax || bq >= satMax || q >= satMax {
		return satMax, 0
	}
	return q, r
}

// lessEq reports whether (aq, ar) ≤ (bq, br) as (µs, remainder) pairs with
// remainders in [0, count).
func lessEq(aq, ar, bq, br int64) bool {
	return aq < bq || aq == bq && ar <= br
}

// ceilPair rounds q + r/count up to a whole µs, for -count < r < count.
func ceilPair(q, r int64) int64 {
	if r > 0 {
		return q + 1
	}
	return q
}
