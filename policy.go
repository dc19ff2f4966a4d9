package floodgate

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// MaxCost is the largest cost of one request, and the largest max of a
// limit: 2^53 - 1. Every parameter, cost, count and time is an integer
// below 2^53, exact in a float64, so that the Redis store's Lua scripts
// (where numbers are doubles) read them exactly; the few products that may
// exceed 2^53 (a token bucket's limit·window, GCRA's burst·period and
// cost·period) are computed with split arithmetic there, and counts or times
// pushed past 2^53-1 by absurd costs recorded with count_denied saturate at
// 2^53-1 in every store alike.
const MaxCost int64 = 1<<53 - 1

// Bounds on policy parameters, stated in Policy's documentation (and
// exported for store authors by package storekit).
const (
	maxDuration = 100 * 365 * 24 * time.Hour // the longest window, period or retention
	maxLimits   = 16                         // the most limits of one policy
	maxNameLen  = 128                        // the longest policy name, in bytes
	maxBuckets  = 100_000                    // the most buckets of a usage series
)

// Policy says how one class of requests is limited: the algorithm and its
// parameters, as SPEC.md defines them. The fields an algorithm does not use
// must be left zero; Validate rejects a policy that sets them.
//
// Every algorithm but SlidingWindow and AR1 has one limit, Max per Window:
//
//	fixed_window  at most Max per window of Window (SPEC.md's max and window)
//	token_bucket  at most Max per Window, in bursts of Burst (limit and window)
//	sliding_log   at most Max per rolling Window (max and interval)
//	gcra          Max evenly spaced per Window, bursts of Burst (the rate, count/period)
//
// SlidingWindow and AR1 policies have one or more Limits instead.
//
// A Policy is a plain value; stores and Limiters keep their own copies or
// check that the one they were given has not changed, so the caller may
// reuse it. Policies with the same Name share state in a store (a policy
// changed under the same name keeps the state its new parameters can
// read), so give different policies different names.
//
// The bounds: costs, counts and maxima at most MaxCost; durations whole
// microseconds from 1µs to 100 years; 1 to 16 limits; names of 1 to 128
// bytes. The text form (ParsePolicy, Policy.String) and the JSON form
// (SPEC.md's field names) describe the same values, for configuration
// files.
type Policy struct {
	// Name identifies the policy in a store's keys, metrics and listings:
	// 1 to 128 bytes of A-Z, a-z, 0-9 and _ . - /.
	Name string

	// Algorithm chooses the algorithm. The zero value is invalid.
	Algorithm Algorithm

	// Limits are the limits of a SlidingWindow or AR1 policy, 1 to 16 of
	// them; a request passes only if every limit admits it.
	Limits []Limit

	// Max is the quota of every other algorithm (see above): 0 ≤ Max ≤
	// MaxCost, at least 1 but for FixedWindow.
	Max int64

	// Window is the period Max applies to (see above): a whole number of
	// microseconds, > 0. For a TokenBucket it is also the state's lifetime.
	Window time.Duration

	// Align says where a FixedWindow policy's windows start; the zero value
	// means AlignEpoch. Align("calendar") aligns them to the calendar of TZ
	// (SPEC.md, "Calendar windows"): Period then says which, and Window
	// must be zero.
	Align Align

	// Period is the calendar period of a FixedWindow policy with Align
	// "calendar": "day" (from local midnight), "week" (ISO 8601, from
	// Monday) or "month" (from the 1st). Its windows last as long as the
	// period does in TZ: a day 23 to 25 hours across DST changes, a month
	// 28 to 31 days. Empty for every other policy.
	Period string

	// TZ is the IANA time zone name ("Europe/Paris") whose calendar a
	// calendar window follows; empty means UTC. Validate loads it with
	// time.LoadLocation, so the process needs the system's time zone
	// database or an import of time/tzdata. Empty for every other policy.
	TZ string

	// HashTag makes a store that shards keys (a Redis Cluster) place a key
	// by the part inside a leading "{…}" only, so that the keys of a group
	// ("{org7}" and "{org7}user3") can be decided in one atomic step
	// (SPEC.md, "Keys in Redis"). Off by default: whoever chooses a key
	// then chooses its shard. Stores on one node ignore it.
	HashTag bool

	// Burst is the token count a TokenBucket starts with (1 ≤ Burst ≤ Max),
	// or how many emission intervals a GCRA policy may run ahead (≥ 1; the
	// text and JSON forms default it to 1).
	Burst int64

	// MinInterval is the least time between two requests of one key under a
	// SlidingLog policy; 0 (no minimum) up to Window.
	MinInterval time.Duration

	// CountDenied says whether a denied request is still recorded, as
	// several seed systems did. Nil means the algorithm's default: on for
	// SlidingLog (as rolling-rate-limiter), off for every other.
	CountDenied *bool

	// Track keeps per-key usage (first and last seen, requests, denied)
	// beside the limiter state, for stores that list usage.
	Track bool

	// Retention keeps tracked usage at least this long after a key's last
	// request, even once its limiter state is gone; 0 keeps it exactly as
	// long as the state. Only valid with Track.
	Retention time.Duration

	// SeriesResolution and SeriesRetention, both set or both zero, keep a
	// usage series per key beside the totals of Track: the costs asked and
	// denied per bucket of SeriesResolution, for SeriesRetention (SPEC.md,
	// "Per-key usage series"; the text form "track 1m for 24h"). The
	// resolution is a whole number of seconds, at least 1s; the retention
	// a whole multiple of it, at most 100,000 buckets and 100 years. Zero
	// keeps no series. Only valid with Track.
	SeriesResolution time.Duration
	SeriesRetention  time.Duration
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

// parseRate parses "<count>/<duration>", such as "100/1s", "5/1m" or
// "1000/1h30m"; a bare unit stands for one of it ("10/s"). It checks the
// syntax only; Validate checks the bounds. field names the parameter in
// errors.
func parseRate(field, s string) (int64, time.Duration, error) {
	count, period, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, &PolicyError{Field: field, Value: quote(s), Allowed: `"<count>/<duration>", such as "100/1s"`}
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		return 0, 0, &PolicyError{Field: field, Value: quote(s), Allowed: "a count that is an integer ≥ 1 before the /"}
	}
	d, err := parseDuration(period)
	if err != nil {
		return 0, 0, &PolicyError{Field: field, Value: quote(s), Allowed: `a Go duration after the /, such as "1s" or "1m30s"`}
	}
	return n, d, nil
}

// formatRate formats n per d as "100/1s".
func formatRate(n int64, d time.Duration) string {
	return strconv.FormatInt(n, 10) + "/" + formatDuration(d)
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

// Quota returns limit i's quota and the window it applies to, for
// RateLimit-Policy fields, metrics and listings: Limits[i].Max (rounded down
// for AR1) and Limits[i].Window (AR1: its Resolution) for SlidingWindow and
// AR1 policies, where 0 ≤ i < len(p.Limits); Max and Window for every other
// algorithm, whose only limit is i = 0 (for a calendar window, Max and the
// period's nominal length: 24h, 168h or 720h). Any other i gives 0, 0.
func (p *Policy) Quota(i int) (quota int64, window time.Duration) {
	switch {
	case p.Algorithm == SlidingWindow || p.Algorithm == AR1:
		if i < 0 || i >= len(p.Limits) {
			return 0, 0
		}
		l := &p.Limits[i]
		m := l.Max
		switch {
		case !(m >= 0): // NaN too
			m = 0
		case m > float64(MaxCost):
			m = float64(MaxCost)
		}
		if p.Algorithm == AR1 {
			return int64(math.Floor(m)), l.Resolution
		}
		return int64(m), l.Window
	case i == 0 && p.Align == alignCalendar:
		return p.Max, nominalPeriod(p.Period)
	case i == 0:
		return p.Max, p.Window
	}
	return 0, 0
}

// alignCalendar is the Align of calendar windows. It has no exported
// constant (the root's names are counted): write Align("calendar").
const alignCalendar Align = "calendar"

// The calendar periods of SPEC.md, "Calendar windows".
const (
	periodDay   = "day"
	periodWeek  = "week"
	periodMonth = "month"
)

// nominalPeriod returns the usual length of a calendar period, for Quota:
// 24 hours, 7 days, 30 days. The windows themselves follow the calendar.
func nominalPeriod(period string) time.Duration {
	switch period {
	case periodWeek:
		return 7 * 24 * time.Hour
	case periodMonth:
		return 30 * 24 * time.Hour
	}
	return 24 * time.Hour
}

// countsDenied reports whether p records denied requests: CountDenied, or
// the algorithm's default when it is nil.
func (p *Policy) countsDenied() bool {
	if p.CountDenied != nil {
		return *p.CountDenied
	}
	return p.Algorithm == SlidingLog
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
	if len(name) > maxNameLen || !validName(name) {
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

// params checks the algorithm's parameters and that no other is set. Each
// parameter is named as SPEC.md and configuration files name it: a token
// bucket's Max is its limit, a sliding log's Window its interval, a GCRA
// policy's Max and Window its rate.
func (v *validator) params(p *Policy) {
	if !p.Algorithm.valid() {
		value := ""
		if p.Algorithm != "" {
			value = quote(string(p.Algorithm))
		}
		v.add("algorithm", value, algorithmList)
		return
	}
	switch p.Algorithm {
	case SlidingWindow, AR1:
		v.limits(p.Algorithm, p.Limits)
	case FixedWindow:
		v.count("max", p.Max, 0)
		switch p.Align {
		case "", AlignEpoch, AlignFirst:
			v.duration("window", p.Window, false)
		case alignCalendar:
			v.calendar(p)
		default:
			v.add("align", quote(string(p.Align)), "epoch, first or calendar")
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
		v.duration("interval", p.Window, false)
		v.duration("min_interval", p.MinInterval, true)
		if p.MinInterval > p.Window && p.Window > 0 {
			v.add("min_interval", formatDuration(p.MinInterval), "a duration ≤ interval ("+formatDuration(p.Window)+")")
		}
	case GCRA:
		rate := formatRate(p.Max, p.Window)
		if p.Max < 1 || p.Max > MaxCost {
			v.add("rate", rate, "a count from 1 to 2^53-1 per period")
		}
		v.duration("rate", p.Window, false)
		if p.Max >= 1 && p.Window > 0 && int64(p.Window/time.Microsecond) < p.Max {
			v.add("rate", rate, "at most one event per µs (period in µs ≥ count)")
		}
		if p.Burst < 1 || p.Burst > MaxCost {
			v.add("burst", strconv.FormatInt(p.Burst, 10), "an integer from 1 to 2^53-1")
		} else if p.Max >= 1 && p.Window > 0 && burstTooLong(p.Burst, p.Max, p.Window) {
			v.add("burst", strconv.FormatInt(p.Burst, 10), "a burst of at most 100 years of emission intervals (burst·period/count ≤ 876000h with rate "+rate+")")
		}
	}
	if p.Retention != 0 {
		if !p.Track {
			v.add("retention", formatDuration(p.Retention), "only with track: true")
		} else {
			v.duration("retention", p.Retention, true)
		}
	}
	v.series(p)
	v.unused(p)
}

// unused rejects parameters that the algorithm does not have, so a typo or a
// misplaced field is an error rather than silently ignored.
func (v *validator) unused(p *Policy) {
	alg := p.Algorithm
	multi := alg == SlidingWindow || alg == AR1
	not := "not a parameter of " + string(alg)
	if len(p.Limits) > 0 && !multi {
		v.add("limits", "", not)
	}
	if multi && p.Max != 0 {
		v.add("max", strconv.FormatInt(p.Max, 10), not+limitsHint(alg))
	}
	if multi && p.Window != 0 {
		v.add("window", formatDuration(p.Window), not+limitsHint(alg))
	}
	if p.Align != "" && alg != FixedWindow {
		v.add("align", quote(string(p.Align)), not)
	}
	if p.Align != alignCalendar {
		if p.Period != "" {
			v.add("period", quote(p.Period), "only with align calendar (a fixed_window)")
		}
		if p.TZ != "" {
			v.add("tz", quote(p.TZ), "only with align calendar (a fixed_window)")
		}
	}
	if p.Burst != 0 && alg != TokenBucket && alg != GCRA {
		v.add("burst", strconv.FormatInt(p.Burst, 10), not)
	}
	if p.MinInterval != 0 && alg != SlidingLog {
		v.add("min_interval", formatDuration(p.MinInterval), not)
	}
}

// calendar checks a calendar window's period and time zone (SPEC.md,
// "Calendar windows"): no window, a known period, a loadable zone.
func (v *validator) calendar(p *Policy) {
	if p.Window != 0 {
		v.add("window", formatDuration(p.Window), "not a parameter of a calendar window (its length is period)")
	}
	switch p.Period {
	case periodDay, periodWeek, periodMonth:
	default:
		v.add("period", quote(p.Period), "day, week or month")
	}
	if p.TZ != "" {
		if _, err := time.LoadLocation(p.TZ); err != nil || strings.EqualFold(p.TZ, "Local") {
			v.add("tz", quote(p.TZ), "an IANA time zone name such as Europe/Paris, known to the time zone database")
		}
	}
}

// series checks the usage series of a tracked policy (SPEC.md, "Per-key
// usage series"), named as the text form writes it: "track <resolution>
// for <retention>".
func (v *validator) series(p *Policy) {
	res, keep := p.SeriesResolution, p.SeriesRetention
	if res == 0 && keep == 0 {
		return
	}
	value := formatSeries(res, keep)
	switch {
	case !p.Track:
		v.add("track", value, "a series only with track")
	case res <= 0 || res%time.Second != 0:
		v.add("track", value, "a resolution that is a whole number of seconds, at least 1s")
	case keep <= 0 || keep%res != 0:
		v.add("track", value, "a retention that is a whole multiple of the resolution")
	case keep > maxDuration:
		v.add("track", value, "a retention of at most 100 years (876000h)")
	case keep/res > maxBuckets:
		v.add("track", value, "at most 100000 buckets (retention / resolution)")
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
	if len(limits) > maxLimits {
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
			case l.Resolution > 0 && ar1Horizon(l.Decay, l.Resolution) > float64(maxDuration/time.Microsecond):
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
// zeroOK), at most maxDuration.
func (v *validator) duration(field string, d time.Duration, zeroOK bool) {
	switch {
	case d == 0 && zeroOK:
	case d <= 0:
		v.add(field, formatDuration(d), "a duration > 0")
	case d%time.Microsecond != 0:
		v.add(field, formatDuration(d), "a whole number of microseconds")
	case d > maxDuration:
		v.add(field, formatDuration(d), "at most 100 years (876000h)")
	}
}

// burstTooLong reports whether burst·T = burst·period/count exceeds
// maxDuration, comparing burst·period with maxDuration·count in 128 bits.
func burstTooLong(burst, count int64, period time.Duration) bool {
	hi, lo := bits.Mul64(uint64(burst), uint64(period/time.Microsecond))
	mhi, mlo := bits.Mul64(uint64(maxDuration/time.Microsecond), uint64(count))
	return hi > mhi || hi == mhi && lo > mlo
}

// overflowsMul reports whether a·b overflows int64, for a, b ≥ 0.
func overflowsMul(a, b int64) bool {
	return a != 0 && b > math.MaxInt64/a
}
