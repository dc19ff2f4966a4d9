package floodgate

import (
	"strconv"
	"strings"
	"time"
)

// ParsePolicy parses the text form of a policy's parameters and returns the
// policy named name. The text is an optional algorithm name (GCRA when
// absent), then one or more comma-separated clauses (several only for
// sliding_window and ar1), each a count per duration followed by options:
//
//	100/1m                                  gcra, 100 per minute, burst 1
//	5/1s burst 10                           gcra, 5 per second, burst 10
//	fixed_window 100/1m align first         100 per window opened by the first request
//	fixed_window 1000/1month align calendar tz Europe/Paris
//	                                        1000 per calendar month in Paris
//	token_bucket 15/1m burst 3              start with 3, at most 15 per minute
//	sliding_log 10/1s min_interval 100ms    10 per rolling second, 100 ms apart
//	sliding_window 1/5s resolution 1s, 5/1h resolution 10m
//	ar1 5/1s decay 2                        max 5, the count halves every second
//
// The count per duration is the rate of gcra, max/window of fixed_window,
// limit/window of token_bucket, max/interval of sliding_log, max/window of a
// sliding_window limit and max/resolution of an ar1 limit. Options are
// "burst N", "align epoch|first|calendar", "tz ZONE" (a calendar window's
// IANA time zone), "min_interval D", "resolution D" and "decay F" (for the
// clause they follow), "count_denied [true|false]", "track [true|false]",
// "track R for D" (a usage series: per bucket of R, kept D), "retention D"
// and "hash_tag [true|false]". Durations are Go durations ("250ms",
// "1m30s"); a calendar window's period is written 1day, 1week or 1month,
// and only with "align calendar". Policy.String returns this form.
//
// The result is validated; an error wraps ErrInvalidPolicy and names the
// part of the text at fault.
func ParsePolicy(name, text string) (Policy, error) {
	p, err := parsePolicyText(text)
	if err != nil {
		if pe, ok := err.(*PolicyError); ok {
			pe.Policy = name
		}
		return Policy{}, err
	}
	p.Name = name
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

func parsePolicyText(text string) (Policy, error) {
	var p Policy
	clauses := strings.Split(text, ",")
	for ci, clause := range clauses {
		toks := strings.Fields(clause)
		if ci == 0 && len(toks) > 0 {
			if c := toks[0][0]; ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') && !strings.Contains(toks[0], "/") {
				p.Algorithm = Algorithm(toks[0])
				if !p.Algorithm.valid() {
					return Policy{}, &PolicyError{Field: "algorithm", Value: quote(toks[0]), Allowed: algorithmList}
				}
				toks = toks[1:]
			}
		}
		if ci == 0 && p.Algorithm == "" {
			p.Algorithm = GCRA
		}
		if len(toks) == 0 {
			return Policy{}, syntaxError(text, "a count per duration such as 100/1m")
		}
		multi := p.Algorithm == SlidingWindow || p.Algorithm == AR1
		if ci > 0 && !multi {
			return Policy{}, syntaxError(text, "one clause: only sliding_window and ar1 take several limits, separated by commas")
		}
		var lim *Limit
		if p.Algorithm == AR1 {
			// An AR(1) max may be fractional: "1.2/1s".
			count, period, ok := strings.Cut(toks[0], "/")
			max, err := strconv.ParseFloat(count, 64)
			if !ok || err != nil {
				return Policy{}, &PolicyError{Field: "policy text", Value: quote(toks[0]), Allowed: `"<max>/<resolution>", such as "5/1s"`}
			}
			res, err := parseDuration(period)
			if err != nil {
				return Policy{}, &PolicyError{Field: "resolution", Value: quote(period), Allowed: `a Go duration such as "1s"`}
			}
			p.Limits = append(p.Limits, Limit{Max: max, Resolution: res})
			lim = &p.Limits[len(p.Limits)-1]
		} else if n, period, ok := calendarRate(p.Algorithm, toks[0]); ok {
			p.Max, p.Period = n, period
		} else {
			count, period, err := parseRate("rate", toks[0])
			if err != nil {
				return Policy{}, err
			}
			if p.Algorithm == SlidingWindow {
				p.Limits = append(p.Limits, Limit{Max: float64(count), Window: period})
				lim = &p.Limits[len(p.Limits)-1]
			} else {
				p.Max, p.Window = count, period
			}
		}
		if err := parseOptions(&p, lim, toks[1:]); err != nil {
			return Policy{}, err
		}
	}
	if p.Period != "" && p.Align != alignCalendar {
		return Policy{}, &PolicyError{Field: "period", Value: quote("1" + p.Period), Allowed: "1day, 1week or 1month only with align calendar"}
	}
	if p.Algorithm == GCRA && !hasOption(text, "burst") {
		p.Burst = 1 // SPEC.md's default; an explicit "burst 0" stays 0 and is refused
	}
	return p, nil
}

// calendarRate parses a calendar window's "<max>/1day", "/1week" or
// "/1month" for a FixedWindow policy; ok is false for anything else, which
// parseRate then reads (and refuses).
func calendarRate(a Algorithm, tok string) (max int64, period string, ok bool) {
	if a != FixedWindow {
		return 0, "", false
	}
	count, per, found := strings.Cut(tok, "/")
	switch per {
	case "1day", "1week", "1month":
	default:
		return 0, "", false
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if !found || err != nil {
		return 0, "", false
	}
	return n, per[1:], true
}

// hasOption reports whether the text names the option.
func hasOption(text, opt string) bool {
	for _, tok := range strings.Fields(strings.ReplaceAll(text, ",", " ")) {
		if tok == opt {
			return true
		}
	}
	return false
}

func syntaxError(text, allowed string) error {
	return &PolicyError{Field: "policy text", Value: quote(text), Allowed: allowed}
}

func parseOptions(p *Policy, lim *Limit, toks []string) error {
	for i := 0; i < len(toks); i++ {
		opt := toks[i]
		next := func(what string) (string, error) {
			if i+1 >= len(toks) {
				return "", &PolicyError{Field: opt, Allowed: what + " after " + opt}
			}
			i++
			return toks[i], nil
		}
		boolean := func() bool {
			if i+1 < len(toks) && (toks[i+1] == "true" || toks[i+1] == "false") {
				i++
				return toks[i] == "true"
			}
			return true
		}
		switch opt {
		case "burst":
			s, err := next("an integer")
			if err != nil {
				return err
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return &PolicyError{Field: "burst", Value: quote(s), Allowed: "an integer ≥ 1"}
			}
			p.Burst = n
		case "align":
			s, err := next("epoch, first or calendar")
			if err != nil {
				return err
			}
			if s != string(AlignEpoch) && s != string(AlignFirst) && s != string(alignCalendar) {
				return &PolicyError{Field: "align", Value: quote(s), Allowed: "epoch, first or calendar"}
			}
			p.Align = Align(s)
		case "tz":
			s, err := next("an IANA time zone name")
			if err != nil {
				return err
			}
			p.TZ = s
		case "hash_tag":
			p.HashTag = boolean()
		case "min_interval", "retention", "resolution":
			s, err := next("a duration")
			if err != nil {
				return err
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				return &PolicyError{Field: opt, Value: quote(s), Allowed: `a Go duration such as "100ms" or "1m30s"`}
			}
			switch opt {
			case "min_interval":
				p.MinInterval = d
			case "retention":
				p.Retention = d
			case "resolution":
				if lim == nil || p.Algorithm != SlidingWindow {
					return &PolicyError{Field: "resolution", Value: s, Allowed: "not a parameter of " + string(p.Algorithm)}
				}
				lim.Resolution = d
			}
		case "decay":
			s, err := next("a number > 1")
			if err != nil {
				return err
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return &PolicyError{Field: "decay", Value: quote(s), Allowed: "a number > 1"}
			}
			if lim == nil || p.Algorithm != AR1 {
				return &PolicyError{Field: "decay", Value: s, Allowed: "not a parameter of " + string(p.Algorithm)}
			}
			lim.Decay = f
		case "count_denied":
			b := boolean()
			p.CountDenied = &b
		case "track":
			if i+1 < len(toks) && toks[i+1] != "true" && toks[i+1] != "false" && isDurationToken(toks[i+1]) {
				if i+3 >= len(toks) || toks[i+2] != "for" {
					return &PolicyError{Field: "track", Value: quote(strings.Join(toks[i+1:min(i+4, len(toks))], " ")),
						Allowed: `a series as "<resolution> for <retention>", such as "track 1m for 24h"`}
				}
				res, keep, err := parseSeries(toks[i+1] + " for " + toks[i+3])
				if err != nil {
					return err
				}
				p.Track, p.SeriesResolution, p.SeriesRetention = true, res, keep
				i += 3
				continue
			}
			p.Track = boolean()
		default:
			return &PolicyError{Field: "policy text", Value: quote(opt),
				Allowed: "an option: burst, align, tz, min_interval, resolution, decay, count_denied, track, retention or hash_tag"}
		}
	}
	return nil
}

// isDurationToken reports whether tok starts like a duration: a digit.
func isDurationToken(tok string) bool {
	return tok != "" && ('0' <= tok[0] && tok[0] <= '9' || tok[0] == '.')
}

// parseSeries parses a usage series, "<resolution> for <retention>" (the
// text form's "track 1m for 24h", and JSON's "track": "1m for 24h"). It
// checks the syntax only; Validate checks the bounds.
func parseSeries(s string) (res, keep time.Duration, err error) {
	bad := &PolicyError{Field: "track", Value: quote(s), Allowed: `a series as "<resolution> for <retention>", such as "1m for 24h"`}
	f := strings.Fields(s)
	if len(f) != 3 || f[1] != "for" {
		return 0, 0, bad
	}
	if res, err = time.ParseDuration(f[0]); err != nil {
		return 0, 0, bad
	}
	if keep, err = time.ParseDuration(f[2]); err != nil {
		return 0, 0, bad
	}
	return res, keep, nil
}

// formatSeries formats a usage series as parseSeries reads it: "1m for
// 24h".
func formatSeries(res, keep time.Duration) string {
	return formatDuration(res) + " for " + formatDuration(keep)
}

// String returns the policy's parameters in the text form ParsePolicy
// reads, starting with the algorithm: "gcra 100/1m burst 1". The name is not
// part of it. Two valid policies with the same text decide alike.
func (p Policy) String() string {
	var b strings.Builder
	b.WriteString(string(p.Algorithm))
	b.WriteByte(' ')
	switch p.Algorithm {
	case SlidingWindow, AR1:
		for i, l := range p.Limits {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatFloat(l.Max, 'f', -1, 64))
			b.WriteByte('/')
			if p.Algorithm == SlidingWindow {
				b.WriteString(formatDuration(l.Window))
				b.WriteString(" resolution ")
				b.WriteString(formatDuration(l.Resolution))
			} else {
				b.WriteString(formatDuration(l.Resolution))
				b.WriteString(" decay ")
				b.WriteString(strconv.FormatFloat(l.Decay, 'g', -1, 64))
			}
		}
	case FixedWindow:
		if p.Align == alignCalendar {
			b.WriteString(strconv.FormatInt(p.Max, 10) + "/1" + p.Period)
		} else {
			b.WriteString(formatRate(p.Max, p.Window))
		}
	default:
		b.WriteString(formatRate(p.Max, p.Window))
	}
	if p.Burst != 0 {
		b.WriteString(" burst ")
		b.WriteString(strconv.FormatInt(p.Burst, 10))
	}
	if p.Align != "" && p.Align != AlignEpoch {
		b.WriteString(" align ")
		b.WriteString(string(p.Align))
	}
	if p.TZ != "" {
		b.WriteString(" tz ")
		b.WriteString(p.TZ)
	}
	if p.MinInterval != 0 {
		b.WriteString(" min_interval ")
		b.WriteString(formatDuration(p.MinInterval))
	}
	if p.CountDenied != nil {
		b.WriteString(" count_denied ")
		b.WriteString(strconv.FormatBool(*p.CountDenied))
	}
	if p.Track {
		b.WriteString(" track")
		if p.SeriesResolution != 0 || p.SeriesRetention != 0 {
			b.WriteByte(' ')
			b.WriteString(formatSeries(p.SeriesResolution, p.SeriesRetention))
		}
	}
	if p.Retention != 0 {
		b.WriteString(" retention ")
		b.WriteString(formatDuration(p.Retention))
	}
	if p.HashTag {
		b.WriteString(" hash_tag")
	}
	return b.String()
}
