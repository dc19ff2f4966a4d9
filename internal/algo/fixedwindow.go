package algo

import (
	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// fixedWindow: SPEC.md "fixed_window". State: A the window's start (µs),
// B the count. With align epoch windows start at multiples of the window; with
// align first a key's window opens at the add that creates its state.
func fixedWindow(p *floodgate.Policy, s *State, now, n int64, peek bool, d *floodgate.Decision) {
	w, max := us(p.Window), p.Max
	var start, count int64
	live := s.Expires != 0 && now < s.A+w
	switch {
	case live:
		start, count = s.A, s.B
	case p.Align == floodgate.AlignFirst:
		start = now
	default:
		start = floorDiv(now, w) * w
	}

	allowed := n <= max-count
	record := allowed || storekit.CountsDenied(p)
	after := count
	if record {
		after = satAdd(count, n)
	}
	var reset, retry int64
	if live || record {
		reset = start + w - now
	}
	if !allowed {
		retry = reset // the window's end empties it
		if n > max {
			retry = -1
		}
	}
	if record && !peek {
		s.TLast, s.Expires, s.A, s.B = now, start+w, start, after
	}
	decide(d, allowed, 0, max, max-after, retry, reset)
}
