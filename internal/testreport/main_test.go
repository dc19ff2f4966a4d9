package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    suite.go:1: conformance: 164 vectors, 1351 steps\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: no redis-server\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestB"}`,
		`{"Action":"pass","Package":"p","Elapsed":0.5}`,
		`{"Action":"output","Package":"q","Test":"TestC","Output":"    c_test.go:9: got 1 want 2\n"}`,
		`{"Action":"fail","Package":"q","Test":"TestC"}`,
		`{"Action":"fail","Package":"q","Elapsed":0.25}`,
		`# not json`,
	}, "\n")
	var out strings.Builder
	if code := run(strings.NewReader(in), &out); code != 1 {
		t.Errorf("exit status %d, want 1 after a failure", code)
	}
	want := "SKIP  p TestB: b_test.go:3: no redis-server\n" +
		"ok    p 0.50s\n" +
		"    conformance: 164 vectors, 1351 steps\n" +
		"    c_test.go:9: got 1 want 2\n" +
		"FAIL  q 0.25s\n" +
		"# not json\n" +
		"FAIL\n"
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if code := run(strings.NewReader(`{"Action":"pass","Package":"p"}`), &out); code != 0 {
		t.Errorf("exit status %d after a pass", code)
	}
}
