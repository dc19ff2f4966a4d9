package floodgatetest

import (
	"strings"
	"testing"
)

func TestProjectVectors(t *testing.T) {
	vs, err := ProjectVectors()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]int{}
	steps, groups, calendars := 0, 0, 0
	ops := map[string]int{}
	names := map[string]bool{}
	for _, v := range vs {
		files[v.File]++
		steps += len(v.Steps)
		if v.Group {
			groups++
		}
		for _, m := range v.Members {
			if m.Calendar != nil {
				calendars++
				break
			}
		}
		for _, s := range v.Steps {
			ops[s.Op]++
		}
		if names[v.Name] {
			t.Errorf("two vectors named %s", v.Name)
		}
		names[v.Name] = true
	}
	if len(vs) < 40 {
		t.Errorf("%d project vectors, want at least 40 (issue 15)", len(vs))
	}
	for _, op := range []string{"add", "peek", "reset", "add_at_most", "peek_at_most", "reserve", "settle", "refund"} {
		if ops[op] == 0 {
			t.Errorf("no step of op %s", op)
		}
	}
	if groups == 0 || calendars == 0 {
		t.Errorf("%d group vectors, %d calendar vectors: want some of each", groups, calendars)
	}
	t.Logf("project set: %d vectors, %d steps, per file %v, %d groups, %d calendar, ops %v", len(vs), steps, files, groups, calendars, ops)
}

func TestParseProjectVectorsErrors(t *testing.T) {
	const fw = `{"algorithm":"fixed_window","max":1,"window":"1s"}`
	const cal = `{"algorithm":"fixed_window","max":1,"align":"calendar","period":"%s","tz":"%s"}`
	for _, c := range []struct{ in, want string }{
		{`[{"name":"x","steps":[{"at_us":0,"key":"k","op":"add"}]}]`, "no policy and no group"},
		{`[{"name":"x","policy":` + fw + `,"group":[` + fw + `],"steps":[{"at_us":0,"key":"k","op":"add"}]}]`, "both policy and group"},
		{`[{"name":"x","policy":` + fw + `,"steps":[]}]`, "no steps"},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at_us":0,"key":"k","op":"take"}]}]`, `op "take"`},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at_us":0,"key":"k","op":"add","n":0}]}]`, "n = 0"},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at_us":0,"key":"k","op":"refund","n":-3}]}]`, "n = -3"},
		{`[{"name":"x","group":[` + fw + `,` + fw + `],"steps":[{"at_us":0,"keys":["a"],"op":"add"}]}]`, "one key per member"},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at_us":0,"key":"k","op":"settle","id":"r","used":0}]}]`, "no earlier reserve"},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at_us":0,"key":"k","op":"reserve","id":"r"},{"at_us":0,"key":"k","op":"reserve","id":"r"}]}]`, "used by no other reserve"},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at_us":0,"key":"k","op":"reserve","id":"r"},{"at_us":0,"op":"settle","id":"r"}]}]`, "used ≥ 0"},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at_us":0,"key":"k","op":"add"},{"at":"2026-01-01T00:00:00Z","key":"k","op":"add"}]}]`, "either at_us or at"},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at":"yesterday","key":"k","op":"add"}]}]`, "at:"},
		{`[{"name":"x","policy":` + strings.Replace(cal, "%s", "year", 1) + `,"steps":[{"at_us":0,"key":"k","op":"add"}]}]`, `period = "year": day, week or month`},
		{`[{"name":"x","policy":{"algorithm":"fixed_window","max":1,"align":"calendar","period":"day","tz":"Mars/Olympus"},"steps":[{"at_us":0,"key":"k","op":"add"}]}]`, `tz = "Mars/Olympus": an IANA time zone name`},
		{`[{"name":"x","policy":{"algorithm":"fixed_window","max":1,"window":"1s","align":"calendar","period":"day"},"steps":[{"at_us":0,"key":"k","op":"add"}]}]`, "window = 1s: not a parameter of a calendar window"},
		{`[{"name":"x","policy":{"algorithm":"gcra","rate":"1/1s","align":"calendar","period":"day"},"steps":[{"at_us":0,"key":"k","op":"add"}]}]`, "align"},
		{`[{"name":"x","policy":` + fw + `,"steps":[{"at_us":0,"key":"k","op":"add","expect":{"granted":1,"grant":2}}]}]`, "grant"},
	} {
		_, err := ParseProjectVectors([]byte(c.in), "f.json")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseProjectVectors(%s) = %v, want an error mentioning %q", c.in, err, c.want)
		}
	}
	vs, err := ParseProjectVectors([]byte(`[{"name":"c","policy":{"algorithm":"fixed_window","max":2,"align":"calendar","period":"week"},"steps":[{"at":"2026-01-05T00:00:00Z","key":"k","op":"add"}]}]`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	m := vs[0].Members[0]
	if m.Calendar == nil || m.Calendar.TZ != "UTC" || m.Calendar.Period != "week" || m.Policy.Window != 0 || m.Policy.Max != 2 {
		t.Errorf("calendar member = %+v, %+v", m.Policy, m.Calendar)
	}
	if vs[0].Steps[0].At != 1767571200000000 {
		t.Errorf("at = %d, want 1767571200000000 (2026-01-05T00:00:00Z)", vs[0].Steps[0].At)
	}
}
