package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/internal/telemetry"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := telemetry.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Decision("api", true, false, false)
	m.Decision("api", false, false, false)
	m.Decision("api", false, true, false) // a shadow denial
	m.Decision("login", true, false, true)
	m.OverLimitCacheHit("api")
	m.StoreCall("take", "", time.Millisecond, nil)
	m.StoreCall("take", "", 50*time.Millisecond, fmt.Errorf("redisstore: %w", context.DeadlineExceeded))
	m.StoreCall("take", "", time.Millisecond, fmt.Errorf("redisstore: %w", floodgate.ErrUnavailable))
	m.StoreCall("reset", "", time.Millisecond, errors.New("boom"))
	m.StoreCall("peek", "10.0.0.1:6379", 0, failure.ErrBreakerOpen)
	m.BreakerChanged("10.0.0.1:6379", true)
	m.BreakerChanged("", true)
	m.BreakerChanged("", false)
	m.Reload(true)
	m.Reload(false)

	want := `
# HELP floodgate_decisions_total Decisions made, by policy and verdict (allowed or denied). Shadow-mode denials count as denied here and in floodgate_shadow_denials_total.
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{policy="api",verdict="allowed"} 1
floodgate_decisions_total{policy="api",verdict="denied"} 2
floodgate_decisions_total{policy="login",verdict="allowed"} 1
# HELP floodgate_shadow_denials_total Denials of policies in shadow mode, reported but not enforced.
# TYPE floodgate_shadow_denials_total counter
floodgate_shadow_denials_total{policy="api"} 1
# HELP floodgate_degraded_decisions_total Decisions made by the failure policy because the store failed or timed out.
# TYPE floodgate_degraded_decisions_total counter
floodgate_degraded_decisions_total{policy="login"} 1
# HELP floodgate_over_limit_cache_hits_total Denials answered locally because the key's fixed window was already exhausted.
# TYPE floodgate_over_limit_cache_hits_total counter
floodgate_over_limit_cache_hits_total{policy="api"} 1
# HELP floodgate_store_errors_total Store calls that failed, by operation and cause (timeout, unavailable, breaker_open, other).
# TYPE floodgate_store_errors_total counter
floodgate_store_errors_total{cause="breaker_open",op="peek"} 1
floodgate_store_errors_total{cause="other",op="reset"} 1
floodgate_store_errors_total{cause="timeout",op="take"} 1
floodgate_store_errors_total{cause="unavailable",op="take"} 1
# HELP floodgate_config_reloads_total Configuration reloads, by result (applied or rejected).
# TYPE floodgate_config_reloads_total counter
floodgate_config_reloads_total{result="applied"} 1
floodgate_config_reloads_total{result="rejected"} 1
# HELP floodgate_store_breaker_open Whether the circuit breaker of a store node is open (1): its requests are decided by the failure policy without the store.
# TYPE floodgate_store_breaker_open gauge
floodgate_store_breaker_open{node="10.0.0.1:6379"} 1
floodgate_store_breaker_open{node="store"} 0
`
	names := []string{"floodgate_decisions_total", "floodgate_shadow_denials_total", "floodgate_degraded_decisions_total",
		"floodgate_over_limit_cache_hits_total", "floodgate_store_errors_total", "floodgate_config_reloads_total",
		"floodgate_store_breaker_open"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "floodgate_store_duration_seconds"); n != 2 {
		t.Errorf("store duration series: %d, want 2 (take, reset; the breaker's refusal is not timed)", n)
	}

	// No metric has a label that could hold a key.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"policy": true, "verdict": true, "op": true, "cause": true, "result": true, "node": true}
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			for _, l := range metric.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s has label %q", mf.GetName(), l.GetName())
				}
			}
		}
	}

	// A second registration on the same registry is refused.
	if _, err := telemetry.New(reg); err == nil {
		t.Error("New on a registry that already has floodgate's metrics succeeded")
	}
}

// TestLinks: the service's links, read at each scrape, one series per
// node and gauge; no round trip before one told; none before WatchLinks.
func TestLinks(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := telemetry.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"floodgate_store_far", "floodgate_store_round_trip_seconds", "floodgate_store_batches_in_flight"}
	if n := testutil.CollectAndCount(reg, names...); n != 0 {
		t.Errorf("%d link series before WatchLinks; want 0", n)
	}
	links := []telemetry.StoreLink{
		{Node: "10.0.0.1:6379", Far: true, RoundTrip: 1500 * time.Microsecond, Batches: 3},
		{Node: "10.0.0.2:6379"},
	}
	m.WatchLinks(func() []telemetry.StoreLink { return links })
	want := `
# HELP floodgate_store_batches_in_flight Batches of decisions in flight to a store node now.
# TYPE floodgate_store_batches_in_flight gauge
floodgate_store_batches_in_flight{node="10.0.0.1:6379"} 3
floodgate_store_batches_in_flight{node="10.0.0.2:6379"} 0
# HELP floodgate_store_far Whether a store node is far (1): its quickest small batch lately took 0.25 ms or more (and not below 0.15 ms since), so that batches leave without waiting for the one in flight; 0: near, one batch in flight. Only with store.batching.
# TYPE floodgate_store_far gauge
floodgate_store_far{node="10.0.0.1:6379"} 1
floodgate_store_far{node="10.0.0.2:6379"} 0
# HELP floodgate_store_round_trip_seconds The round trip to a store node that floodgate_store_far was judged on: the quickest batch of at most 2 decisions over 10 to 20 seconds of traffic, timed in floodgate's process; an idle node keeps the last. Absent until one told.
# TYPE floodgate_store_round_trip_seconds gauge
floodgate_store_round_trip_seconds{node="10.0.0.1:6379"} 0.0015
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	links = []telemetry.StoreLink{{Node: "", RoundTrip: 90 * time.Microsecond, Batches: 1}} // read anew at each scrape
	want = `
# HELP floodgate_store_far Whether a store node is far (1): its quickest small batch lately took 0.25 ms or more (and not below 0.15 ms since), so that batches leave without waiting for the one in flight; 0: near, one batch in flight. Only with store.batching.
# TYPE floodgate_store_far gauge
floodgate_store_far{node="store"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "floodgate_store_far"); err != nil {
		t.Error(err)
	}
}

// TestLastReload: the last reload's outcome and time, whichever it was,
// beside the time of the configuration in force.
func TestLastReload(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := telemetry.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no gauge %s", name)
		return 0
	}
	const ok, tried, applied = "floodgate_config_last_reload_successful",
		"floodgate_config_last_reload_timestamp_seconds", "floodgate_config_last_reload_success_timestamp_seconds"
	start := gauge(applied)
	if gauge(ok) != 1 || gauge(tried) != start || start < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("at start: successful %v, tried %v, applied %v", gauge(ok), gauge(tried), start)
	}
	time.Sleep(20 * time.Millisecond) // the gauges have sub-second precision
	m.Reload(false)
	if gauge(ok) != 0 || gauge(tried) <= start || gauge(applied) != start {
		t.Errorf("after a rejected reload: successful %v, tried %v, applied %v (start %v)", gauge(ok), gauge(tried), gauge(applied), start)
	}
	rejected := gauge(tried)
	time.Sleep(20 * time.Millisecond)
	m.Reload(true)
	if gauge(ok) != 1 || gauge(applied) <= start || gauge(tried) <= rejected || gauge(tried) != gauge(applied) {
		t.Errorf("after an applied reload: successful %v, tried %v, applied %v", gauge(ok), gauge(tried), gauge(applied))
	}
}

// TestSnapshot: the typed snapshot holds what the metrics counted.
func TestSnapshot(t *testing.T) {
	m, err := telemetry.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.Decision("api", true, false, false)
	m.Decision("api", false, true, true)
	m.OverLimitCacheHit("web")
	m.StoreCall("take", "", 3*time.Millisecond, nil)
	m.StoreCall("take", "", time.Millisecond, fmt.Errorf("x: %w", context.DeadlineExceeded))
	m.StoreCall("reset", "", time.Millisecond, nil)
	m.Reload(false)
	s := m.Snapshot()
	want := []telemetry.PolicyCounts{
		{Name: "api", Allowed: 1, Denied: 1, ShadowDenials: 1, Degraded: 1},
		{Name: "web", OverLimitCacheHits: 1},
	}
	if !slices.Equal(s.Policies, want) {
		t.Errorf("policies %+v, want %+v", s.Policies, want)
	}
	if len(s.StoreCalls) != 2 || s.StoreCalls[0].Op != "take" || s.StoreCalls[1].Op != "reset" {
		t.Fatalf("store calls %+v", s.StoreCalls)
	}
	take := s.StoreCalls[0]
	if take.Count != 2 || take.Errors != 1 || take.ByCause["timeout"] != 1 || take.SumSeconds < 0.0039 || take.SumSeconds > 0.0041 {
		t.Errorf("take: %+v", take)
	}
	if n := len(take.Buckets); n == 0 || take.Buckets[n-1].Count != 2 || take.Buckets[0].LE != .000002 {
		t.Errorf("take buckets %+v", take.Buckets)
	}
	if s.Reloads.Rejected != 1 || s.Reloads.LastOK || s.Reloads.AppliedAt.IsZero() || s.Reloads.LastAt.Before(s.Reloads.AppliedAt) {
		t.Errorf("reloads %+v", s.Reloads)
	}
}
