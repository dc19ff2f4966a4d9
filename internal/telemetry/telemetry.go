// Package telemetry exports the service's metrics to Prometheus, on a
// registry the caller provides (never the global one). Labels carry
// policy names, operations and verdicts — bounded sets from the
// configuration — never keys.
package telemetry

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
)

// Metrics implements service.Observer and failure.Observer. Create it
// with New.
type Metrics struct {
	decisions  *prometheus.CounterVec
	shadow     *prometheus.CounterVec
	degraded   *prometheus.CounterVec
	cacheHits  *prometheus.CounterVec
	storeTime  *prometheus.HistogramVec
	storeErrs  *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	lastReload prometheus.Gauge // when the configuration in force was applied
	lastTry    prometheus.Gauge // when the last reload was tried, applied or not
	lastOK     prometheus.Gauge // 1 if the last reload was applied, else 0
	breaker    *prometheus.GaugeVec
}

// New registers floodgate's metrics on reg and returns their observer. It
// fails if reg already has metrics of the same names.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Decisions made, by policy and verdict (allowed or denied). Shadow-mode denials count as denied here and in floodgate_shadow_denials_total.",
		}, []string{"policy", "verdict"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_shadow_denials_total",
			Help: "Denials of policies in shadow mode, reported but not enforced.",
		}, []string{"policy"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_degraded_decisions_total",
			Help: "Decisions made by the failure policy because the store failed or timed out.",
		}, []string{"policy"}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_over_limit_cache_hits_total",
			Help: "Denials answered locally because the key's fixed window was already exhausted.",
		}, []string{"policy"}),
		storeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_store_duration_seconds",
			Help:    "Latency of store calls, by operation (take, peek, reset).",
			Buckets: []float64{.000002, .000005, .00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"op"}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_store_errors_total",
			Help: "Store calls that failed, by operation and cause (timeout, unavailable, breaker_open, other).",
		}, []string{"op", "cause"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_config_reloads_total",
			Help: "Configuration reloads, by result (applied or rejected).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in force was applied, as a Unix time.",
		}),
		lastTry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_last_reload_timestamp_seconds",
			Help: "When the configuration was last loaded or reloaded, applied or rejected, as a Unix time.",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_last_reload_successful",
			Help: "Whether the last configuration reload was applied (1) or rejected (0).",
		}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_store_breaker_open",
			Help: "Whether the circuit breaker of a store node is open (1): its requests are decided by the failure policy without the store.",
		}, []string{"node"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.shadow, m.degraded, m.cacheHits, m.storeTime, m.storeErrs, m.reloads, m.lastReload, m.lastTry, m.lastOK, m.breaker} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	now := unixNow()
	m.lastReload.Set(now)
	m.lastTry.Set(now)
	m.lastOK.Set(1)
	return m, nil
}

// Decision counts one decision.
func (m *Metrics) Decision(policy string, allowed, shadow, degraded bool) {
	verdict := "allowed"
	if !allowed {
		verdict = "denied"
		if shadow {
			m.shadow.WithLabelValues(policy).Inc()
		}
	}
	m.decisions.WithLabelValues(policy, verdict).Inc()
	if degraded {
		m.degraded.WithLabelValues(policy).Inc()
	}
}

// StoreCall times one store call and counts its failure (a call the
// breaker kept from the store is counted, not timed).
func (m *Metrics) StoreCall(op, node string, took time.Duration, err error) {
	if !errors.Is(err, failure.ErrBreakerOpen) {
		m.storeTime.WithLabelValues(op).Observe(took.Seconds())
	}
	if err == nil {
		return
	}
	cause := "other"
	switch {
	case errors.Is(err, failure.ErrBreakerOpen):
		cause = "breaker_open"
	case errors.Is(err, context.DeadlineExceeded):
		cause = "timeout"
	case errors.Is(err, floodgate.ErrUnavailable):
		cause = "unavailable"
	}
	m.storeErrs.WithLabelValues(op, cause).Inc()
}

// BreakerChanged records a node's breaker opening or closing.
func (m *Metrics) BreakerChanged(node string, open bool) {
	v := 0.0
	if open {
		v = 1
	}
	m.breaker.WithLabelValues(nodeLabel(node)).Set(v)
}

// nodeLabel is a node's label value: its address, or "store" for a store
// without nodes.
func nodeLabel(node string) string {
	if node == "" {
		return "store"
	}
	return node
}

// OverLimitCacheHit counts a denial answered locally.
func (m *Metrics) OverLimitCacheHit(policy string) { m.cacheHits.WithLabelValues(policy).Inc() }

// Reload counts a configuration reload.
func (m *Metrics) Reload(ok bool) {
	now := unixNow()
	m.lastTry.Set(now)
	if ok {
		m.reloads.WithLabelValues("applied").Inc()
		m.lastReload.Set(now)
		m.lastOK.Set(1)
		return
	}
	m.reloads.WithLabelValues("rejected").Inc()
	m.lastOK.Set(0)
}

// unixNow is the time as SetToCurrentTime gives it, read once for gauges
// that must agree.
func unixNow() float64 { return float64(time.Now().UnixNano()) / 1e9 }
