package rlheader_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/rlheadertest"
	"github.com/floodgatehq/floodgate/rlheader"
)

func mustPolicy(t testing.TB, name, text string) floodgate.Policy {
	t.Helper()
	p, err := floodgate.ParsePolicy(name, text)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyItems(t *testing.T) {
	type item = rlheader.PolicyItem
	for _, c := range []struct {
		text string
		want []item
	}{
		{"gcra 100/1m burst 5", []item{{"api", 100, 60}}},
		{"gcra 3/1500ms", []item{{"api", 3, 2}}},
		{"fixed_window 10/250ms", []item{{"api", 10, 1}}},
		{"fixed_window 0/1h", []item{{"api", 0, 3600}}},
		{"token_bucket 15/1m burst 3", []item{{"api", 15, 60}}},
		{"sliding_log 10/1s min_interval 100ms", []item{{"api", 10, 1}}},
		{"sliding_window 7/1m resolution 1s", []item{{"api", 7, 60}}},
		{"sliding_window 1/5s resolution 1s, 5/1h resolution 10m", []item{{"api/0", 1, 5}, {"api/1", 5, 3600}}},
		{"ar1 1.7/1500ms decay 2", []item{{"api", 1, 2}}},
		{"ar1 5/1s decay 2, 0.5/1m decay 1.5", []item{{"api/0", 5, 1}, {"api/1", 0, 60}}},
		{"fixed_window 9007199254740991/1s", []item{{"api", 999_999_999_999_999, 1}}},
	} {
		p := mustPolicy(t, "api", c.text)
		got := rlheader.PolicyItems(&p)
		if !slices.Equal(got, c.want) {
			t.Errorf("PolicyItems(%s) = %v, want %v", c.text, got, c.want)
		}
		h := http.Header{"Ratelimit-Policy": {rlheader.FormatPolicy(got)}}
		rlheadertest.Check(t, h)
	}
	if got := rlheader.PolicyItems(nil); got != nil {
		t.Errorf("PolicyItems(nil) = %v", got)
	}
}

func TestFormatPolicy(t *testing.T) {
	got := rlheader.FormatPolicy([]rlheader.PolicyItem{{"burst", 100, 60}, {"daily", 1000, 86400}})
	if want := `"burst";q=100;w=60, "daily";q=1000;w=86400`; got != want {
		t.Errorf("FormatPolicy = %s, want %s", got, want)
	}
	got = rlheader.FormatPolicy([]rlheader.PolicyItem{{`a"b\c`, -1, 0}, {"ü", 1 << 60, 1 << 60}})
	if want := `"a\"b\\c";q=0;w=1, "??";q=999999999999999;w=999999999999999`; got != want {
		t.Errorf("FormatPolicy = %s, want %s", got, want)
	}
	rlheadertest.Check(t, http.Header{"Ratelimit-Policy": {got}})
	if got := rlheader.FormatPolicy(nil); got != "" {
		t.Errorf("FormatPolicy(nil) = %q", got)
	}
}

func TestFormatRateLimit(t *testing.T) {
	for _, c := range []struct {
		d    floodgate.Decision
		want string
	}{
		{floodgate.Decision{Allowed: true, Remaining: 42, ResetAfter: 16*time.Second + time.Microsecond}, `"api";r=42;t=17`},
		{floodgate.Decision{Allowed: true, Remaining: 5, ResetAfter: 17 * time.Second}, `"api";r=5;t=17`},
		{floodgate.Decision{Allowed: true, Remaining: 5}, `"api";r=5;t=0`}, // SPEC rule 14: reset_after 0 gives t=0
		{floodgate.Decision{RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Hour}, `"api";r=0;t=2`},
		{floodgate.Decision{RetryAfter: time.Microsecond}, `"api";r=0;t=1`},
		{floodgate.Decision{RetryAfter: floodgate.Never, ResetAfter: time.Minute}, `"api";r=0`}, // rule 14: no t
		{floodgate.Decision{Allowed: true, Remaining: floodgate.MaxCost}, `"api";r=999999999999999;t=0`},
	} {
		got := rlheader.FormatRateLimit("api", c.d)
		if got != c.want {
			t.Errorf("FormatRateLimit(%v) = %s, want %s", c.d, got, c.want)
		}
		rlheadertest.Check(t, http.Header{"Ratelimit": {got}})
	}
}

func TestBinding(t *testing.T) {
	allow := func(rem int64) rlheader.Item {
		return rlheader.Item{Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: rem}}
	}
	deny := func(retry time.Duration) rlheader.Item {
		return rlheader.Item{Decision: floodgate.Decision{Limit: 10, RetryAfter: retry}}
	}
	keyless := rlheader.Item{Unknown: true}
	failOpen := rlheader.Item{Decision: floodgate.Decision{Allowed: true, Degraded: true}}
	failClosed := rlheader.Item{Decision: floodgate.Decision{Degraded: true, RetryAfter: time.Second}}
	fallback := rlheader.Item{Decision: floodgate.Decision{Limit: 10, Remaining: 0, RetryAfter: time.Second, Degraded: true}}
	fallbackAllowed := rlheader.Item{Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 4, Degraded: true}}
	for _, c := range []struct {
		name  string
		items []rlheader.Item
		want  int
	}{
		{"none", nil, -1},
		{"all unknown", []rlheader.Item{keyless, failOpen, failClosed}, -1},
		{"least remaining", []rlheader.Item{allow(5), allow(2), allow(9)}, 1},
		{"tie goes to the first", []rlheader.Item{allow(2), allow(2)}, 0},
		{"a denial beats any allowance", []rlheader.Item{allow(0), deny(time.Second)}, 1},
		{"longest retry", []rlheader.Item{deny(time.Second), deny(3 * time.Second), deny(2 * time.Second)}, 1},
		{"never is longest", []rlheader.Item{deny(time.Hour), deny(floodgate.Never)}, 1},
		{"denial tie goes to the first", []rlheader.Item{deny(time.Second), deny(time.Second)}, 0},
		{"unknown skipped", []rlheader.Item{keyless, allow(3)}, 1},
		{"fail-open skipped: it claims no remaining quota", []rlheader.Item{failOpen, allow(3)}, 1},
		{"fail-closed skipped: its wait is no quota's", []rlheader.Item{allow(3), failClosed}, 0},
		{"a fallback's denial is known", []rlheader.Item{allow(3), fallback}, 1},
		{"a fallback's allowance is known", []rlheader.Item{allow(5), fallbackAllowed}, 1},
	} {
		if got := rlheader.Binding(c.items); got != c.want {
			t.Errorf("%s: Binding = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestSetHeaders(t *testing.T) {
	login := mustPolicy(t, "login", "sliding_window 1/5s resolution 1s, 5/1h resolution 10m")
	api := mustPolicy(t, "api", "gcra 10/1s burst 20")
	now := time.Unix(1_700_000_000, 0)
	results := []rlheader.Item{
		{Policy: &api, Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 19, ResetAfter: 100 * time.Millisecond}},
		{Policy: &login, Decision: floodgate.Decision{Binding: 1, Limit: 5, Remaining: 0, RetryAfter: 1799500 * time.Millisecond, ResetAfter: time.Hour}},
		{Policy: &api, Decision: floodgate.Decision{Allowed: true, Degraded: true}},
	}
	h := http.Header{}
	if bi := rlheader.Set(h, rlheader.IETF|rlheader.XRateLimit|rlheader.XRateLimitResetUnix|rlheader.RetryAfter, now, rlheader.PolicyField(results), results); bi != 1 {
		t.Errorf("Set returned binding %d, want 1", bi)
	}
	rlheadertest.Check(t, h)
	want := http.Header{
		"Ratelimit-Policy":      {`"api";q=10;w=1, "login/0";q=1;w=5, "login/1";q=5;w=3600`},
		"Ratelimit":             {`"login/1";r=0;t=1800`},
		"X-Ratelimit-Limit":     {"5"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"1700001800"},
		"Retry-After":           {"1800"},
	}
	for k, v := range want {
		if !slices.Equal(h[k], v) {
			t.Errorf("%s = %q, want %q", k, h[k], v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("fields %v, want %d", h, len(want))
	}

	// The zero selection is Default; None sets nothing.
	h = http.Header{}
	rlheader.Set(h, 0, now, rlheader.PolicyField(results[:1]), results[:1])
	if got := h.Get("RateLimit"); got != `"api";r=19;t=1` || h.Get("X-RateLimit-Limit") != "" || h.Get("Retry-After") != "" {
		t.Errorf("default selection: %v", h)
	}
	h = http.Header{}
	rlheader.Set(h, rlheader.None, now, rlheader.PolicyField(results), results)
	if len(h) != 0 {
		t.Errorf("None set %v", h)
	}

	// A denial waiting cannot cure: no Retry-After, no t, X-RateLimit-Reset
	// from ResetAfter.
	never := []rlheader.Item{{Policy: &api, Decision: floodgate.Decision{Limit: 10, RetryAfter: floodgate.Never, ResetAfter: 2500 * time.Millisecond}}}
	h = http.Header{}
	rlheader.Set(h, rlheader.IETF|rlheader.XRateLimit|rlheader.RetryAfter, now, "", never)
	rlheadertest.Check(t, h)
	if h.Get("Retry-After") != "" || h.Get("RateLimit") != `"api";r=0` || h.Get("X-RateLimit-Reset") != "3" {
		t.Errorf("never: %v", h)
	}
}

// TestSetHeadersMultiLimitReset: an allowed sliding window of several
// limits reports, as t, when the binding limit's quota is whole again (at
// most its window), not when the longest limit's state ends.
func TestSetHeadersMultiLimitReset(t *testing.T) {
	login := mustPolicy(t, "login", "sliding_window 5/1m resolution 1s, 20/1h resolution 1m")
	now := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		d    floodgate.Decision
		want string
	}{
		{floodgate.Decision{Allowed: true, Binding: 0, Limit: 5, Remaining: 3, ResetAfter: 3599 * time.Second}, `"login/0";r=3;t=60`},
		{floodgate.Decision{Allowed: true, Binding: 0, Limit: 5, Remaining: 3, ResetAfter: 30 * time.Second}, `"login/0";r=3;t=30`},
		{floodgate.Decision{Allowed: true, Binding: 1, Limit: 20, Remaining: 1, ResetAfter: 3599 * time.Second}, `"login/1";r=1;t=3599`},
		// A denial's t is its RetryAfter, whatever the windows.
		{floodgate.Decision{Binding: 0, Limit: 5, RetryAfter: 90 * time.Second, ResetAfter: 3599 * time.Second}, `"login/0";r=0;t=90`},
	} {
		h := http.Header{}
		rlheader.Set(h, rlheader.IETF|rlheader.XRateLimit, now, "", []rlheader.Item{{Policy: &login, Decision: c.d}})
		rlheadertest.Check(t, h)
		if got := h.Get("RateLimit"); got != c.want {
			t.Errorf("%+v: RateLimit %s, want %s", c.d, got, c.want)
		}
	}
}

func TestFieldsString(t *testing.T) {
	for f, want := range map[rlheader.Fields]string{
		0:                                   "0",
		rlheader.Default:                    "IETF|RetryAfter",
		rlheader.XRateLimit | 0x80:          "XRateLimit|Fields(0x80)",
		rlheader.None:                       "None",
		rlheader.IETF | rlheader.XRateLimit: "IETF|XRateLimit",
	} {
		if got := f.String(); got != want {
			t.Errorf("Fields(%d).String() = %s, want %s", uint8(f), got, want)
		}
	}
}

func TestFieldsCheck(t *testing.T) {
	for f, want := range map[rlheader.Fields]string{
		0:                             "",
		rlheader.Default:              "",
		rlheader.None:                 "",
		rlheader.None | rlheader.IETF: "None alone, or a combination of the others",
		rlheader.XRateLimitResetUnix:  "XRateLimitResetUnix together with XRateLimit",
		0x80:                          "only IETF, XRateLimit, XRateLimitResetUnix, RetryAfter and None",
		rlheader.IETF | rlheader.XRateLimit | rlheader.XRateLimitResetUnix: "",
	} {
		if got := f.Check(); got != want {
			t.Errorf("%s.Check() = %q, want %q", f, got, want)
		}
	}
}

func TestSpelling(t *testing.T) {
	for k, want := range map[string]string{
		"Ratelimit": "RateLimit", "Ratelimit-Policy": "RateLimit-Policy", "X-Ratelimit-Limit": "X-RateLimit-Limit",
		"X-Ratelimit-Remaining": "X-RateLimit-Remaining", "X-Ratelimit-Reset": "X-RateLimit-Reset", "Retry-After": "Retry-After",
	} {
		if got := rlheader.Spelling(k); got != want || http.CanonicalHeaderKey(got) != k {
			t.Errorf("Spelling(%s) = %s, want %s (which canonicalizes back)", k, got, want)
		}
	}
}
