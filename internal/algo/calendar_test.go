package algo

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

func instant(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMicro()
}

// TestCalendarBoundsExamples pins the windows SPEC.md names: New York's 23
// and 25 hour days of 2026, Santiago's day that starts at 01:00, February,
// ISO weeks.
func TestCalendarBoundsExamples(t *testing.T) {
	const h = int64(time.Hour / time.Microsecond)
	for _, c := range []struct {
		period, tz, at, start string
		length                int64
	}{
		{Day, "America/New_York", "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", 23 * h},
		{Day, "America/New_York", "2026-11-01T12:00:00Z", "2026-11-01T04:00:00Z", 25 * h},
		{Day, "America/New_York", "2026-11-02T04:30:00Z", "2026-11-01T04:00:00Z", 25 * h},
		{Day, "America/New_York", "2026-06-15T12:00:00Z", "2026-06-15T04:00:00Z", 24 * h},
		{Day, "America/Santiago", "2026-09-06T04:00:00Z", "2026-09-06T04:00:00Z", 23 * h},
		{Day, "America/Santiago", "2026-09-06T03:59:59.999999Z", "2026-09-05T04:00:00Z", 24 * h},
		{Day, "America/Santiago", "2026-04-05T03:30:00Z", "2026-04-04T03:00:00Z", 25 * h},
		{Week, "UTC", "2026-01-04T23:59:59.999999Z", "2025-12-29T00:00:00Z", 7 * 24 * h},
		{Week, "America/New_York", "2026-03-08T12:00:00Z", "2026-03-02T05:00:00Z", 7*24*h - h},
		{Month, "UTC", "2026-02-15T00:00:00Z", "2026-02-01T00:00:00Z", 28 * 24 * h},
		{Month, "UTC", "2028-02-29T23:59:59Z", "2028-02-01T00:00:00Z", 29 * 24 * h},
		{Month, "Europe/Paris", "2026-03-15T00:00:00Z", "2026-02-28T23:00:00Z", 31*24*h - h},
		{Month, "Europe/Paris", "2026-10-15T00:00:00Z", "2026-09-30T22:00:00Z", 31*24*h + h},
		{Day, "Pacific/Apia", "2011-12-31T09:00:00Z", "2011-12-30T10:00:00Z", 24 * h}, // Samoa skipped 30 December 2011: 31 December starts where 29 December ends
	} {
		b := CalendarBounds(c.period, mustLoad(t, c.tz), instant(t, c.at))
		start, end, ok := b.Window(instant(t, c.at))
		if !ok || start != instant(t, c.start) || end-start != c.length {
			t.Errorf("%s in %s at %s: window [%s, %s) (%v), want from %s, %v long",
				c.period, c.tz, c.at, time.UnixMicro(start).UTC().Format(time.RFC3339), time.UnixMicro(end).UTC().Format(time.RFC3339), ok,
				c.start, time.Duration(c.length)*time.Microsecond)
		}
	}
}

// TestCalendarBoundsProperties checks CalendarBounds against SPEC.md's
// definition in zones with odd offsets and DST rules, at random instants
// from 2000 to 2040: the window holds now; every bound is the first instant
// of a period start's date (wall clock at or past its midnight, and at no
// earlier instant, scanned minute by minute over the 27 hours before it);
// the dates are one period apart and start on a Monday or the 1st.
func TestCalendarBoundsProperties(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "America/Santiago", "Europe/Paris", "Australia/Lord_Howe",
		"Asia/Kathmandu", "Pacific/Apia", "Pacific/Chatham", "America/Havana", "Asia/Beirut",
		"Africa/Casablanca", "America/St_Johns", "Asia/Tehran", "Pacific/Kiritimati"}
	seed := refSeed(t)
	r := rand.New(rand.NewPCG(seed, 7))
	lo, hi := instant(t, "2000-01-01T00:00:00Z"), instant(t, "2040-01-01T00:00:00Z")
	samples := 60
	if testing.Short() {
		samples = 10
	}
	for _, z := range zones {
		loc := mustLoad(t, z)
		date := func(us int64) time.Time {
			y, m, d := time.UnixMicro(us).In(loc).Date()
			return civil(y, m, d)
		}
		wall := func(us int64) time.Time { // the wall clock as a UTC time
			v := time.UnixMicro(us).In(loc)
			return time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)
		}
		for i := 0; i < samples; i++ {
			now := lo + r.Int64N(hi-lo)
			if i%4 == 0 { // near a transition: a midnight or a DST change
				now = boundary(date(now), loc) + r.Int64N(3) - 1
			}
			for _, period := range []string{Day, Week, Month} {
				b := CalendarBounds(period, loc, now)
				if !(b[0] <= b[1] && b[1] <= now && now < b[2] && b[2] <= b[3]) {
					t.Fatalf("%s %s at %d: bounds %v do not hold now in order", z, period, now, b)
				}
				var prev time.Time
				for k, x := range b {
					d := date(x)
					if wall(x).Before(d) || !wall(x-1).Before(d) {
						t.Fatalf("%s %s at %d: bound %d (%s) is not the first instant of %s", z, period, now, k, time.UnixMicro(x).UTC(), d.Format(time.DateOnly))
					}
					for s := x - 27*3600*1_000_000; s < x; s += 60 * 1_000_000 {
						if !wall(s).Before(d) {
							t.Fatalf("%s %s: %s already reads %s at %s", z, period, d.Format(time.DateOnly), wall(s), time.UnixMicro(s).UTC())
						}
					}
					switch {
					case period == Week && d.Weekday() != time.Monday, period == Month && d.Day() != 1:
						t.Fatalf("%s %s at %d: bound %d starts on %s", z, period, now, k, d.Format("Mon 2006-01-02"))
					}
					if k > 0 {
						var next time.Time
						switch period {
						case Day:
							next = prev.AddDate(0, 0, 1)
						case Week:
							next = prev.AddDate(0, 0, 7)
						case Month:
							next = prev.AddDate(0, 1, 0)
						}
						// A skipped date (Samoa) gives an empty window: its bound is the next date's.
						if !d.Equal(next) && !(x == b[k-1] || boundary(next, loc) == x) {
							t.Fatalf("%s %s at %d: bound %d on %s, want %s", z, period, now, k, d.Format(time.DateOnly), next.Format(time.DateOnly))
						}
					}
					prev = d
				}
			}
		}
	}
}

// TestCalendarWindowClockSkew: a store whose clock is outside the caller's
// bounds refuses the step rather than guess.
func TestCalendarWindowClockSkew(t *testing.T) {
	loc := mustLoad(t, "UTC")
	now := instant(t, "2026-06-15T12:00:00Z")
	b := CalendarBounds(Day, loc, now)
	p := mustPolicy(t, "fixed_window 2/1s")
	p.Window = 0
	m := Member{Policy: p, State: &State{}, Born: new(int64), Bounds: &b}
	var o Outcome
	if err := Add([]Member{m}, now+2*24*3600*1_000_000, 1, false, &o); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("Add two days past the bounds: %v, want ErrClockSkew", err)
	}
	if err := Add([]Member{m}, now-2*24*3600*1_000_000, 1, false, &o); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("Add two days before the bounds: %v, want ErrClockSkew", err)
	}
	if m.State.Live() {
		t.Fatal("a refused step wrote state")
	}
	if err := Add([]Member{m}, now+24*3600*1_000_000, 1, false, &o); err != nil || !o.Allowed {
		t.Fatalf("Add in the next window: %v, %+v", err, o)
	}
	if m.State.Live() != true || m.State.A != b[2] {
		t.Fatalf("state %+v, want the next window's (start %d)", m.State, b[2])
	}
}

// civil returns the date y-m-d as midnight UTC: a plain calendar date.
func civil(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// boundary returns B(date) in µs through storekit.PeriodBounds: the start
// of the day window that holds the first instant at or after date's
// midnight in loc, found from an instant safely inside that date.
func boundary(date time.Time, loc *time.Location) int64 {
	// Noon UTC on the date is within ±14 h of local noon: inside the date
	// for every zone offset in use, unless the zone skipped the date.
	w := time.Date(date.Year(), date.Month(), date.Day(), 12, 0, 0, 0, loc)
	b := CalendarBounds(Day, loc, w.UnixMicro())
	return b[1]
}
