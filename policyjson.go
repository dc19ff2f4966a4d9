package floodgate

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// policyJSON is the JSON form of a Policy, with SPEC.md's field names.
// Numbers stay json.Number so that integers beyond 2^53 are not rounded
// before they are checked.
type policyJSON struct {
	Name        string          `json:"name,omitempty"`
	Algorithm   string          `json:"algorithm"`
	Limits      []limitJSON     `json:"limits,omitempty"`
	Max         *json.Number    `json:"max,omitempty"`
	Limit       *json.Number    `json:"limit,omitempty"`
	Window      string          `json:"window,omitempty"`
	Align       string          `json:"align,omitempty"`
	Burst       *json.Number    `json:"burst,omitempty"`
	Interval    string          `json:"interval,omitempty"`
	MinInterval string          `json:"min_interval,omitempty"`
	Rate        string          `json:"rate,omitempty"`
	CountDenied *bool           `json:"count_denied,omitempty"`
	Track       json.RawMessage `json:"track,omitempty"` // true, false or "1m for 24h"
	Retention   string          `json:"retention,omitempty"`
	Period      string          `json:"period,omitempty"`
	TZ          string          `json:"tz,omitempty"`
	HashTag     bool            `json:"hash_tag,omitempty"`
}

type limitJSON struct {
	Max        json.Number `json:"max"`
	Window     string      `json:"window,omitempty"`
	Resolution string      `json:"resolution"`
	Decay      json.Number `json:"decay,omitempty"`
}

// MarshalJSON returns the policy in SPEC.md's JSON form:
// {"name":"api","algorithm":"gcra","rate":"100/1s","burst":10}, or for a
// calendar window {"algorithm":"fixed_window","max":1000,"align":"calendar",
// "period":"month","tz":"Europe/Paris"}.
func (p Policy) MarshalJSON() ([]byte, error) {
	j := policyJSON{Name: p.Name, Algorithm: string(p.Algorithm), CountDenied: p.CountDenied,
		Period: p.Period, TZ: p.TZ, HashTag: p.HashTag}
	switch {
	case p.SeriesResolution != 0 || p.SeriesRetention != 0:
		j.Track, _ = json.Marshal(formatSeries(p.SeriesResolution, p.SeriesRetention))
	case p.Track:
		j.Track = json.RawMessage("true")
	}
	num := func(n int64) *json.Number {
		v := json.Number(strconv.FormatInt(n, 10))
		return &v
	}
	dur := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return formatDuration(d)
	}
	for _, l := range p.Limits {
		lj := limitJSON{
			Max:        json.Number(strconv.FormatFloat(l.Max, 'f', -1, 64)),
			Window:     dur(l.Window),
			Resolution: formatDuration(l.Resolution),
		}
		if l.Decay != 0 {
			lj.Decay = json.Number(strconv.FormatFloat(l.Decay, 'g', -1, 64))
		}
		j.Limits = append(j.Limits, lj)
	}
	switch p.Algorithm {
	case GCRA:
		if p.Max != 0 || p.Window != 0 {
			j.Rate = formatRate(p.Max, p.Window)
		}
	case TokenBucket:
		if p.Max != 0 {
			j.Limit = num(p.Max)
		}
		j.Window = dur(p.Window)
	case SlidingLog:
		if p.Max != 0 {
			j.Max = num(p.Max)
		}
		j.Interval = dur(p.Window)
	case FixedWindow:
		j.Max = num(p.Max)
		j.Window = dur(p.Window)
		j.Align = string(AlignEpoch)
		if p.Align != "" {
			j.Align = string(p.Align)
		}
	default:
		if p.Max != 0 {
			j.Max = num(p.Max)
		}
		j.Window = dur(p.Window)
	}
	if p.Burst != 0 {
		j.Burst = num(p.Burst)
	}
	j.MinInterval = dur(p.MinInterval)
	j.Retention = dur(p.Retention)
	return json.Marshal(j)
}

// UnmarshalJSON reads SPEC.md's JSON form, as the conformance vectors use
// it. Unknown fields are errors; absent fields take SPEC.md's defaults
// (gcra burst 1, align epoch, count_denied by algorithm). It does not
// validate the result beyond the syntax of each field: call Validate.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var j policyJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		return &PolicyError{Policy: j.Name, Field: "json", Allowed: "a policy object with SPEC.md's fields: " + err.Error()}
	}
	a := Algorithm(j.Algorithm)
	q := Policy{Name: j.Name, Algorithm: a, CountDenied: j.CountDenied}
	perr := func(field, value, allowed string) error {
		return &PolicyError{Policy: j.Name, Field: field, Value: value, Allowed: allowed}
	}
	if len(j.Track) > 0 {
		var on bool
		var series string
		switch {
		case json.Unmarshal(j.Track, &on) == nil:
			q.Track = on
		case json.Unmarshal(j.Track, &series) == nil:
			res, keep, err := parseSeries(series)
			if err != nil {
				err.(*PolicyError).Policy = j.Name
				return err
			}
			q.Track, q.SeriesResolution, q.SeriesRetention = true, res, keep
		default:
			return perr("track", string(j.Track), `true, false or a series such as "1m for 24h"`)
		}
	}
	if !a.valid() {
		return perr("algorithm", quote(j.Algorithm), algorithmList)
	}
	dur := func(field, s string) (time.Duration, error) {
		if s == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, perr(field, quote(s), `a Go duration such as "250ms" or "1m30s"`)
		}
		return d, nil
	}
	integer := func(field string, n *json.Number) (int64, error) {
		if n == nil {
			return 0, nil
		}
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			return 0, perr(field, n.String(), "an integer")
		}
		return v, nil
	}
	var err error
	for i, lj := range j.Limits {
		f := "limits[" + strconv.Itoa(i) + "]."
		var l Limit
		if l.Max, err = strconv.ParseFloat(lj.Max.String(), 64); err != nil {
			return perr(f+"max", lj.Max.String(), "a number")
		}
		if l.Window, err = dur(f+"window", lj.Window); err != nil {
			return err
		}
		if l.Resolution, err = dur(f+"resolution", lj.Resolution); err != nil {
			return err
		}
		if lj.Decay != "" {
			if l.Decay, err = strconv.ParseFloat(lj.Decay.String(), 64); err != nil {
				return perr(f+"decay", lj.Decay.String(), "a number > 1")
			}
		}
		q.Limits = append(q.Limits, l)
	}
	// Each algorithm's quota under SPEC.md's names: max (and window or
	// interval), limit, rate. A name of another algorithm is an error.
	own := map[Algorithm][]string{
		FixedWindow: {"max", "window"}, TokenBucket: {"limit", "window"},
		SlidingLog: {"max", "interval"}, GCRA: {"rate"},
	}[a]
	for _, f := range []struct {
		name string
		set  bool
		val  string
	}{
		{"max", j.Max != nil, numString(j.Max)}, {"limit", j.Limit != nil, numString(j.Limit)},
		{"window", j.Window != "", j.Window}, {"interval", j.Interval != "", j.Interval}, {"rate", j.Rate != "", j.Rate},
	} {
		if f.set && !slices.Contains(own, f.name) {
			allowed := "not a parameter of " + j.Algorithm
			if a == TokenBucket && f.name == "max" {
				allowed = "not a parameter of token_bucket (its quota is limit)"
			} else if a == SlidingWindow || a == AR1 {
				allowed += " (its limits carry max, window and resolution)"
			}
			return perr(f.name, f.val, allowed)
		}
	}
	switch a {
	case GCRA:
		if j.Rate != "" {
			if q.Max, q.Window, err = parseRate("rate", j.Rate); err != nil {
				return err
			}
		}
	case TokenBucket:
		if q.Max, err = integer("limit", j.Limit); err != nil {
			return err
		}
	default:
		if q.Max, err = integer("max", j.Max); err != nil {
			return err
		}
	}
	if a == SlidingLog {
		if q.Window, err = dur("interval", j.Interval); err != nil {
			return err
		}
	} else if a != GCRA {
		if q.Window, err = dur("window", j.Window); err != nil {
			return err
		}
	}
	if j.Align != "" {
		if j.Align != string(AlignEpoch) && j.Align != string(AlignFirst) && j.Align != string(alignCalendar) {
			return perr("align", quote(j.Align), "epoch, first or calendar")
		}
		if a != FixedWindow {
			return perr("align", j.Align, "not a parameter of "+j.Algorithm)
		}
		if j.Align != string(AlignEpoch) {
			q.Align = Align(j.Align)
		}
	}
	q.Period, q.TZ, q.HashTag = j.Period, j.TZ, j.HashTag
	if q.Burst, err = integer("burst", j.Burst); err != nil {
		return err
	}
	if a == GCRA && j.Burst == nil {
		q.Burst = 1
	}
	if q.MinInterval, err = dur("min_interval", j.MinInterval); err != nil {
		return err
	}
	if q.Retention, err = dur("retention", j.Retention); err != nil {
		return err
	}
	*p = q
	return nil
}

func numString(n *json.Number) string {
	if n == nil {
		return ""
	}
	return n.String()
}
