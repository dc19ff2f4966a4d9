package httpapi

import (
	"encoding/json"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/service"
)

const usageConfig = `
policies:
  api: "gcra 100/1s burst 1000 track 1m for 1h"
  plain: "fixed_window 10/1m track"
  off: "fixed_window 10/1m"
admin:
  token: "` + testToken + `"
`

func newUsageAPI(t *testing.T) *testAPI {
	t.Helper()
	clock := floodgatetest.NewManualClock(t0)
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg, err := config.Parse(config.Source{Name: "floodgate.yaml", Data: []byte(usageConfig)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: store, Clock: clock, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return &testAPI{h: Handler(svc, Options{Logger: quietLogger()}), svc: svc, clock: clock}
}

func (a *testAPI) admin(t *testing.T, path string) answer {
	t.Helper()
	return a.do(t, call{method: "GET", path: path, auth: "Bearer " + testToken})
}

// TestKeyUsage: GET /v1/keys/{key}/usage answers the shape the dashboard
// reads, to the field: the series re-bucketed to the step over the whole
// steps that [from, to) meets, sums, means and peaks; a key with a slash
// is its escaped path segment.
func TestKeyUsage(t *testing.T) {
	a := newUsageAPI(t)
	for _, s := range []struct {
		at   time.Duration
		key  string
		cost int64
	}{{0, "a/b", 1}, {10 * time.Second, "a/b", 2}, {90 * time.Second, "a/b", 1}, {100 * time.Second, "other", 5}} {
		a.clock.Set(t0.Add(s.at))
		if res := a.post(t, "/v1/check", `{"policy":"api","key":"`+s.key+`","cost":`+jsonInt(s.cost)+`}`); res.status != 200 {
			t.Fatalf("check: %d %s", res.status, res.raw)
		}
	}
	a.clock.Set(t0.Add(150 * time.Second))
	res := a.admin(t, "/v1/keys/"+url.PathEscape("a/b")+"/usage?policy=api&from=-3m")
	if res.status != 200 {
		t.Fatalf("usage: %d %s", res.status, res.raw)
	}
	want := `{"policy":"api","key":"a/b","from":"2029-12-31T23:59:30Z","to":"2030-01-01T00:02:30Z","step_us":60000000,"resolution_us":60000000,` +
		`"points":[{"t":"2029-12-31T23:59:00Z","requests":0,"denied":0},{"t":"2030-01-01T00:00:00Z","requests":3,"denied":0},` +
		`{"t":"2030-01-01T00:01:00Z","requests":1,"denied":0},{"t":"2030-01-01T00:02:00Z","requests":0,"denied":0}],` +
		`"requests":{"sum":4,"mean":1,"peak":3,"peak_at":"2030-01-01T00:00:00Z"},"denied":{"sum":0,"mean":0,"peak":0,"peak_at":null}}`
	if got := strings.TrimSpace(res.raw); got != want {
		t.Errorf("usage:\n got %s\nwant %s", got, want)
	}
	// Absolute times and a step of two minutes.
	res = a.admin(t, "/v1/keys/a%2Fb/usage?policy=api&from=2030-01-01T00:00:00Z&to=2030-01-01T00:02:00Z&step=2m")
	var body struct {
		StepUS int64 `json:"step_us"`
		Points []struct {
			T        time.Time
			Requests int64
		}
		Requests struct {
			Sum  int64
			Mean float64
		}
	}
	if err := json.Unmarshal([]byte(res.raw), &body); err != nil || res.status != 200 {
		t.Fatalf("usage: %d %s %v", res.status, res.raw, err)
	}
	if body.StepUS != 120_000_000 || len(body.Points) != 1 || body.Points[0].Requests != 4 || body.Requests.Mean != 4 {
		t.Errorf("usage with step 2m: %s", res.raw)
	}
	for _, c := range []struct {
		path, code, field string
		status            int
	}{
		{"/v1/keys/a/usage?policy=api&step=30s", "invalid_step", "step", 400},
		{"/v1/keys/a/usage?policy=api&step=90s", "invalid_step", "step", 400},
		{"/v1/keys/a/usage?policy=api&step=1m&from=-1s&to=-1h", "invalid_range", "from", 400},
		{"/v1/keys/a/usage?policy=api&from=yesterday", "invalid_time", "from", 400},
		{"/v1/keys/a/usage?policy=api&to=1h", "invalid_time", "to", 400},
		{"/v1/keys/a/usage?policy=api&step=1s", "invalid_step", "step", 400},
		{"/v1/keys/a/usage?policy=api&from=-8000h", "invalid_step", "step", 400},
		{"/v1/keys/a/usage?policy=plain", "no_series", "policy", 400},
		{"/v1/keys/a/usage?policy=off", "not_tracked", "policy", 400},
		{"/v1/keys/a/usage?policy=nope", "unknown_policy", "policy", 404},
		{"/v1/keys/a/usage", "missing_policy", "policy", 400},
		{"/v1/keys/a/usage?policy=api&size=2", "unknown_parameter", "size", 400},
	} {
		res := a.admin(t, c.path)
		if code, field := errorOf(t, res); res.status != c.status || code != c.code || field != c.field {
			t.Errorf("%s: %d %s (field %s), want %d %s (field %s): %s", c.path, res.status, code, field, c.status, c.code, c.field, res.raw)
		}
	}
	if res := a.do(t, call{method: "GET", path: "/v1/keys/a/usage?policy=api"}); res.status != 401 {
		t.Errorf("usage without the admin token: %d, want 401", res.status)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestKeysPaged: /v1/keys with the new parameters pages through every key
// with cursors, in order, with window sums; without them it is the top
// keys, as before; bad parameters are 400s naming them.
func TestKeysPaged(t *testing.T) {
	a := newUsageAPI(t)
	keys := []string{"k1", "k2", "k3", "k4", "k5"}
	for i, k := range keys {
		a.clock.Set(t0.Add(time.Duration(i) * time.Minute))
		for j := 0; j <= i%3; j++ {
			a.post(t, "/v1/check", `{"policy":"api","key":"`+k+`"}`)
		}
	}
	a.clock.Set(t0.Add(5 * time.Minute))
	type page struct {
		Sort, Order string
		WindowUS    int64 `json:"window_us"`
		Keys        []struct {
			Key            string
			Requests       int64
			WindowRequests *int64 `json:"window_requests"`
		}
		Next string `json:"next_cursor"`
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		path := "/v1/keys?policy=api&sort=usage&order=asc&window=3m&limit=2"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		res := a.admin(t, path)
		var p page
		if err := json.Unmarshal([]byte(res.raw), &p); err != nil || res.status != 200 {
			t.Fatalf("%s: %d %s", path, res.status, res.raw)
		}
		if p.Sort != "usage" || p.Order != "asc" || p.WindowUS != 180_000_000 || len(p.Keys) > 2 {
			t.Fatalf("page: %s", res.raw)
		}
		for _, k := range p.Keys {
			got = append(got, k.Key+":"+jsonInt(*k.WindowRequests))
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
		if pages > 10 {
			t.Fatal("no end")
		}
	}
	// At 5m, a 3m window holds the buckets of 3m and 4m: k4 (1 add) and k5 (2).
	if want := []string{"k1:0", "k2:0", "k3:0", "k4:1", "k5:2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("paged keys %v, want %v", got, want)
	}
	// The top keys, as before: no cursor, no order.
	res := a.admin(t, "/v1/keys?policy=api&limit=2")
	if res.status != 200 || res.body["next_cursor"] != nil || res.body["order"] != nil || res.body["sort"] != "requests" {
		t.Errorf("top keys: %d %s", res.status, res.raw)
	}
	first := a.admin(t, "/v1/keys?policy=api&order=desc&limit=2")
	next, _ := first.body["next_cursor"].(string)
	if next == "" {
		t.Fatalf("first page: %s", first.raw)
	}
	for _, c := range []struct {
		path, code, field string
	}{
		{"/v1/keys?policy=api&sort=denied&cursor=" + url.QueryEscape(next), "invalid_cursor", "cursor"},
		{"/v1/keys?policy=api&cursor=garbage", "invalid_cursor", "cursor"},
		{"/v1/keys?policy=api&sort=usage&window=2h", "invalid_window", "window"},
		{"/v1/keys?policy=api&window=soon", "invalid_window", "window"},
		{"/v1/keys?policy=api&order=up", "invalid_order", "order"},
		{"/v1/keys?policy=api&order=asc&sort=size", "invalid_sort", "sort"},
		{"/v1/keys?policy=plain&sort=usage", "invalid_sort", "sort"},
		{"/v1/keys?policy=plain&window=1m", "invalid_window", "window"},
		{"/v1/keys?policy=api&order=asc&limit=0", "invalid_limit", "limit"},
		{"/v1/keys?policy=api&order=asc&page=2", "unknown_parameter", "page"},
	} {
		res := a.admin(t, c.path)
		if code, field := errorOf(t, res); res.status != 400 || code != c.code || field != c.field {
			t.Errorf("%s: %d %s (field %s), want 400 %s (field %s): %s", c.path, res.status, code, field, c.code, c.field, res.raw)
		}
	}
	if res := a.do(t, call{method: "GET", path: "/v1/keys?policy=api&order=asc"}); res.status != 401 {
		t.Errorf("paged keys without the admin token: %d, want 401", res.status)
	}
	// first_seen, oldest first.
	res = a.admin(t, "/v1/keys?policy=api&sort=first_seen&order=asc")
	var p page
	json.Unmarshal([]byte(res.raw), &p)
	var order []string
	for _, k := range p.Keys {
		order = append(order, k.Key)
	}
	if !sort.StringsAreSorted(order) || len(order) != 5 {
		t.Errorf("first_seen asc: %v", order)
	}
}
