package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// usageSeries is the body of GET /v1/keys/{key}/usage.
type usageSeries struct {
	Policy       string    `json:"policy"`
	Key          string    `json:"key"`
	From         time.Time `json:"from"`
	To           time.Time `json:"to"`
	StepUS       int64     `json:"step_us"`
	ResolutionUS int64     `json:"resolution_us"`
	Points       []struct {
		T        time.Time `json:"t"`
		Requests int64     `json:"requests"`
		Denied   int64     `json:"denied"`
	} `json:"points"`
	Requests usageStats `json:"requests"`
	Denied   usageStats `json:"denied"`
}

type usageStats struct {
	Sum    int64      `json:"sum"`
	Mean   float64    `json:"mean"`
	Peak   int64      `json:"peak"`
	PeakAt *time.Time `json:"peak_at"`
}

func (e *environ) usageCmd(args []string) int {
	c, fs := e.clientFlags("usage", "[flags] POLICY KEY",
		"Prints KEY's usage series under POLICY, a policy that keeps one (track 1m for 24h):\n"+
			"requests and denied per step, as a table and a sparkline, with their sums, means\n"+
			"per step and peaks. An admin action.", EnvAdminToken)
	from := fs.String("from", "", "the series' start: an RFC 3339 `time`, or a duration before now such as -1h (default: to less the policy's retention)")
	to := fs.String("to", "", "its end: an RFC 3339 `time`, or a duration before now such as -5m (default: now)")
	step := fs.String("step", "", "the `duration` of a point, a whole multiple of the policy's resolution (default: the resolution)")
	asJSON := fs.Bool("json", false, "print the service's JSON answer")
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		return e.errorf("usage takes POLICY and KEY (floodgate usage --help)")
	}
	q := url.Values{"policy": {fs.Arg(0)}}
	for name, v := range map[string]string{"from": *from, "to": *to, "step": *step} {
		if v != "" {
			q.Set(name, v)
		}
	}
	var raw json.RawMessage
	if _, err := e.do(c, http.MethodGet, "/v1/keys/"+url.PathEscape(fs.Arg(1))+"/usage?"+q.Encode(), nil, &raw); err != nil {
		return e.errorf("%v", err)
	}
	if *asJSON {
		var b bytes.Buffer
		json.Indent(&b, raw, "", "  ")
		fmt.Fprintln(e.stdout, b.String())
		return 0
	}
	var s usageSeries
	if err := json.Unmarshal(raw, &s); err != nil {
		return e.errorf("unexpected answer: %v", err)
	}
	printSeries(e.stdout, &s)
	return 0
}

// printSeries writes a series as a table, its summary and sparklines.
func printSeries(w io.Writer, s *usageSeries) {
	step := time.Duration(s.StepUS) * time.Microsecond
	res := time.Duration(s.ResolutionUS) * time.Microsecond
	fmt.Fprintf(w, "%s %q from %s to %s, step %s (resolution %s)\n\n", s.Policy, s.Key,
		s.From.UTC().Format(time.RFC3339), s.To.UTC().Format(time.RFC3339), step, res)
	fmt.Fprintf(w, "%-20s %12s %12s\n", "TIME (UTC)", "REQUESTS", "DENIED")
	req := make([]int64, len(s.Points))
	den := make([]int64, len(s.Points))
	for i, p := range s.Points {
		fmt.Fprintf(w, "%-20s %12d %12d\n", p.T.UTC().Format(time.DateTime), p.Requests, p.Denied)
		req[i], den[i] = p.Requests, p.Denied
	}
	fmt.Fprintln(w)
	for _, x := range []struct {
		name   string
		st     usageStats
		values []int64
	}{{"requests", s.Requests, req}, {"denied", s.Denied, den}} {
		peak := fmt.Sprintf("peak %d", x.st.Peak)
		if x.st.PeakAt != nil {
			peak += " at " + x.st.PeakAt.UTC().Format(time.DateTime)
		}
		fmt.Fprintf(w, "%-8s  sum %d  mean %.2f per %s  %s\n", x.name, x.st.Sum, x.st.Mean, step, peak)
		fmt.Fprintf(w, "%-8s  %s\n", "", sparkline(x.values, 100))
	}
}

// sparkChars are the eight heights of a sparkline, lowest (0) first.
var sparkChars = []rune("▁▂▃▄▅▆▇█")

// sparkline draws values as one line of at most width characters (each
// the largest of the values it covers): ▁ for 0, then seven heights up to
// the largest value.
func sparkline(values []int64, width int) string {
	if len(values) == 0 {
		return ""
	}
	cols := values
	if len(values) > width {
		cols = make([]int64, width)
		for i, v := range values {
			c := i * width / len(values)
			cols[c] = max(cols[c], v)
		}
	}
	var top int64
	for _, v := range cols {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range cols {
		i := 0
		if top > 0 && v > 0 {
			i = int(1 + (v-1)*6/max(top-1, 1))
			if v == top {
				i = 7
			}
		}
		b.WriteRune(sparkChars[i])
	}
	return b.String()
}
