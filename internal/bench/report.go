package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// ReportVersion is the version of the JSON report's schema. It changes
// only when a field is removed or changes meaning; fields may be added.
const ReportVersion = 1

// Report is the outcome of a run; its JSON form is `floodgate bench
// --json`'s output, documented in docs/bench.md.
type Report struct {
	// Version is ReportVersion.
	Version int `json:"version"`

	Target   TargetInfo `json:"target"`
	Workload Workload   `json:"workload"`

	// Interrupted is set when the run was stopped early (Ctrl-C): the
	// figures are those of the requests made until then.
	Interrupted bool `json:"interrupted"`

	// ElapsedSeconds runs from the start to the last answer.
	ElapsedSeconds float64 `json:"elapsed_s"`

	// Requests counts the requests sent: Decisions plus Backpressure plus
	// Errors.
	Requests int64 `json:"requests"`
	// Decisions counts the requests answered, Allowed plus Denied.
	Decisions int64 `json:"decisions"`
	// DecisionsPerSecond is Decisions / ElapsedSeconds.
	DecisionsPerSecond float64 `json:"decisions_per_s"`
	Allowed            int64   `json:"allowed"`
	Denied             int64   `json:"denied"`
	// Errors counts requests with no answer (timeouts, refused
	// connections, bad answers); FirstError is the first one's message.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error"`
	// Degraded counts answers made by the service's failure policy rather
	// than by the algorithm (HTTP target only).
	Degraded int64 `json:"degraded"`
	// Backpressure counts answers refusing the request under the
	// service's overload bound (HTTP 503/429 "overloaded", gRPC
	// RESOURCE_EXHAUSTED): not decisions, not degraded, not errors; the
	// limiter counted none of them.
	Backpressure int64 `json:"backpressure"`
	// Unsent counts open-loop arrivals that were due before the run ended
	// but that no worker was free to send: the target fell behind Rate.
	Unsent int64 `json:"unsent"`

	// Latency is over the answered requests, in µs; in open loop it runs
	// from each request's scheduled time, not from when it was sent.
	Latency Latency `json:"latency_us"`

	// Accuracy is nil when the policy is unknown.
	Accuracy *Accuracy `json:"accuracy"`

	// Redis is what the run cost the Redis servers (Config.Server), nil
	// when not measured.
	Redis *RedisCost `json:"redis"`

	// Notes are remarks on how to read the figures (never null).
	Notes []string `json:"notes"`
}

// Workload is the run's workload, as configured.
type Workload struct {
	// Mode is "closed" (each worker waits for its answer) or "open"
	// (arrivals at Rate, whatever the answers).
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	Iterations  int64   `json:"iterations"`
	// DurationSeconds is the configured duration, 0 for none.
	DurationSeconds float64 `json:"duration_s"`
	Keys            int     `json:"keys"`
	// Distribution is "per_worker", "uniform" or "zipf".
	Distribution string  `json:"distribution"`
	ZipfS        float64 `json:"zipf_s"`
	Cost         int64   `json:"cost"`
}

// RedisCost is what a run cost Redis: the difference of the servers'
// INFO counters from before the first request to after the last answer,
// divided by the decisions. INFO counts everything the servers did
// meanwhile: every client's commands (a service's health checks, other
// traffic), new connections' handshakes, and the servers' own periodic
// work.
type RedisCost struct {
	// Servers is how many servers were read: 1, or a Cluster's masters.
	Servers int `json:"servers"`
	// CPUSeconds is the servers' CPU time over the run, user and system.
	CPUSeconds float64 `json:"cpu_s"`
	// CPUPerDecision is CPUSeconds over the decisions Redis made (not
	// the degraded ones, the failure policy's), in µs; 0 when none. The
	// other per-decision figures divide by the same.
	CPUPerDecision float64 `json:"cpu_us_per_decision"`
	// DecisionsPerCPUSecond is 10^6 / CPUPerDecision: the decisions one
	// core of Redis could make a second at this cost; 0 when unknown.
	DecisionsPerCPUSecond float64 `json:"decisions_per_cpu_s"`
	// Commands counts the commands processed over the run.
	Commands int64 `json:"commands"`
	// CommandsPerDecision is Commands over the decisions.
	CommandsPerDecision float64 `json:"commands_per_decision"`
	// Reads counts the servers' reads from client sockets (a pipelined
	// batch is often one), nil when the servers do not report them
	// (Redis before 6.0).
	Reads *int64 `json:"reads"`
	// ReadsPerDecision is Reads over the decisions, nil when Reads is.
	ReadsPerDecision *float64 `json:"reads_per_decision"`
}

// redisCost is the cost between two reads of the servers' counters, for
// decisions decisions: the per-decision figures are 0 when there are
// none.
func redisCost(before, after ServerCounters, decisions int64) *RedisCost {
	c := &RedisCost{
		Servers:    after.Servers,
		CPUSeconds: math.Round((after.CPU-before.CPU).Seconds()*1e6) / 1e6,
		Commands:   after.Commands - before.Commands,
	}
	if before.Reads >= 0 && after.Reads >= 0 {
		n := after.Reads - before.Reads
		c.Reads = &n
		if decisions <= 0 {
			zero := 0.0
			c.ReadsPerDecision = &zero
		}
	}
	if decisions > 0 {
		per := func(v float64) float64 { return math.Round(v/float64(decisions)*100) / 100 }
		c.CPUPerDecision = per(float64(after.CPU-before.CPU) / 1e3)
		if c.CPUPerDecision > 0 {
			c.DecisionsPerCPUSecond = math.Round(1e6 / (float64(after.CPU-before.CPU) / 1e3 / float64(decisions)))
		}
		c.CommandsPerDecision = per(float64(c.Commands))
		if c.Reads != nil {
			r := per(float64(*c.Reads))
			c.ReadsPerDecision = &r
		}
	}
	return c
}

// Latency is a latency distribution in µs.
type Latency struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func micros(d time.Duration) float64 { return math.Round(float64(d)/100) / 10 }

func (r *run) report(interrupted bool) *Report {
	cfg := r.cfg
	elapsed := time.Duration(r.lastDone.Load())
	c := r.counts()
	h := r.histogram()
	rep := &Report{
		Version: ReportVersion,
		Target:  cfg.Info,
		Workload: Workload{
			Mode: "closed", Concurrency: cfg.Concurrency, Rate: cfg.Rate, Iterations: cfg.Iterations,
			DurationSeconds: cfg.Duration.Seconds(), Keys: cfg.Keys, Distribution: cfg.Distribution.String(),
			Cost: cfg.Cost,
		},
		Interrupted:    interrupted,
		ElapsedSeconds: math.Round(elapsed.Seconds()*1e6) / 1e6,
		Requests:       c.allowed + c.denied + c.backpressure + c.errors,
		Decisions:      c.allowed + c.denied,
		Allowed:        c.allowed,
		Denied:         c.denied,
		Errors:         c.errors,
		Degraded:       c.degraded,
		Backpressure:   c.backpressure,
		Latency: Latency{
			Min: micros(h.Min()), Mean: micros(h.Mean()), P50: micros(h.Quantile(0.50)), P90: micros(h.Quantile(0.90)),
			P99: micros(h.Quantile(0.99)), P999: micros(h.Quantile(0.999)), Max: micros(h.Max()),
		},
		Notes: []string{},
	}
	if rep.Target.Descriptor == nil {
		rep.Target.Descriptor = []string{}
	}
	if cfg.Distribution == Zipf {
		rep.Workload.ZipfS = cfg.ZipfS
	}
	if cfg.Rate > 0 {
		rep.Workload.Mode = "open"
		end := r.deadline
		if at := time.Duration(r.stoppedAt.Load()); at > 0 && (end == 0 || at < end) {
			end = at
		}
		if end > 0 && !r.aborted {
			rep.Unsent = max(0, r.due(end)-r.sent.Load())
		}
	}
	if elapsed > 0 {
		rep.DecisionsPerSecond = math.Round(float64(rep.Decisions)/elapsed.Seconds()*10) / 10
	}
	if r.firstErr != nil {
		rep.FirstError = r.firstErr.Error()
	}
	if r.ledger != nil {
		rep.Accuracy = r.ledger.accuracy()
		if c.errors > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d requests failed and may or may not have been counted by the limiter: accuracy is approximate", c.errors))
		}
		if c.backpressure > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d answers were backpressure (the service's overload bound): never sent to the limiter, they are left out of accuracy, which stays exact", c.backpressure))
		}
		if c.degraded > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d answers came from the service's failure policy, not from its algorithm: accuracy leaves them out and is approximate", c.degraded))
		}
	}
	if rep.Unsent > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the target fell behind the rate: %d arrivals due before the end were never sent", rep.Unsent))
	}
	return rep
}

// WriteJSON writes the report as one JSON object and a newline.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes the report for people.
func (rep *Report) WriteText(w io.Writer) {
	t := rep.Target
	fmt.Fprintf(w, "floodgate bench: %s %s", t.Kind, t.Address)
	switch {
	case t.PolicyName != "" && t.Policy != "":
		fmt.Fprintf(w, ", policy %s (%s)", t.PolicyName, t.Policy)
	case t.Policy != "":
		fmt.Fprintf(w, ", policy %s", t.Policy)
	case t.PolicyName != "":
		fmt.Fprintf(w, ", policy %s", t.PolicyName)
	}
	if t.Domain != "" {
		fmt.Fprintf(w, ", domain %s descriptor %s", t.Domain, strings.Join(t.Descriptor, ","))
	}
	fmt.Fprintln(w)
	wl := rep.Workload
	fmt.Fprintf(w, "  workload   %s loop, %d workers", wl.Mode, wl.Concurrency)
	if wl.Mode == "open" {
		fmt.Fprintf(w, ", %s arrivals/s", formatCount(wl.Rate))
	}
	switch wl.Distribution {
	case "per_worker":
		fmt.Fprintf(w, ", %d keys (one per worker)", wl.Keys)
	case "zipf":
		fmt.Fprintf(w, ", %d keys (zipf, s=%g)", wl.Keys, wl.ZipfS)
	default:
		fmt.Fprintf(w, ", %d keys (%s)", wl.Keys, wl.Distribution)
	}
	fmt.Fprintf(w, ", cost %d\n", wl.Cost)
	state := ""
	if rep.Interrupted {
		state = "  (interrupted: the figures so far)"
	}
	fmt.Fprintf(w, "  elapsed    %.3f s%s\n", rep.ElapsedSeconds, state)
	fmt.Fprintf(w, "  decisions  %s (%s/s)   allowed %s   denied %s   errors %s",
		formatCount(float64(rep.Decisions)), formatCount(rep.DecisionsPerSecond),
		formatCount(float64(rep.Allowed)), formatCount(float64(rep.Denied)), formatCount(float64(rep.Errors)))
	if rep.Degraded > 0 {
		fmt.Fprintf(w, "   degraded %s", formatCount(float64(rep.Degraded)))
	}
	if rep.Backpressure > 0 {
		fmt.Fprintf(w, "   backpressure %s", formatCount(float64(rep.Backpressure)))
	}
	if rep.Unsent > 0 {
		fmt.Fprintf(w, "   unsent %s", formatCount(float64(rep.Unsent)))
	}
	fmt.Fprintln(w)
	l := rep.Latency
	from := ""
	if wl.Mode == "open" {
		from = "  (from each request's scheduled time)"
	}
	fmt.Fprintf(w, "  latency    p50 %s   p90 %s   p99 %s   p99.9 %s   max %s   (min %s, mean %s)%s\n",
		fmtUS(l.P50), fmtUS(l.P90), fmtUS(l.P99), fmtUS(l.P999), fmtUS(l.Max), fmtUS(l.Min), fmtUS(l.Mean), from)
	if a := rep.Accuracy; a != nil {
		ratio := "n/a"
		if a.Ratio != nil {
			ratio = fmt.Sprintf("%.3f", *a.Ratio)
		}
		fmt.Fprintf(w, "  accuracy   %s   admitted %s of an ideal %s (bound %s) over %d keys\n",
			ratio, formatCount(float64(a.Admitted)), formatCount(float64(a.Ideal)), formatCount(float64(a.Bound)), a.Keys)
		if a.UnderAdmitted > 0 {
			fmt.Fprintf(w, "  under-admission: %s below what an exact limiter admits, on %d keys\n",
				formatCount(float64(a.UnderAdmitted)), a.UnderKeys)
		}
		if a.Over() {
			fmt.Fprint(w, OverAdmissionMessage(a))
		} else if a.OverAdmitted > 0 {
			fmt.Fprintf(w, "  possible over-admission: %s admitted that the twins could not place, on %d keys (an estimate when requests on a key overlap: docs/bench.md)\n",
				formatCount(float64(a.OverAdmitted)), a.OverKeys)
		}
	} else {
		fmt.Fprintln(w, "  accuracy   unknown (the policy is not known)")
	}
	if c := rep.Redis; c != nil {
		servers := "1 server"
		if c.Servers != 1 {
			servers = fmt.Sprintf("%d servers", c.Servers)
		}
		if rep.Decisions-rep.Degraded <= 0 {
			fmt.Fprintf(w, "  redis      cpu %.6f s   commands %d   (%s; no decision to divide by)\n", c.CPUSeconds, c.Commands, servers)
		} else {
			fmt.Fprintf(w, "  redis      cpu %.2f µs/decision", c.CPUPerDecision)
			if c.DecisionsPerCPUSecond > 0 {
				fmt.Fprintf(w, " (one core: %s decisions/s)", formatCount(c.DecisionsPerCPUSecond))
			}
			fmt.Fprintf(w, "   commands %.2f/decision", c.CommandsPerDecision)
			if c.ReadsPerDecision != nil {
				fmt.Fprintf(w, "   reads %.2f/decision", *c.ReadsPerDecision)
			}
			fmt.Fprintf(w, "   (%s)\n", servers)
		}
	}
	if rep.FirstError != "" {
		fmt.Fprintf(w, "  first error: %s\n", rep.FirstError)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// OverAdmissionMessage is the warning printed when a run admitted more
// than SPEC.md allows.
func OverAdmissionMessage(a *Accuracy) string {
	var b strings.Builder
	b.WriteString("  !!! OVER-ADMISSION !!!\n")
	fmt.Fprintf(&b, "  the target admitted %d more than SPEC.md allows for the keys' spans, whatever the timing and order of the requests",
		a.BeyondBound)
	if a.OverAdmitted > 0 {
		fmt.Fprintf(&b, "; the twins place the excess at %d on %d of %d keys", a.OverAdmitted, a.OverKeys, a.Keys)
	}
	b.WriteString("\n")
	return b.String()
}

// fmtUS formats µs for people: 850µs, 1.23ms, 2.50s.
func fmtUS(v float64) string {
	d := time.Duration(v * 1e3)
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", v)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", v/1e3)
	}
	return fmt.Sprintf("%.2fs", v/1e6)
}

// formatCount formats a count with thousands separators (one decimal for
// fractions below 100).
func formatCount(v float64) string {
	if v != math.Trunc(v) && math.Abs(v) < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
