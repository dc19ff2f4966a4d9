package algo

import (
	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// slidingLog: SPEC.md "sliding_log" and rule 9. State: one Log of entries
// (µs, units); an entry counts while t > now - interval. Entries of one µs
// share one element.
func slidingLog(p *floodgate.Policy, s *State, now, n int64, peek bool, d *floodgate.Decision) {
	quota, interval, gap := p.Max, us(p.Window), us(p.MinInterval)
	var lg *Log
	var none Log
	if s.Expires != 0 && s.X != nil && len(s.X.Logs) == 1 {
		lg = &s.X.Logs[0]
	} else {
		lg = &none
	}
	k, count := lg.Live(1, interval, now)
	hasNewest := k < lg.Len()
	var newest int64
	if hasNewest {
		newest = lg.At(lg.Len() - 1).T
	}

	allowed := n <= quota-count && !(gap > 0 && hasNewest && now-newest < gap)
	record := allowed || storekit.CountsDenied(p)
	after := count
	if record {
		after = satAdd(count, n)
		newest, hasNewest = now, true
	}
	var reset, retry int64
	if hasNewest {
		reset = newest + interval - now
	}
	if !allowed {
		switch {
		case n > quota:
			retry = -1
		default:
			wait := int64(0)
			if n > quota-after {
				// Entries oldest first must expire until the rest, with the
				// add when it records (at now, not stored yet), hold at most
				// quota-n.
				var pending int64
				if record {
					pending = n
				}
				wait = lg.Wait(k, 1, interval, quota-n, pending, now+interval, now) - now
			}
			if gap > 0 && hasNewest {
				wait = max(wait, newest+gap-now)
			}
			retry = wait
		}
	}
	if record && !peek {
		if lg == &none {
			x := s.extra()
			if cap(x.Logs) < 1 {
				x.Logs = make([]Log, 1)
			}
			x.Logs = x.Logs[:1]
			x.Logs[0].Clear()
			lg = &x.Logs[0]
			k = 0
		}
		lg.DropFront(k)
		lg.Push(now, n)
		s.TLast, s.Expires = now, now+interval
	}
	decide(d, allowed, 0, quota, quota-after, retry, reset)
}
