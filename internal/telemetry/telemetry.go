// Package telemetry exports the service's metrics to Prometheus, on a
// registry the caller provides (never the global one). Labels carry
// policy names, operations and verdicts — bounded sets from the
// configuration — never keys.
package telemetry

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/storekit"
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
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	unknownPol prometheus.Counter
	unknownDom prometheus.Counter
	mode       *prometheus.GaugeVec
	build      *prometheus.GaugeVec
	memory     *memoryCollector
	links      *linkCollector
	clients    *prometheus.CounterVec
	refused    *prometheus.CounterVec
	overload   *prometheus.CounterVec
	queued     prometheus.GaugeFunc
	queueSrc   atomic.Pointer[func() int64]

	reg     prometheus.Registerer // for the listeners' gauges, registered later
	history *History
	// reqSeries caches the series of requests and latency by
	// requestLabels (a bounded set), sparing Request the vectors'
	// lookups: requestKey → *requestSeries.
	reqSeries sync.Map
	// decSeries caches the decisions counter by policy and verdict:
	// decisionKey → prometheus.Counter.
	decSeries sync.Map
}

type decisionKey struct {
	policy  string
	allowed bool
}

type requestKey struct{ transport, endpoint, code string }

type requestSeries struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// The label names of each vector, in order: Snapshot reads them back.
var (
	decisionLabels = []string{"policy", "verdict"}
	policyLabels   = []string{"policy"}
	opLabels       = []string{"op"}
	errorLabels    = []string{"op", "cause"}
	reloadLabels   = []string{"result"}
	requestLabels  = []string{"transport", "endpoint", "code"}
	latencyLabels  = []string{"transport", "endpoint"}
	clientLabels   = []string{"transport", "client"}
	refusedLabels  = []string{"transport", "surface", "reason"}
)

// storeBuckets are the upper bounds, in seconds, of the store latency
// histograms: the metric's and the history's.
var storeBuckets = [...]float64{.000002, .000005, .00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// New registers floodgate's metrics on reg and returns their observer. It
// fails if reg already has metrics of the same names.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		clients: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_client_requests_total",
			Help: "Decision requests of authenticated clients, by transport and client: a name of the tokens file, mtls for a client certificate alone, admin for the admin token.",
		}, clientLabels),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_auth_refused_total",
			Help: "Requests refused for their credentials, by transport, surface (client: the decision APIs; admin) and reason (missing, invalid, disabled, cross_origin).",
		}, refusedLabels),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Decisions made, by policy and verdict (allowed or denied). Shadow-mode denials count as denied here and in floodgate_shadow_denials_total.",
		}, decisionLabels),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_shadow_denials_total",
			Help: "Denials of policies in shadow mode, reported but not enforced.",
		}, policyLabels),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_degraded_decisions_total",
			Help: "Decisions made by the failure policy because the store failed or timed out.",
		}, policyLabels),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_over_limit_cache_hits_total",
			Help: "Denials answered locally because the key's fixed window was already exhausted.",
		}, policyLabels),
		storeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_store_duration_seconds",
			Help:    "Latency of store calls, by operation (take, peek, reset).",
			Buckets: storeBuckets[:],
		}, opLabels),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_store_errors_total",
			Help: "Store calls that failed, by operation and cause (timeout, unavailable, breaker_open, other).",
		}, errorLabels),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_config_reloads_total",
			Help: "Configuration reloads, by result (applied or rejected).",
		}, reloadLabels),
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
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_requests_total",
			Help: "Requests answered, by transport (http, grpc), endpoint (an HTTP route or a gRPC method; other for none) and code (HTTP status or gRPC code).",
		}, requestLabels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_request_duration_seconds",
			Help:    "Time from a request's arrival to its answer, by transport and endpoint.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, latencyLabels),
		unknownPol: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_unknown_policy_requests_total",
			Help: "Requests naming a policy the configuration does not have (the name is the client's, so it is no label).",
		}),
		unknownDom: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_unknown_domain_requests_total",
			Help: "Envoy requests for a domain the configuration does not have; they are answered OK, as envoyproxy/ratelimit does.",
		}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_failure_mode",
			Help: "The failure mode in force (1 for it, 0 for the others): what a decision becomes when the store fails.",
		}, []string{"mode"}),
		overload: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_overload_rejected_total",
			Help: "Decisions the service answered by its overload mode: not sent to the store because the store calls in flight were at their bound (overload.max_inflight) and the queue was full (reason queue_full) or the wait passed (queue_wait), or sent and cut by store.timeout while decisions queued behind the bound (store_timeout); mode says how they were answered: backpressure (503/429, RESOURCE_EXHAUSTED; never counted as degraded) or failure_policy.",
		}, []string{"reason", "mode"}),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_build_info",
			Help: "1, labelled with the running build's version, VCS revision and Go version.",
		}, []string{"version", "revision", "goversion"}),
	}
	m.queued = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "floodgate_store_queued",
		Help: "Decisions waiting now for a store call to come free (bounded by overload.max_queue).",
	}, func() float64 {
		if f := m.queueSrc.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	m.memory = newMemoryCollector()
	m.links = newLinkCollector()
	m.history, _ = NewHistory(HistoryOptions{}) // the defaults are valid
	for _, c := range []prometheus.Collector{m.decisions, m.shadow, m.degraded, m.cacheHits, m.storeTime, m.storeErrs, m.reloads,
		m.lastReload, m.lastTry, m.lastOK, m.breaker, m.requests, m.latency, m.unknownPol, m.unknownDom, m.mode, m.build,
		m.memory, m.links, m.clients, m.refused, m.overload, m.queued} {
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

// Overloaded counts n decisions refused by the service's overload bound
// (service.OverloadObserver).
func (m *Metrics) Overloaded(reason, mode string, n int) {
	m.overload.WithLabelValues(reason, mode).Add(float64(n))
}

// WatchQueue reads the gauge of decisions waiting for a store call from
// queued (service.Service.Queued) when scraped.
func (m *Metrics) WatchQueue(queued func() int64) { m.queueSrc.Store(&queued) }

// History returns the history the metrics feed: per policy and for the
// store, at 10 s resolution for the last 24 h (see History). Never nil.
func (m *Metrics) History() *History { return m.history }

// Decision counts one decision.
func (m *Metrics) Decision(policy string, allowed, shadow, degraded bool) {
	verdict := "allowed"
	if !allowed {
		verdict = "denied"
		if shadow {
			m.shadow.WithLabelValues(policy).Inc()
		}
	}
	k := decisionKey{policy, allowed}
	c, ok := m.decSeries.Load(k)
	if !ok {
		c, _ = m.decSeries.LoadOrStore(k, m.decisions.WithLabelValues(policy, verdict))
	}
	c.(prometheus.Counter).Inc()
	if degraded {
		m.degraded.WithLabelValues(policy).Inc()
	}
	m.history.Decision(policy, allowed, degraded)
}

// StoreCall times one store call and counts its failure (a call the
// breaker kept from the store is counted, not timed).
func (m *Metrics) StoreCall(op, node string, took time.Duration, err error) {
	m.history.StoreCall(took, err)
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
	case errors.Is(err, storekit.ErrFull):
		cause = "full"
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

// Request counts one answered request and times it. endpoint and code
// must come from bounded sets (routes, methods, status codes).
func (m *Metrics) Request(transport, endpoint, code string, took time.Duration) {
	k := requestKey{transport, endpoint, code}
	v, ok := m.reqSeries.Load(k)
	if !ok {
		v, _ = m.reqSeries.LoadOrStore(k, &requestSeries{
			count:   m.requests.WithLabelValues(transport, endpoint, code),
			latency: m.latency.WithLabelValues(transport, endpoint),
		})
	}
	rs := v.(*requestSeries)
	rs.count.Inc()
	rs.latency.Observe(took.Seconds())
}

// ClientRequest counts a decision request of an authenticated client
// (auth.Observer). client comes from the tokens file, a bounded set.
func (m *Metrics) ClientRequest(transport, client string) {
	m.clients.WithLabelValues(transport, client).Inc()
}

// AuthRefused counts a request refused for its credentials
// (auth.Observer).
func (m *Metrics) AuthRefused(transport, surface, reason string) {
	m.refused.WithLabelValues(transport, surface, reason).Inc()
}

// ConnStats are a capped listener's figures (internal/connlimit's
// Listener has them).
type ConnStats interface {
	Open() int
	Max() int
	Evicted() uint64
	Refused() uint64
}

// Listener exports a capped listener's figures, labelled listener=name
// ("http", "grpc"): floodgate_connections_open, _max, and the
// connections evicted and refused at the cap. It fails if a listener of
// that name is exported already.
func (m *Metrics) Listener(name string, s ConnStats) error {
	labels := prometheus.Labels{"listener": name}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_connections_open", ConstLabels: labels,
			Help: "Connections the listener holds open."}, func() float64 { return float64(s.Open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_connections_max", ConstLabels: labels,
			Help: "The cap on the listener's open connections (limits.max_connections)."}, func() float64 { return float64(s.Max()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_connections_evicted_total", ConstLabels: labels,
			Help: "Idle connections closed at the cap to make room for a new one."}, func() float64 { return float64(s.Evicted()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_connections_refused_total", ConstLabels: labels,
			Help: "New connections closed at the cap because no open one was idle."}, func() float64 { return float64(s.Refused()) }),
	} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// UnknownPolicy counts a request naming no configured policy.
func (m *Metrics) UnknownPolicy() { m.unknownPol.Inc() }

// UnknownDomain counts an Envoy request for no configured domain.
func (m *Metrics) UnknownDomain() { m.unknownDom.Inc() }

// FailureMode records the failure mode in force (open, closed or
// fallback).
func (m *Metrics) FailureMode(mode string) {
	for _, x := range []string{"open", "closed", "fallback"} {
		v := 0.0
		if x == mode {
			v = 1
		}
		m.mode.WithLabelValues(x).Set(v)
	}
}

// BuildInfo records the running build.
func (m *Metrics) BuildInfo(version, revision, goVersion string) {
	m.build.Reset()
	m.build.WithLabelValues(version, revision, goVersion).Set(1)
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

// Snapshot is what the metrics have counted since the process started, as
// typed values: what /v1/stats and the dashboard show. Policy names are
// those the metrics carry (configured names and rule labels); no key.
type Snapshot struct {
	Policies   []PolicyCounts // by name
	StoreCalls []StoreCalls   // by operation: take, peek, reset
	Reloads    Reloads
}

// PolicyCounts are one policy's decisions.
type PolicyCounts struct {
	Name                           string
	Allowed, Denied, ShadowDenials int64
	Degraded, OverLimitCacheHits   int64
}

// StoreCalls are the store calls of one operation: their latency as a
// histogram of cumulative buckets (finite upper bounds, seconds,
// ascending), and their failures by cause.
type StoreCalls struct {
	Op         string
	Count      int64
	SumSeconds float64
	Buckets    []Bucket
	Errors     int64
	ByCause    map[string]int64
}

// Bucket is a histogram bucket: Count observations took at most LE
// seconds.
type Bucket struct {
	LE    float64
	Count int64
}

// Reloads are the configuration's reloads.
type Reloads struct {
	Applied, Rejected int64
	AppliedAt         time.Time // when the configuration in force was applied
	LastAt            time.Time // the last attempt, applied or not
	LastOK            bool      // whether it was applied
}

// Snapshot reads every counter of m. It is safe to call concurrently with
// the updates (each value is read atomically; the snapshot as a whole is
// not one instant).
func (m *Metrics) Snapshot() Snapshot {
	var s Snapshot
	byName := map[string]*PolicyCounts{}
	policy := func(name string) *PolicyCounts {
		p, ok := byName[name]
		if !ok {
			p = &PolicyCounts{Name: name}
			byName[name] = p
		}
		return p
	}
	calls := map[string]*StoreCalls{}
	op := func(name string) *StoreCalls {
		c, ok := calls[name]
		if !ok {
			c = &StoreCalls{Op: name, ByCause: map[string]int64{}}
			calls[name] = c
		}
		return c
	}
	each(m.decisions, decisionLabels, func(l []string, d *dto.Metric) {
		if l[1] == "allowed" {
			policy(l[0]).Allowed += int64(d.GetCounter().GetValue())
		} else {
			policy(l[0]).Denied += int64(d.GetCounter().GetValue())
		}
	})
	each(m.shadow, policyLabels, func(l []string, d *dto.Metric) { policy(l[0]).ShadowDenials += int64(d.GetCounter().GetValue()) })
	each(m.degraded, policyLabels, func(l []string, d *dto.Metric) { policy(l[0]).Degraded += int64(d.GetCounter().GetValue()) })
	each(m.cacheHits, policyLabels, func(l []string, d *dto.Metric) { policy(l[0]).OverLimitCacheHits += int64(d.GetCounter().GetValue()) })
	each(m.storeTime, opLabels, func(l []string, d *dto.Metric) {
		c, h := op(l[0]), d.GetHistogram()
		c.Count, c.SumSeconds = int64(h.GetSampleCount()), h.GetSampleSum()
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), +1) {
				c.Buckets = append(c.Buckets, Bucket{LE: b.GetUpperBound(), Count: int64(b.GetCumulativeCount())})
			}
		}
	})
	each(m.storeErrs, errorLabels, func(l []string, d *dto.Metric) {
		c, n := op(l[0]), int64(d.GetCounter().GetValue())
		c.Errors += n
		c.ByCause[l[1]] += n
	})
	each(m.reloads, reloadLabels, func(l []string, d *dto.Metric) {
		if l[0] == "applied" {
			s.Reloads.Applied += int64(d.GetCounter().GetValue())
		} else {
			s.Reloads.Rejected += int64(d.GetCounter().GetValue())
		}
	})
	s.Reloads.AppliedAt = unixTime(gauge(m.lastReload))
	s.Reloads.LastAt = unixTime(gauge(m.lastTry))
	s.Reloads.LastOK = gauge(m.lastOK) == 1
	for _, p := range byName {
		s.Policies = append(s.Policies, *p)
	}
	slices.SortFunc(s.Policies, func(a, b PolicyCounts) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range calls {
		s.StoreCalls = append(s.StoreCalls, *c)
	}
	slices.SortFunc(s.StoreCalls, func(a, b StoreCalls) int { return opRank(a.Op) - opRank(b.Op) })
	return s
}

// opRank orders store operations as the documentation lists them.
func opRank(op string) int {
	if i := slices.Index([]string{"take", "peek", "reset"}, op); i >= 0 {
		return i
	}
	return 3
}

// each calls fn with the values of the labels names (those the vector c was
// made with, in that order) and the value of every series of c.
func each(c prometheus.Collector, names []string, fn func(labels []string, m *dto.Metric)) {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		values := make([]string, len(names))
		for _, l := range d.GetLabel() {
			if i := slices.Index(names, l.GetName()); i >= 0 {
				values[i] = l.GetValue()
			}
		}
		fn(values, &d)
	}
}

func gauge(g prometheus.Gauge) float64 {
	var d dto.Metric
	if g.Write(&d) != nil {
		return 0
	}
	return d.GetGauge().GetValue()
}

func unixTime(sec float64) time.Time {
	if sec <= 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(sec*1e9)).UTC()
}
