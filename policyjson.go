package floodgate

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// policyJSON is the JSON form of a Policy, with SPEC.md's field names.
// Numbers stay json.Number so that integers beyond 2^53 are not rounded
// before they are checked.
type policyJSON struct {
	Name        string       `json:"name,omitempty"`
	Algorithm   string       `json:"algorithm"`
	Limits      []limitJSON  `json:"limits,omitempty"`
	Max         *json.Number `json:"max,omitempty"`
	Limit       *json.Number `json:"limit,omitempty"`
	Window      string       `json:"window,omitempty"`
	Align       string       `json:"align,omitempty"`
	Burst       *json.Number `json:"burst,omitempty"`
	Interval    string       `json:"interval,omitempty"`
	MinInterval string       `json:"min_interval,omitempty"`
	Rate        string       `json:"rate,omitempty"`
	CountDenied *bool        `json:"count_denied,omitempty"`
	Track       bool         `json:"track,omitempty"`
	Retention   string       `json:"retention,omitempty"`
}

type limitJSON struct {
	Max        json.Number `json:"max"`
	Window     string      `json:"window,omitempty"`
	Resolution string      `json:"resolution"`
	Decay      json.Number `json:"decay,omitempty"`
}

// MarshalJSON returns the policy in SPEC.md's JSON form:
// {"name":"api","algorithm":"gcra","rate":"100/1s","burst":10}.
func (p Policy) MarshalJSON() ([]byte, error) {
	j := policyJSON{Name: p.Name, Algorithm: p.Algorithm.String(), Track: p.Track}
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
	if p.Max != 0 || p.Algorithm == FixedWindow {
		if p.Algorithm == TokenBucket {
			j.Limit = num(p.Max)
		} else {
			j.Max = num(p.Max)
		}
	}
	j.Window = dur(p.Window)
	if p.Algorithm == FixedWindow {
		j.Align = p.Align.String()
	}
	if p.Burst != 0 {
		j.Burst = num(p.Burst)
	}
	j.Interval = dur(p.Interval)
	j.MinInterval = dur(p.MinInterval)
	if p.Rate != (Rate{}) {
		j.Rate = p.Rate.String()
	}
	if p.CountDenied != Default {
		b := p.CountDenied == On
		j.CountDenied = &b
	}
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
	q := Policy{Name: j.Name, Track: j.Track}
	perr := func(field, value, allowed string) error {
		return &PolicyError{Policy: j.Name, Field: field, Value: value, Allowed: allowed}
	}
	a, err := ParseAlgorithm(j.Algorithm)
	if err != nil {
		return perr("algorithm", quote(j.Algorithm), algorithmList)
	}
	q.Algorithm = a
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
	switch {
	case a == TokenBucket && j.Max != nil:
		return perr("max", j.Max.String(), "not a parameter of token_bucket (its quota is limit)")
	case a != TokenBucket && j.Limit != nil:
		return perr("limit", j.Limit.String(), "not a parameter of "+a.String())
	case a == TokenBucket:
		if q.Max, err = integer("limit", j.Limit); err != nil {
			return err
		}
	default:
		if q.Max, err = integer("max", j.Max); err != nil {
			return err
		}
	}
	if q.Window, err = dur("window", j.Window); err != nil {
		return err
	}
	if j.Align != "" {
		if err := q.Align.UnmarshalText([]byte(j.Align)); err != nil {
			return perr("align", quote(j.Align), "epoch or first")
		}
		if a != FixedWindow {
			return perr("align", j.Align, "not a parameter of "+a.String())
		}
	}
	if q.Burst, err = integer("burst", j.Burst); err != nil {
		return err
	}
	if a == GCRA && j.Burst == nil {
		q.Burst = 1
	}
	if q.Interval, err = dur("interval", j.Interval); err != nil {
		return err
	}
	if q.MinInterval, err = dur("min_interval", j.MinInterval); err != nil {
		return err
	}
	if j.Rate != "" {
		if q.Rate, err = ParseRate(j.Rate); err != nil {
			return err
		}
	}
	if j.CountDenied != nil {
		q.CountDenied = SwitchOf(*j.CountDenied)
	}
	if q.Retention, err = dur("retention", j.Retention); err != nil {
		return err
	}
	*p = q
	return nil
}
