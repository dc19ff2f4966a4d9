package rlheadertest

import (
	"net/http"
	"testing"
)

// TestCheckRejects shows that the checker flags invalid values.
func TestCheckRejects(t *testing.T) {
	for _, h := range []http.Header{
		{"Ratelimit": {`api;r=1`}},                  // a Token, not a String
		{"Ratelimit": {`"api";r=-1`}},               // negative
		{"Ratelimit": {`"api";t=1`}},                // no r
		{"Ratelimit-Policy": {`"api";w=1`}},         // no q
		{"Retry-After": {`1.5`}},                    // a Decimal
		{"X-Ratelimit-Limit": {`1000000000000000`}}, // 16 digits
		{"Ratelimit": {`"a";r=1,`}},                 // trailing comma
	} {
		ft := &fakeTB{TB: t}
		Check(ft, h)
		if !ft.failed {
			t.Errorf("Check(%v) passed", h)
		}
	}
}

type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Errorf(string, ...any) { f.failed = true }
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true }
