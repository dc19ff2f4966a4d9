package httpapi

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
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
	// FailureMode is what a decision becomes when the store fails (open,
	// closed or fallback); OpenBreakers the store nodes decided without.
	FailureMode  string        `json:"failure_mode"`
	OpenBreakers []breakerJSON `json:"open_breakers"`
	// Links is how far each store node is, as the batcher judges it
	// (service.Links); empty without batching.
	Links []linkJSON `json:"links"`
}

// linkJSON is one store node's link (service.Link).
type linkJSON struct {
	Node             string   `json:"node"` // "store" for a store without nodes
	Far              bool     `json:"far"`
	RoundTripSeconds *float64 `json:"round_trip_seconds"` // null until a round trip told
	BatchesInFlight  int      `json:"batches_in_flight"`
}

// linksJSON lists svc's links, by node.
func linksJSON(links []service.Link) []linkJSON {
	out := make([]linkJSON, 0, len(links))
	for _, l := range links {
		j := linkJSON{Node: l.Node, Far: l.Far, BatchesInFlight: l.Batches}
		if j.Node == "" {
			j.Node = "store"
		}
		if l.RoundTrip > 0 {
			rt := l.RoundTrip.Seconds()
			j.RoundTripSeconds = &rt
		}
		out = append(out, j)
	}
	return out
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
	snap := a.o.Stats()
	cfg := a.svc.Config()
	now := time.Now()
	fp, breakers := a.svc.Failure()
	out := statsJSON{
		Time: now.UTC(), Version: a.o.Version, UptimeSeconds: now.Sub(a.started).Seconds(),
		Store: storeStateJSON{Type: cfg.Store.Type, Ready: true, FailureMode: fp.Mode.String(), OpenBreakers: breakersJSON(breakers),
			Links: linksJSON(a.svc.Links())},
		Config: configStateJSON{Sources: append([]string{}, cfg.Sources...), Applied: snap.Reloads.Applied, Rejected: snap.Reloads.Rejected},
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := a.svc.Ready(ctx); err != nil {
		out.Store.Ready, out.Store.Error = false, err.Error()
	}
	out.Config.AppliedAt = timeOrNil(snap.Reloads.AppliedAt)
	if snap.Reloads.Applied+snap.Reloads.Rejected > 0 && !snap.Reloads.LastAt.IsZero() {
		out.Config.LastReload = &reloadJSON{At: timeOrNil(snap.Reloads.LastAt), Outcome: "applied"}
		if !snap.Reloads.LastOK {
			out.Config.LastReload.Outcome = "rejected"
		}
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
	for _, c := range snap.Policies {
		add(policyStatsJSON{Name: c.Name})
		p := byName[c.Name]
		p.Allowed, p.Denied, p.ShadowDenials = c.Allowed, c.Denied, c.ShadowDenials
		p.Degraded, p.CacheHits = c.Degraded, c.OverLimitCacheHits
	}
	sort.Strings(order[configured:])
	out.Policies = make([]policyStatsJSON, len(order))
	for i, name := range order {
		out.Policies[i] = *byName[name]
	}
	out.StoreCalls = []storeCallsJSON{}
	for _, c := range snap.StoreCalls {
		cj := storeCallsJSON{Op: c.Op, Count: c.Count, SumSeconds: c.SumSeconds, Buckets: []bucketJSON{}, Errors: c.Errors, ByCause: c.ByCause}
		for _, b := range c.Buckets {
			cj.Buckets = append(cj.Buckets, bucketJSON(b))
		}
		if c.Count > 0 {
			mean := c.SumSeconds / float64(c.Count)
			cj.Mean = &mean
			cj.P50, cj.P99 = quantile(0.5, cj.Buckets, c.Count), quantile(0.99, cj.Buckets, c.Count)
		}
		out.StoreCalls = append(out.StoreCalls, cj)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
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
