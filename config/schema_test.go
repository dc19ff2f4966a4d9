package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/failure"
)

// TestDefaultsYAML: the generated file parses, to the defaults, and reads
// within its width.
func TestDefaultsYAML(t *testing.T) {
	data := DefaultsYAML()
	got, err := Parse(Source{Name: "defaults.yaml", Data: data})
	if err != nil {
		t.Fatalf("DefaultsYAML does not parse: %v\n%s", err, data)
	}
	want := Defaults()
	got.Sources, want.Sources = nil, nil
	// The breaker's defaults are written out; Defaults leaves them zero
	// for package failure to fill in.
	want.Failure.Breaker = failure.Breaker{Window: failure.DefaultWindow, MinCalls: failure.DefaultMinCalls,
		FailureRatio: failure.DefaultFailureRatio, OpenFor: failure.DefaultOpenFor}
	for _, c := range []*Config{got, want} { // empty and nil lists alike
		if len(c.Policies) == 0 {
			c.Policies = nil
		}
		if len(c.Domains) == 0 {
			c.Domains = nil
		}
		if len(c.Store.Addrs) == 0 {
			c.Store.Addrs = nil
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultsYAML parses to\n%+v\nwant the defaults\n%+v", got, want)
	}
	if again := DefaultsYAML(); string(again) != string(data) {
		t.Error("DefaultsYAML is not deterministic")
	}
	for _, line := range strings.Split(string(data), "\n") {
		if len(line) > width {
			t.Errorf("line longer than %d: %q", width, line)
		}
	}
}

// TestSchemaRead: the parser reads every field of the schema: a value of
// the wrong kind in any of them is an error naming that field. (A field
// the schema lists but the parser ignored would pass silently.)
func TestSchemaRead(t *testing.T) {
	var walk func(path string, settings []setting, n int)
	count := 0
	walk = func(path string, settings []setting, depth int) {
		for _, s := range settings {
			p := join(path, s.key)
			if s.children != nil {
				walk(p, s.children, depth+1)
				continue
			}
			count++
			// Nest p's parts as YAML, with a list (wrong for every field
			// but addrs, which gets a mapping) as the value.
			parts := strings.Split(p, ".")
			var b strings.Builder
			for i, part := range parts {
				b.WriteString(strings.Repeat("  ", i) + part + ":")
				if i < len(parts)-1 {
					b.WriteString("\n")
				}
			}
			bad := " [1, 2]\n"
			if p == "store.addrs" || p == "policies" {
				bad = " {a: {b: 1}}\n"
			}
			b.WriteString(bad)
			_, err := Parse(Source{Name: "c.yaml", Data: []byte(b.String())})
			if err == nil {
				t.Errorf("%s: a wrong value is accepted:\n%s", p, b.String())
				continue
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: the error does not name the field: %v", p, err)
			}
		}
	}
	walk("", schema, 0)
	if count < 30 {
		t.Errorf("only %d fields walked", count)
	}
}
