package envoyrls_test

// Issue 15's Envoy behaviours over gRPC and /json (SPEC.md, "Envoy's rate
// limit service"): negative hits are refunds, a limit override shares the
// configured limit's counter, and envoy.calendar_month makes the month the
// UTC calendar month.

import (
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// budgetConfig is in envoyproxy/ratelimit's configuration format.
const budgetConfig = `domain: budget
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: plan
    rate_limit:
      unit: month
      requests_per_unit: 2
`

// negative makes a descriptor's hits a refund: is_negative_hits with
// hits_addend n, or with the request's hits_addend when n < 0.
func negative(n int64, d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	if n >= 0 {
		d.HitsAddend = wrapperspb.UInt64(uint64(n))
	}
	d.IsNegativeHits = true
	return d
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// withReset is s with an explicit duration_until_reset.
func withReset(s st, d time.Duration) st {
	s.reset = d
	return s
}

func TestNegativeHits(t *testing.T) {
	l3m := L(3, minute)
	runScenarios(t, []scenario{{name: "negative", sources: []string{budgetConfig}, domain: "budget", steps: []step{
		{note: "3 of 3", descs: ds(desc("user", "a")), times: 3, want: sts(countdown(2, l3m))},
		{note: "4th: over, counted", descs: ds(desc("user", "a")), want: sts(over(l3m))},
		{note: "refund 1: count 3, at the limit, answered OK", descs: ds(negative(1, desc("user", "a"))), want: sts(ok(0, l3m))},
		{note: "refund 2: count 1", descs: ds(negative(2, desc("user", "a"))), want: sts(ok(2, l3m))},
		{note: "spends again", descs: ds(desc("user", "a")), want: sts(ok(1, l3m))},
		{note: "refund 100: floored at 0, never a reset past it", descs: ds(negative(100, desc("user", "a"))), want: sts(ok(3, l3m))},
		{note: "the whole limit back", descs: ds(desc("user", "a")), times: 3, want: sts(countdown(2, l3m))},
		{note: "the request's hits_addend as the refund", hits: 2, descs: ds(negative(-1, desc("user", "a"))), want: sts(ok(2, l3m))},
		{note: "a refund, then three hits, in one request", descs: ds(negative(1, desc("user", "a")), desc("user", "a"), desc("user", "a"), desc("user", "a")),
			want: sts(ok(3, l3m), ok(2, l3m), ok(1, l3m), ok(0, l3m))},
		{note: "over, and a refund in the same request", descs: ds(desc("user", "a"), negative(1, desc("user", "a"))),
			want: sts(over(l3m), ok(0, l3m)), overall: codeOver},
		{note: "a key without a count: nothing to give back, nothing created", descs: ds(negative(5, desc("user", "fresh"))), want: sts(ok(3, l3m))},
		{note: "its first hit", descs: ds(desc("user", "fresh")), want: sts(ok(2, l3m))},
		{note: "no rule", descs: ds(negative(5, desc("nothing", "x"))), want: sts(noLimit)},
		{note: "the next window: a fresh count", advance: time.Minute, descs: ds(negative(1, desc("user", "a"))), want: sts(ok(3, l3m))},
	}}})
}

func TestOverrideSharesConfiguredCounter(t *testing.T) {
	l3m, l5m, l2h := L(3, minute), L(5, minute), L(2, hour)
	runScenarios(t, []scenario{{name: "override", sources: []string{budgetConfig}, domain: "budget", steps: []step{
		{note: "configured 1 of 3", descs: ds(desc("user", "a")), want: sts(ok(2, l3m))},
		{note: "override 5/minute: 2 of 5", descs: ds(override(5, typev3.RateLimitUnit_MINUTE, desc("user", "a"))), want: sts(ok(3, l5m))},
		{note: "configured: 3 of 3", descs: ds(desc("user", "a")), want: sts(ok(0, l3m))},
		{note: "configured: over", descs: ds(desc("user", "a")), want: sts(over(l3m))},
		{note: "override: 5 of 5", descs: ds(override(5, typev3.RateLimitUnit_MINUTE, desc("user", "a"))), want: sts(ok(0, l5m))},
		{note: "override: over", descs: ds(override(5, typev3.RateLimitUnit_MINUTE, desc("user", "a"))), want: sts(over(l5m))},
		{note: "override of another unit: its own counter", descs: ds(override(2, typev3.RateLimitUnit_HOUR, desc("user", "a"))), want: sts(ok(1, l2h))},
		{note: "a refund through the override gives the shared counter back", descs: ds(negative(6, override(5, typev3.RateLimitUnit_MINUTE, desc("user", "a")))), want: sts(ok(5, l5m))},
		{note: "and the configured limit sees it", descs: ds(desc("user", "a")), want: sts(ok(2, l3m))},
	}}})
}

func TestCalendarMonth(t *testing.T) {
	l2mo := L(2, month)
	calendar := "envoy:\n  calendar_month: true\n"
	runScenarios(t, []scenario{
		{name: "calendar", sources: []string{budgetConfig, calendar}, domain: "budget", steps: []step{
			{note: "Jan 31 23:59:30: 30 s to Feb", at: utc("2026-01-31T23:59:30Z"), descs: ds(desc("plan", "p")), want: sts(withReset(ok(1, l2mo), 30*time.Second))},
			{note: "second", descs: ds(desc("plan", "p")), want: sts(withReset(ok(0, l2mo), 30*time.Second))},
			{note: "0.75 s left rounds up; an override shares the counter", advance: 29250 * time.Millisecond,
				descs: ds(override(2, typev3.RateLimitUnit_MONTH, desc("plan", "p"))), want: sts(withReset(over(l2mo), time.Second))},
			{note: "Feb 1 00:00: a new counter, 28 days to March", at: utc("2026-02-01T00:00:00Z"), descs: ds(desc("plan", "p")),
				want: sts(withReset(ok(1, l2mo), 28*24*time.Hour))},
			{note: "Feb 28 23:00, 2026", at: utc("2026-02-28T23:00:00Z"), descs: ds(desc("plan", "p")), want: sts(withReset(ok(0, l2mo), time.Hour))},
			{note: "Feb 29 23:59:30, 2028", at: utc("2028-02-29T23:59:30Z"), descs: ds(desc("plan", "p")), want: sts(withReset(ok(1, l2mo), 30*time.Second))},
			{note: "a refund in a calendar month", descs: ds(negative(1, desc("plan", "p"))), want: sts(withReset(ok(2, l2mo), 30*time.Second))},
			{note: "other units stay from the epoch", descs: ds(desc("user", "u")), want: sts(ok(2, L(3, minute)))},
		}},
		{name: "epoch", sources: []string{budgetConfig}, domain: "budget", steps: []step{
			// 2026-01-31T23:59:30Z lies in the 30-day window from the
			// epoch [2026-01-07, 2026-02-06): the 1st does not reset it.
			{note: "Jan 31 23:59:30", at: utc("2026-01-31T23:59:30Z"), descs: ds(desc("plan", "p")), want: sts(ok(1, l2mo))},
			{note: "Feb 1 00:00: the same counter", at: utc("2026-02-01T00:00:00Z"), descs: ds(desc("plan", "p")), want: sts(ok(0, l2mo))},
			{note: "Feb 6 00:00: the next 30 days", at: utc("2026-02-06T00:00:00Z"), descs: ds(desc("plan", "p")), want: sts(ok(1, l2mo))},
		}},
	})
}
