package floodgatetest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
)

// sharedVectors returns the project's shared vectors folder, ../shared/vectors
// beside the repository, or "" when it does not exist.
func sharedVectors(t *testing.T) string {
	shared := filepath.Join(repoRoot(t), "..", "shared", "vectors")
	if _, err := os.Stat(shared); err != nil {
		return ""
	}
	return shared
}

// repoRoot returns the directory of the module's go.mod.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	return dir
}

// TestVectorsInStep: the embedded copy equals ../shared/vectors, file for
// file, byte for byte, whenever that folder exists.
func TestVectorsInStep(t *testing.T) {
	shared := sharedVectors(t)
	if shared == "" {
		t.Skip("no ../shared/vectors beside the repository; nothing to compare the copy with")
	}
	list := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		return names
	}
	copyDir := filepath.Join("testdata", "vectors")
	want, got := list(shared), list(copyDir)
	if !slices.Equal(want, got) {
		t.Fatalf("floodgatetest/testdata/vectors holds %v; %s holds %v: copy the folder again", got, shared, want)
	}
	for _, name := range want {
		a, _ := os.ReadFile(filepath.Join(shared, name))
		b, _ := os.ReadFile(filepath.Join(copyDir, name))
		if !bytes.Equal(a, b) {
			t.Errorf("testdata/vectors/%s differs from %s: copy it again", name, filepath.Join(shared, name))
		}
	}
}

func TestPublicVectors(t *testing.T) {
	vs, err := PublicVectors()
	if err != nil {
		t.Fatal(err)
	}
	algs := map[floodgate.Algorithm]int{}
	steps := 0
	for _, v := range vs {
		algs[v.Policy.Algorithm]++
		steps += len(v.Steps)
	}
	if len(vs) != 164 || steps != 1351 || len(algs) != 6 {
		t.Errorf("public set: %d vectors, %d steps, %d algorithms; want 164, 1351, 6", len(vs), steps, len(algs))
	}
}

func TestParseVectorsErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`[{"name":"x","policy":{"algorithm":"gcra","rate":"0/1s"},"steps":[{"at_us":0,"key":"k","op":"add"}]}]`, "rate = 0/1s"},
		{`[{"name":"x","policy":{"algorithm":"gcra","rate":"1/1s"},"steps":[]}]`, "no steps"},
		{`[{"name":"x","policy":{"algorithm":"gcra","rate":"1/1s"},"steps":[{"at_us":0,"key":"k","op":"take"}]}]`, `op "take"`},
		{`[{"name":"x","policy":{"algorithm":"gcra","rate":"1/1s"},"steps":[{"at_us":0,"key":"k","op":"add","n":0}]}]`, "n = 0"},
		{`[{"name":"x","policy":{"algorithm":"gcra","rate":"1/1s"},"steps":[{"at_us":0,"key":"","op":"add"}]}]`, "empty key"},
		{`{"name":`, "f.json"},
	} {
		_, err := ParseVectors([]byte(c.in), "f.json")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseVectors(%s) = %v, want an error mentioning %q", c.in, err, c.want)
		}
	}
	// One object is a file of one vector.
	vs, err := ParseVectors([]byte(`{"name":"one","policy":{"algorithm":"gcra","rate":"1/1s"},"steps":[{"at_us":0,"key":"k","op":"add","expect":{"allowed":true}}]}`), "one.json")
	if err != nil || len(vs) != 1 || vs[0].File != "one.json" {
		t.Errorf("single object: %v, %v", vs, err)
	}
}

func TestExpectMismatch(t *testing.T) {
	yes, two, never := true, int64(2), int64(-1)
	e := &Expect{Allowed: &yes, Remaining: &two, RetryAfterUS: &never}
	if m := e.Mismatch(floodgate.Decision{Allowed: true, Remaining: 2, RetryAfter: floodgate.Never}); m != "" {
		t.Errorf("agreeing decision: %q", m)
	}
	m := e.Mismatch(floodgate.Decision{Allowed: false, Remaining: 3, RetryAfter: time.Second})
	if m != "allowed=false want true, remaining=3 want 2, retry_after_us=1000000 want -1" {
		t.Errorf("Mismatch = %q", m)
	}
	var none *Expect
	if m := none.Mismatch(floodgate.Decision{}); m != "" {
		t.Errorf("nil expectation: %q", m)
	}
}

func TestMaxAdmitted(t *testing.T) {
	parse := func(text string) *floodgate.Policy {
		p, err := floodgate.ParsePolicy("p", text)
		if err != nil {
			t.Fatal(err)
		}
		return &p
	}
	const s = 1_000_000
	for _, c := range []struct {
		text        string
		first, last int64
		want        int64
	}{
		{"fixed_window 5/10s", 0, 9 * s, 5},
		{"fixed_window 5/10s", 9 * s, 10 * s, 10},
		{"fixed_window 5/10s align first", 9 * s, 10 * s, 5},
		{"fixed_window 5/10s align first", 0, 10 * s, 10},
		{"gcra 10/1s burst 3", 0, 0, 3},
		{"gcra 10/1s burst 3", 0, s, 13},
		{"sliding_log 4/1s", 0, s - 1, 4},
		{"sliding_log 4/1s", 0, s, 8},
		{"sliding_window 5/10s resolution 1s", 0, 9 * s, 5},
		{"sliding_window 5/10s resolution 1s", 0, 10 * s, 10},
		{"sliding_window 5/10s resolution 1s, 2/1h resolution 1m", 0, 10 * s, 2},
		{"token_bucket 10/10s burst 2", 0, 5 * s, 6},
		{"token_bucket 10/10s burst 2", 0, 15 * s, 9 + 6}, // 2 + 8 refilled within the first 10 s less 1 µs, then 2 + 4
		{"ar1 4/1s decay 2", 0, 0, 4},
		{"ar1 4/1s decay 2", 0, 2 * s, 8},
	} {
		if got := MaxAdmitted(parse(c.text), 1, c.first, c.last); got != c.want {
			t.Errorf("MaxAdmitted(%s, 1, %d, %d) = %d, want %d", c.text, c.first, c.last, got, c.want)
		}
	}
}

// TestBaselineVectorsUnchanged: the copy of the baseline vectors is the
// one recorded in testdata/vectors.sha256 (sha256sum's format), file for
// file. Unlike TestVectorsInStep it needs nothing beside the repository,
// so a clean checkout (CI) checks too that no one edited the baseline
// every store must replay unchanged. The record changes only with the
// baseline itself: copy ../shared/vectors again, then
// (cd testdata/vectors && sha256sum * > ../vectors.sha256).
func TestBaselineVectorsUnchanged(t *testing.T) {
	record, err := os.ReadFile(filepath.Join("testdata", "vectors.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(record)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("testdata/vectors.sha256: %q is not a line of sha256sum", line)
		}
		want[name] = sum
	}
	entries, err := os.ReadDir(filepath.Join("testdata", "vectors"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", "vectors", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	for name, sum := range want {
		switch g, ok := got[name]; {
		case !ok:
			t.Errorf("testdata/vectors/%s is gone", name)
		case g != sum:
			t.Errorf("testdata/vectors/%s changed (sha256 %s, recorded %s): the baseline is replayed unchanged", name, g, sum)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("testdata/vectors/%s is not in testdata/vectors.sha256: the baseline's folder holds its files alone", name)
		}
	}
}
