package rls_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/telemetry"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
)

// TestEnvoyNamespace: an Envoy rule's counters are its own. A rule that
// names a policy of the policies section decides under the rule's own
// name, so that /v1/check and /v1/reset of that policy, with the key the
// rule counts under, can neither spend nor reset them; nor can a named
// policy that happens to be called as a limit override would be.
func TestEnvoyNamespace(t *testing.T) {
	cfg, err := parse(`
policies:
  api: "fixed_window 2/1h"
  edge.override.hour: "fixed_window 2/1h"
`, `
domain: edge
descriptors:
  - key: user
    rate_limit: {policy: api}
`)
	if err != nil {
		t.Fatal(err)
	}
	// A clock that stands still: no hour ends between the calls.
	clock := floodgatetest.NewManualClock(time.Unix(1714825800, 0))
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
	ctx := context.Background()
	envoy := func(limit *rls.Limit) rls.Code {
		t.Helper()
		resp, err := eng.ShouldRateLimit(ctx, rls.Request{Domain: "edge", Descriptors: []rls.Descriptor{{
			Entries: []rls.Entry{{Key: "user", Value: "alice"}}, Limit: limit}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	check := func(policy, key string) (bool, int64) {
		t.Helper()
		v, err := svc.Check(ctx, []service.Item{{Policy: policy, Key: key}})
		if err != nil {
			t.Fatal(err)
		}
		return v.Allowed, v.Items[0].Decision.Remaining
	}
	override := &rls.Limit{RequestsPerUnit: 2, Unit: config.Hour}
	for _, limit := range []*rls.Limit{nil, override} {
		// Envoy spends its two, for the rule and for an override alike.
		if c1, c2, c3 := envoy(limit), envoy(limit), envoy(limit); c1 != rls.CodeOK || c2 != rls.CodeOK || c3 != rls.CodeOverLimit {
			t.Fatalf("Envoy (override %v): %v %v %v, want OK OK OVER_LIMIT", limit, c1, c2, c3)
		}
	}
	// The HTTP API, with the key Envoy counts under (user=alice), sees
	// fresh counters under the named policies...
	for _, p := range []string{"api", "edge.override.hour"} {
		if ok, rem := check(p, "user=alice"); !ok || rem != 1 {
			t.Errorf("check of %s user=alice after Envoy spent its own: allowed %v, remaining %d; want a fresh key", p, ok, rem)
		}
		// ...and its reset does not give Envoy its quota back.
		if err := svc.Reset(ctx, p, "user=alice"); err != nil {
			t.Fatal(err)
		}
	}
	if c := envoy(nil); c != rls.CodeOverLimit {
		t.Errorf("Envoy's rule after a reset of api through the service: %v, want OVER_LIMIT", c)
	}
	if c := envoy(override); c != rls.CodeOverLimit {
		t.Errorf("Envoy's override after a reset of edge.override.hour: %v, want OVER_LIMIT", c)
	}
	// The listing says which policy decides the rule: the rule's own.
	info, ok := eng.Table().Rule("edge", []rls.Entry{{Key: "user", Value: "x"}})
	if !ok || info.Policy == "api" || info.Policy == "" || info.Text != "fixed_window 2/1h" {
		t.Errorf("the rule's policy: %+v", info)
	}
}

// TestManyOverrides: 100,000 distinct limit overrides, as a client may
// send, leave the metrics at a fixed number of series (each override
// counts under its domain's "<domain>.override") and the heap within a
// fixed bound: the engine keeps at most 256 override rules per domain,
// mints no metric label per value, and the store (bounded here) holds the
// counters.
func TestManyOverrides(t *testing.T) {
	cfg, err := parse("policies: {api: \"gcra 10/1s\"}\n", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.WithMaxKeys(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := prometheus.NewRegistry()
	m, err := telemetry.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: store, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	units := []config.Unit{config.Second, config.Minute, config.Hour, config.Day}
	send := func(from, to int) {
		for i := from; i < to; i++ {
			_, err := eng.ShouldRateLimit(ctx, rls.Request{Domain: "edge", Descriptors: []rls.Descriptor{
				{Entries: []rls.Entry{{Key: "user", Value: "alice"}}, Limit: &rls.Limit{RequestsPerUnit: uint32(1 + i/len(units)), Unit: units[i%len(units)]}},
				{Entries: []rls.Entry{{Key: "user", Value: fmt.Sprint("u", i%7)}}},
			}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	series := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	send(0, 1000)
	seriesBefore, heapBefore := series(), heap()
	send(1000, 100_000)
	seriesAfter, heapAfter := series(), heap()
	t.Logf("series %d → %d; heap in use %.1f → %.1f MiB", seriesBefore, seriesAfter, float64(heapBefore)/(1<<20), float64(heapAfter)/(1<<20))
	if seriesAfter != seriesBefore {
		t.Errorf("metrics series grew from %d to %d over 99,000 more distinct overrides", seriesBefore, seriesAfter)
	}
	const bound = 16 << 20
	if heapAfter > heapBefore+bound {
		t.Errorf("heap in use grew by %d MiB over 99,000 more distinct overrides; bound %d MiB", (heapAfter-heapBefore)>>20, bound>>20)
	}
	snap := m.Snapshot()
	names := map[string]bool{}
	for _, p := range snap.Policies {
		names[p.Name] = true
	}
	if len(names) != 2 || !names["edge.override"] || !names["edge.user"] {
		t.Errorf("policies in the metrics: %v, want edge.override and edge.user", names)
	}
}
