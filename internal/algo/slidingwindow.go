package algo

import (
	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// slidingWindow: SPEC.md "sliding_window". State: one Log per limit whose
// entries are buckets (index k = ⌊t/resolution⌋, cost). Bucket k counts
// while now < k·resolution + window.
func slidingWindow(p *floodgate.Policy, s *State, now, n int64, peek bool, d *floodgate.Decision) {
	limits := p.Limits
	var logs []Log
	fresh := s.Expires == 0 || s.X == nil || len(s.X.Logs) != len(limits)
	if fresh {
		var none [storekit.MaxLimits]Log // no state: every count is zero
		logs = none[:len(limits)]
	} else {
		logs = s.X.Logs
	}

	// Pass 1: counts and the verdict.
	allowed := true
	var counts [storekit.MaxLimits]int64
	for i := range limits {
		res, win := us(limits[i].Resolution), us(limits[i].Window)
		_, counts[i] = logs[i].Live(res, win, now)
		if n > int64(limits[i].Max)-counts[i] {
			allowed = false
		}
	}
	record := allowed || storekit.CountsDenied(p)

	// Pass 2: remaining, binding limit, retry and reset on the state after
	// the call (the add included when it records).
	var remaining, reset, retry, bindRem int64
	binding := int32(-1)
	for i := range limits {
		lg := &logs[i]
		quota, res, win := int64(limits[i].Max), us(limits[i].Resolution), us(limits[i].Window)
		after := counts[i]
		if record {
			after = satAdd(after, n)
		}
		rem := max(0, quota-after)
		if i == 0 || rem < remaining {
			remaining = rem
		}
		denies := n > quota-counts[i]
		if (allowed || denies) && better(rem, bindRem, binding) {
			binding, bindRem = int32(i), rem
		}
		// reset_after: when the newest bucket expires.
		if record {
			reset = max(reset, floorDiv(now, res)*res+win-now)
		} else if k, _ := lg.Live(res, win, now); k < lg.Len() {
			reset = max(reset, lg.At(lg.Len()-1).T*res+win-now)
		}
		if !allowed {
			retry = combineRetry(retry, bucketRetry(lg, res, win, quota, after, n, now, record))
		}
	}
	limit := int64(limits[binding].Max)

	if record && !peek {
		x := s.extra()
		if fresh {
			if cap(x.Logs) < len(limits) {
				x.Logs = make([]Log, len(limits))
			}
			x.Logs = x.Logs[:len(limits)]
			for i := range x.Logs {
				x.Logs[i].Clear()
			}
		}
		var expires int64
		for i := range limits {
			lg := &x.Logs[i]
			res, win := us(limits[i].Resolution), us(limits[i].Window)
			k, _ := lg.Live(res, win, now)
			lg.DropFront(k)
			b := floorDiv(now, res)
			lg.Push(b, n)
			expires = max(expires, b*res+win)
		}
		s.TLast, s.Expires = now, expires
	}
	decide(d, allowed, binding, limit, remaining, retry, reset)
}

// bucketRetry is one limit's wait (SPEC.md rule 4) on the state after the
// call, whose count is after. When the call records, its add of n belongs
// in the current bucket but is not in lg yet (Step stores it afterwards, a
// peek never); it is the pending cost of Log.Wait.
func bucketRetry(lg *Log, res, win, quota, after, n, now int64, record bool) int64 {
	switch {
	case n <= quota-after:
		return 0
	case n > quota:
		return -1
	}
	// The add passes once the buckets still counting hold at most quota-n.
	var pending int64
	current := floorDiv(now, res)*res + win
	if record {
		pending = n
	}
	first, _ := lg.Live(res, win, now)
	return lg.Wait(first, res, win, quota-n, pending, current, now) - now
}
