package httpapi

// The budget endpoints: the project's vectors (SPEC.md's atomic groups,
// reserve/settle/refund, partial grants, calendar windows) replayed over
// HTTP on a memory store, as floodgatetest replays them through
// Store.Take; tokens that are forged, altered or settled twice; the
// errors of the new fields.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/service"
)

// newBudgetAPI serves conf on a memory store with a manual clock at t.
func newBudgetAPI(t *testing.T, conf string, at time.Time) *testAPI {
	t.Helper()
	clock := floodgatetest.NewManualClock(at)
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg, err := config.Parse(config.Source{Name: "floodgate.yaml", Data: []byte(conf)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: store, Clock: clock, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return &testAPI{h: Handler(svc, Options{Logger: quietLogger()}), svc: svc, clock: clock}
}

// vectorConfig is a configuration naming every member of vs v<i>m<j>.
func vectorConfig(vs []floodgatetest.ProjectVector) string {
	var b strings.Builder
	b.WriteString("admin:\n  allow_loopback: true\npolicies:\n")
	for i, v := range vs {
		for j, m := range v.Members {
			text, _ := json.Marshal(m.Policy.String())
			fmt.Fprintf(&b, "  v%dm%d: %s\n", i, j, text)
		}
	}
	return b.String()
}

// decisionOf reads an answer's decision: the one of budgetResponse, or
// the only one of a check's decisions; and its member (0 without one).
func decisionOf(t *testing.T, a answer) (floodgate.Decision, int32, *int64) {
	t.Helper()
	dj, ok := a.body["decision"].(map[string]any)
	if !ok {
		ds, _ := a.body["decisions"].([]any)
		if len(ds) != 1 {
			t.Fatalf("no decision in %d %s", a.status, a.raw)
		}
		dj = ds[0].(map[string]any)
	}
	d := floodgate.Decision{
		Allowed: dj["allowed"] == true, Limit: num(dj["limit"]), Remaining: num(dj["remaining"]),
		RetryAfter: time.Duration(num(dj["retry_after_us"])) * time.Microsecond,
		ResetAfter: time.Duration(num(dj["reset_after_us"])) * time.Microsecond,
		Binding:    int32(num(dj["binding"])),
	}
	if num(dj["retry_after_us"]) == -1 {
		d.RetryAfter = floodgate.Never
	}
	var granted *int64
	if g, ok := dj["granted"]; ok {
		n := num(g)
		granted = &n
	}
	var m int32
	if mv, ok := a.body["member"]; ok {
		m = int32(num(mv))
	}
	return d, m, granted
}

// TestProjectVectorsOverHTTP replays the project's vectors through the
// API: add and peek as /v1/check and /v1/peek (a group as an atomic
// batch), add_at_most and peek_at_most with at_most, reserve as
// /v1/reserve, settle as /v1/settle with the token (a peek of 1 for a
// denied reservation, which has none), refund as /v1/refund, reset as
// /v1/reset of every member. Every expectation is checked, with granted
// and member; 0 mismatches.
func TestProjectVectorsOverHTTP(t *testing.T) {
	vs, err := floodgatetest.ProjectVectors()
	if err != nil {
		t.Fatal(err)
	}
	a := newBudgetAPI(t, vectorConfig(vs), time.UnixMicro(floodgatetest.BaseMicros))
	steps, mismatches := 0, 0
	for i, v := range vs {
		name := func(j int) string { return "v" + strconv.Itoa(i) + "m" + strconv.Itoa(j) }
		tokens := map[string]string{}
		reserved := map[string][]string{}
		for k, s := range v.Steps {
			if s.Op == "series" || s.Op == "list" {
				continue
			}
			a.clock.SetMicros(s.At)
			steps++
			fail := func(format string, args ...any) {
				t.Errorf("%s %s step %d (%s n=%d at %s): %s", v.File, v.Name, k, s.Op, s.N,
					time.UnixMicro(s.At).UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
				mismatches++
			}
			keys := s.Keys
			if s.Op == "settle" {
				keys = reserved[s.ID]
			}
			members := make([]map[string]any, len(keys))
			for j, key := range keys {
				members[j] = map[string]any{"policy": name(j), "key": key}
			}
			group := len(keys) > 1
			body := func(extra map[string]any) string {
				m := map[string]any{}
				if group {
					reqs := make([]map[string]any, len(members))
					for j, mb := range members {
						reqs[j] = map[string]any{}
						for k, x := range mb {
							reqs[j][k] = x
						}
						for k, x := range extra {
							reqs[j][k] = x
						}
					}
					m["requests"], m["atomic"] = reqs, true
				} else {
					for k, x := range members[0] {
						m[k] = x
					}
					for k, x := range extra {
						m[k] = x
					}
				}
				data, _ := json.Marshal(m)
				return string(data)
			}
			units := func() string {
				m := map[string]any{"n": s.N}
				if group {
					m["requests"] = members
				} else {
					m["policy"], m["key"] = members[0]["policy"], members[0]["key"]
				}
				data, _ := json.Marshal(m)
				return string(data)
			}
			var res answer
			n := s.N // the units a plain add or peek is granted when allowed
			switch s.Op {
			case "reset":
				for j, key := range keys {
					data, _ := json.Marshal(map[string]any{"policy": name(j), "key": key})
					if r := a.post(t, "/v1/reset", string(data)); r.status != 200 {
						fail("reset: %d %s", r.status, r.raw)
					}
				}
				continue
			case "add":
				res = a.post(t, "/v1/check", body(map[string]any{"cost": s.N}))
			case "peek":
				res = a.post(t, "/v1/peek", body(map[string]any{"cost": s.N}))
			case "add_at_most":
				res = a.post(t, "/v1/check", body(map[string]any{"cost": s.N, "at_most": true}))
			case "peek_at_most":
				res = a.post(t, "/v1/peek", body(map[string]any{"cost": s.N, "at_most": true}))
			case "reserve":
				res = a.post(t, "/v1/reserve", units())
				tok, _ := res.body["token"].(string)
				if allowed, _ := res.body["allowed"].(bool); allowed != (tok != "") {
					fail("allowed %v with token %q", allowed, tok)
				}
				tokens[s.ID], reserved[s.ID] = tok, keys
			case "settle":
				n = 1
				if tok := tokens[s.ID]; tok != "" {
					data, _ := json.Marshal(map[string]any{"token": tok, "used": s.Used})
					res = a.post(t, "/v1/settle", string(data))
				} else {
					res = a.post(t, "/v1/peek", body(map[string]any{"cost": 1}))
				}
			case "refund":
				n = 1
				res = a.post(t, "/v1/refund", units())
			default:
				fail("unknown op")
				continue
			}
			if res.status != 200 && res.status != 429 {
				fail("HTTP %d: %s", res.status, res.raw)
				continue
			}
			d, member, granted := decisionOf(t, res)
			if granted != nil {
				d.Granted = *granted
			} else if d.Allowed {
				d.Granted = n
			}
			if s.Expect == nil {
				continue
			}
			msg := s.Expect.Mismatch(d)
			if e := s.Expect.Granted; e != nil && *e != d.Granted {
				msg += fmt.Sprintf(" granted=%d want %d", d.Granted, *e)
			}
			if e := s.Expect.Member; e != nil && *e != member {
				msg += fmt.Sprintf(" member=%d want %d", member, *e)
			}
			if msg != "" {
				fail("%s", msg)
			}
		}
	}
	t.Logf("project vectors over HTTP: %d vectors, %d steps, %d mismatches", len(vs), steps, mismatches)
	if steps < 200 {
		t.Errorf("only %d steps replayed", steps)
	}
}
