package browsertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

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
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	type shown struct {
		nodeRow
		RoundTrip string `json:"roundTrip"`
	}
	// The page polls /v1/stats every second; the service is idle, so the
	// two agree from the first poll that listed both nodes.
	var page []shown
	var want []nodeRow
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		page, err = chromedp.Run(ctx, chromedp.Evaluate[[]shown](nodeRowsJS))
		if err != nil {
			t.Fatal(err)
		}
		want = statsRows(t, base)
		got := make([]nodeRow, len(page))
		for i, r := range page {
			got[i] = r.nodeRow
		}
		if len(got) == len(cluster.Addrs) && reflect.DeepEqual(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store nodes table shows %+v; /v1/stats says %+v", page, want)
		}
	}
	nodes := make([]string, len(page))
	duration := regexp.MustCompile(`^\d+(\.\d+)? (µs|ms|s)$`)
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
