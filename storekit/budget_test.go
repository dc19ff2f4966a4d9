package storekit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// TestFlatBinding: a group's Binding flattens its members' limits in
// order, and SplitBinding finds the member and limit again.
func TestFlatBinding(t *testing.T) {
	sw := floodgate.Policy{Name: "sw", Algorithm: floodgate.SlidingWindow, Limits: []floodgate.Limit{
		{Max: 1, Window: time.Second, Resolution: time.Second}, {Max: 2, Window: time.Minute, Resolution: time.Second}, {Max: 3, Window: time.Hour, Resolution: time.Minute}}}
	gc := floodgate.Policy{Name: "gc", Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1}
	ar := floodgate.Policy{Name: "ar", Algorithm: floodgate.AR1, Limits: []floodgate.Limit{{Max: 1, Resolution: time.Second, Decay: 2}, {Max: 2, Resolution: time.Second, Decay: 2}}}
	req := floodgate.Request{Policy: &gc, Key: "k", N: 1, Group: []floodgate.Request{{Policy: &sw, Key: "k"}, {Policy: &ar, Key: "k"}}}
	want := []struct {
		member int
		limit  int32
	}{{0, 0}, {1, 0}, {1, 1}, {1, 2}, {2, 0}, {2, 1}}
	for flat, w := range want {
		if got := storekit.FlatBinding(&req, w.member, w.limit); got != int32(flat) {
			t.Errorf("FlatBinding(member %d, limit %d) = %d, want %d", w.member, w.limit, got, flat)
		}
		if m, l := storekit.SplitBinding(&req, int32(flat)); m != w.member || l != w.limit {
			t.Errorf("SplitBinding(%d) = %d, %d; want %d, %d", flat, m, l, w.member, w.limit)
		}
	}
	if m, _ := storekit.SplitBinding(&req, 6); m != -1 {
		t.Errorf("SplitBinding past the last limit = member %d, want -1", m)
	}
}

// TestCalendarBounds: the bounds of a calendar policy, and errors for
// other policies.
func TestCalendarBounds(t *testing.T) {
	p := floodgate.Policy{Name: "m", Algorithm: floodgate.FixedWindow, Max: 1, Align: "calendar", Period: "month", TZ: "Europe/Paris"}
	now := time.Date(2026, 2, 28, 23, 30, 0, 0, time.UTC).UnixMicro() // 00:30 on March 1st in Paris
	b, err := storekit.CalendarBounds(&p, now)
	if err != nil {
		t.Fatal(err)
	}
	want := [4]int64{
		time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC).UnixMicro(), // February 1st, UTC+1
		time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC).UnixMicro(), // March 1st, UTC+1
		time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC).UnixMicro(), // April 1st, UTC+2
		time.Date(2026, 4, 30, 22, 0, 0, 0, time.UTC).UnixMicro(), // May 1st, UTC+2
	}
	if b != want {
		t.Errorf("CalendarBounds = %v, want %v", b, want)
	}
	q := floodgate.Policy{Name: "f", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour}
	if _, err := storekit.CalendarBounds(&q, now); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("CalendarBounds of a plain fixed_window: %v", err)
	}
	p.TZ = "Mars/Olympus"
	if _, err := storekit.CalendarBounds(&p, now); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("CalendarBounds with a bad zone: %v", err)
	}
}

// TestCheckPlain: a store without budgets refuses every request it would
// misread as a plain add.
func TestCheckPlain(t *testing.T) {
	p := floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1}
	cal := floodgate.Policy{Name: "c", Algorithm: floodgate.FixedWindow, Max: 1, Align: "calendar", Period: "day"}
	if err := storekit.CheckPlain(&floodgate.Request{Policy: &p, Key: "k", N: 1, Peek: true}); err != nil {
		t.Errorf("a plain peek: %v", err)
	}
	for name, req := range map[string]floodgate.Request{
		"group":    {Policy: &p, Key: "k", N: 1, Group: []floodgate.Request{{Policy: &cal, Key: "k"}}},
		"at most":  {Policy: &p, Key: "k", N: 1, AtMost: true},
		"refund":   {Policy: &p, Key: "k", N: 1, Refund: true},
		"reserve":  {Policy: &p, Key: "k", N: 1, Reserve: new(floodgate.Reservation)},
		"settle":   {Policy: &p, Key: "k", N: 1, Settle: new(floodgate.Reservation)},
		"calendar": {Policy: &cal, Key: "k", N: 1},
	} {
		if err := storekit.CheckPlain(&req); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
}
