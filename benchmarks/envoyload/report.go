package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// cell is the median over passes of one workload × contender.
type cell struct {
	n                          int
	perSec, perSecMin, perSecM float64 // median, min, max
	ok, over, errs, unsent     int64   // summed over passes
	degraded                   int64   // summed; -1: n/a
	p50, p99, p999             time.Duration
	redisUs, contUs            float64
	disturbed                  int
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

func summarize(rows []row, w workload, c contender) (cell, bool) {
	var ce cell
	var per, p50, p99, p999, rUs, cUs []float64
	ce.degraded = -1
	for _, r := range rows {
		if r.w.name != w.name || r.c.name != c.name {
			continue
		}
		ce.n++
		res := r.res
		per = append(per, res.perSec)
		p50 = append(p50, float64(quantile(res.lat, .5)))
		p99 = append(p99, float64(quantile(res.lat, .99)))
		p999 = append(p999, float64(quantile(res.lat, .999)))
		rUs = append(rUs, r.redisUs)
		cUs = append(cUs, r.contUs)
		ce.ok += res.ok
		ce.over += res.overLimit
		ce.errs += res.errors
		ce.unsent += res.unsent
		if r.degraded >= 0 {
			ce.degraded = max(ce.degraded, 0) + r.degraded
		}
		if r.kept != "kept" {
			ce.disturbed++
		}
	}
	if ce.n == 0 {
		return ce, false
	}
	ce.perSec = median(per)
	ce.perSecMin, ce.perSecM = slices.Min(per), slices.Max(per)
	ce.p50, ce.p99, ce.p999 = time.Duration(median(p50)), time.Duration(median(p99)), time.Duration(median(p999))
	ce.redisUs, ce.contUs = median(rUs), median(cUs)
	return ce, true
}

func printReport(w io.Writer, rows []row, ws []workload, cs []contender, o options, machine string) {
	fmt.Fprintf(w, "floodgate serve against envoyproxy/ratelimit on one redis-server: medians over %s\n\n", plural(o.passes, "interleaved pass", "interleaved passes"))
	if machine != "" {
		fmt.Fprint(w, machine, "\n")
	}
	fmt.Fprintln(w, "| workload | contender | decisions/s | range | OK | OVER_LIMIT | errors | degraded | p50 | p99 | p99.9 | redis-server CPU µs/decision | contender CPU µs/decision |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, wl := range ws {
		for _, c := range cs {
			ce, ok := summarize(rows, wl, c)
			if !ok {
				continue
			}
			errs := groupDigits(int(ce.errs))
			if ce.unsent > 0 {
				errs += fmt.Sprintf(" (+%s unsent)", groupDigits(int(ce.unsent)))
			}
			deg := "n/a"
			if ce.degraded >= 0 {
				deg = groupDigits(int(ce.degraded))
			}
			name := c.name
			if ce.disturbed > 0 {
				name += fmt.Sprintf(" (%d disturbed)", ce.disturbed)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s–%s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f |\n",
				wl.describe(), name, groupDigits(int(ce.perSec+.5)),
				groupDigits(int(ce.perSecMin+.5)), groupDigits(int(ce.perSecM+.5)),
				groupDigits(int(ce.ok)), groupDigits(int(ce.over)), errs, deg,
				fmtDur(ce.p50), fmtDur(ce.p99), fmtDur(ce.p999), ce.redisUs, ce.contUs)
		}
	}
	fmt.Fprintln(w)

	// The targets: floodgate (defaults) against the workload's
	// baseline contender.
	if fg := byName(cs, "floodgate"); fg.name != "" {
		fmt.Fprintln(w, "Targets (floodgate with its defaults against the baseline: ≥ 2× decisions/s and ≤ its redis-server CPU per decision; open loop: a lower p99):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| workload | baseline | decisions/s, floodgate ÷ baseline | redis-server µs/decision, floodgate vs baseline | p99, floodgate vs baseline | targets met |")
		fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | --- |")
		for _, wl := range ws {
			base := byName(cs, wl.baseline)
			f, ok1 := summarize(rows, wl, fg)
			b, ok2 := summarize(rows, wl, base)
			if !ok1 || !ok2 || b.perSec == 0 {
				continue
			}
			ratio := f.perSec / b.perSec
			var met []string
			verdict := func(name string, ok bool) {
				if ok {
					met = append(met, name+" yes")
				} else {
					met = append(met, name+" no")
				}
			}
			if wl.open() {
				verdict("p99", f.p99 < b.p99)
			} else {
				verdict("2×", ratio >= 2)
			}
			verdict("redis CPU", f.redisUs <= b.redisUs)
			fmt.Fprintf(w, "| %s | %s | %.2f× | %.1f vs %.1f | %s vs %s | %s |\n", wl.describe(), base.name, ratio,
				f.redisUs, b.redisUs, fmtDur(f.p99), fmtDur(b.p99), strings.Join(met, ", "))
		}
		fmt.Fprintln(w)
	}

	printFloor(w, rows, ws, cs)

	fmt.Fprintln(w, "Contenders:")
	fmt.Fprintln(w)
	for _, c := range cs {
		fmt.Fprintf(w, "- `%s`: %s\n", c.name, c.note)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The Envoy domain file both load unchanged (requests: domain `bench`, one descriptor `{user: uN}` or `{hot: u0}`, hits_addend 1):")
	fmt.Fprintln(w)
	fmt.Fprint(w, "```yaml\n", domainYAML, "```\n")
}

// printFloor writes, when the floor contender ran, how far each workload's
// baseline and floodgate stand from it: the floor's decisions/s divided by
// the baseline's is the most any Go service of Envoy's API could reach
// against the baseline on this machine with this load generator (the
// floor decides nothing and keeps nothing), so a target of k× the baseline
// is out of reach for every service where it is under k.
func printFloor(w io.Writer, rows []row, ws []workload, cs []contender) {
	floor, fg := byName(cs, "floor"), byName(cs, "floodgate")
	if floor.name == "" {
		return
	}
	fmt.Fprintln(w, "The floor (a gRPC server of the same API that decides nothing; closed loops only):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | baseline | floor decisions/s | floor CPU µs/decision | floor ÷ baseline: the most any service reaches | floodgate ÷ floor |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: |")
	for _, wl := range ws {
		if wl.open() {
			continue
		}
		fl, ok := summarize(rows, wl, floor)
		if !ok {
			continue
		}
		// ratio is num's decisions/s over den's, or "—" when either did
		// not run.
		ratio := func(num, den contender) string {
			n, ok1 := summarize(rows, wl, num)
			d, ok2 := summarize(rows, wl, den)
			if !ok1 || !ok2 || d.perSec == 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f×", n.perSec/d.perSec)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f | %s | %s |\n", wl.describe(), wl.baseline,
			groupDigits(int(fl.perSec+.5)), fl.contUs, ratio(floor, byName(cs, wl.baseline)), ratio(fg, floor))
	}
	fmt.Fprintln(w)
}

// byName returns the contender of cs called name, or the zero contender.
func byName(cs []contender, name string) contender {
	for _, c := range cs {
		if c.name == name {
			return c
		}
	}
	return contender{}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
