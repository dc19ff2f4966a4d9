package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/floodgatehq/floodgate/internal/delayproxy"
	"github.com/floodgatehq/floodgate/internal/redistest"
)

// nodeRow is one row of the dashboard's store nodes table, as the page
// shows it, or as it should show /v1/stats's store.links.
type nodeRow struct {
	Node     string `json:"node"`
	Distance string `json:"distance"`
	InFlight string `json:"inFlight"`
}

const nodeRowsJS = `[...document.querySelectorAll("#store-nodes tbody tr[data-node]")].map((r) => ({
	node: r.cells[0].textContent, distance: r.cells[1].textContent,
	roundTrip: r.cells[2].textContent, inFlight: r.cells[3].textContent,
}))`

// statsRows returns the store nodes table /v1/stats's store.links call
// for, by node.
func statsRows(t *testing.T, base string) []nodeRow {
	t.Helper()
	res, err := http.Get(base + "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s struct {
		Store struct {
			Links []struct {
				Node            string
				Far             bool
				BatchesInFlight int `json:"batches_in_flight"`
			}
		}
	}
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatalf("/v1/stats: %v", err)
	}
	var rows []nodeRow
	for _, l := range s.Store.Links {
		d := "near"
		if l.Far {
			d = "far"
		}
		rows = append(rows, nodeRow{Node: l.Node, Distance: d, InFlight: thousands(int64(l.BatchesInFlight))})
	}
	return rows
}

// TestDashboardStoreNodes serves with a Redis Cluster of two masters,
// sends decisions to both, and checks that the dashboard lists each master
// once, with the distance and batches in flight /v1/stats reports for it
// and a timed round trip.
func TestDashboardStoreNodes(t *testing.T) {
	browser := chromium(t)
	cluster := redistest.StartCluster(t, 2)
	addr := serve(t, fmt.Sprintf(`
admin:
  allow_loopback: true
store:
  type: redis-cluster
  addrs: [%s]
  timeout: 1s # the race detector on a shared CI machine: no decision should fail over
policies:
  api: "gcra 1000/1s burst 1000"
`, strings.Join(cluster.Addrs, ", ")))
	base := "http://" + addr
	counts := &tally{allowed: map[string]int64{}, denied: map[string]int64{}, requests: map[string]int64{}, refused: map[string]int64{}}
	// One decision at a time: each is a batch of one, whose round trip
	// tells the distance (all but each node's first). The slots of forty
	// keys (the CRC16 of each one's hash tag) fall on both masters.
	for i := range 40 {
		counts.check(t, base, "api", fmt.Sprintf("user-%d", i))
	}
	if counts.denied["api"] != 0 {
		t.Fatalf("denied %d of 40 decisions under a burst of 1000", counts.denied["api"])
	}

	var tab console
	ctx := newTab(t, browser, &tab)
	page := shownNodes(t, ctx, base, len(cluster.Addrs))
	nodes := make([]string, len(page))
	for i, r := range page {
		nodes[i] = r.Node
		if r.InFlight != "0" {
			t.Errorf("node %s: %s batches in flight while the service is idle", r.Node, r.InFlight)
		}
		if !duration.MatchString(r.RoundTrip) {
			t.Errorf("node %s: round trip %q, want a duration after %d decisions", r.Node, r.RoundTrip, counts.allowed["api"])
		}
	}
	masters := slices.Sorted(slices.Values(cluster.Addrs))
	if !slices.Equal(nodes, masters) {
		t.Errorf("the table lists nodes %v, want the masters %v in order", nodes, masters)
	}
	if errs := tab.errors(); len(errs) != 0 {
		t.Errorf("the console:\n%s", strings.Join(errs, "\n"))
	}
}

// TestDashboardFarStore serves with a Redis behind a proxy that delays
// every byte 1 ms each way, so that every round trip takes 2 ms or more
// however fast the machine: the dashboard must show the store far, with a
// round trip of at least 2 ms.
func TestDashboardFarStore(t *testing.T) {
	browser := chromium(t)
	srv := redistest.StartServer(t)
	px, err := delayproxy.Start(srv.Addr, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	addr := serve(t, fmt.Sprintf(`
admin:
  allow_loopback: true
store:
  url: redis://%s
  timeout: 1s # the race detector on a shared CI machine: no decision should fail over
policies:
  api: "gcra 1000/1s burst 1000"
`, px.Addr))
	base := "http://" + addr
	counts := &tally{allowed: map[string]int64{}, denied: map[string]int64{}, requests: map[string]int64{}, refused: map[string]int64{}}
	for i := range 10 { // each a batch of one: all but the first tell the distance
		counts.check(t, base, "api", fmt.Sprintf("user-%d", i))
	}
	var tab console
	ctx := newTab(t, browser, &tab)
	page := shownNodes(t, ctx, base, 1)
	r := page[0]
	if r.Node != "store" || r.Distance != "far" {
		t.Errorf("the store behind a 1 ms delay: %+v, want node store, far", r)
	}
	m := duration.FindStringSubmatch(r.RoundTrip)
	if m == nil || m[2] == "µs" || m[2] == "ms" && mustFloat(t, m[1]) < 2 {
		t.Errorf("round trip %q through a 1 ms delay each way, want 2 ms or more", r.RoundTrip)
	}
	if errs := tab.errors(); len(errs) != 0 {
		t.Errorf("the console:\n%s", strings.Join(errs, "\n"))
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// duration is a round trip as the page writes it (app.js's secs).
var duration = regexp.MustCompile(`^(\d+(?:\.\d+)?) (µs|ms|s)$`)

// shownNode is a row of the store nodes table with its round trip.
type shownNode struct {
	nodeRow
	RoundTrip string `json:"roundTrip"`
}

// shownNodes opens the dashboard in ctx and waits until its store nodes
// table lists n nodes as /v1/stats reports them, and returns its rows.
// The page polls /v1/stats every second; the service is idle, so the two
// agree from the first poll that listed every node.
func shownNodes(t *testing.T, ctx context.Context, base string, n int) []shownNode {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		page, err := chromedp.Run(ctx, chromedp.Evaluate[[]shownNode](nodeRowsJS))
		if err != nil {
			t.Fatal(err)
		}
		want := statsRows(t, base)
		got := make([]nodeRow, len(page))
		for i, r := range page {
			got[i] = r.nodeRow
		}
		if len(got) == n && reflect.DeepEqual(got, want) {
			return page
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store nodes table shows %+v; /v1/stats says %+v", page, want)
		}
	}
}
