package floodgate

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Bounds on policy parameters and costs. Every parameter, cost, count and
// time is an integer below 2^53, exact in a float64, so the Redis store's
// Lua scripts (where numbers are doubles) read them exactly; the few
// products that may exceed 2^53 (a token bucket's limit·window, GCRA's
// burst·period and cost·period) are computed with split arithmetic there,
// and counts or times pushed past 2^53-1 by absurd costs recorded with
// count_denied saturate at 2^53-1 in every store alike.
const (
	// MaxCost is the largest cost of one request, and the largest max of a
	// limit: 2^53 - 1.
	MaxCost int64 = 1<<53 - 1

	// MaxDuration is the longest window, interval, resolution, period or
	// retention: 100 years of 365 days.
	MaxDuration = 100 * 365 * 24 * time.Hour

	// MaxLimits is the most limits one SlidingWindow or AR1 policy may have.
	MaxLimits = 16

	// MaxNameLen is the longest policy name, in bytes.
	MaxNameLen = 128
)

// Policy says how one class of requests is limited: the algorithm and its
// parameters, as SPEC.md defines them. The fields an algorithm does not use
// must be left zero; Validate rejects a policy that sets them.
//
// A Policy is a plain value. Once handed to a Store or a Limiter it must not
// be modified: stores remember a validated policy by its address. Policies
// with the same Name share state in a store, so give different policies
// different names.
//
// The text form (ParsePolicy, Policy.String) and the JSON form (SPEC.md's
// field names) describe the same values, for configuration files.
type Policy struct {
	// Name identifies the policy in a store's keys, metrics and listings:
	// 1 to MaxNameLen bytes of A-Z, a-z, 0-9 and _ . - /.
	Name string

	// Algorithm chooses the algorithm. The zero value is invalid.
	Algorithm Algorithm

	// Limits are the limits of a SlidingWindow or AR1 policy, 1 to
	// MaxLimits of them; a request passes only if every limit admits it.
	Limits []Limit

	// Max is the quota of a FixedWindow (its max per window), SlidingLog
	// (its max per interval) or TokenBucket policy (SPEC.md's limit: at most
	// Max pass per Window). 0 ≤ Max ≤ MaxCost; at least 1 for SlidingLog and
	// TokenBucket.
	Max int64

	// Window is the window of a FixedWindow policy and the state lifetime of
	// a TokenBucket policy: a whole number of microseconds, > 0.
	Window time.Duration

	// Align says where a FixedWindow policy's windows start; the zero value
	// is AlignEpoch.
	Align Align

	// Burst is the token count a TokenBucket starts with (1 ≤ Burst ≤ Max),
	// or how many emission intervals a GCRA policy may run ahead (≥ 1; the
	// text and JSON forms default it to 1).
	Burst int64

	// Interval is the rolling window of a SlidingLog policy, > 0.
	Interval time.Duration

	// MinInterval is the least time between two requests of one key under a
	// SlidingLog policy; 0 (no minimum) up to Interval.
	MinInterval time.Duration

	// Rate is a GCRA policy's sustained rate: Count per Period.
	Rate Rate

	// CountDenied says whether a denied request is still recorded, as
	// several seed systems did. Default means on for SlidingLog (as
	// rolling-rate-limiter) and off for every other algorithm.
	CountDenied Switch

	// Track keeps per-key usage (first and last seen, requests, denied)
	// beside the limiter state, for Store implementations of UsageLister.
	Track bool

	// Retention keeps tracked usage at least this long after a key's last
	// request, even once its limiter state is gone; 0 keeps it exactly as
	// long as the state. Only valid with Track.
	Retention time.Duration
}

// Limit is one limit of a SlidingWindow or AR1 policy.
type Limit struct {
	// Max is the most a key may have counted at once: an integer for
	// SlidingWindow, any finite number ≥ 0 for AR1; at most MaxCost.
	Max float64

	// Window is the SlidingWindow limit's window (> 0); zero for AR1.
	Window time.Duration

	// Resolution is the width of a SlidingWindow bucket (0 < Resolution ≤
	// Window), or the AR1 decay step: the count is divided by Decay once per
	// Resolution.
	Resolution time.Duration

	// Decay is the AR1 decay factor (> 1); zero for SlidingWindow.
	Decay float64
}

// Rate is Count events per Period, the rate of a GCRA policy. Its text
// form is "100/1s" or "5/1m".
type Rate struct {
	Count  int64
	Period time.Duration
}

// Per returns a Rate of count per period.
func Per(count int64, period time.Duration) Rate { return Rate{Count: count, Period: period} }

// PerSecond returns a Rate of count per second.
func PerSecond(count int64) Rate { return Per(count, time.Second) }

// PerMinute returns a Rate of count per minute.
func PerMinute(count int64) Rate { return Per(count, time.Minute) }

// PerHour returns a Rate of count per hour.
func PerHour(count int64) Rate { return Per(count, time.Hour) }

// String returns the rate as "100/1s".
func (r Rate) String() string {
	return strconv.FormatInt(r.Count, 10) + "/" + formatDuration(r.Period)
}

// ParseRate parses "<count>/<duration>", such as "100/1s", "5/1m" or
// "1000/1h30m"; a bare unit stands for one of it ("10/s"). It checks the
// syntax only; Policy.Validate checks the bounds.
func ParseRate(s string) (Rate, error) {
	count, period, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, &PolicyError{Field: "rate", Value: quote(s), Allowed: `"<count>/<duration>", such as "100/1s"`}
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		return Rate{}, &PolicyError{Field: "rate", Value: quote(s), Allowed: "a count that is an integer ≥ 1 before the /"}
	}
	d, err := parseDuration(period)
	if err != nil {
		return Rate{}, &PolicyError{Field: "rate", Value: quote(s), Allowed: `a Go duration after the /, such as "1s" or "1m30s"`}
	}
	return Rate{Count: n, Period: d}, nil
}

// parseDuration is time.ParseDuration that also accepts a bare unit ("s"
// for "1s").
func parseDuration(s string) (time.Duration, error) {
	if s != "" && (s[0] < '0' || s[0] > '9') && s[0] != '.' && s[0] != '-' && s[0] != '+' {
		s = "1" + s
	}
	return time.ParseDuration(s)
}

// formatDuration formats d as time.Duration.String does, without the zero
// components it adds: "1m" instead of "1m0s", "1h" instead of "1h0m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// CountsDenied reports whether the policy records denied requests: the value
// of CountDenied, or the algorithm's default when it is Default.
func (p Policy) CountsDenied() bool {
	return p.CountDenied.Bool(p.Algorithm == SlidingLog)
}

// Validate reports every parameter that breaks a rule of SPEC.md. The error
// joins one *PolicyError per problem (each wrapping ErrInvalidPolicy); it is
// nil when the policy is valid.
func (p Policy) Validate() error {
	v := validator{policy: p.Name}
	v.name(p.Name)
	v.params(&p)
	return v.err()
}

// validateParams checks everything but the name, for ParsePolicy.
func (p Policy) validateParams() error {
	v := validator{policy: p.Name}
	v.params(&p)
	return v.err()
}

type validator struct {
	policy string
	errs   []error
}

func (v *validator) add(field, value, allowed string) {
	v.errs = append(v.errs, &PolicyError{Policy: v.policy, Field: field, Value: value, Allowed: allowed})
}

func (v *validator) err() error {
	switch len(v.errs) {
	case 0:
		return nil
	case 1:
		return v.errs[0]
	}
	return errors.Join(v.errs...)
}

func (v *validator) name(name string) {
	if name == "" {
		v.add("name", "", "a name of 1 to 128 bytes of A-Z a-z 0-9 _ . - /")
		return
	}
	if len(name) > MaxNameLen || !validName(name) {
		v.add("name", quote(name), "1 to 128 bytes of A-Z a-z 0-9 _ . - /")
	}
}

func validName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_', c == '.', c == '-', c == '/':
		default:
			return false
		}
	}
	return true
}

// params checks the algorithm's parameters and that no other is set.
func (v *validator) params(p *Policy) {
	if !p.Algorithm.Valid() {
		value := ""
		if p.Algorithm != 0 {
			value = p.Algorithm.String()
		}
		v.add("algorithm", value, algorithmList)
		return
	}
	alg := p.Algorithm
	switch alg {
	case SlidingWindow, AR1:
		v.limits(alg, p.Limits)
	case FixedWindow:
		v.count("max", p.Max, 0)
		v.duration("window", p.Window, false)
		if p.Align > AlignFirst {
			v.add("align", p.Align.String(), "epoch or first")
		}
	case TokenBucket:
		v.count("limit", p.Max, 1)
		v.duration("window", p.Window, false)
		if p.Burst < 1 || p.Burst > p.Max {
			v.add("burst", strconv.FormatInt(p.Burst, 10), "an integer with 1 ≤ burst ≤ limit ("+strconv.FormatInt(p.Max, 10)+")")
		}
		if p.Max >= 1 && p.Window > 0 && overflowsMul(p.Max, int64(p.Window/time.Microsecond)) {
			v.add("limit", strconv.FormatInt(p.Max, 10), "a limit whose product with the window in µs ("+formatDuration(p.Window)+") fits in 63 bits")
		}
	case SlidingLog:
		v.count("max", p.Max, 1)
		v.duration("interval", p.Interval, false)
		v.duration("min_interval", p.MinInterval, true)
		if p.MinInterval > p.Interval && p.Interval > 0 {
			v.add("min_interval", formatDuration(p.MinInterval), "a duration ≤ interval ("+formatDuration(p.Interval)+")")
		}
	case GCRA:
		r := p.Rate
		if r.Count < 1 || r.Count > MaxCost {
			v.add("rate", r.String(), "a count from 1 to 2^53-1 per period")
		}
		v.duration("rate", r.Period, false)
		if r.Count >= 1 && r.Period > 0 && int64(r.Period/time.Microsecond) < r.Count {
			v.add("rate", r.String(), "at most one event per µs (period in µs ≥ count)")
		}
		if p.Burst < 1 || p.Burst > MaxCost {
			v.add("burst", strconv.FormatInt(p.Burst, 10), "an integer from 1 to 2^53-1")
		} else if r.Count >= 1 && r.Period > 0 && burstTooLong(p.Burst, r) {
			v.add("burst", strconv.FormatInt(p.Burst, 10), "a burst of at most 100 years of emission intervals (burst·period/count ≤ 876000h with rate "+r.String()+")")
		}
	}
	if p.CountDenied > Off {
		v.add("count_denied", p.CountDenied.String(), "default, on or off")
	}
	if p.Retention != 0 {
		if !p.Track {
			v.add("retention", formatDuration(p.Retention), "only with track: true")
		} else {
			v.duration("retention", p.Retention, true)
		}
	}
	v.unused(p)
}

// unused rejects parameters that the algorithm does not have, so a typo or a
// misplaced field is an error rather than silently ignored.
func (v *validator) unused(p *Policy) {
	alg := p.Algorithm
	uses := func(a ...Algorithm) bool {
		for _, x := range a {
			if x == alg {
				return true
			}
		}
		return false
	}
	not := "not a parameter of " + alg.String()
	if len(p.Limits) > 0 && !uses(SlidingWindow, AR1) {
		v.add("limits", "", not)
	}
	if p.Max != 0 && !uses(FixedWindow, SlidingLog, TokenBucket) {
		v.add("max", strconv.FormatInt(p.Max, 10), not+limitsHint(alg))
	}
	if p.Window != 0 && !uses(FixedWindow, TokenBucket) {
		v.add("window", formatDuration(p.Window), not+limitsHint(alg))
	}
	if p.Align != AlignEpoch && alg != FixedWindow {
		v.add("align", p.Align.String(), not)
	}
	if p.Burst != 0 && !uses(TokenBucket, GCRA) {
		v.add("burst", strconv.FormatInt(p.Burst, 10), not)
	}
	if p.Interval != 0 && alg != SlidingLog {
		v.add("interval", formatDuration(p.Interval), not)
	}
	if p.MinInterval != 0 && alg != SlidingLog {
		v.add("min_interval", formatDuration(p.MinInterval), not)
	}
	if p.Rate != (Rate{}) && alg != GCRA {
		v.add("rate", p.Rate.String(), not)
	}
}

func limitsHint(a Algorithm) string {
	if a == SlidingWindow || a == AR1 {
		return " (its limits carry max, window and resolution)"
	}
	return ""
}

func (v *validator) limits(alg Algorithm, limits []Limit) {
	if len(limits) == 0 {
		v.add("limits", "", "1 to 16 limits")
		return
	}
	if len(limits) > MaxLimits {
		v.add("limits", strconv.Itoa(len(limits))+" limits", "1 to 16 limits")
		return
	}
	for i, l := range limits {
		f := "limits[" + strconv.Itoa(i) + "]."
		max := strconv.FormatFloat(l.Max, 'g', -1, 64)
		switch alg {
		case SlidingWindow:
			if math.IsNaN(l.Max) || l.Max < 0 || l.Max > float64(MaxCost) || l.Max != math.Trunc(l.Max) {
				v.add(f+"max", max, "an integer from 0 to 2^53-1")
			}
			v.duration(f+"window", l.Window, false)
			v.duration(f+"resolution", l.Resolution, false)
			if l.Resolution > l.Window && l.Window > 0 {
				v.add(f+"resolution", formatDuration(l.Resolution), "a duration ≤ window ("+formatDuration(l.Window)+")")
			}
			if l.Decay != 0 {
				v.add(f+"decay", strconv.FormatFloat(l.Decay, 'g', -1, 64), "not a parameter of sliding_window")
			}
		case AR1:
			if math.IsNaN(l.Max) || l.Max < 0 || l.Max > float64(MaxCost) {
				v.add(f+"max", max, "a number from 0 to 2^53-1")
			}
			v.duration(f+"resolution", l.Resolution, false)
			decay := strconv.FormatFloat(l.Decay, 'g', -1, 64)
			switch {
			case math.IsNaN(l.Decay) || math.IsInf(l.Decay, 0) || l.Decay <= 1:
				v.add(f+"decay", decay, "a finite number > 1")
			case l.Resolution > 0 && ar1Horizon(l.Decay, l.Resolution) > float64(MaxDuration/time.Microsecond):
				v.add(f+"decay", decay, "a decay far enough above 1 that a count decays to 0 within 100 years at resolution "+formatDuration(l.Resolution))
			}
			if l.Window != 0 {
				v.add(f+"window", formatDuration(l.Window), "not a parameter of ar1 (the decay step is resolution)")
			}
		}
	}
}

// ar1Horizon returns, in µs, how long a count of 2^64 takes to decay below
// 1e-6: ln(2^64·1e6)/ln(decay) slots. Real counts stay far below 2^64
// (maxima are below 2^53); only costs recorded with count_denied far beyond
// the max could push one higher, and then decay takes longer.
func ar1Horizon(decay float64, resolution time.Duration) float64 {
	slots := (64*math.Ln2 + 6*math.Ln10) / math.Log(decay)
	return slots * float64(resolution/time.Microsecond)
}

func (v *validator) count(field string, n, min int64) {
	if n < min || n > MaxCost {
		v.add(field, strconv.FormatInt(n, 10), "an integer from "+strconv.FormatInt(min, 10)+" to 2^53-1")
	}
}

// duration checks a duration parameter: a whole number of µs, > 0 (≥ 0 when
// zeroOK), at most MaxDuration.
func (v *validator) duration(field string, d time.Duration, zeroOK bool) {
	switch {
	case d == 0 && zeroOK:
	case d <= 0:
		v.add(field, formatDuration(d), "a duration > 0")
	case d%time.Microsecond != 0:
		v.add(field, formatDuration(d), "a whole number of microseconds")
	case d > MaxDuration:
		v.add(field, formatDuration(d), "at most 100 years (876000h)")
	}
}

// burstTooLong reports whether burst·T = burst·period/count exceeds
// MaxDuration, comparing burst·period with MaxDuration·count in 128 bits.
func burstTooLong(burst int64, r Rate) bool {
	hi, lo := bits.Mul64(uint64(burst), uint64(r.Period/time.Microsecond))
	mhi, mlo := bits.Mul64(uint64(MaxDuration/time.Microsecond), uint64(r.Count))
	return hi > mhi || hi == mhi && lo > mlo
}

// overflowsMul reports whether a·b overflows int64, for a, b ≥ 0.
func overflowsMul(a, b int64) bool {
	return a != 0 && b > math.MaxInt64/a
}
