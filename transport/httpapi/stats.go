package httpapi

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/floodgatehq/floodgate/rls"
	dto "github.com/prometheus/client_model/go"
)

// The metric names /v1/stats reads (internal/telemetry registers them;
// docs/operations.md lists them).
const (
	metricDecisions    = "floodgate_decisions_total"
	metricShadow       = "floodgate_shadow_denials_total"
	metricDegraded     = "floodgate_degraded_decisions_total"
	metricCacheHits    = "floodgate_over_limit_cache_hits_total"
	metricStoreTime    = "floodgate_store_duration_seconds"
	metricStoreErrors  = "floodgate_store_errors_total"
	metricReloads      = "floodgate_config_reloads_total"
	metricApplied      = "floodgate_config_last_reload_success_timestamp_seconds"
	metricLastReload   = "floodgate_config_last_reload_timestamp_seconds"
	metricLastReloadOK = "floodgate_config_last_reload_successful"
)

// statsJSON is the body of GET /v1/stats: cumulative counters since the
// process started and the current state. It holds no key: metrics carry
// none, and the top keys are the admin endpoint /v1/keys's alone.
type statsJSON struct {
	Time          time.Time         `json:"time"`
	Version       string            `json:"version"`
	UptimeSeconds float64           `json:"uptime_seconds"`
	Store         storeStateJSON    `json:"store"`
	Config        configStateJSON   `json:"config"`
	Policies      []policyStatsJSON `json:"policies"`
	StoreCalls    []storeCallsJSON  `json:"store_calls"`
}

type storeStateJSON struct {
	Type  string `json:"type"`
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
}

type configStateJSON struct {
	Sources []string `json:"sources"`
	// AppliedAt is when the configuration in force was applied (at start
	// or by the last successful reload).
	AppliedAt *time.Time `json:"applied_at"`
	// LastReload is the last attempt, applied or rejected; nil before any.
	LastReload *reloadJSON `json:"last_reload"`
	Applied    int64       `json:"reloads_applied"`
	Rejected   int64       `json:"reloads_rejected"`
}

type reloadJSON struct {
	At      *time.Time `json:"at"`
	Outcome string     `json:"outcome"` // applied or rejected
}

type policyStatsJSON struct {
	Name string `json:"name"`
	// Kind is "policy" for a named policy, "rule" for an Envoy rule's own
	// policy, "" for a name the configuration in force no longer has.
	Kind          string `json:"kind"`
	Text          string `json:"text,omitempty"`
	Track         bool   `json:"track,omitempty"`
	Shadow        bool   `json:"shadow_mode,omitempty"`
	Allowed       int64  `json:"allowed"`
	Denied        int64  `json:"denied"`
	ShadowDenials int64  `json:"shadow_denials"`
	Degraded      int64  `json:"degraded"`
	CacheHits     int64  `json:"over_limit_cache_hits"`
}

type storeCallsJSON struct {
	Op         string           `json:"op"`
	Count      int64            `json:"count"`
	SumSeconds float64          `json:"sum_seconds"`
	Mean       *float64         `json:"mean_seconds"`
	P50        *float64         `json:"p50_seconds"`
	P99        *float64         `json:"p99_seconds"`
	Buckets    []bucketJSON     `json:"buckets"`
	Errors     int64            `json:"errors"`
	ByCause    map[string]int64 `json:"errors_by_cause"`
}

// bucketJSON is a histogram bucket: calls that took at most LE seconds,
// cumulative as in Prometheus (the +Inf bucket is Count).
type bucketJSON struct {
	LE    float64 `json:"le"`
	Count int64   `json:"count"`
}

func (a *api) stats(w http.ResponseWriter, r *http.Request) {
	mfs, err := a.o.Gatherer.Gather()
	if err != nil && len(mfs) == 0 {
		a.log.Error("gathering metrics", "error", err)
		writeError(w, http.StatusInternalServerError, "internal", "", "internal error")
		return
	}
	cfg := a.svc.Config()
	now := time.Now()
	out := statsJSON{
		Time: now.UTC(), Version: a.o.Version, UptimeSeconds: now.Sub(a.started).Seconds(),
		Store:  storeStateJSON{Type: cfg.Store.Type, Ready: true},
		Config: configStateJSON{Sources: append([]string{}, cfg.Sources...)},
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := a.svc.Ready(ctx); err != nil {
		out.Store.Ready, out.Store.Error = false, err.Error()
	}

	// The policies in force first (named ones, then Envoy rules' own),
	// then any name the metrics still have from before a reload.
	byName := map[string]*policyStatsJSON{}
	var order []string
	add := func(p policyStatsJSON) {
		if _, ok := byName[p.Name]; !ok {
			byName[p.Name] = &p
			order = append(order, p.Name)
		}
	}
	for _, p := range a.svc.Policies() {
		add(policyStatsJSON{Name: p.Name, Kind: "policy", Text: p.String(), Track: p.Track})
	}
	for _, d := range a.envoyDomains() {
		for _, rule := range d.Rules {
			if rule.Policy != "" {
				add(policyStatsJSON{Name: rule.Policy, Kind: "rule", Text: rule.Text, Shadow: rule.Shadow})
			}
		}
	}
	configured := len(order)
	policy := func(m *dto.Metric) *policyStatsJSON {
		name := label(m, "policy")
		if _, ok := byName[name]; !ok {
			add(policyStatsJSON{Name: name})
		}
		return byName[name]
	}
	calls := map[string]*storeCallsJSON{}
	op := func(m *dto.Metric) *storeCallsJSON {
		name := label(m, "op")
		if c, ok := calls[name]; ok {
			return c
		}
		c := &storeCallsJSON{Op: name, Buckets: []bucketJSON{}, ByCause: map[string]int64{}}
		calls[name] = c
		return c
	}
	var lastOK, lastAt *float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case metricDecisions:
				p := policy(m)
				if label(m, "verdict") == "allowed" {
					p.Allowed += counter(m)
				} else {
					p.Denied += counter(m)
				}
			case metricShadow:
				policy(m).ShadowDenials += counter(m)
			case metricDegraded:
				policy(m).Degraded += counter(m)
			case metricCacheHits:
				policy(m).CacheHits += counter(m)
			case metricStoreTime:
				c, h := op(m), m.GetHistogram()
				c.Count, c.SumSeconds = int64(h.GetSampleCount()), h.GetSampleSum()
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), +1) {
						c.Buckets = append(c.Buckets, bucketJSON{LE: b.GetUpperBound(), Count: int64(b.GetCumulativeCount())})
					}
				}
			case metricStoreErrors:
				c, n := op(m), counter(m)
				c.Errors += n
				c.ByCause[label(m, "cause")] += n
			case metricReloads:
				if label(m, "result") == "applied" {
					out.Config.Applied += counter(m)
				} else {
					out.Config.Rejected += counter(m)
				}
			case metricApplied:
				out.Config.AppliedAt = unixTime(m.GetGauge().GetValue())
			case metricLastReload:
				v := m.GetGauge().GetValue()
				lastAt = &v
			case metricLastReloadOK:
				v := m.GetGauge().GetValue()
				lastOK = &v
			}
		}
	}
	if out.Config.Applied+out.Config.Rejected > 0 && lastOK != nil && lastAt != nil {
		out.Config.LastReload = &reloadJSON{At: unixTime(*lastAt), Outcome: "applied"}
		if *lastOK == 0 {
			out.Config.LastReload.Outcome = "rejected"
		}
	}
	sort.Strings(order[configured:])
	out.Policies = make([]policyStatsJSON, len(order))
	for i, name := range order {
		out.Policies[i] = *byName[name]
	}
	out.StoreCalls = []storeCallsJSON{}
	for _, c := range calls {
		if c.Count > 0 {
			mean := c.SumSeconds / float64(c.Count)
			c.Mean = &mean
			c.P50, c.P99 = quantile(0.5, c.Buckets, c.Count), quantile(0.99, c.Buckets, c.Count)
		}
		out.StoreCalls = append(out.StoreCalls, *c)
	}
	slices.SortFunc(out.StoreCalls, func(x, y storeCallsJSON) int { return opRank(x.Op) - opRank(y.Op) })
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// opRank orders store operations as the documentation lists them.
func opRank(op string) int {
	if i := slices.Index([]string{"take", "peek", "reset"}, op); i >= 0 {
		return i
	}
	return 3
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func counter(m *dto.Metric) int64 { return int64(m.GetCounter().GetValue()) }

func unixTime(sec float64) *time.Time {
	if sec <= 0 {
		return nil
	}
	t := time.Unix(0, int64(sec*1e9)).UTC()
	return &t
}

// quantile estimates the q-quantile of count observations from cumulative
// buckets (finite upper bounds, ascending) as Prometheus's
// histogram_quantile does: linearly within the bucket holding the rank,
// from 0 in the first; the highest finite bound when the rank is past it.
// nil when there is nothing to estimate from.
func quantile(q float64, buckets []bucketJSON, count int64) *float64 {
	if count == 0 || len(buckets) == 0 {
		return nil
	}
	rank := q * float64(count)
	lower, below := 0.0, int64(0)
	for _, b := range buckets {
		if float64(b.Count) >= rank {
			v := lower
			if in := b.Count - below; in > 0 {
				v += (b.LE - lower) * (rank - float64(below)) / float64(in)
			}
			return &v
		}
		lower, below = b.LE, b.Count
	}
	v := buckets[len(buckets)-1].LE
	return &v
}

// envoyDomains lists the Envoy domains, none without an engine.
func (a *api) envoyDomains() []rls.DomainInfo {
	if a.o.Envoy == nil {
		return nil
	}
	return a.o.Envoy.Table().Domains()
}
