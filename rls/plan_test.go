package rls_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/rls"
)

const planDomain = `domain: p
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 5, name: login}
  - key: path
    value: /login/*
    rate_limit: {unit: second, requests_per_unit: 1, name: sub}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: open
    rate_limit: {unlimited: true}
`

// TestMatch: Match alone finds each descriptor's rule and plans its store
// request, without deciding anything.
func TestMatch(t *testing.T) {
	eng, _ := newService(t, planDomain)
	plan, err := eng.Table().Match(rls.Request{Domain: "p", HitsAddend: 2, Descriptors: []rls.Descriptor{
		d("user", "alice"),
		d("path", "/login"),
		d("path", "/login/otp"),
		d("path", "/other"),
		d("open", "x"),
		d("nothing", "y"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range plan.Requests {
		got = append(got, fmt.Sprintf("%s %q n=%d peek=%v", r.Policy.String(), r.Key, r.N, r.Peek))
	}
	want := []string{
		`fixed_window 10/1m count_denied true "user=alice" n=2 peek=false`,
		`fixed_window 5/1h count_denied true "path=\\/login" n=2 peek=false`,
		`fixed_window 1/1s count_denied true "path=\\/login\\/otp" n=2 peek=false`,
		`fixed_window 100/1s count_denied true "path=\\/other" n=2 peek=false`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("planned requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSummarise: Summarise alone turns decisions into statuses and the
// overall code; the plan's decisions may come from anywhere.
func TestSummarise(t *testing.T) {
	eng, _ := newService(t, planDomain)
	plan, err := eng.Table().Match(rls.Request{Domain: "p", Descriptors: []rls.Descriptor{d("user", "a"), d("open", "x"), d("path", "/login")}})
	if err != nil {
		t.Fatal(err)
	}
	ds := []floodgate.Decision{
		{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 1500 * time.Millisecond},
		{Allowed: false, Limit: 5, RetryAfter: time.Hour, ResetAfter: time.Hour},
	}
	resp := plan.Summarise(ds)
	if got := summaries(resp); got != "OK(7) unlimited OVER" {
		t.Errorf("statuses %s", got)
	}
	if resp.OverallCode != rls.CodeOverLimit || resp.Statuses[0].DurationUntilReset != 2*time.Second {
		t.Errorf("overall %v, reset %v", resp.OverallCode, resp.Statuses[0].DurationUntilReset)
	}
	if l := resp.Statuses[2].CurrentLimit; l == nil || l.Name != "login" || l.Unit != config.Hour || l.RequestsPerUnit != 5 {
		t.Errorf("current limit %+v", l)
	}
}

// TestOverridesBounded: limit overrides chosen by clients never mint a
// policy name for metrics or counters (an override of the configured
// rule's unit decides on its counters; of another unit, on the domain's
// for the unit), and the rules kept for them are bounded; the same
// override made again decides on the same counter.
func TestOverridesBounded(t *testing.T) {
	eng, _ := newService(t, planDomain)
	for i := range 2000 {
		plan, err := eng.Table().Match(rls.Request{Domain: "p", Descriptors: []rls.Descriptor{{
			Entries: d("user", "x").Entries, Limit: &rls.Limit{RequestsPerUnit: uint32(i + 1), Unit: config.Minute},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := plan.Requests[0].Policy; p.Max != int64(i+1) || p.Window != time.Minute || p.Name != "p.user" {
			t.Fatalf("override %d: policy %s %s; want p.user's counters", i+1, p.Name, p.String())
		}
		plan, err = eng.Table().Match(rls.Request{Domain: "p", Descriptors: []rls.Descriptor{{
			Entries: d("user", "x").Entries, Limit: &rls.Limit{RequestsPerUnit: uint32(i + 1), Unit: config.Day},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := plan.Requests[0].Policy; p.Max != int64(i+1) || p.Window != 24*time.Hour || p.Name != "p.override.day" {
			t.Fatalf("override %d: policy %s %s; want p.override.day", i+1, p.Name, p.String())
		}
	}
	// The same override twice: one counter (the second sees the first).
	for i, want := range []string{"OK(1)", "OK(0)", "OVER"} {
		resp := ask(t, eng, "p", rls.Descriptor{Entries: d("user", "y").Entries, Limit: &rls.Limit{RequestsPerUnit: 2, Unit: config.Hour}})
		if got := summaries(resp); got != want {
			t.Errorf("override request %d: %s, want %s", i+1, got, want)
		}
	}
}

// TestCompileRefusesBadDomain: a domain whose floodgate policy does not
// compile (config.Parse refuses it; a Config built by hand may carry it)
// is an error naming its file and line, and nothing is swapped.
func TestCompileRefusesBadDomain(t *testing.T) {
	eng, _ := newService(t, planDomain)
	before := eng.Table()
	bad := &config.Config{Bounds: config.RequestBounds{MaxDescriptors: 8, MaxKeyBytes: 64}}
	bad.Domains = []*config.Domain{{Name: "d", Descriptors: []*config.Descriptor{{Key: "a", File: "x.yaml", Line: 3,
		RateLimit: &config.RateLimit{Spec: "gcra fast", Line: 4}}}}}
	if _, err := eng.Compile(bad); err == nil || !strings.HasPrefix(err.Error(), "x.yaml:4: ") {
		t.Errorf("Compile = %v; want an error at x.yaml:4", err)
	}
	if eng.Table() != before {
		t.Error("a failed compile swapped the table")
	}
}

// TestRule: Table.Rule finds what ShouldRateLimit matches, wildcards in
// configuration order included.
func TestRule(t *testing.T) {
	eng, _ := newService(t, planDomain)
	for _, c := range []struct {
		entries []rls.Entry
		path    string
	}{
		{d("path", "/login").Entries, "p.path_/login"},
		{d("path", "/login/x").Entries, "p.path_/login/*"},
		{d("path", "/else").Entries, "p.path"},
		{d("user", "u").Entries, "p.user"},
		{d("nothing", "u").Entries, ""},
	} {
		r, ok := eng.Table().Rule("p", c.entries)
		if ok != (c.path != "") || r.Path != c.path {
			t.Errorf("Rule(%v) = %q, %v; want %q", c.entries, r.Path, ok, c.path)
		}
	}
	if _, ok := eng.Table().Rule("nope", d("user", "u").Entries); ok {
		t.Error("Rule of an unknown domain found one")
	}
}
