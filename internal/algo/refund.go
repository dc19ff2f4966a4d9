package algo

import (
	"github.com/floodgatehq/floodgate"
)

// giveBack returns x units to m's state at now (rule 1 applied): from the
// part h of a reservation (settle), or newest first when h is nil
// (refund). It follows the tables of SPEC.md's "Reserve, settle, refund":
// nothing without a live state, nothing into a state born after the
// reservation, never below empty nor above full. A state left with nothing
// recorded is reset; any other change writes t_last.
func giveBack(m *Member, now, x int64, h *Hold) {
	s, p := m.State, m.Policy
	if !liveAt(m, now) || h != nil && *m.Born != h.Born {
		return
	}
	changed := false
	switch {
	case p.Algorithm == floodgate.FixedWindow:
		t := min(x, s.B)
		s.B -= t
		changed = t > 0
		if s.B == 0 {
			s.Reset()
			return
		}
	case p.Algorithm == floodgate.TokenBucket:
		changed = refundTokens(p, s, now, x)
	case p.Algorithm == floodgate.GCRA:
		changed = refundTAT(p, s, now, x, h)
	case p.Algorithm == floodgate.SlidingWindow:
		changed = refundBuckets(p, s, now, x, h)
	case p.Algorithm == floodgate.SlidingLog:
		changed = refundLog(p, s, now, x, h)
	case p.Algorithm == floodgate.AR1:
		changed = refundAR1(p, s, now, x, h)
	}
	if changed && s.Expires != 0 {
		s.TLast = now
	}
}

// liveAt reports whether m's state holds anything at now: a calendar
// window only in the window of now.
func liveAt(m *Member, now int64) bool {
	s := m.State
	if s.Expires == 0 || now >= s.Expires {
		return false
	}
	if m.Bounds != nil {
		start, _, ok := m.Bounds.Window(now)
		return ok && s.A == start
	}
	if m.Policy.Algorithm == floodgate.FixedWindow || m.Policy.Algorithm == floodgate.TokenBucket {
		return now < s.A+us(m.Policy.Window)
	}
	return true
}

// refundTokens: u = min(burst·window, u(now) + x·window). The state keeps
// its lifetime even when full.
func refundTokens(p *floodgate.Policy, s *State, now, x int64) bool {
	w := us(p.Window)
	full := p.Burst * w
	u := min(full, s.B+(now-s.TLast)*(p.Max-p.Burst))
	if need := full - u; x >= (need+w-1)/w {
		u = full
	} else {
		u += x * w
	}
	s.B = u
	return true // the refill to now is written too
}

// refundTAT: gcra's tat = max(now, tat - give), give = x·T, or for a
// settle min(x·T, max(0, tat_r - now)). Pairs are (µs, remainder in
// 1/count µs) as in gcra.
func refundTAT(p *floodgate.Policy, s *State, now, x int64, h *Hold) bool {
	count, period := p.Max, us(p.Window)
	gq, gr := mulDivMod(x, period, count) // x·T
	if h != nil {
		if !lessEq(now, 0, h.TatA, h.TatB) || h.TatA == now && h.TatB == 0 {
			return false // the reservation has drained: nothing ahead of now
		}
		if dq, dr := h.TatA-now, h.TatB; lessEq(dq, dr, gq, gr) {
			gq, gr = dq, dr
		}
	}
	// tat - now > give: tat - give; else now, and the state is empty.
	tq, tr := s.A-now, s.B
	if lessEq(tq, tr, gq, gr) {
		s.Reset()
		return true
	}
	tq, tr = s.A-gq, s.B-gr
	if tr < 0 {
		tq, tr = tq-1, tr+count
	}
	s.A, s.B = tq, tr
	s.Expires = now + ceilPair(tq-now, tr)
	return true
}

// refundBuckets: sliding_window, each limit on its own: a settle takes
// from the reservation's bucket if it still counts, a refund from the
// newest counting bucket back.
func refundBuckets(p *floodgate.Policy, s *State, now, x int64, h *Hold) bool {
	if s.X == nil || len(s.X.Logs) != len(p.Limits) {
		return false
	}
	changed := false
	var expires int64
	for i := range p.Limits {
		lg := &s.X.Logs[i]
		res, win := us(p.Limits[i].Resolution), us(p.Limits[i].Window)
		first, _ := lg.Live(res, win, now)
		if h != nil {
			k := floorDiv(h.At, res)
			for j := lg.Len() - 1; j >= first; j-- {
				if lg.At(j).T == k {
					changed = lg.take(j, x) > 0 || changed
					break
				}
			}
		} else {
			left := x
			for j := lg.Len() - 1; j >= first && left > 0; j-- {
				left -= lg.take(j, left)
				changed = true
			}
		}
		if first < lg.Len() {
			expires = max(expires, lg.At(lg.Len()-1).T*res+win)
		}
	}
	settleExpiry(s, now, expires)
	return changed
}

// refundLog: sliding_log: a settle takes the units stamped at the
// reservation's µs, a refund the newest units back.
func refundLog(p *floodgate.Policy, s *State, now, x int64, h *Hold) bool {
	if s.X == nil || len(s.X.Logs) != 1 {
		return false
	}
	lg := &s.X.Logs[0]
	interval := us(p.Window)
	first, _ := lg.Live(1, interval, now)
	changed := false
	if h != nil {
		for j := lg.Len() - 1; j >= first; j-- {
			if lg.At(j).T == h.At {
				changed = lg.take(j, x) > 0
				break
			}
		}
	} else {
		left := x
		for j := lg.Len() - 1; j >= first && left > 0; j-- {
			left -= lg.take(j, left)
			changed = true
		}
	}
	var expires int64
	if first < lg.Len() {
		expires = lg.At(lg.Len()-1).T + interval
	}
	settleExpiry(s, now, expires)
	return changed
}

// refundAR1: each limit's count loses x as it weighs now: x·decay^-(s -
// s_at) for a settle, x for a refund; 0 below 1e-6.
func refundAR1(p *floodgate.Policy, s *State, now, x int64, h *Hold) bool {
	if s.X == nil || len(s.X.AR) != len(p.Limits) {
		return false
	}
	var reset int64
	for i := range p.Limits {
		l := &p.Limits[i]
		res := us(l.Resolution)
		slot := floorDiv(now, res)
		c := decayed(s.X.AR[i].Count, l.Decay, slot-s.X.AR[i].Slot)
		give := float64(x)
		if h != nil {
			if k := slot - floorDiv(h.At, res); k > 0 {
				give /= powInt(l.Decay, k)
			}
		}
		c -= give
		if c < zeroBelow {
			c = 0
		}
		s.X.AR[i] = ARCount{Slot: slot, Count: c}
		if c > 0 {
			reset = max(reset, (slot+firstSlot(c, l.Decay, 0, -1))*res-now)
		}
	}
	if reset == 0 {
		settleExpiry(s, now, 0)
	} else {
		s.Expires = now + reset
	}
	return true
}

// settleExpiry sets s.Expires after a refund to expires, the end of what
// is left, or resets s when nothing is left.
func settleExpiry(s *State, now, expires int64) {
	if expires <= now {
		s.Reset()
		return
	}
	s.Expires = expires
}

// take removes up to x units from entry i (oldest first, counting from the
// live front), dropping the entry when it reaches 0, and returns how many
// it took.
func (l *Log) take(i int, x int64) int64 {
	e := &l.e[l.head+i]
	t := min(x, e.N)
	e.N -= t
	l.sum -= t
	if e.N == 0 {
		copy(l.e[l.head+i:], l.e[l.head+i+1:])
		l.e = l.e[:len(l.e)-1]
		if l.Len() == 0 {
			l.Clear()
		}
	}
	if l.over {
		l.recount()
	}
	return t
}
