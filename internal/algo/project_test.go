package algo_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/algo"
)

// TestProjectVectors replays the project's own vectors (groups,
// reserve/settle/refund, partial grants, calendar windows) on the twin.
func TestProjectVectors(t *testing.T) {
	vs, err := floodgatetest.ProjectVectors()
	if err != nil {
		t.Fatal(err)
	}
	steps, mismatches := 0, 0
	for _, v := range vs {
		policies := make([]floodgate.Policy, len(v.Members))
		for i, m := range v.Members {
			policies[i] = m.Policy
			policies[i].Name = "m" + strconv.Itoa(i)
		}
		states := map[string]*algo.State{}
		borns := map[string]*int64{}
		holds := map[string][]algo.Hold{}
		holdKeys := map[string][]string{}
		members := func(keys []string, now int64) []algo.Member {
			ms := make([]algo.Member, len(keys))
			for i, k := range keys {
				id := strconv.Itoa(i) + "/" + k
				if states[id] == nil {
					states[id], borns[id] = &algo.State{}, new(int64)
				}
				ms[i] = algo.Member{Policy: &policies[i], State: states[id], Born: borns[id]}
				if c := v.Members[i].Calendar; c != nil {
					b := algo.CalendarBounds(c.Period, c.Location, now)
					ms[i].Bounds = &b
				}
			}
			return ms
		}
		for i, s := range v.Steps {
			if s.Op == "series" || s.Op == "list" {
				continue // usage queries: the stores replay them (floodgatetest)
			}
			steps++
			keys := s.Keys
			if s.Op == "settle" {
				keys = holdKeys[s.ID]
			}
			ms := members(keys, s.At)
			var o algo.Outcome
			switch s.Op {
			case "reset":
				for _, m := range ms {
					m.State.Reset()
				}
				continue
			case "add", "peek":
				err = algo.Add(ms, s.At, s.N, s.Op == "peek", &o)
			case "add_at_most", "peek_at_most":
				err = algo.AddAtMost(ms, s.At, s.N, s.Op == "peek_at_most", &o)
			case "reserve":
				h := make([]algo.Hold, len(ms))
				err = algo.Reserve(ms, s.At, s.N, &o, h)
				holds[s.ID], holdKeys[s.ID] = h, keys
			case "settle":
				err = algo.Settle(ms, s.At, holds[s.ID], s.Used, &o)
			case "refund":
				err = algo.Refund(ms, s.At, s.N, &o)
			}
			if err != nil {
				mismatches++
				t.Errorf("%s %s step %d (%s): %v", v.File, v.Name, i, s.Op, err)
				continue
			}
			if msg := projectMismatch(s.Expect, &o); msg != "" {
				mismatches++
				t.Errorf("%s %s step %d (%s %v n=%d at %d): %s", v.File, v.Name, i, s.Op, keys, s.N, s.At, msg)
			}
		}
	}
	t.Logf("conformance: project vectors (internal/algo): %d vectors, %d steps replayed, %d mismatches", len(vs), steps, mismatches)
}

// projectMismatch compares an outcome with a project expectation.
func projectMismatch(e *floodgatetest.ProjectExpect, o *algo.Outcome) string {
	if e == nil {
		return ""
	}
	msg := e.Expect.Mismatch(o.Decision)
	add := func(s string) {
		if msg != "" {
			msg += ", "
		}
		msg += s
	}
	if e.Granted != nil && *e.Granted != o.Granted {
		add(fmt.Sprintf("granted=%d want %d", o.Granted, *e.Granted))
	}
	if e.Member != nil && *e.Member != o.Member {
		add(fmt.Sprintf("member=%d want %d", o.Member, *e.Member))
	}
	return msg
}
