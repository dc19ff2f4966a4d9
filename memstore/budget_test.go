package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
)

// calendarFixture returns a Limiter on a memstore whose clock starts at
// start, for the calendar window of text.
func calendarFixture(t *testing.T, text, start string) (*floodgate.Limiter, *floodgatetest.ManualClock) {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, start)
	if err != nil {
		t.Fatal(err)
	}
	clock := floodgatetest.NewManualClock(at)
	s := newStore(t, memstore.WithClock(clock))
	p, err := floodgate.ParsePolicy("cal", text)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.NewLimiter(s, p)
	if err != nil {
		t.Fatal(err)
	}
	return lim, clock
}

// calendarStep moves the clock to at, adds 1 and checks the decision.
func calendarStep(t *testing.T, lim *floodgate.Limiter, clock *floodgatetest.ManualClock, at string, allowed bool, reset time.Duration) {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(tm)
	d, err := lim.Allow(context.Background(), "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed != allowed || d.ResetAfter != reset {
		t.Errorf("at %s: allowed %t, reset after %s; want %t, %s", at, d.Allowed, d.ResetAfter, allowed, reset)
	}
}

// TestCalendarDST: a daily window in America/New_York lasts 23 hours on
// 2026-03-08 (clocks spring forward) and 25 hours on 2026-11-01 (they fall
// back); each opens at local midnight, to the µs.
func TestCalendarDST(t *testing.T) {
	lim, clock := calendarFixture(t, "fixed_window 2/1day align calendar tz America/New_York", "2026-03-08T05:00:00Z")
	// 2026-03-08 00:00 EST is 05:00Z; 2026-03-09 00:00 EDT is 04:00Z.
	calendarStep(t, lim, clock, "2026-03-08T05:00:00Z", true, 23*time.Hour)
	calendarStep(t, lim, clock, "2026-03-08T12:00:00Z", true, 16*time.Hour)
	calendarStep(t, lim, clock, "2026-03-09T03:59:59.999999Z", false, time.Microsecond)
	calendarStep(t, lim, clock, "2026-03-09T04:00:00Z", true, 24*time.Hour)

	lim, clock = calendarFixture(t, "fixed_window 2/1day align calendar tz America/New_York", "2026-10-31T23:00:00Z")
	// 2026-11-01 00:00 EDT is 04:00Z; 2026-11-02 00:00 EST is 05:00Z.
	calendarStep(t, lim, clock, "2026-11-01T03:59:59.999999Z", true, time.Microsecond) // the last µs of Oct 31
	calendarStep(t, lim, clock, "2026-11-01T04:00:00Z", true, 25*time.Hour)
	calendarStep(t, lim, clock, "2026-11-01T06:30:00Z", true, 22*time.Hour+30*time.Minute) // 01:30 EDT, before the repeat
	calendarStep(t, lim, clock, "2026-11-02T04:59:59.999999Z", false, time.Microsecond)
	calendarStep(t, lim, clock, "2026-11-02T05:00:00Z", true, 24*time.Hour)
}

// TestCalendarFebruary: a monthly window on the last day of February
// closes at the first instant of March, in UTC and in Paris (whose March
// also loses an hour to DST on the 29th).
func TestCalendarFebruary(t *testing.T) {
	lim, clock := calendarFixture(t, "fixed_window 3/1month align calendar", "2026-02-01T00:00:00Z")
	calendarStep(t, lim, clock, "2026-02-01T00:00:00Z", true, 28*24*time.Hour)
	calendarStep(t, lim, clock, "2026-02-28T00:00:00Z", true, 24*time.Hour)
	calendarStep(t, lim, clock, "2026-02-28T23:59:59.999999Z", true, time.Microsecond)
	calendarStep(t, lim, clock, "2026-02-28T23:59:59.999999Z", false, time.Microsecond)
	calendarStep(t, lim, clock, "2026-03-01T00:00:00Z", true, 31*24*time.Hour)

	lim, clock = calendarFixture(t, "fixed_window 1/1month align calendar tz Europe/Paris", "2026-02-28T12:00:00Z")
	// Paris is UTC+1 until 2026-03-29: March opens at 2026-02-28T23:00Z
	// and ends at 2026-03-31T22:00Z (UTC+2), 31 days less an hour later.
	calendarStep(t, lim, clock, "2026-02-28T22:59:59Z", true, time.Second)
	calendarStep(t, lim, clock, "2026-02-28T22:59:59.5Z", false, 500*time.Millisecond)
	calendarStep(t, lim, clock, "2026-02-28T23:00:00Z", true, 31*24*time.Hour-time.Hour)
}

// TestLimiterBudgets drives the Limiter's budget methods on memstore: a
// group of two policies, a partial grant, a reservation settled for less,
// a refund, a second settle.
func TestLimiterBudgets(t *testing.T) {
	ctx := context.Background()
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	s := newStore(t, memstore.WithClock(clock))
	perMinute, err := floodgate.ParsePolicy("tpm", "token_bucket 100/1m burst 100")
	if err != nil {
		t.Fatal(err)
	}
	perDay, err := floodgate.ParsePolicy("tpd", "fixed_window 150/1day align calendar tz Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.NewLimiter(s, perMinute, perDay)
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.Reserve(ctx, "tenant", 80)
	if err != nil || !r.Decision.Allowed || r.Decision.Granted != 80 || r.Decision.Remaining != 20 {
		t.Fatalf("Reserve(80) = %+v, %v", r, err)
	}
	d, err := lim.Settle(ctx, r, 30) // 50 back to both
	if err != nil || d.Remaining != 69 {
		t.Fatalf("Settle(used 30) = %+v, %v; want 69 remaining (peek 1 on 70)", d, err)
	}
	if _, err := lim.Settle(ctx, r, 30); !errors.Is(err, floodgate.ErrSettled) {
		t.Errorf("second Settle: %v, want ErrSettled", err)
	}
	d, err = lim.AllowAtMost(ctx, "tenant", 100) // the minute has 70 left
	if err != nil || !d.Allowed || d.Granted != 70 || d.Binding != 0 {
		t.Fatalf("AllowAtMost(100) = %+v, %v; want 70 granted, binding the per-minute policy", d, err)
	}
	clock.Advance(time.Minute) // the minute refills; the day has 150 - 30 - 70 = 50
	d, err = lim.AllowAtMost(ctx, "tenant", 100)
	if err != nil || d.Granted != 50 || d.Binding != 1 || d.Limit != 150 {
		t.Fatalf("AllowAtMost(100) a minute later = %+v, %v; want 50 granted, binding the daily policy (1)", d, err)
	}
	if d, _ := lim.Allow(ctx, "tenant"); d.Allowed {
		t.Fatalf("Allow with the day spent: %+v", d)
	}
	d, err = lim.Refund(ctx, "tenant", 5)
	if err != nil || d.Remaining != 4 || !d.Allowed {
		t.Fatalf("Refund(5) = %+v, %v; want the peek of 1 on 5 left", d, err)
	}
}
