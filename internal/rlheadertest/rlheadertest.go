// Package rlheadertest checks rate limit header fields in tests: every
// value must parse as a Structured Field List (RFC 9651) with a maintained
// parser, and the RateLimit fields must have the shape
// draft-ietf-httpapi-ratelimit-headers-10 gives them.
package rlheadertest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dunglas/httpsfv"
)

// Serve serves req with h and checks every header field of the response.
func Serve(t testing.TB, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	Check(t, rec.Result().Header)
	return rec
}

// Check checks that every field of h is a valid Structured Field
// List, and the RateLimit fields' items.
func Check(t testing.TB, h http.Header) {
	t.Helper()
	for name, values := range h {
		if name == "Date" {
			continue // an HTTP date, set by servers, not by the middleware
		}
		list, err := httpsfv.UnmarshalList(values)
		if err != nil {
			t.Errorf("field %s: %q is not a Structured Field List: %v", name, values, err)
			continue
		}
		switch name {
		case "Ratelimit-Policy":
			checkItems(t, name, list, []string{"q"}, []string{"w"})
		case "Ratelimit":
			checkItems(t, name, list, []string{"r"}, []string{"t"})
		case "Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset":
			if len(list) != 1 {
				t.Errorf("field %s: %q: want one Integer", name, values)
				continue
			}
			if it, ok := list[0].(httpsfv.Item); !ok || !nonNegInt(it.Value) {
				t.Errorf("field %s: %q: want a non-negative Integer", name, values)
			}
		}
	}
}

// checkItems checks that every member of list is an Item whose value is a
// String with the required integer parameters, and optional ones.
func checkItems(t testing.TB, field string, list httpsfv.List, required, optional []string) {
	t.Helper()
	if len(list) == 0 {
		t.Errorf("field %s: empty list", field)
	}
	for i, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Errorf("field %s: member %d is an inner list", field, i)
			continue
		}
		if _, ok := it.Value.(string); !ok {
			t.Errorf("field %s: member %d: value %v is not a String", field, i, it.Value)
		}
		for _, p := range required {
			if v, ok := it.Params.Get(p); !ok || !nonNegInt(v) {
				t.Errorf("field %s: member %d: parameter %s = %v, want a non-negative Integer", field, i, p, v)
			}
		}
		for _, p := range optional {
			if v, ok := it.Params.Get(p); ok && !nonNegInt(v) {
				t.Errorf("field %s: member %d: parameter %s = %v, want a non-negative Integer", field, i, p, v)
			}
		}
	}
}

func nonNegInt(v any) bool {
	n, ok := v.(int64)
	return ok && n >= 0
}

// ParseItem parses a one-item RateLimit field value into its name and
// integer parameters.
func ParseItem(t testing.TB, value string) (name string, params map[string]int64) {
	t.Helper()
	list, err := httpsfv.UnmarshalList([]string{value})
	if err != nil || len(list) != 1 {
		t.Fatalf("%q: want a one-item list (%v)", value, err)
	}
	it := list[0].(httpsfv.Item)
	params = map[string]int64{}
	for _, k := range it.Params.Names() {
		v, _ := it.Params.Get(k)
		params[k], _ = v.(int64)
	}
	name, _ = it.Value.(string)
	return name, params
}
