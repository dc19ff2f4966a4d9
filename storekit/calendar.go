package storekit

import (
	"fmt"
	"sync"
	"time"

	"github.com/floodgatehq/floodgate"
)

// CalendarBounds returns the boundaries a store decides a calendar window
// in (SPEC.md, "Calendar windows"), for a FixedWindow policy p with Align
// "calendar" at now (µs since the Unix epoch): the starts of the previous,
// current and next periods in p.TZ and the end of the next, increasing. A
// store whose own clock reads t decides in whichever of [b0, b1), [b1, b2),
// [b2, b3) contains t, so the clock that drew the bounds and the store's
// may disagree by up to a period, and the store needs no time zone data (a
// Lua script on Redis TIME gets the four numbers).
//
// The loaded *time.Location is cached per zone name (time.LoadLocation
// reads the time zone database on every call). The error wraps
// floodgate.ErrInvalidPolicy when p is not a calendar window or its zone
// cannot be loaded.
func CalendarBounds(p *floodgate.Policy, now int64) ([4]int64, error) {
	if p.Algorithm != floodgate.FixedWindow || p.Align != "calendar" {
		return [4]int64{}, fmt.Errorf("%w: policy %q is not a calendar window", floodgate.ErrInvalidPolicy, p.Name)
	}
	loc, err := location(p.TZ)
	if err != nil {
		return [4]int64{}, fmt.Errorf("%w: policy %q: tz %q: %v", floodgate.ErrInvalidPolicy, p.Name, p.TZ, err)
	}
	return PeriodBounds(p.Period, loc, now), nil
}

// locations caches time zones by name: there are a few hundred, and only
// names that load are kept.
var locations sync.Map // string -> *time.Location

// location returns the zone named tz ("" is UTC), loaded once.
func location(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if v, ok := locations.Load(tz); ok {
		return v.(*time.Location), nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, err
	}
	locations.Store(tz, loc)
	return loc, nil
}

// PeriodBounds is CalendarBounds for period ("day", "week" or "month"; any
// other is taken as "day") in loc, which must not be nil. Days start at
// local midnight, or at the first instant of the date where a DST gap
// skips midnight; weeks on Mondays; months on the 1st.
func PeriodBounds(period string, loc *time.Location, now int64) [4]int64 {
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
	case "week":
		start = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	case "month":
		start = civil(day.Year(), day.Month(), 1)
	}
	step := func(t time.Time, k int) time.Time {
		switch period {
		case "week":
			return t.AddDate(0, 0, 7*k)
		case "month":
			return t.AddDate(0, k, 0) // from the 1st: never normalised past a month end
		}
		return t.AddDate(0, 0, k)
	}
	return [4]int64{
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
