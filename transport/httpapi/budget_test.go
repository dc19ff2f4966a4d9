package httpapi

// The budget endpoints: the project's vectors (SPEC.md's atomic groups,
// reserve/settle/refund, partial grants, calendar windows) replayed over
// HTTP on a memory store, as floodgatetest replays them through
// Store.Take; tokens that are forged, altered or settled twice; the
// errors of the new fields.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/auth"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
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
	return newBudgetAPIOn(t, conf, store, clock)
}

// newBudgetAPIOn serves conf on store. Unless conf sets them, store.timeout
// and overload.queue_wait are a minute instead of 50ms and 500ms: on a
// loaded machine (two suites at once on 2 cores, under -race) a call to a
// real Redis (the first one loads its function library) may take longer
// than 50ms, and the failure mode would answer it, or a batched request
// wait longer than 500ms, and be refused. A minute is only a hang check.
func newBudgetAPIOn(t *testing.T, conf string, store floodgate.Store, clock *floodgatetest.ManualClock) *testAPI {
	t.Helper()
	cfg, err := config.Parse(config.Source{Name: "floodgate.yaml", Data: []byte(conf)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(conf, "timeout:") {
		cfg.Store.Timeout = time.Minute
	}
	if !strings.Contains(conf, "queue_wait:") {
		cfg.Overload.QueueWait = time.Minute
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
		Degraded:   dj["degraded"] == true,
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
	replayOverHTTP(t, newBudgetAPI(t, vectorConfig(vs), time.UnixMicro(floodgatetest.BaseMicros)), vs)
}

// TestProjectVectorsOverHTTPRedis is TestProjectVectorsOverHTTP on a Redis
// store (a real redis-server, the replayed clock passed to the store), when
// the Redis store implements budgets.
func TestProjectVectorsOverHTTPRedis(t *testing.T) {
	vs, err := floodgatetest.ProjectVectors()
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.StartServer(t)
	// Reads and writes wait up to a minute (a hang check), not go-redis's
	// 3s, which a loaded machine may keep a round trip stalled for.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password, MaxRetries: -1,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	clock := floodgatetest.NewManualClock(time.UnixMicro(floodgatetest.BaseMicros))
	store, err := redisstore.New(c, redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour), redisstore.WithPrefix("hv"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if !storekit.HasBudgets(store) {
		t.Skip("the Redis store does not implement budgets (storekit.BudgetStore) on this branch: nothing replayed")
	}
	replayOverHTTP(t, newBudgetAPIOn(t, vectorConfig(vs), store, clock), vs)
}

// replayOverHTTP replays vs through a's API, as TestProjectVectorsOverHTTP
// says.
func replayOverHTTP(t *testing.T, a *testAPI, vs []floodgatetest.ProjectVector) {
	t.Helper()
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
	t.Logf("project vectors over HTTP (%s): %d vectors, %d steps, %d mismatches", t.Name(), len(vs), steps, mismatches)
	if steps < 200 {
		t.Errorf("only %d steps replayed", steps)
	}
}

const (
	tokenKeyA  = "0123456789abcdef0123456789abcdef-a"
	tokenKeyB  = "0123456789abcdef0123456789abcdef-b"
	budgetConf = `
admin:
  allow_loopback: true
budgets:
  token_key: "` + tokenKeyA + `"
policies:
  llm: "fixed_window 100/1m"
  tiny: "fixed_window 2/1m"
  burst: "token_bucket 10/1s burst 10"
`
)

// remaining returns the units llm's key k has left: a peek of 1's
// remaining, and the one it would take.
func remaining(t *testing.T, a *testAPI) int64 {
	t.Helper()
	return 1 + num(decisions(t, a.post(t, "/v1/peek", `{"policy":"llm","key":"k"}`))[0]["remaining"])
}

// TestReserveSettle: a reservation spends n and returns a token with
// granted and RateLimit headers; a settle gives back n − used and answers
// the peek after it; a second settle on the same process is refused (409
// already_settled) and gives back nothing; a settle on another replica
// with the same key is accepted and gives back at most n, never beyond
// full (docs/budgets.md); a denied reservation has no token.
func TestReserveSettle(t *testing.T) {
	clock := floodgatetest.NewManualClock(t0)
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := newBudgetAPIOn(t, budgetConf, store, clock)
	res := a.post(t, "/v1/reserve", `{"policy":"llm","key":"k","n":40}`)
	d, _, granted := decisionOf(t, res)
	tok, _ := res.body["token"].(string)
	if res.status != 200 || !d.Allowed || d.Remaining != 60 || granted == nil || *granted != 40 || tok == "" {
		t.Fatalf("reserve 40: %d %s", res.status, res.raw)
	}
	if h := res.header.Get("RateLimit"); !strings.Contains(h, "r=60") {
		t.Errorf("reserve: RateLimit %q, want r=60", h)
	}
	if strings.Contains(tok, `"k"`) || !strings.HasPrefix(tok, "fgr1.") {
		t.Errorf("token %q: want fgr1.<base64>.<mac>", tok)
	}

	settle := func(a *testAPI, tok string, used int64) answer {
		data, _ := json.Marshal(map[string]any{"token": tok, "used": used})
		return a.post(t, "/v1/settle", string(data))
	}
	if s := settle(a, tok, 41); s.status != 400 {
		t.Errorf("settle used 41 of 40: %d %s", s.status, s.raw)
	} else if code, field := errorOf(t, s); code != "invalid_used" || field != "used" || !strings.Contains(s.raw, "used 41") || !strings.Contains(s.raw, "0 to the reservation's n, 40") {
		t.Errorf("settle used 41 of 40: %s", s.raw)
	}
	if s := settle(a, tok, -1); s.status != 400 {
		t.Errorf("settle used -1: %d %s", s.status, s.raw)
	}
	if r := remaining(t, a); r != 60 {
		t.Fatalf("after refused settles: remaining %d, want 60", r)
	}
	s := settle(a, tok, 10)
	if d, _, _ := decisionOf(t, s); s.status != 200 || !d.Allowed || d.Remaining != 89 {
		t.Fatalf("settle used 10 of 40: %d %s, want remaining 89 (90 left, a peek of 1 after)", s.status, s.raw)
	}
	if h := s.header.Get("RateLimit"); !strings.Contains(h, "r=89") {
		t.Errorf("settle: RateLimit %q, want r=89", h)
	}
	// Spend 5 more, so that a second give-back would show.
	a.post(t, "/v1/check", `{"policy":"llm","key":"k","cost":5}`)
	if s := settle(a, tok, 10); s.status != 409 {
		t.Errorf("second settle: %d %s, want 409", s.status, s.raw)
	} else if code, field := errorOf(t, s); code != "already_settled" || field != "token" {
		t.Errorf("second settle: %s", s.raw)
	}
	if r := remaining(t, a); r != 85 {
		t.Errorf("after a refused second settle: remaining %d, want 85", r)
	}

	// Another replica with the same key (and store) accepts the token
	// again: bounded by n, and never beyond full.
	b := newBudgetAPIOn(t, budgetConf, store, clock)
	if s := settle(b, tok, 10); s.status != 200 {
		t.Fatalf("settle on another replica: %d %s", s.status, s.raw)
	} else if d, _, _ := decisionOf(t, s); d.Remaining != 99 {
		t.Errorf("settle on another replica: remaining %d, want 99 (100 left: 85 + 30, never beyond full)", d.Remaining)
	}

	// A denied reservation holds nothing: 429, no token.
	a.post(t, "/v1/reserve", `{"policy":"tiny","key":"k","n":2}`)
	if res := a.post(t, "/v1/reserve", `{"policy":"tiny","key":"k","n":1}`); res.status != 429 || res.body["token"] != nil || res.header.Get("Retry-After") == "" {
		t.Errorf("denied reservation: %d %v %s", res.status, res.header, res.raw)
	}
}

// TestTokenForgery: a token altered in any byte, truncated, signed with
// another key, made up, or of a process without a configured key (which
// draws its own) is refused as invalid_token, and gives nothing back.
func TestTokenForgery(t *testing.T) {
	a := newBudgetAPI(t, budgetConf, t0)
	res := a.post(t, "/v1/reserve", `{"policy":"llm","key":"k","n":50}`)
	tok, _ := res.body["token"].(string)
	if tok == "" {
		t.Fatalf("reserve: %s", res.raw)
	}
	other := newBudgetAPI(t, strings.Replace(budgetConf, tokenKeyA, tokenKeyB, 1), t0)
	otherTok, _ := other.post(t, "/v1/reserve", `{"policy":"llm","key":"k","n":50}`).body["token"].(string)
	noKey := newBudgetAPI(t, strings.Replace(budgetConf, "budgets:\n  token_key: \""+tokenKeyA+"\"\n", "", 1), t0)

	// Every byte of the token altered, one at a time.
	var forged []string
	for i := range tok {
		b := []byte(tok)
		b[i] ^= 0x01
		forged = append(forged, string(b))
	}
	forged = append(forged, tok[:len(tok)-1], tok+"A", "fgr1.e30.", "fgr1.", "x", otherTok,
		// A body of one's own choosing with a MAC under a guessed key.
		signedWith("guess", tok))
	for _, f := range forged {
		data, _ := json.Marshal(map[string]any{"token": f, "used": 0})
		s := a.post(t, "/v1/settle", string(data))
		if code, field := errorOf(t, s); s.status != 400 || code != "invalid_token" || field != "token" {
			t.Fatalf("forged token %q: %d %s", f, s.status, s.raw)
		}
	}
	data, _ := json.Marshal(map[string]any{"token": tok, "used": 0})
	if s := noKey.post(t, "/v1/settle", string(data)); s.status != 400 {
		t.Errorf("a token settled by a process with its own random key: %d %s", s.status, s.raw)
	}
	if r := remaining(t, a); r != 50 {
		t.Errorf("after forged settles: remaining %d, want 50", r)
	}
	if s := a.post(t, "/v1/settle", string(data)); s.status != 200 {
		t.Errorf("the genuine token after the forgeries: %d %s", s.status, s.raw)
	}
	if r := remaining(t, a); r != 100 {
		t.Errorf("after the genuine settle of 0 used: remaining %d, want 100", r)
	}
}

// signedWith re-signs tok's payload with key.
func signedWith(key, tok string) string {
	payload := tok[:strings.LastIndexByte(tok, '.')]
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(payload))
	return payload + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// TestSettleAfterReload: a token of a policy changed since (or removed)
// is refused (409 policy_changed); one of an unchanged policy settles
// across a reload.
func TestSettleAfterReload(t *testing.T) {
	a := newBudgetAPI(t, budgetConf, t0)
	tok1, _ := a.post(t, "/v1/reserve", `{"policy":"llm","key":"k","n":50}`).body["token"].(string)
	tok2, _ := a.post(t, "/v1/reserve", `{"policy":"burst","key":"k","n":5}`).body["token"].(string)
	cfg, err := config.Parse(config.Source{Name: "floodgate.yaml", Data: []byte(strings.Replace(budgetConf, "100/1m", "200/1m", 1))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.svc.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]any{"token": tok1, "used": 0})
	if s := a.post(t, "/v1/settle", string(data)); s.status != 409 {
		t.Errorf("settle of a changed policy: %d %s", s.status, s.raw)
	} else if code, _ := errorOf(t, s); code != "policy_changed" {
		t.Errorf("settle of a changed policy: %s", s.raw)
	}
	data, _ = json.Marshal(map[string]any{"token": tok2, "used": 1})
	if s := a.post(t, "/v1/settle", string(data)); s.status != 200 {
		t.Errorf("settle of an unchanged policy after a reload: %d %s", s.status, s.raw)
	}
}

// TestAtomicBatch: an atomic batch is spent on every item or none (a
// later item denying leaves the earlier ones' quota), answers one
// decision naming the binding member, and sets the headers of /v1/check;
// at_most grants what passes, in granted.
func TestAtomicBatch(t *testing.T) {
	a := newBudgetAPI(t, budgetConf, t0)
	a.post(t, "/v1/check", `{"policy":"tiny","key":"k","cost":2}`) // tiny is spent
	res := a.post(t, "/v1/check", `{"atomic":true,"requests":[{"policy":"llm","key":"k","cost":1},{"policy":"tiny","key":"k","cost":1}]}`)
	d, member, _ := decisionOf(t, res)
	if res.status != 429 || d.Allowed || member != 1 || res.body["atomic"] != true || res.header.Get("Retry-After") == "" ||
		res.header.Get("RateLimit-Policy") != `"llm";q=100;w=60, "tiny";q=2;w=60` || !strings.HasPrefix(res.header.Get("RateLimit"), `"tiny";r=0;`) {
		t.Fatalf("atomic batch with tiny spent: %d %v %s", res.status, res.header, res.raw)
	}
	if r := remaining(t, a); r != 100 {
		t.Errorf("llm after a denied atomic batch: %d left, want 100 (nothing spent)", r)
	}
	// Without atomic, the same batch spends llm.
	a.post(t, "/v1/check", `{"requests":[{"policy":"llm","key":"k","cost":1},{"policy":"tiny","key":"k","cost":1}]}`)
	if r := remaining(t, a); r != 99 {
		t.Errorf("llm after a denied plain batch: %d left, want 99", r)
	}
	res = a.post(t, "/v1/check", `{"atomic":true,"requests":[{"policy":"llm","key":"k","cost":9},{"policy":"burst","key":"k","cost":9}]}`)
	if d, member, _ := decisionOf(t, res); res.status != 200 || !d.Allowed || member != 1 || d.Remaining != 1 {
		t.Errorf("atomic batch allowed: %d %s, want member 1 (burst, 1 left)", res.status, res.raw)
	}
	if r := remaining(t, a); r != 90 {
		t.Errorf("llm after an allowed atomic batch of 9: %d left, want 90", r)
	}

	// at_most: one item, a plain batch, an atomic one.
	res = a.post(t, "/v1/check", `{"policy":"burst","key":"k","cost":5,"at_most":true}`)
	if d, _, g := decisionOf(t, res); res.status != 200 || !d.Allowed || g == nil || *g != 1 {
		t.Errorf("at_most 5 with 1 left: %d %s, want granted 1", res.status, res.raw)
	}
	res = a.post(t, "/v1/check", `{"requests":[{"policy":"burst","key":"k","cost":5,"at_most":true},{"policy":"llm","key":"k","cost":3}]}`)
	ds := decisions(t, res)
	if res.status != 429 || ds[0]["granted"] != float64(0) || ds[0]["allowed"] != false || ds[1]["allowed"] != true || ds[1]["granted"] != nil {
		t.Errorf("plain batch with at_most and none left: %d %s", res.status, res.raw)
	}
	a.clock.Advance(time.Second) // burst is full again
	res = a.post(t, "/v1/check", `{"atomic":true,"requests":[{"policy":"burst","key":"k","cost":50,"at_most":true},{"policy":"llm","key":"k","cost":50,"at_most":true}]}`)
	if d, member, g := decisionOf(t, res); res.status != 200 || !d.Allowed || g == nil || *g != 10 || member != 0 {
		t.Errorf("atomic at_most 50: %d %s, want granted 10 bound by burst", res.status, res.raw)
	}
	if r := remaining(t, a); r != 77 {
		t.Errorf("llm after the atomic grant of 10: %d left, want 77", r)
	}
}

// TestBudgetErrors: each bad request names the field, the value and
// what is allowed; a negative n or cost is an error, never a reset or a
// refund.
func TestBudgetErrors(t *testing.T) {
	a := newBudgetAPI(t, budgetConf, t0)
	for _, c := range []struct {
		path, body  string
		status      int
		code, field string
		says        string
	}{
		{"/v1/check", `{"atomic":true,"requests":[{"policy":"llm","key":"k","cost":1},{"policy":"tiny","key":"k","cost":2}]}`, 400, "invalid_cost", "requests[1].cost", "cost 2: every request of an atomic batch has the group's cost, requests[0]'s 1"},
		{"/v1/check", `{"atomic":true,"requests":[{"policy":"llm","key":"k"},{"policy":"tiny","key":"k","at_most":true}]}`, 400, "invalid_request", "requests[1].at_most", "at_most true"},
		{"/v1/check", `{"atomic":true,"requests":[{"policy":"llm","key":"k"},{"policy":"llm","key":"k"}]}`, 400, "invalid_request", "requests[1]", "repeats requests[0]"},
		{"/v1/check", `{"atomic":true,"requests":[{"policy":"llm","key":"k"},{"policy":"nope","key":"k"}]}`, 404, "unknown_policy", "requests[1].policy", "no policy named"},
		{"/v1/check", `{"policy":"llm","key":"k","cost":-5}`, 400, "invalid_cost", "cost", "cost -5: want an integer from 1"},
		{"/v1/check", `{"policy":"llm","key":"k","cost":-5,"at_most":true}`, 400, "invalid_cost", "cost", "cost -5"},
		{"/v1/check", `{"atomic":"yes","requests":[]}`, 400, "invalid_field", "atomic", "want true or false"},
		{"/v1/reserve", `{"policy":"llm","key":"k"}`, 400, "missing_n", "n", "1 to 2^53-1"},
		{"/v1/reserve", `{"policy":"llm","key":"k","n":-3}`, 400, "invalid_cost", "n", "n -3: want an integer from 1 to 2^53-1"},
		{"/v1/reserve", `{"policy":"llm","key":"k","n":0}`, 400, "invalid_cost", "n", "n 0"},
		{"/v1/reserve", `{"policy":"llm","key":"k","n":1,"cost":1}`, 400, "unknown_field", "cost", "unknown field"},
		{"/v1/reserve", `{"requests":[{"policy":"llm","key":"k","cost":2}],"n":1}`, 400, "unknown_field", "requests[0].cost", "unknown field"},
		{"/v1/reserve", `{"requests":[{"key":"k"}],"n":1}`, 400, "missing_policy", "requests[0].policy", "name the policy"},
		{"/v1/reserve", `{"policy":"llm","key":"","n":1}`, 400, "invalid_key", "key", "empty key"},
		{"/v1/settle", `{"used":1}`, 400, "missing_token", "token", "/v1/reserve"},
		{"/v1/settle", `{"token":"x"}`, 400, "missing_used", "used", "0 to the reservation's n"},
		{"/v1/settle", `{"token":"x","used":1}`, 400, "invalid_token", "token", "not a reservation token"},
		{"/v1/refund", `{"policy":"llm","key":"k","n":-1}`, 400, "invalid_cost", "n", "n -1"},
	} {
		res := a.post(t, c.path, c.body)
		code, field := errorOf(t, res)
		if res.status != c.status || code != c.code || field != c.field || !strings.Contains(res.raw, c.says) {
			t.Errorf("%s %s: %d %s, want %d %s at %s saying %q", c.path, c.body, res.status, res.raw, c.status, c.code, c.field, c.says)
		}
	}
	if r := remaining(t, a); r != 100 {
		t.Errorf("after the refused requests: %d left, want 100", r)
	}
}

// crossSlotStore refuses groups of several keys as a Redis Cluster does
// when they hash to different slots.
type crossSlotStore struct{ *memstore.Store }

func (s crossSlotStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	for _, m := range req.Group {
		if m.Key != req.Key {
			return floodgate.Decision{}, fmt.Errorf("redisstore: group of 2 keys in slots 1 and 2: %w", storekit.ErrCrossSlot)
		}
	}
	return s.Store.Take(ctx, req)
}

// TestCrossSlot: a group a Cluster cannot decide in one slot is a 409
// cross_slot that names the hash_tag option, and neither key; the failure
// policy does not degrade it (nothing is decided).
func TestCrossSlot(t *testing.T) {
	clock := floodgatetest.NewManualClock(t0)
	mem, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	a := newBudgetAPIOn(t, budgetConf, crossSlotStore{mem}, clock)
	for _, c := range []struct{ path, body string }{
		{"/v1/check", `{"atomic":true,"requests":[{"policy":"llm","key":"user-secret-3"},{"policy":"tiny","key":"org-secret-7"}]}`},
		{"/v1/reserve", `{"requests":[{"policy":"llm","key":"user-secret-3"},{"policy":"tiny","key":"org-secret-7"}],"n":1}`},
	} {
		res := a.post(t, c.path, c.body)
		code, field := errorOf(t, res)
		if res.status != 409 || code != "cross_slot" || field != "requests" || !strings.Contains(res.raw, "hash_tag") || strings.Contains(res.raw, "secret") {
			t.Errorf("%s across slots: %d %s", c.path, res.status, res.raw)
		}
	}
	_, err = a.svc.CheckGroup(context.Background(), []service.Item{{Policy: "llm", Key: "a"}, {Policy: "tiny", Key: "b"}}, false)
	var re *service.RequestError
	if !errors.Is(err, storekit.ErrCrossSlot) || !errors.As(err, &re) || re.Code != "cross_slot" {
		t.Errorf("CheckGroup across slots: %v, want a cross_slot RequestError wrapping storekit.ErrCrossSlot", err)
	}
	if res := a.post(t, "/v1/check", `{"atomic":true,"requests":[{"policy":"llm","key":"k"},{"policy":"tiny","key":"k"}]}`); res.status != 200 {
		t.Errorf("one key's group: %d %s", res.status, res.raw)
	}
}

// TestSettleRace: 16 settles of one token at once, on one process: one
// gives back, the others are refused.
func TestSettleRace(t *testing.T) {
	a := newBudgetAPI(t, budgetConf, t0)
	tok, _ := a.post(t, "/v1/reserve", `{"policy":"llm","key":"k","n":60}`).body["token"].(string)
	data, _ := json.Marshal(map[string]any{"token": tok, "used": 0})
	codes := make(chan int, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- a.post(t, "/v1/settle", string(data)).status
		}()
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[200] != 1 || n[409] != 15 {
		t.Errorf("16 settles of one token: %v, want one 200 and 15 409", n)
	}
	if r := remaining(t, a); r != 100 {
		t.Errorf("after the settles: %d left, want 100", r)
	}
}

// downStore fails every call, as a Redis that is down.
type downStore struct{ *memstore.Store }

func (downStore) Take(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("%w: test store down", floodgate.ErrUnavailable)
}

// TestDegradedReservation: a reservation the failure mode made (open:
// allowed, closed: denied with 503) has no token, and a settle or refund
// the store cannot make is a 503, nothing known to be given back.
func TestDegradedReservation(t *testing.T) {
	a := newBudgetAPI(t, budgetConf, t0)
	tok, _ := a.post(t, "/v1/reserve", `{"policy":"llm","key":"k","n":10}`).body["token"].(string)
	clock := floodgatetest.NewManualClock(t0)
	mem, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for mode, want := range map[string]int{"open": 200, "closed": 503} {
		conf := budgetConf + "failure:\n  mode: " + mode + "\n  breaker:\n    disabled: true\n"
		down := newBudgetAPIOn(t, conf, downStore{mem}, clock)
		res := down.post(t, "/v1/reserve", `{"policy":"llm","key":"k","n":10}`)
		if d, _, _ := decisionOf(t, res); res.status != want || !d.Degraded || res.body["token"] != nil {
			t.Errorf("failure mode %s: reserve %d %s, want %d, degraded, no token", mode, res.status, res.raw, want)
		}
		data, _ := json.Marshal(map[string]any{"token": tok, "used": 0})
		if s := down.post(t, "/v1/settle", string(data)); s.status != 503 {
			t.Errorf("failure mode %s: settle %d %s, want 503", mode, s.status, s.raw)
		}
		if s := down.post(t, "/v1/refund", `{"policy":"llm","key":"k","n":1}`); s.status != 503 {
			t.Errorf("failure mode %s: refund %d %s, want 503", mode, s.status, s.raw)
		}
	}
}

// TestGiveBackClearsCache: a key whose fixed window is exhausted is
// answered from the over-limit cache; a refund or a settle that gives
// units back clears it, so the next check sees them.
func TestGiveBackClearsCache(t *testing.T) {
	a := newBudgetAPI(t, budgetConf+"store:\n  over_limit_cache: true\n", t0)
	tok, _ := a.post(t, "/v1/reserve", `{"policy":"tiny","key":"k","n":2}`).body["token"].(string)
	if res := a.post(t, "/v1/check", `{"policy":"tiny","key":"k"}`); res.status != 429 {
		t.Fatalf("tiny exhausted: %d %s", res.status, res.raw)
	}
	if res := a.post(t, "/v1/refund", `{"policy":"tiny","key":"k","n":1}`); res.status != 200 {
		t.Fatalf("refund: %d %s", res.status, res.raw)
	}
	if res := a.post(t, "/v1/check", `{"policy":"tiny","key":"k"}`); res.status != 200 {
		t.Errorf("check after a refund of 1: %d %s, want 200", res.status, res.raw)
	}
	if res := a.post(t, "/v1/check", `{"policy":"tiny","key":"k"}`); res.status != 429 {
		t.Fatalf("tiny exhausted again: %d %s", res.status, res.raw)
	}
	data, _ := json.Marshal(map[string]any{"token": tok, "used": 1})
	if res := a.post(t, "/v1/settle", string(data)); res.status != 200 {
		t.Fatalf("settle: %d %s", res.status, res.raw)
	}
	if res := a.post(t, "/v1/check", `{"policy":"tiny","key":"k"}`); res.status != 200 {
		t.Errorf("check after a settle giving back 1: %d %s, want 200", res.status, res.raw)
	}
}

// TestSettleAuth: with client authentication on, /v1/settle needs a
// client's token before it reads the body, as /v1/check does.
func TestSettleAuth(t *testing.T) {
	clients := &auth.Clients{}
	if err := clients.Load(tokensFile(t, "alice "+aliceToken+"\n")); err != nil {
		t.Fatal(err)
	}
	a := newAPIConf(t, testConfig, Options{Clients: clients})
	res := a.do(t, call{method: "POST", path: "/v1/reserve", body: `{"policy":"api","key":"k","n":3}`, auth: "Bearer " + aliceToken})
	tok, _ := res.body["token"].(string)
	if res.status != 200 || tok == "" {
		t.Fatalf("reserve with a client token: %d %s", res.status, res.raw)
	}
	data, _ := json.Marshal(map[string]any{"token": tok, "used": 1})
	if res := a.do(t, call{method: "POST", path: "/v1/settle", body: string(data)}); res.status != 401 {
		t.Errorf("settle without a token: %d %s", res.status, res.raw)
	}
	if res := a.do(t, call{method: "POST", path: "/v1/settle", body: string(data), auth: "Bearer " + aliceToken}); res.status != 200 {
		t.Errorf("settle with a client token: %d %s", res.status, res.raw)
	}
}
