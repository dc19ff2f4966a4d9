package algo_test

import (
	"os"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/algo"
)

// TestConformance replays every public vector, and those of the folder
// named by FLOODGATE_VECTORS, on the pure step functions.
func TestConformance(t *testing.T) {
	vectors, err := floodgatetest.PublicVectors()
	if err != nil {
		t.Fatal(err)
	}
	replay(t, "public", vectors)
	if dir := os.Getenv(floodgatetest.VectorsEnv); dir != "" {
		extra, err := floodgatetest.LoadVectorDir(dir)
		if err != nil {
			t.Fatalf("%s=%s: %v", floodgatetest.VectorsEnv, dir, err)
		}
		if len(extra) == 0 {
			t.Fatalf("%s=%s: no *.json vector files", floodgatetest.VectorsEnv, dir)
		}
		replay(t, dir, extra)
	}
}

func replay(t *testing.T, set string, vectors []floodgatetest.Vector) {
	steps, mismatches := 0, 0
	for _, v := range vectors {
		p := v.Policy
		p.Name = "v"
		states := map[string]*algo.State{}
		for i, s := range v.Steps {
			st := states[s.Key]
			if st == nil {
				st = &algo.State{}
				states[s.Key] = st
			}
			now := floodgatetest.BaseMicros + s.AtMicros
			steps++
			if s.Op == "reset" {
				st.Reset()
				continue
			}
			before := *st
			var d floodgate.Decision
			algo.Step(&p, st, now, s.Cost(), s.Op == "peek", &d)
			if msg := s.Expect.Mismatch(d); msg != "" {
				mismatches++
				t.Errorf("%s %s step %d (%s %q n=%d at %d): %s\n  state before: %+v", v.File, v.Name, i, s.Op, s.Key, s.Cost(), s.AtMicros, msg, before)
			}
		}
	}
	t.Logf("conformance: %s vectors (internal/algo): %d vectors, %d steps replayed, %d mismatches", set, len(vectors), steps, mismatches)
}
