package floodgate_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
)

func mustParse(t *testing.T, text string) floodgate.Policy {
	t.Helper()
	p, err := floodgate.ParsePolicy("p", text)
	if err != nil {
		t.Fatalf("ParsePolicy(%q): %v", text, err)
	}
	return p
}

// TestValidateRejects: every invalid parameter is rejected with an error
// that wraps ErrInvalidPolicy and names the field, the value and what is
// allowed.
func TestValidateRejects(t *testing.T) {
	gcra := floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 10, Window: time.Second, Burst: 1}
	sw := floodgate.Policy{Name: "p", Algorithm: floodgate.SlidingWindow,
		Limits: []floodgate.Limit{{Max: 10, Window: time.Minute, Resolution: time.Second}}}
	ar := floodgate.Policy{Name: "p", Algorithm: floodgate.AR1,
		Limits: []floodgate.Limit{{Max: 5, Resolution: time.Second, Decay: 2}}}
	fw := floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Minute}
	tb := floodgate.Policy{Name: "p", Algorithm: floodgate.TokenBucket, Max: 15, Window: time.Minute, Burst: 3}
	sl := floodgate.Policy{Name: "p", Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Second}
	for _, p := range []floodgate.Policy{gcra, sw, ar, fw, tb, sl} {
		if err := p.Validate(); err != nil {
			t.Fatalf("base policy %s invalid: %v", p, err)
		}
	}
	with := func(p floodgate.Policy, f func(*floodgate.Policy)) floodgate.Policy {
		p.Limits = append([]floodgate.Limit(nil), p.Limits...)
		f(&p)
		return p
	}
	nan := math.NaN()
	cases := []struct {
		name string
		p    floodgate.Policy
		want string // the whole message of the (first) error
	}{
		{"no name", with(gcra, func(p *floodgate.Policy) { p.Name = "" }),
			`floodgate: policy: name: a name of 1 to 128 bytes of A-Z a-z 0-9 _ . - /`},
		{"name with a colon", with(gcra, func(p *floodgate.Policy) { p.Name = "a:b" }),
			`floodgate: policy "a:b": name = "a:b": 1 to 128 bytes of A-Z a-z 0-9 _ . - /`},
		{"name too long", with(gcra, func(p *floodgate.Policy) { p.Name = strings.Repeat("n", 129) }),
			`floodgate: policy "` + strings.Repeat("n", 64) + `"…: name = "` + strings.Repeat("n", 64) + `"…: 1 to 128 bytes of A-Z a-z 0-9 _ . - /`},
		{"unknown algorithm", with(gcra, func(p *floodgate.Policy) { p.Algorithm = ""; p.Max = 0; p.Window = 0; p.Burst = 0 }),
			`floodgate: policy "p": algorithm: one of sliding_window, ar1, fixed_window, token_bucket, sliding_log, gcra`},
		{"unknown algorithm name", with(gcra, func(p *floodgate.Policy) { p.Algorithm = "leaky_bucket" }),
			`floodgate: policy "p": algorithm = "leaky_bucket": one of sliding_window, ar1, fixed_window, token_bucket, sliding_log, gcra`},
		{"negative max", with(fw, func(p *floodgate.Policy) { p.Max = -1 }),
			`floodgate: policy "p": max = -1: an integer from 0 to 2^53-1`},
		{"max above 2^53", with(fw, func(p *floodgate.Policy) { p.Max = 1 << 53 }),
			`floodgate: policy "p": max = 9007199254740992: an integer from 0 to 2^53-1`},
		{"zero window", with(fw, func(p *floodgate.Policy) { p.Window = 0 }),
			`floodgate: policy "p": window = 0s: a duration > 0`},
		{"negative window", with(fw, func(p *floodgate.Policy) { p.Window = -time.Second }),
			`floodgate: policy "p": window = -1s: a duration > 0`},
		{"window not whole µs", with(fw, func(p *floodgate.Policy) { p.Window = time.Second + 1 }),
			`floodgate: policy "p": window = 1.000000001s: a whole number of microseconds`},
		{"window over 100 years", with(fw, func(p *floodgate.Policy) { p.Window = 900000 * time.Hour }),
			`floodgate: policy "p": window = 900000h: at most 100 years (876000h)`},
		{"bad align", with(fw, func(p *floodgate.Policy) { p.Align = "left" }),
			`floodgate: policy "p": align = "left": epoch, first or calendar`},
		{"no limits", with(sw, func(p *floodgate.Policy) { p.Limits = nil }),
			`floodgate: policy "p": limits: 1 to 16 limits`},
		{"too many limits", with(sw, func(p *floodgate.Policy) { p.Limits = make([]floodgate.Limit, 17) }),
			`floodgate: policy "p": limits = 17 limits: 1 to 16 limits`},
		{"resolution above window", with(sw, func(p *floodgate.Policy) { p.Limits[0].Resolution = 2 * time.Minute }),
			`floodgate: policy "p": limits[0].resolution = 2m: a duration ≤ window (1m)`},
		{"zero resolution", with(sw, func(p *floodgate.Policy) { p.Limits[0].Resolution = 0 }),
			`floodgate: policy "p": limits[0].resolution = 0s: a duration > 0`},
		{"fractional sliding_window max", with(sw, func(p *floodgate.Policy) { p.Limits[0].Max = 1.5 }),
			`floodgate: policy "p": limits[0].max = 1.5: an integer from 0 to 2^53-1`},
		{"NaN sliding_window max", with(sw, func(p *floodgate.Policy) { p.Limits[0].Max = nan }),
			`floodgate: policy "p": limits[0].max = NaN: an integer from 0 to 2^53-1`},
		{"decay on a sliding window", with(sw, func(p *floodgate.Policy) { p.Limits[0].Decay = 2 }),
			`floodgate: policy "p": limits[0].decay = 2: not a parameter of sliding_window`},
		{"decay of 1", with(ar, func(p *floodgate.Policy) { p.Limits[0].Decay = 1 }),
			`floodgate: policy "p": limits[0].decay = 1: a finite number > 1`},
		{"decay below 1", with(ar, func(p *floodgate.Policy) { p.Limits[0].Decay = 0.5 }),
			`floodgate: policy "p": limits[0].decay = 0.5: a finite number > 1`},
		{"NaN decay", with(ar, func(p *floodgate.Policy) { p.Limits[0].Decay = nan }),
			`floodgate: policy "p": limits[0].decay = NaN: a finite number > 1`},
		{"decay too close to 1", with(ar, func(p *floodgate.Policy) { p.Limits[0].Decay = 1 + 1e-12 }),
			`floodgate: policy "p": limits[0].decay = 1.000000000001: a decay far enough above 1 that a count decays to 0 within 100 years at resolution 1s`},
		{"NaN ar1 max", with(ar, func(p *floodgate.Policy) { p.Limits[0].Max = nan }),
			`floodgate: policy "p": limits[0].max = NaN: a number from 0 to 2^53-1`},
		{"infinite ar1 max", with(ar, func(p *floodgate.Policy) { p.Limits[0].Max = math.Inf(1) }),
			`floodgate: policy "p": limits[0].max = +Inf: a number from 0 to 2^53-1`},
		{"window on ar1", with(ar, func(p *floodgate.Policy) { p.Limits[0].Window = time.Second }),
			`floodgate: policy "p": limits[0].window = 1s: not a parameter of ar1 (the decay step is resolution)`},
		{"burst above limit", with(tb, func(p *floodgate.Policy) { p.Burst = 16 }),
			`floodgate: policy "p": burst = 16: an integer with 1 ≤ burst ≤ limit (15)`},
		{"zero burst", with(tb, func(p *floodgate.Policy) { p.Burst = 0 }),
			`floodgate: policy "p": burst = 0: an integer with 1 ≤ burst ≤ limit (15)`},
		{"token bucket limit 0", with(tb, func(p *floodgate.Policy) { p.Max = 0; p.Burst = 0 }),
			`floodgate: policy "p": limit = 0: an integer from 1 to 2^53-1`},
		{"token bucket product overflow", with(tb, func(p *floodgate.Policy) { p.Max = 1 << 50; p.Window = 876000 * time.Hour }),
			`floodgate: policy "p": limit = 1125899906842624: a limit whose product with the window in µs (876000h) fits in 63 bits`},
		{"sliding log max 0", with(sl, func(p *floodgate.Policy) { p.Max = 0 }),
			`floodgate: policy "p": max = 0: an integer from 1 to 2^53-1`},
		{"min interval above interval", with(sl, func(p *floodgate.Policy) { p.MinInterval = 2 * time.Second }),
			`floodgate: policy "p": min_interval = 2s: a duration ≤ interval (1s)`},
		{"negative min interval", with(sl, func(p *floodgate.Policy) { p.MinInterval = -time.Millisecond }),
			`floodgate: policy "p": min_interval = -1ms: a duration > 0`},
		{"gcra rate count 0", with(gcra, func(p *floodgate.Policy) { p.Max = 0 }),
			`floodgate: policy "p": rate = 0/1s: a count from 1 to 2^53-1 per period`},
		{"gcra zero period", with(gcra, func(p *floodgate.Policy) { p.Window = 0 }),
			`floodgate: policy "p": rate = 0s: a duration > 0`},
		{"gcra rate finer than 1/µs", with(gcra, func(p *floodgate.Policy) { p.Max, p.Window = 2000, time.Millisecond }),
			`floodgate: policy "p": rate = 2000/1ms: at most one event per µs (period in µs ≥ count)`},
		{"gcra burst 0", with(gcra, func(p *floodgate.Policy) { p.Burst = 0 }),
			`floodgate: policy "p": burst = 0: an integer from 1 to 2^53-1`},
		{"gcra burst beyond 100 years", with(gcra, func(p *floodgate.Policy) { p.Burst = 101; p.Max, p.Window = 1, 8760*time.Hour }),
			`floodgate: policy "p": burst = 101: a burst of at most 100 years of emission intervals (burst·period/count ≤ 876000h with rate 1/8760h)`},
		{"gcra burst beyond 100 years, large count", with(gcra, func(p *floodgate.Policy) { p.Burst = 1 << 52; p.Max, p.Window = 1000, time.Second }),
			`floodgate: policy "p": burst = 4503599627370496: a burst of at most 100 years of emission intervals (burst·period/count ≤ 876000h with rate 1000/1s)`},
		{"burst on a fixed window", with(fw, func(p *floodgate.Policy) { p.Burst = 3 }),
			`floodgate: policy "p": burst = 3: not a parameter of fixed_window`},
		{"min_interval on a token bucket", with(tb, func(p *floodgate.Policy) { p.MinInterval = time.Second }),
			`floodgate: policy "p": min_interval = 1s: not a parameter of token_bucket`},
		{"window on a sliding window", with(sw, func(p *floodgate.Policy) { p.Window = time.Second }),
			`floodgate: policy "p": window = 1s: not a parameter of sliding_window (its limits carry max, window and resolution)`},
		{"max on a sliding window", with(sw, func(p *floodgate.Policy) { p.Max = 3 }),
			`floodgate: policy "p": max = 3: not a parameter of sliding_window (its limits carry max, window and resolution)`},
		{"limits on gcra", with(gcra, func(p *floodgate.Policy) { p.Limits = sw.Limits }),
			`floodgate: policy "p": limits: not a parameter of gcra`},
		{"align on gcra", with(gcra, func(p *floodgate.Policy) { p.Align = floodgate.AlignFirst }),
			`floodgate: policy "p": align = "first": not a parameter of gcra`},
		{"retention without track", with(gcra, func(p *floodgate.Policy) { p.Retention = time.Hour }),
			`floodgate: policy "p": retention = 1h: only with track: true`},
		{"series without track", with(gcra, func(p *floodgate.Policy) { p.SeriesResolution, p.SeriesRetention = time.Minute, time.Hour }),
			`floodgate: policy "p": track = 1m for 1h: a series only with track`},
		{"series without retention", with(gcra, func(p *floodgate.Policy) { p.Track, p.SeriesResolution = true, time.Minute }),
			`floodgate: policy "p": track = 1m for 0s: a retention that is a whole multiple of the resolution`},
		{"series resolution below a second", with(gcra, func(p *floodgate.Policy) {
			p.Track, p.SeriesResolution, p.SeriesRetention = true, 500*time.Millisecond, time.Hour
		}), `floodgate: policy "p": track = 500ms for 1h: a resolution that is a whole number of seconds, at least 1s`},
		{"series resolution not whole seconds", with(gcra, func(p *floodgate.Policy) {
			p.Track, p.SeriesResolution, p.SeriesRetention = true, 1500*time.Millisecond, 3*time.Second
		}), `floodgate: policy "p": track = 1.5s for 3s: a resolution that is a whole number of seconds, at least 1s`},
		{"series retention not a multiple", with(gcra, func(p *floodgate.Policy) {
			p.Track, p.SeriesResolution, p.SeriesRetention = true, time.Minute, 90*time.Second
		}), `floodgate: policy "p": track = 1m for 1m30s: a retention that is a whole multiple of the resolution`},
		{"series of too many buckets", with(gcra, func(p *floodgate.Policy) {
			p.Track, p.SeriesResolution, p.SeriesRetention = true, time.Second, 100_001*time.Second
		}), `floodgate: policy "p": track = 1s for 27h46m41s: at most 100000 buckets (retention / resolution)`},
		{"series beyond 100 years", with(gcra, func(p *floodgate.Policy) {
			p.Track, p.SeriesResolution, p.SeriesRetention = true, 8760*time.Hour, 101*8760*time.Hour
		}), `floodgate: policy "p": track = 8760h for 884760h: a retention of at most 100 years (876000h)`},
	}
	for _, c := range cases {
		err := c.p.Validate()
		if err == nil {
			t.Errorf("%s: Validate accepted %+v", c.name, c.p)
			continue
		}
		if !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("%s: error %v does not wrap ErrInvalidPolicy", c.name, err)
		}
		var pe *floodgate.PolicyError
		if !errors.As(err, &pe) {
			t.Errorf("%s: error %v is not a *PolicyError", c.name, err)
			continue
		}
		if got := pe.Error(); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// TestValidateReportsEveryProblem: Validate lists all problems at once.
func TestValidateReportsEveryProblem(t *testing.T) {
	p := floodgate.Policy{Name: "x y", Algorithm: floodgate.TokenBucket, Max: 0, Window: -1, Burst: 5, MinInterval: time.Second}
	err := p.Validate()
	for _, want := range []string{"name =", "limit = 0", "window = -1ns", "burst = 5", "min_interval = 1s: not a parameter of token_bucket"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to mention %q", err, want)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	for _, c := range []struct {
		text string
		want floodgate.Policy
	}{
		{"100/1m", floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 100, Window: time.Minute, Burst: 1}},
		{"5/1s burst 10", floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 5, Window: time.Second, Burst: 10}},
		{"gcra 10/s burst 2 count_denied", floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 10, Window: time.Second, Burst: 2, CountDenied: new(true)}},
		{"fixed_window 100/1m align first", floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Minute, Align: floodgate.AlignFirst}},
		{"fixed_window 0/1m30s", floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 0, Window: 90 * time.Second}},
		{"token_bucket 15/1m burst 3", floodgate.Policy{Name: "p", Algorithm: floodgate.TokenBucket, Max: 15, Window: time.Minute, Burst: 3}},
		{"sliding_log 10/1s min_interval 100ms count_denied false track retention 24h",
			floodgate.Policy{Name: "p", Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Second, MinInterval: 100 * time.Millisecond,
				CountDenied: new(false), Track: true, Retention: 24 * time.Hour}},
		{"sliding_window 1/5s resolution 1s, 5/1h resolution 10m", floodgate.Policy{Name: "p", Algorithm: floodgate.SlidingWindow,
			Limits: []floodgate.Limit{{Max: 1, Window: 5 * time.Second, Resolution: time.Second}, {Max: 5, Window: time.Hour, Resolution: 10 * time.Minute}}}},
		{"fixed_window 100/1m track 1m for 24h", floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Minute,
			Track: true, SeriesResolution: time.Minute, SeriesRetention: 24 * time.Hour}},
		{"gcra 5/1s track 60s for 1440m retention 720h", floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 5, Window: time.Second, Burst: 1,
			Track: true, SeriesResolution: time.Minute, SeriesRetention: 24 * time.Hour, Retention: 720 * time.Hour}},
		{"gcra 5/1s track true", floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 5, Window: time.Second, Burst: 1, Track: true}},
		{"fixed_window 1000/1month align calendar tz Europe/Paris", floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 1000,
			Align: floodgate.Align("calendar"), Period: "month", TZ: "Europe/Paris"}},
		{"fixed_window 5/1day align calendar", floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 5,
			Align: floodgate.Align("calendar"), Period: "day"}},
		{"fixed_window 7/1week align calendar tz America/New_York count_denied hash_tag", floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 7,
			Align: floodgate.Align("calendar"), Period: "week", TZ: "America/New_York", CountDenied: new(true), HashTag: true}},
		{"gcra 5/1s hash_tag true", floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 5, Window: time.Second, Burst: 1, HashTag: true}},
		{"ar1 1.2/1s decay 2,5/10s decay 1.5", floodgate.Policy{Name: "p", Algorithm: floodgate.AR1,
			Limits: []floodgate.Limit{{Max: 1.2, Resolution: time.Second, Decay: 2}, {Max: 5, Resolution: 10 * time.Second, Decay: 1.5}}}},
	} {
		got := mustParse(t, c.text)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParsePolicy(%q)\n got %+v\nwant %+v", c.text, got, c.want)
		}
		// The text form reads back to the same policy.
		again := mustParse(t, got.String())
		if !reflect.DeepEqual(again, got) {
			t.Errorf("ParsePolicy(%q).String() = %q reads back as %+v", c.text, got.String(), again)
		}
	}
}

// TestCalendarPolicies: SPEC.md's JSON form of a calendar window, its
// Quota, and every way to get one wrong, each named by its field.
func TestCalendarPolicies(t *testing.T) {
	var p floodgate.Policy
	if err := json.Unmarshal([]byte(`{"name": "bill", "algorithm": "fixed_window", "max": 1000, "align": "calendar", "period": "month", "tz": "Europe/Paris"}`), &p); err != nil {
		t.Fatal(err)
	}
	want := floodgate.Policy{Name: "bill", Algorithm: floodgate.FixedWindow, Max: 1000, Align: "calendar", Period: "month", TZ: "Europe/Paris"}
	if !reflect.DeepEqual(p, want) || p.Validate() != nil {
		t.Errorf("calendar JSON reads as %+v (%v), want %+v", p, p.Validate(), want)
	}
	if got := p.String(); got != "fixed_window 1000/1month align calendar tz Europe/Paris" {
		t.Errorf("String() = %q", got)
	}
	if q, w := p.Quota(0); q != 1000 || w != 720*time.Hour {
		t.Errorf("Quota(0) = %d, %s; want 1000, 720h (the nominal month)", q, w)
	}
	cal := func(f func(*floodgate.Policy)) floodgate.Policy {
		q := floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 5, Align: "calendar", Period: "day"}
		f(&q)
		return q
	}
	for _, c := range []struct {
		name string
		p    floodgate.Policy
		want string
	}{
		{"no period", cal(func(p *floodgate.Policy) { p.Period = "" }), `period = "": day, week or month`},
		{"bad period", cal(func(p *floodgate.Policy) { p.Period = "fortnight" }), `period = "fortnight": day, week or month`},
		{"window", cal(func(p *floodgate.Policy) { p.Window = time.Hour }), `window = 1h: not a parameter of a calendar window (its length is period)`},
		{"bad tz", cal(func(p *floodgate.Policy) { p.TZ = "Mars/Olympus" }), `tz = "Mars/Olympus": an IANA time zone name`},
		{"local tz", cal(func(p *floodgate.Policy) { p.TZ = "Local" }), `tz = "Local": an IANA time zone name`},
		{"period without calendar", floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour, Period: "day"},
			`period = "day": only with align calendar`},
		{"tz without calendar", floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour, TZ: "UTC"},
			`tz = "UTC": only with align calendar`},
		{"calendar gcra", floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Max: 5, Window: time.Hour, Burst: 1, Align: "calendar"},
			`align = "calendar": not a parameter of gcra`},
	} {
		err := c.p.Validate()
		if !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct{ text, want string }{
		{"fixed_window 5/1month", `period = "1month": 1day, 1week or 1month only with align calendar`},
		{"fixed_window 5/1h align calendar", `window = 1h: not a parameter of a calendar window`},
		{"fixed_window 5/1day align calendar tz", `tz: an IANA time zone name after tz`},
		{"gcra 5/1month", `rate = "5/1month"`},
	} {
		_, err := floodgate.ParsePolicy("p", c.text)
		if !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePolicy(%q) = %v, want %q", c.text, err, c.want)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"", `floodgate: policy "p": policy text = "": a count per duration such as 100/1m`},
		{"leaky_bucket 5/1s", `floodgate: policy "p": algorithm = "leaky_bucket": one of sliding_window, ar1, fixed_window, token_bucket, sliding_log, gcra`},
		{"5 per second", `floodgate: policy "p": rate = "5": "<count>/<duration>", such as "100/1s"`},
		{"x/1s", `floodgate: policy "p": rate = "x/1s": a count that is an integer ≥ 1 before the /`},
		{"5/1 fortnight", `floodgate: policy "p": rate = "5/1": a Go duration after the /, such as "1s" or "1m30s"`},
		{"5/1s fortnightly", `floodgate: policy "p": policy text = "fortnightly": an option: burst, align, tz, min_interval, resolution, decay, count_denied, track, retention or hash_tag`},
		{"5/1q", `floodgate: policy "p": rate = "5/1q": a Go duration after the /, such as "1s" or "1m30s"`},
		{"5/1s burst", `floodgate: policy "p": burst: an integer after burst`},
		{"5/1s burst many", `floodgate: policy "p": burst = "many": an integer ≥ 1`},
		{"gcra 5/1s, 3/1m", `floodgate: policy "p": policy text = "gcra 5/1s, 3/1m": one clause: only sliding_window and ar1 take several limits, separated by commas`},
		{"fixed_window 5/1s align left", `floodgate: policy "p": align = "left": epoch, first or calendar`},
		{"sliding_window 5/1s", `floodgate: policy "p": limits[0].resolution = 0s: a duration > 0`},
		{"gcra 5/1s resolution 1s", `floodgate: policy "p": resolution = 1s: not a parameter of gcra`},
		{"sliding_window 5/1s decay 2", `floodgate: policy "p": decay = 2: not a parameter of sliding_window`},
		{"ar1 5/1s", `floodgate: policy "p": limits[0].decay = 0: a finite number > 1`},
		{"ar1 x/1s decay 2", `floodgate: policy "p": policy text = "x/1s": "<max>/<resolution>", such as "5/1s"`},
		{"token_bucket 5/1s", `floodgate: policy "p": burst = 0: an integer with 1 ≤ burst ≤ limit (5)`},
		{"gcra 10/1s burst 0", `floodgate: policy "p": burst = 0: an integer from 1 to 2^53-1`},
		{"5/1s min_interval soon", `floodgate: policy "p": min_interval = "soon": a Go duration such as "100ms" or "1m30s"`},
		{"5/1s track 1m", `floodgate: policy "p": track = "1m": a series as "<resolution> for <retention>", such as "track 1m for 24h"`},
		{"5/1s track 1m during 24h", `floodgate: policy "p": track = "1m during 24h": a series as "<resolution> for <retention>", such as "track 1m for 24h"`},
		{"5/1s track 1m for a day", `floodgate: policy "p": track = "1m for a": a series as "<resolution> for <retention>", such as "1m for 24h"`},
		{"5/1s track 1m for 90s", `floodgate: policy "p": track = 1m for 1m30s: a retention that is a whole multiple of the resolution`},
		{"5/1s track false 1m for 1h", `floodgate: policy "p": policy text = "1m": an option: burst, align, tz, min_interval, resolution, decay, count_denied, track, retention or hash_tag`},
	} {
		_, err := floodgate.ParsePolicy("p", c.text)
		if err == nil {
			t.Errorf("ParsePolicy(%q) succeeded", c.text)
			continue
		}
		if !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("ParsePolicy(%q): %v does not wrap ErrInvalidPolicy", c.text, err)
		}
		if err.Error() != c.want {
			t.Errorf("ParsePolicy(%q):\n got %s\nwant %s", c.text, err, c.want)
		}
	}
}

func TestPolicyJSON(t *testing.T) {
	for _, text := range []string{
		"gcra 100/1s burst 10",
		"fixed_window 3/1m align first count_denied true",
		"fixed_window 0/1h",
		"token_bucket 15/1m burst 3",
		"sliding_log 10/1s min_interval 100ms track retention 1h",
		"sliding_window 1/5s resolution 1s, 5/1h resolution 10m",
		"ar1 1.2/1s decay 2",
		"fixed_window 100/1m track 1m for 24h",
		"gcra 5/1s track 10s for 1h retention 48h",
		"fixed_window 1000/1month align calendar tz Europe/Paris",
		"fixed_window 3/1day align calendar count_denied true hash_tag",
	} {
		p := mustParse(t, text)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		var q floodgate.Policy
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatalf("%s: Unmarshal(%s): %v", text, b, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Errorf("%s: JSON %s reads back as %+v", text, b, q)
		}
	}
	// SPEC.md's own example, and its defaults.
	var p floodgate.Policy
	if err := json.Unmarshal([]byte(`{"algorithm": "gcra", "rate": "5/1m"}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.Burst != 1 || p.Max != 5 || p.Window != time.Minute {
		t.Errorf("gcra defaults: %+v", p)
	}
	// A series is the string of the text form; plain track is a bool.
	for text, want := range map[string]string{
		"fixed_window 100/1m track 1m for 24h": `"track":"1m for 24h"`,
		"fixed_window 100/1m track":            `"track":true`,
		"fixed_window 100/1m":                  `"align":"epoch"}`,
	} {
		b, _ := json.Marshal(mustParse(t, text))
		if !strings.Contains(string(b), want) || strings.Count(string(b), "track") > 1 {
			t.Errorf("%s: JSON %s, want it to hold %s", text, b, want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{`{"algorithm": "gcra", "rate": "5/1m", "brust": 2}`, `json: a policy object with SPEC.md's fields: json: unknown field "brust"`},
		{`{"algorithm": "token_bucket", "max": 5, "window": "1s", "burst": 1}`, `max = 5: not a parameter of token_bucket (its quota is limit)`},
		{`{"algorithm": "fixed_window", "limit": 5, "window": "1s"}`, `limit = 5: not a parameter of fixed_window`},
		{`{"algorithm": "fixed_window", "max": 5.5, "window": "1s"}`, `max = 5.5: an integer`},
		{`{"algorithm": "fixed_window", "max": 99999999999999999999, "window": "1s"}`, `max = 99999999999999999999: an integer`},
		{`{"algorithm": "fixed_window", "max": 5, "window": "1 minute"}`, `window = "1 minute": a Go duration such as "250ms" or "1m30s"`},
		{`{"algorithm": "gcra", "rate": "5/1s", "align": "first"}`, `align = first: not a parameter of gcra`},
		{`{"algorithm": "gcra", "rate": "5/1s", "window": "1s"}`, `window = 1s: not a parameter of gcra`},
		{`{"algorithm": "sliding_log", "max": 5, "window": "1s"}`, `window = 1s: not a parameter of sliding_log`},
		{`{"algorithm": "bucket"}`, `algorithm = "bucket": one of`},
		{`{"algorithm": "gcra", "rate": "5/1s", "track": "1m"}`, `track = "1m": a series as "<resolution> for <retention>"`},
		{`{"algorithm": "gcra", "rate": "5/1s", "track": 1}`, `track = 1: true, false or a series such as "1m for 24h"`},
	} {
		var p floodgate.Policy
		err := json.Unmarshal([]byte(c.in), &p)
		if err == nil || !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Unmarshal(%s) = %v; want an ErrInvalidPolicy mentioning %q", c.in, err, c.want)
		}
	}
}

// FuzzParsePolicy: parsing never panics, and whatever parses prints back to
// text that parses to the same policy, and survives JSON.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{
		"100/1m", "5/1s burst 10", "fixed_window 100/1m align first", "token_bucket 15/1m burst 3",
		"sliding_log 10/1s min_interval 100ms", "sliding_window 1/5s resolution 1s, 5/1h resolution 10m",
		"ar1 5/1s decay 2", "ar1 1.2/1s decay 2, 3/1m decay 1.1 count_denied true track retention 1h",
		"gcra 1/876000h burst 1", ",,", "5/", "/1s", "sliding_window 1/1us resolution 1us",
		"fixed_window 3/1m track 1m for 24h retention 48h", "5/1s track 1s for 1s", "5/1s track 1m for",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := floodgate.ParsePolicy("fuzz", text)
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidPolicy) {
				t.Fatalf("ParsePolicy(%q): %v does not wrap ErrInvalidPolicy", text, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParsePolicy(%q) returned an invalid policy: %v", text, err)
		}
		again, err := floodgate.ParsePolicy("fuzz", p.String())
		if err != nil {
			t.Fatalf("ParsePolicy(%q).String() = %q does not parse: %v", text, p.String(), err)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("ParsePolicy(%q) = %+v; its String %q reads back as %+v", text, p, p.String(), again)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", p, err)
		}
		var j floodgate.Policy
		if err := json.Unmarshal(b, &j); err != nil || !reflect.DeepEqual(j, p) {
			t.Fatalf("JSON %s reads back as %+v, %v; want %+v", b, j, err, p)
		}
	})
}
