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
// for period (Day, Week or Month) in loc. Days start at local midnight,
// or at the first instant of the date where a DST gap skips midnight;
// weeks on Mondays; months on the 1st. period must be one of the three
// (any other is treated as Day); loc must not be nil.
func CalendarBounds(period string, loc *time.Location, now int64) Bounds {
	// The date whose day window holds now: its local date, or the next
	// one where a fall-back repeats the hour before midnight after the
	// next date began (B of the next date is then already behind us).
	y, m, d := time.UnixMicro(now).In(loc).Date()
	day := civil(y, m, d)
	for boundary(day.AddDate(0, 0, 1), loc) <= now {
		day = day.AddDate(0, 0, 1)
	}
	for boundary(day, loc) > now { // not expected: wall dates never run ahead of boundaries
		day = day.AddDate(0, 0, -1)
	}
	start := day
	switch period {
	case Week:
		start = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	case Month:
		start = civil(day.Year(), day.Month(), 1)
	}
	step := func(t time.Time, k int) time.Time {
		switch period {
		case Week:
			return t.AddDate(0, 0, 7*k)
		case Month:
			return t.AddDate(0, k, 0) // from the 1st: never normalised past a month end
		}
		return t.AddDate(0, 0, k)
	}
	return Bounds{
		boundary(step(start, -1), loc), boundary(start, loc),
		boundary(step(start, 1), loc), boundary(step(start, 2), loc),
	}
}

// civil returns the date y-m-d as midnight UTC: a plain calendar date.
func civil(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// boundary returns B(D) of SPEC.md in µs: the earliest instant whose wall
// clock in loc reads date at 00:00:00 or later. Within one zone interval of
// offset off, the wall clock reads t + off, so the earliest such instant of
// the interval [start, end) is max(start, W - off) for W the wall seconds
// of midnight, if that is before end. Intervals are visited in time order
// from one that begins before any candidate (offsets stay within ±26 h), so
// the first fit is the earliest. time.Date alone will not do: for a
// midnight inside a DST gap it may return the hour before the gap.
func boundary(date time.Time, loc *time.Location) int64 {
	w := date.Unix()
	t := time.Unix(w-30*3600, 0).In(loc)
	for {
		_, off := t.Zone()
		start, end := t.ZoneBounds()
		c := w - int64(off)
		if !start.IsZero() && c < start.Unix() {
			c = start.Unix()
		}
		if end.IsZero() || c < end.Unix() {
			return c * 1_000_000
		}
		t = end.In(loc)
	}
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
