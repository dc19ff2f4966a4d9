package rls_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
)

const budgetDomain = `domain: b
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: plan
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: model
        rate_limit: {unit: hour, requests_per_unit: 4}
`

var ctx = context.Background()

func neg(n uint64, desc rls.Descriptor) rls.Descriptor {
	desc.HitsAddend, desc.NegativeHits = &n, true
	return desc
}

func over(rpu uint32, u config.Unit, desc rls.Descriptor) rls.Descriptor {
	desc.Limit = &rls.Limit{RequestsPerUnit: rpu, Unit: u}
	return desc
}

// TestNegativeHits: a descriptor with is_negative_hits refunds its hits to
// its counter (never below 0, and never a reset), and is answered OK with
// what remains, whatever the count; it takes no part in the overall code.
func TestNegativeHits(t *testing.T) { testNegativeHits(t, newService) }

// newEngine returns an engine on files and its store's clock.
type newEngine func(t testing.TB, files ...string) (*rls.Engine, *floodgatetest.ManualClock)

func testNegativeHits(t *testing.T, newService newEngine) {
	eng, clock := newService(t, budgetDomain)
	steps := []struct {
		note string
		ds   []rls.Descriptor
		want string
		code rls.Code
	}{
		{"1 of 3", []rls.Descriptor{d("user", "a")}, "OK(2)", rls.CodeOK},
		{"2 of 3", []rls.Descriptor{d("user", "a")}, "OK(1)", rls.CodeOK},
		{"3 of 3", []rls.Descriptor{d("user", "a")}, "OK(0)", rls.CodeOK},
		{"4: over, counted", []rls.Descriptor{d("user", "a")}, "OVER", rls.CodeOK + 1},
		{"refund 1: count 3, still at the limit, answered OK", []rls.Descriptor{neg(1, d("user", "a"))}, "OK(0)", rls.CodeOK},
		{"refund 2: count 1", []rls.Descriptor{neg(2, d("user", "a"))}, "OK(2)", rls.CodeOK},
		{"spends again", []rls.Descriptor{d("user", "a")}, "OK(1)", rls.CodeOK},
		{"refund 100: count 0, not below", []rls.Descriptor{neg(100, d("user", "a"))}, "OK(3)", rls.CodeOK},
		{"the full limit again", []rls.Descriptor{d("user", "a")}, "OK(2)", rls.CodeOK},
		{"a refund beside an over-limit descriptor: its own status OK", []rls.Descriptor{neg(1, d("user", "a")), over(0, config.Minute, d("user", "z"))}, "OK(3) OVER", rls.CodeOverLimit},
		{"refund of 0: nothing, a check", []rls.Descriptor{neg(0, d("user", "a"))}, "OK(3)", rls.CodeOK},
		{"a refund of a key without a count creates nothing", []rls.Descriptor{neg(5, d("user", "fresh"))}, "OK(3)", rls.CodeOK},
		{"and its first hit sees the whole limit", []rls.Descriptor{d("user", "fresh")}, "OK(2)", rls.CodeOK},
		{"no rule: OK, no limit", []rls.Descriptor{neg(5, d("nothing", "x"))}, "none", rls.CodeOK},
	}
	for _, s := range steps {
		resp := ask(t, eng, "b", s.ds...)
		if got := summaries(resp); got != s.want || resp.OverallCode != s.code {
			t.Fatalf("%s: %s overall %v; want %s overall %v", s.note, got, resp.OverallCode, s.want, s.code)
		}
	}
	// The request's hits_addend is the refund when the descriptor has none.
	desc := d("user", "b")
	for range 3 {
		ask(t, eng, "b", desc)
	}
	desc.NegativeHits = true
	resp, err := eng.ShouldRateLimit(ctx, rls.Request{Domain: "b", HitsAddend: 2, Descriptors: []rls.Descriptor{desc}})
	if err != nil || summaries(resp) != "OK(2)" {
		t.Fatalf("request hits_addend 2 as a refund: %s, %v; want OK(2)", summaries(resp), err)
	}
	// A refund is within its window: the next one starts from zero.
	clock.Advance(time.Minute)
	if got := summaries(ask(t, eng, "b", neg(3, d("user", "b")))); got != "OK(3)" {
		t.Fatalf("refund in the next window: %s; want OK(3)", got)
	}
}

// plainStore hides the memory store's Budgets: a store that would decide
// a refund as an add.
type plainStore struct{ floodgate.Store }

// TestNegativeHitsNeedBudgets: on a store that does not take refunds,
// negative hits are refused naming the field (never decided as hits), and
// envoy.calendar_month does not compile.
func TestNegativeHitsNeedBudgets(t *testing.T) {
	cfg, err := parse(budgetDomain)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	svc, err := service.New(cfg, service.Options{Store: plainStore{mem}})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = eng.ShouldRateLimit(ctx, rls.Request{Domain: "b", Descriptors: []rls.Descriptor{d("user", "a"), neg(1, d("user", "a"))}})
	var re *service.RequestError
	if !errors.As(err, &re) || re.Field != "descriptors[1].is_negative_hits" {
		t.Fatalf("negative hits on a store without refunds: %v; want a request error naming descriptors[1].is_negative_hits", err)
	}
	cfg.Envoy.CalendarMonth = true
	if _, err := eng.Compile(cfg); err == nil || !strings.Contains(err.Error(), "envoy.calendar_month") {
		t.Fatalf("calendar_month on a store without calendar windows: %v; want an error naming envoy.calendar_month", err)
	}
}

// TestOverrideSharesCounter: as in envoyproxy/ratelimit, whose counters are
// keyed by domain, entries and unit, a request's limit override and the
// configured limit of the same entries and unit spend from one counter,
// each request checked against its own requests_per_unit; an override of
// another unit, or of entries without a rule of its unit, has counters of
// its own, shared by every override of that unit and those entries.
func TestOverrideSharesCounter(t *testing.T) { testOverrideSharesCounter(t, newService) }

func testOverrideSharesCounter(t *testing.T, newService newEngine) {
	eng, _ := newService(t, budgetDomain)
	steps := []struct {
		note string
		desc rls.Descriptor
		want string
	}{
		{"configured 1 of 3", d("user", "a"), "OK(2)"},
		{"configured 2 of 3", d("user", "a"), "OK(1)"},
		{"override 5/minute: count 3 of 5", over(5, config.Minute, d("user", "a")), "OK(2)"},
		{"configured: count 4, over its 3", d("user", "a"), "OVER"},
		{"override 5/minute: count 5 of 5", over(5, config.Minute, d("user", "a")), "OK(0)"},
		{"override 5/minute: 6, over", over(5, config.Minute, d("user", "a")), "OVER"},
		{"override 10/minute: 7 of 10", over(10, config.Minute, d("user", "a")), "OK(3)"},
		{"override of another unit: its own counter", over(10, config.Hour, d("user", "a")), "OK(9)"},
		{"another rpu of that unit shares it", over(3, config.Hour, d("user", "a")), "OK(1)"},
		{"other entries: their own", over(5, config.Minute, d("user", "b")), "OK(4)"},
		{"and the configured rule sees them", d("user", "b"), "OK(1)"},
		{"nested entries share the nested rule's", over(4, config.Hour, d("tenant", "t", "model", "m")), "OK(3)"},
		{"the nested rule", d("tenant", "t", "model", "m"), "OK(2)"},
		{"entries without a rule: the domain's counter of the unit", over(2, config.Hour, d("nothing", "x")), "OK(1)"},
		{"shared by another rpu", over(5, config.Hour, d("nothing", "x")), "OK(3)"},
	}
	for _, s := range steps {
		if got := summaries(ask(t, eng, "b", s.desc)); got != s.want {
			t.Fatalf("%s: %s; want %s", s.note, got, s.want)
		}
	}
	// A negative hit on an override refunds the shared counter.
	if got := summaries(ask(t, eng, "b", neg(6, over(10, config.Minute, d("user", "a"))))); got != "OK(9)" {
		t.Fatalf("refund of 6 through an override: %s; want OK(9) (count 1 of 10)", got)
	}
	if got := summaries(ask(t, eng, "b", d("user", "a"))); got != "OK(1)" {
		t.Fatalf("the configured rule after the override's refund: %s; want OK(1)", got)
	}
}

// TestCalendarMonth: with envoy.calendar_month, the month unit is the UTC
// calendar month: its counter starts at 00:00 UTC on the 1st, and
// duration_until_reset is the time to the next month's start, rounded up
// to the second, for configured limits and overrides alike. Without it, a
// month is 30 days from the epoch.
func TestCalendarMonth(t *testing.T) {
	for _, cal := range []bool{false, true} {
		files := []string{budgetDomain}
		if cal {
			files = append(files, "envoy: {calendar_month: true}\n")
		}
		eng, clock := newService(t, files...)
		at := func(s string) time.Time {
			tm, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				t.Fatal(err)
			}
			return tm
		}
		epochReset := func(now time.Time) time.Duration {
			const month = 2592000 * time.Second
			us := now.UnixMicro() % month.Microseconds()
			return (month - time.Duration(us)*time.Microsecond + time.Second - 1).Truncate(time.Second)
		}
		steps := []struct {
			now      string
			desc     rls.Descriptor
			want     string
			calReset time.Duration // with calendar months
			note     string
		}{
			{"2026-01-31T23:59:30Z", d("plan", "p"), "OK(1)", 30 * time.Second, "Jan 31 23:59:30"},
			{"2026-01-31T23:59:30Z", d("plan", "p"), "OK(0)", 30 * time.Second, "second"},
			{"2026-01-31T23:59:59.25Z", over(2, config.Month, d("plan", "p")), "OVER", time.Second, "an override shares it; 0.75 s rounds up"},
			{"2026-02-01T00:00:00Z", d("plan", "p"), "OK(1)", 28 * 24 * time.Hour, "Feb 1: a new counter, 28 days"},
			{"2026-02-28T23:00:00Z", d("plan", "p"), "OK(0)", time.Hour, "Feb 28 23:00 (2026 is no leap year)"},
			{"2028-02-28T23:00:00Z", d("plan", "p"), "OK(1)", 25 * time.Hour, "Feb 28, 2028: a leap year"},
			{"2028-02-29T23:59:30Z", d("plan", "p"), "OK(0)", 30 * time.Second, "Feb 29 23:59:30"},
			{"2028-03-01T00:00:00Z", d("plan", "p"), "OK(1)", 31 * 24 * time.Hour, "Mar 1"},
			{"2028-03-01T00:00:00Z", d("user", "u"), "OK(2)", 60 * time.Second, "other units do not change"},
		}
		for _, s := range steps {
			clock.Set(at(s.now))
			resp := ask(t, eng, "b", s.desc)
			st := resp.Statuses[0]
			want := s.calReset
			if !cal && s.desc.Entries[0].Key == "plan" {
				want = epochReset(clock.Now())
			}
			if !cal && s.desc.Entries[0].Key == "plan" {
				// Epoch months do not restart on the 1st: only the
				// reset is checked.
				if st.DurationUntilReset != want {
					t.Fatalf("calendar off, %s: reset %v; want %v", s.note, st.DurationUntilReset, want)
				}
				continue
			}
			if got := summary(st); got != s.want || st.DurationUntilReset != want {
				t.Fatalf("calendar %v, %s: %s reset %v; want %s reset %v", cal, s.note, got, st.DurationUntilReset, s.want, want)
			}
		}
	}
}

// TestCalendarMonthTTL: a calendar month's counter lives until the month's
// end and no longer: the store forgets it at 00:00 UTC on the 1st, not
// 30 days after it was made.
func TestCalendarMonthTTL(t *testing.T) {
	cfg, err := parse(budgetDomain, "envoy: {calendar_month: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	clock := floodgatetest.NewManualClock(time.Date(2026, 1, 31, 23, 59, 30, 0, time.UTC))
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc, err := service.New(cfg, service.Options{Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := summaries(ask(t, eng, "b", d("plan", "p"))); got != "OK(1)" {
		t.Fatalf("first hit: %s", got)
	}
	clock.Set(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC).Add(-time.Microsecond))
	if n := store.Sweep(); n != 0 || store.Stats().Entries != 1 {
		t.Fatalf("the month's last µs: swept %d, %d entries; want the counter kept", n, store.Stats().Entries)
	}
	clock.Advance(time.Microsecond)
	if n := store.Sweep(); n != 1 || store.Stats().Entries != 0 {
		t.Fatalf("Feb 1 00:00 UTC: swept %d, %d entries; want the counter gone", n, store.Stats().Entries)
	}
}

// TestNegativeHitsFloodgatePolicy: negative hits on a rule that names a
// floodgate policy are that algorithm's refund (SPEC.md's table): a gcra
// of burst 3 gets its cells back, and a sliding_log (here without
// count_denied, its default) loses its newest entries.
func TestNegativeHitsFloodgatePolicy(t *testing.T) {
	eng, _ := newService(t, `policies:
  cells: "gcra 3/1m burst 3"
  log: "sliding_log 3/1m count_denied false"
`, `domain: f
descriptors:
  - key: g
    rate_limit: {policy: cells}
  - key: l
    rate_limit: {policy: log}
`)
	for _, key := range []string{"g", "l"} {
		for i, want := range []string{"OK(2)", "OK(1)", "OK(0)", "OVER"} {
			if got := summaries(ask(t, eng, "f", d(key, "a"))); got != want {
				t.Fatalf("%s: hit %d: %s; want %s", key, i+1, got, want)
			}
		}
		// The refund's answer is a peek of 1 after it: 2 back, so 2
		// pass, and the peek's own 1 is not spent: OK(1).
		if got := summaries(ask(t, eng, "f", neg(2, d(key, "a")))); got != "OK(1)" {
			t.Fatalf("%s: refund of 2: %s; want OK(1)", key, got)
		}
		for i, want := range []string{"OK(1)", "OK(0)", "OVER"} {
			if got := summaries(ask(t, eng, "f", d(key, "a"))); got != want {
				t.Fatalf("%s: after the refund, hit %d: %s; want %s", key, i+1, got, want)
			}
		}
	}
}
