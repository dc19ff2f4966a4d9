package shipcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/cli"
	"github.com/floodgatehq/floodgate/internal/telemetry"
)

// external are the series the dashboard and alerts may use that floodgate
// does not serve, and where they come from.
var external = map[string]string{
	"up":                    "Prometheus, for every scrape target",
	"kube_pod_status_ready": "kube-state-metrics",
}

// recorder is a Registerer that keeps what is registered on a fresh
// registry, so that every metric's name is known whether or not it has
// a sample yet.
type recorder struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// telemetryFamilies returns the metrics internal/telemetry registers,
// name -> type: the names from the collectors' descriptions, the types
// from a gathering after every observer method has been called.
func telemetryFamilies(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	reg := &recorder{Registry: prometheus.NewRegistry()}
	m, err := telemetry.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Give every vector a child, so that gathering reports its type. A
	// metric added to telemetry needs its observer call here: the test
	// below says which one lacks it.
	m.Decision("p", true, false, false)
	m.Decision("p", false, true, true)
	m.StoreCall("take", "", time.Millisecond, nil)
	m.StoreCall("take", "127.0.0.1:7000", time.Millisecond, floodgate.ErrUnavailable)
	m.BreakerChanged("127.0.0.1:7000", true)
	m.Request("http", "/v1/check", "200", time.Millisecond)
	m.UnknownPolicy()
	m.UnknownDomain()
	m.FailureMode("open")
	m.BuildInfo("v0.1.0", "0123456789ab", "go1.26")
	m.WatchMemoryStore(func() telemetry.MemoryStats { return telemetry.MemoryStats{Entries: 1, Bound: 2, Refused: 1} })
	m.OverLimitCacheHit("p")
	m.Reload(true)
	m.Reload(false)
	m.ClientRequest("grpc", "envoy")
	m.AuthRefused("http", "admin", "missing")
	m.Overloaded("queue_full", "backpressure", 1)
	m.WatchQueue(func() int64 { return 3 })
	m.WatchLinks(func() []telemetry.StoreLink {
		return []telemetry.StoreLink{{Node: "127.0.0.1:7000", Far: true, RoundTrip: time.Millisecond, Batches: 1}}
	})
	described := map[string]bool{}
	for _, c := range reg.collectors {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			mm := fqName.FindStringSubmatch(d.String())
			if mm == nil {
				t.Fatalf("cannot read a metric's name from %s", d)
			}
			described[mm[1]] = true
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]dto.MetricType{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetType()
	}
	for name := range described {
		if _, ok := out[name]; !ok {
			t.Errorf("telemetry registers %s, but no observer call in telemetryFamilies gives it a sample: add one, so that its type is known", name)
		}
	}
	if len(described) == 0 {
		t.Fatal("telemetry registered no metric")
	}
	return out
}

// serveFamilies returns the metrics a running "floodgate serve" (started
// in-process on loopback) serves at /metrics: the Go runtime's and the
// process's beside telemetry's, and whatever serve adds.
func serveFamilies(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, &out, &errOut, func(string) string { return "" })
	}()
	defer func() {
		cancel()
		<-done
	}()
	re := regexp.MustCompile(`msg="floodgate serving".* http=(\S+)`)
	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(errOut.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", errOut.String())
		}
	}
	// One decision, so that the decision metrics have a child.
	if res, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","key":"k"}`)); err == nil {
		res.Body.Close()
	}
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	fams := map[string]dto.MetricType{}
	for name, mf := range mfs {
		fams[name] = mf.GetType()
	}
	return fams
}

// seriesNames returns the names of the series a family of the given type
// exposes, as PromQL selects them.
func seriesNames(name string, typ dto.MetricType) []string {
	switch typ {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		return []string{name + "_bucket", name + "_sum", name + "_count"}
	case dto.MetricType_SUMMARY:
		return []string{name, name + "_sum", name + "_count"}
	}
	return []string{name}
}

// grafanaVars replaces the dashboard's variables with values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "${job}", ".*", "$job", ".*")

// selectedNames returns the metric names an expression selects.
func selectedNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
			if name == "" {
				names = append(names, "<a selector without a metric name>")
			} else {
				names = append(names, name)
			}
		}
		return nil
	})
	return names, nil
}

// dashboardExprs returns every PromQL expression of a Grafana dashboard:
// its panels' targets (rows' panels included) and its query variables.
func dashboardExprs(data []byte) ([]string, error) {
	var d struct {
		Panels     []json.RawMessage
		Templating struct {
			List []struct {
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	var exprs []string
	var walk func(ps []json.RawMessage) error
	walk = func(ps []json.RawMessage) error {
		for _, raw := range ps {
			var p struct {
				Title   string
				Panels  []json.RawMessage
				Targets []struct{ Expr string }
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					return fmt.Errorf("panel %q has a target without expr", p.Title)
				}
				exprs = append(exprs, tg.Expr)
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				return nil, err
			}
		}
		if m := labelValues.FindStringSubmatch(q.Query); m != nil {
			exprs = append(exprs, m[1])
		} else {
			return nil, fmt.Errorf("variable query %q: not label_values(selector, label)", q.Query)
		}
	}
	return exprs, nil
}

// alertExprs returns the expressions of a Prometheus rule file.
func alertExprs(data []byte) ([]string, error) {
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	var exprs []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Expr == "" {
				return nil, fmt.Errorf("rule %q%q has no expr", r.Alert, r.Record)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs, nil
}

// unknownNames returns the names the expressions select that are neither
// served (served: series name -> true) nor external, each with the
// expression it is in.
func unknownNames(exprs []string, served map[string]bool) ([]string, error) {
	var bad []string
	for _, e := range exprs {
		names, err := selectedNames(e)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", e, err)
		}
		for _, n := range names {
			if !served[n] && external[n] == "" {
				bad = append(bad, fmt.Sprintf("%s (in %q)", n, strings.Join(strings.Fields(e), " ")))
			}
		}
	}
	return bad, nil
}

// TestDashboardAndAlertsUseServedMetrics: every metric the Grafana
// dashboard and the Prometheus alerts read is one floodgate serves, as
// registered by internal/telemetry and served by floodgate serve's
// /metrics (or one of the external series, from elsewhere); and every
// floodgate_* metric is on the dashboard.
func TestDashboardAndAlertsUseServedMetrics(t *testing.T) {
	families := telemetryFamilies(t)
	for name, typ := range serveFamilies(t) {
		if old, ok := families[name]; ok && old != typ {
			t.Errorf("%s is a %v in telemetry but a %v at /metrics", name, old, typ)
		}
		families[name] = typ
	}
	served := map[string]bool{}
	for name, typ := range families {
		for _, s := range seriesNames(name, typ) {
			served[s] = true
		}
	}
	for _, name := range []string{"floodgate_decisions_total", "floodgate_store_duration_seconds_bucket", "go_goroutines", "process_resident_memory_bytes"} {
		if !served[name] {
			t.Fatalf("%s is not among the served series: the collection is broken", name)
		}
	}

	dashboard, err := os.ReadFile(filepath.Join(repo, "deploy/grafana/floodgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	dexprs, err := dashboardExprs(dashboard)
	if err != nil {
		t.Fatalf("deploy/grafana/floodgate.json: %v", err)
	}
	alerts, err := os.ReadFile(filepath.Join(repo, "deploy/prometheus/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	aexprs, err := alertExprs(alerts)
	if err != nil {
		t.Fatalf("deploy/prometheus/alerts.yaml: %v", err)
	}
	if len(dexprs) < 10 || len(aexprs) < 5 {
		t.Fatalf("found %d dashboard and %d alert expressions: the parsing is broken", len(dexprs), len(aexprs))
	}
	for file, exprs := range map[string][]string{"deploy/grafana/floodgate.json": dexprs, "deploy/prometheus/alerts.yaml": aexprs} {
		bad, err := unknownNames(exprs, served)
		if err != nil {
			t.Errorf("%s: %v", file, err)
		}
		for _, b := range bad {
			t.Errorf("%s uses %s, which floodgate does not serve", file, b)
		}
	}

	onDashboard := map[string]bool{}
	for _, e := range dexprs {
		names, _ := selectedNames(e)
		for _, n := range names {
			onDashboard[n] = true
		}
	}
	var missing []string
	for name, typ := range families {
		if !strings.HasPrefix(name, "floodgate_") {
			continue
		}
		shown := false
		for _, s := range seriesNames(name, typ) {
			shown = shown || onDashboard[s]
		}
		if !shown {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("floodgate serves %s, but deploy/grafana/floodgate.json shows nothing of it: add a panel", name)
	}
}

// TestUnknownNamesCatchesDrift: the comparison above does flag a name
// floodgate does not serve, a misspelt one in a nested expression
// included, and lets through the external ones.
func TestUnknownNamesCatchesDrift(t *testing.T) {
	served := map[string]bool{"floodgate_decisions_total": true}
	bad, err := unknownNames([]string{
		`sum(rate(floodgate_decisions_total{job=~"$job"}[$__rate_interval])) / sum(rate(floodgate_decision_total[5m]))`,
		`up{job="floodgate"} == 0`,
		`{__name__="floodgate_gone"}`,
	}, served)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 2 || !strings.HasPrefix(bad[0], "floodgate_decision_total ") || !strings.HasPrefix(bad[1], "floodgate_gone ") {
		t.Errorf("unknownNames = %q, want floodgate_decision_total and floodgate_gone", bad)
	}
	if _, err := unknownNames([]string{"sum(rate(x[5m])"}, served); err == nil {
		t.Error("unknownNames accepted an expression that does not parse")
	}
}
