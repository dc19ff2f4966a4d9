package algo

import (
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// Periods of a calendar fixed_window (SPEC.md, "Calendar windows").
const (
	Day   = "day"
	Week  = "week" // ISO 8601: from Monday
	Month = "month"
)

// Bounds are the boundaries a caller hands a store for a calendar window,
// computed from the caller's clock and time-zone data: the starts of the
// previous, current and next periods and the end of the next, in µs since
// the Unix epoch, increasing. A store whose own clock reads now decides in
// whichever of [B[0], B[1]), [B[1], B[2]), [B[2], B[3]) contains it, so
// caller and store may disagree by up to a period, and the store needs no
// time-zone data (a Lua script on Redis TIME gets these four numbers).
type Bounds [4]int64

// Window returns the window of b that contains now, and false when none
// does (the clocks are a period or more apart: a store error).
func (b *Bounds) Window(now int64) (start, end int64, ok bool) {
	for i := 0; i < 3; i++ {
		if b[i] <= now && now < b[i+1] {
			return b[i], b[i+1], true
		}
	}
	return 0, 0, false
}

// CalendarBounds returns the Bounds around now (µs since the Unix epoch)
// for period (Day, Week or Month) in loc: storekit.PeriodBounds, which
// stores call through storekit.CalendarBounds. Days start at local
// midnight, or at the first instant of the date where a DST gap skips
// midnight; weeks on Mondays; months on the 1st. period must be one of the
// three (any other is treated as Day); loc must not be nil.
func CalendarBounds(period string, loc *time.Location, now int64) Bounds {
	return Bounds(storekit.PeriodBounds(period, loc, now))
}

// calendarWindow: SPEC.md "Calendar windows": fixed_window's decision on
// the window [start, end) the caller's Bounds give for now. State: A the
// window's start, B the count, Expires its end.
func calendarWindow(p *floodgate.Policy, s *State, now, n, start, end int64, peek bool, d *floodgate.Decision) {
	max := p.Max
	var count int64
	live := s.Expires != 0 && s.A == start && now < s.Expires
	if live {
		count = s.B
	}
	allowed := n <= max-count
	record := allowed || storekit.CountsDenied(p)
	after := count
	if record {
		after = satAdd(count, n)
	}
	var reset, retry int64
	if live || record {
		reset = end - now
	}
	if !allowed {
		retry = reset
		if n > max {
			retry = -1
		}
	}
	if record && !peek {
		s.TLast, s.Expires, s.A, s.B = now, end, start, after
	}
	decide(d, allowed, 0, max, max-after, retry, reset)
}
