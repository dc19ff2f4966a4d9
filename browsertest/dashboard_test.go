package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/cli"
)

var (
	screenshots = flag.String("screenshots", "", "write the dashboard's screenshots (dashboard.png, 1280 px wide, and dashboard-420.png) into this directory")
	traffic     = flag.Duration("traffic", 0, "before loading the page, send varying traffic for this long (for screenshots with history)")
)

// chromium returns the browser's path. Without one it skips the test, or
// fails it when the environment sets FLOODGATE_REQUIRE_BROWSER=1 (make
// test does, after installing Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("FLOODGATE_REQUIRE_BROWSER") == "1" {
		t.Fatal("no chromium on PATH; make test installs it")
	}
	t.Skip("no chromium on PATH (set FLOODGATE_REQUIRE_BROWSER=1 to fail instead)")
	return ""
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve runs "floodgate serve" in-process on loopback with the given
// configuration and returns its HTTP address.
func serve(t *testing.T, config string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan struct{})
	var code int
	go func() {
		defer close(done)
		code = cli.Run(ctx, []string{"serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, &out, &errOut,
			func(string) string { return "" })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if code != 0 {
			t.Errorf("serve exited with %d:\n%s", code, errOut.String())
		}
	})
	re := regexp.MustCompile(`msg="floodgate serving".* http=(\S+)`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(errOut.String()); m != nil {
			return m[1]
		}
		select {
		case <-done:
			t.Fatalf("serve exited with %d:\n%s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", errOut.String())
		}
	}
}

// tally is what the checks the test sent were answered, per policy and
// per key.
type tally struct {
	mu                sync.Mutex
	allowed, denied   map[string]int64 // by policy
	requests, refused map[string]int64 // by key
}

func (c *tally) check(t *testing.T, base, policy, key string) {
	t.Helper()
	res, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests[key]++
	switch res.StatusCode {
	case http.StatusOK:
		c.allowed[policy]++
	case http.StatusTooManyRequests:
		c.denied[policy]++
		c.refused[key]++
	default:
		t.Fatalf("check %s: status %d", policy, res.StatusCode)
	}
}

// usageStub answers GET /v1/keys/{key}/usage?policy=P&from=-1h&step=1m in
// the shape the usage endpoint has (issue 13), from the requests the test
// sent: all in the current minute. It stands in for the endpoint while the
// service has none (then the service answers 404 not_found, "no
// endpoint"); once it has one, the service's own answer is passed on.
func usageStub(t *testing.T, counts *tally) func(w http.ResponseWriter, r *http.Request, key string) {
	return func(w http.ResponseWriter, r *http.Request, key string) {
		q := r.URL.Query()
		if q.Get("from") != "-1h" || q.Get("step") != "1m" || q.Get("policy") == "" {
			t.Errorf("the drill-down asked %s, want policy=P&from=-1h&step=1m", r.URL.RawQuery)
			http.Error(w, "bad query", http.StatusBadRequest)
			return
		}
		counts.mu.Lock()
		requests, denied := counts.requests[key], counts.refused[key]
		counts.mu.Unlock()
		now := time.Now().UTC()
		from := now.Add(-time.Hour).Truncate(time.Minute)
		type point struct {
			T        time.Time `json:"t"`
			Requests int64     `json:"requests"`
			Denied   int64     `json:"denied"`
		}
		type stats struct {
			Sum    int64     `json:"sum"`
			Mean   float64   `json:"mean"`
			Peak   int64     `json:"peak"`
			PeakAt time.Time `json:"peak_at"`
		}
		var points []point
		for t := from; t.Before(now); t = t.Add(time.Minute) {
			points = append(points, point{T: t})
		}
		last := &points[len(points)-1]
		last.Requests, last.Denied = requests, denied
		n := float64(len(points))
		body := map[string]any{
			"policy": q.Get("policy"), "key": key, "from": from, "to": now,
			"step_us": time.Minute.Microseconds(), "resolution_us": time.Minute.Microseconds(),
			"points":   points,
			"requests": stats{requests, float64(requests) / n, requests, last.T},
			"denied":   stats{denied, float64(denied) / n, denied, last.T},
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(body)
	}
}

var usagePath = regexp.MustCompile(`^/v1/keys/([^/]+)/usage$`)

// front serves the service through a reverse proxy that adds the usage
// stub while stub is true and the service has no usage endpoint.
// It counts the pages' reads of the service's history in historyReads.
func front(t *testing.T, addr string, stub *atomic.Bool, historyReads *atomic.Int64, usage func(http.ResponseWriter, *http.Request, string)) *httptest.Server {
	upstream := &url.URL{Scheme: "http", Host: addr}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/v1/stats/history") {
			historyReads.Add(1)
		}
		m := usagePath.FindStringSubmatch(r.URL.EscapedPath())
		if m == nil {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(rec.Body.Bytes(), &e)
		if stub.Load() && rec.Code == http.StatusNotFound && e.Error.Code == "not_found" && strings.HasPrefix(e.Error.Message, "no endpoint") {
			key, err := url.PathUnescape(m[1])
			if err != nil {
				t.Errorf("the drill-down asked for key %q: %v", m[1], err)
			}
			usage(w, r, key)
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	return srv
}

// newTab starts browser and returns a tab 1280 px wide whose errors go to
// c. The tab's context ends after 3 minutes, or when the test ends.
func newTab(t *testing.T, browser string, c *console) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithListener(c.listen))
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// console collects what a tab reports as wrong: uncaught exceptions,
// console.error calls, and the browser's own error entries (a refused
// resource, a Content-Security-Policy violation, a failed request).
type console struct {
	mu   sync.Mutex
	errs []string
}

func (c *console) listen(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = "exception: " + (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error()
	case *runtime.EventConsoleAPICalled:
		if ev.Type != "error" && ev.Type != "assert" {
			return
		}
		var parts []string
		for _, a := range ev.Args {
			parts = append(parts, string(a.Value)+a.Description)
		}
		msg = "console." + string(ev.Type) + ": " + strings.Join(parts, " ")
	case *log.EventEntryAdded:
		if ev.Entry.Level != "error" {
			return
		}
		msg = "log: " + ev.Entry.Text + " " + ev.Entry.URL
	default:
		return
	}
	c.mu.Lock()
	c.errs = append(c.errs, msg)
	c.mu.Unlock()
}

func (c *console) errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

// figureInfo is what a chart figure shows.
type figureInfo struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Series []struct {
		Class  string `json:"class"`
		Points int    `json:"points"`
	} `json:"series"`
	XLabels []string `json:"xLabels"`
	YLabels []string `json:"yLabels"`
	Legend  string   `json:"legend"`
	Totals  string   `json:"totals"`
	Width   float64  `json:"width"`
}

const figuresJS = `[...document.querySelectorAll(%q)].map((f) => ({
	id: f.dataset.id,
	title: f.querySelector(".title").textContent,
	series: [...f.querySelectorAll("path.series")].map((p) => ({class: p.getAttribute("class"), points: +p.dataset.points})),
	xLabels: [...f.querySelectorAll("svg .grid text[text-anchor=middle]")].map((t) => t.textContent),
	yLabels: [...f.querySelectorAll("svg .grid text[text-anchor=end]")].map((t) => t.textContent),
	legend: (f.querySelector(".legend") || {}).textContent || "",
	totals: f.querySelector(".totals").textContent,
	width: f.getBoundingClientRect().right,
}))`

// figures waits until the figures under selector have drawn at least one
// point each of their first series, and returns them.
func figures(t *testing.T, ctx context.Context, selector string, within time.Duration) []figureInfo {
	t.Helper()
	var figs []figureInfo
	var err error
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		figs, err = chromedp.Run(ctx, chromedp.Evaluate[[]figureInfo](fmt.Sprintf(figuresJS, selector)))
		drawn := err == nil && len(figs) > 0
		for _, f := range figs {
			drawn = drawn && len(f.Series) > 0 && f.Series[0].Points > 0
		}
		if drawn {
			return figs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no point drawn within %s (err %v): %+v", selector, within, err, figs)
		}
	}
}

// waitTrue waits until the JavaScript expression is true.
func waitTrue(t *testing.T, ctx context.Context, what, expr string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: not within %s (%v); the page reads:\n%s", what, within, err, page)
		}
	}
}

func text(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return s
}

func byID(figs []figureInfo) map[string]figureInfo {
	m := map[string]figureInfo{}
	for _, f := range figs {
		m[f.ID] = f
	}
	return m
}

// trackSpec is how the test's tracked policy tracks: with a per-key series
// when the policy text knows that option (issue 13's "track 1m for 24h"),
// so that the service's own usage endpoint answers the drill-down once it
// has one; else plain track, and the stub answers.
func trackSpec() string {
	if _, err := floodgate.ParsePolicy("probe", "sliding_window 10/1h resolution 1m track 1m for 24h"); err == nil {
		return "track 1m for 24h"
	}
	return "track"
}

// TestDashboard loads /dashboard of a running service after traffic, in
// Chromium, and checks what it renders: history charts with points, time
// and value axes and units, the failure mode beside "degraded", the same
// figures after a reload and in a second browser context, a key's usage
// series in the drill-down, a layout that fits 420 px, and no error in
// the console.
func TestDashboard(t *testing.T) {
	browser := chromium(t)
	// uploads keeps its keys' state, and so their usage, for an hour: the
	// top keys stay listed however slowly the browser starts. api refills
	// a token every 6 minutes, so that 30 checks are denied 10 however
	// slowly they go; the screenshots' traffic (-traffic) wants one a
	// second, to swing between allowed and denied.
	apiPolicy := "gcra 10/1h burst 20"
	if *traffic > 0 {
		apiPolicy = "gcra 10/1s burst 20"
	}
	addr := serve(t, `
admin:
  allow_loopback: true # the browser and the proxy in front are on loopback
policies:
  api: "`+apiPolicy+`"
  uploads: "sliding_window 10/1h resolution 1m `+trackSpec()+`"
`)
	base := "http://" + addr
	counts := &tally{allowed: map[string]int64{}, denied: map[string]int64{}, requests: map[string]int64{}, refused: map[string]int64{}}
	if *traffic > 0 {
		// For screenshots: a rate that swings between calm and a burst.
		for start := time.Now(); time.Since(start) < *traffic; time.Sleep(50 * time.Millisecond) {
			phase := time.Since(start).Seconds()
			if int(phase)%40 < 25 {
				counts.check(t, base, "api", "k")
			} else {
				for range 3 {
					counts.check(t, base, "api", "k")
				}
			}
			if int(phase*20)%7 == 0 {
				counts.check(t, base, "uploads", []string{"dave", "erin", "frank"}[int(phase)%3])
			}
		}
	}
	for range 30 { // burst 20: some are denied
		counts.check(t, base, "api", "k")
	}
	for key, n := range map[string]int{"alice": 12, "bob": 5, "carol": 1} {
		for range n {
			counts.check(t, base, "uploads", key)
		}
	}
	if counts.denied["api"] == 0 || counts.refused["alice"] == 0 {
		t.Fatalf("the traffic denied nothing: %+v", counts)
	}
	var stub atomic.Bool
	stub.Store(true)
	var historyReads atomic.Int64
	srv := front(t, addr, &stub, &historyReads, usageStub(t, counts))

	var tab1 console
	ctx := newTab(t, browser, &tab1)

	page := "/dashboard"
	if *traffic > 0 {
		page += "#range=15m" // the traffic's minutes fill more of the charts
	}
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+page)); err != nil {
		t.Fatal(err)
	}
	// The history comes from the service at once: the charts have points
	// from the page's first read of it, not its second 10 s later. (Only a
	// stall of 10 s between the drawing and this count would mislead it.)
	figs := byID(figures(t, ctx, "#charts figure.chart", 30*time.Second))
	t.Logf("charts drawn %s after the navigation", time.Since(start).Round(time.Millisecond))
	if n := historyReads.Load(); n != 1 {
		t.Errorf("the charts were drawn after %d reads of the history, want the first", n)
	}
	for _, id := range []string{"store-latency", "store-calls", "policy:api", "policy:uploads"} {
		if _, ok := figs[id]; !ok {
			t.Fatalf("no chart %s: %v", id, figs)
		}
	}
	clockLabel := regexp.MustCompile(`^\d\d:\d\d(:\d\d)?$`)
	for id, f := range figs {
		if len(f.XLabels) < 2 || !clockLabel.MatchString(f.XLabels[0]) {
			t.Errorf("%s: time axis labels %q", id, f.XLabels)
		}
		if len(f.YLabels) < 2 {
			t.Errorf("%s: value axis labels %q", id, f.YLabels)
		}
	}
	api := figs["policy:api"]
	if len(api.Series) != 3 || api.Series[0].Points == 0 || api.Series[1].Points == 0 {
		t.Errorf("api's chart: %+v, want allowed, denied and degraded, allowed and denied with points", api.Series)
	}
	if !strings.Contains(api.Legend, "degraded (fail open)") || !strings.Contains(api.Legend, "decisions per second") {
		t.Errorf("api's legend %q lacks the failure mode beside degraded, or the unit", api.Legend)
	}
	if want := fmt.Sprintf("%s allowed, %s denied, 0 degraded", thousands(counts.allowed["api"]), thousands(counts.denied["api"])); !strings.Contains(api.Totals, want) {
		t.Errorf("api's totals %q, want %q", api.Totals, want)
	}
	if !strings.HasSuffix(api.YLabels[len(api.YLabels)-1], "/s") {
		t.Errorf("api's value axis %q has no unit", api.YLabels)
	}
	lat := figs["store-latency"]
	if lat.Series[0].Points == 0 || !regexp.MustCompile(`(µs|ms| s)$`).MatchString(lat.YLabels[len(lat.YLabels)-1]) {
		t.Errorf("store latency: %+v, value axis %q", lat.Series, lat.YLabels)
	}
	waitTrue(t, ctx, "the store nodes' note", `document.querySelector("#store-nodes tbody").textContent === "The memory store decides in this process: it has no node."`, 30*time.Second)
	waitTrue(t, ctx, "the failure mode in the header", `document.getElementById("failure-mode").textContent === "fail open"`, 30*time.Second)
	if got := text(t, ctx, `document.getElementById("degraded-head").textContent`); got != "degraded (fail open)" {
		t.Errorf("the policies table's degraded column: %q", got)
	}

	// The drill-down: the top keys are listed; a click on one draws its
	// usage series.
	waitTrue(t, ctx, "alice among the top keys", `[...document.querySelectorAll("button.key-link")].some((b) => b.textContent === "alice")`, 30*time.Second)
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("button.key-link")].find((b) => b.textContent === "alice").click()`)); err != nil {
		t.Fatal(err)
	}
	drill := figures(t, ctx, "#drill figure.chart", 30*time.Second)[0]
	if drill.Title != "alice" || len(drill.Series) != 2 || drill.Series[0].Points < 50 || len(drill.XLabels) < 2 {
		t.Errorf("drill-down: %+v, want alice's requests and denied over an hour of minutes", drill)
	}
	if want := fmt.Sprintf("requests: %s in all", thousands(counts.requests["alice"])); !strings.Contains(drill.Totals, want) {
		t.Errorf("drill-down totals %q, want %q", drill.Totals, want)
	}
	if want := fmt.Sprintf("denied: %s in all", thousands(counts.refused["alice"])); !strings.Contains(drill.Totals, want) {
		t.Errorf("drill-down totals %q, want %q", drill.Totals, want)
	}

	if *screenshots != "" {
		shoot(t, ctx, filepath.Join(*screenshots, "dashboard.png"))
	}

	// 420 px wide: nothing wider than the window; the charts redraw to
	// fit.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(420, 900)); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, ctx, "the charts redrawn at 420 px",
		`[...document.querySelectorAll("figure.chart svg")].every((s) => s.getBoundingClientRect().right <= 420)`, 30*time.Second)
	if w := text(t, ctx, `String(document.documentElement.scrollWidth)`); w != "420" {
		t.Errorf("at 420 px the page is %s px wide", w)
		t.Log(text(t, ctx, `[...document.querySelectorAll("body *")].filter((e) => !e.closest(".scroll") && e.getBoundingClientRect().right > 420).map((e) => e.tagName + "." + e.className + "#" + e.id + " " + Math.round(e.getBoundingClientRect().right)).join("\n")`))
	}
	if *screenshots != "" {
		shoot(t, ctx, filepath.Join(*screenshots, "dashboard-420.png"))
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 1000)); err != nil {
		t.Fatal(err)
	}

	// A reload shows the same history at once: it lives in the service.
	totals := func(figs []figureInfo) map[string]string {
		m := map[string]string{}
		for _, f := range figs {
			if strings.HasPrefix(f.ID, "policy:") {
				m[f.ID] = f.Totals
			}
		}
		return m
	}
	before := totals(figures(t, ctx, "#charts figure.chart", 30*time.Second))
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	if after := totals(figures(t, ctx, "#charts figure.chart", 30*time.Second)); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("after a reload the charts say %v, before %v", after, before)
	}

	// A second browser context (no shared cache, storage or cookie) sees
	// the same; its drill-down, without the stub, says how to get a
	// series.
	var tab2 console
	ctx2, cancel := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext(), chromedp.WithListener(tab2.listen))
	defer cancel()
	if err := chromedp.Do(ctx2, chromedp.Navigate(srv.URL+"/dashboard#range=15m")); err != nil {
		t.Fatal(err)
	}
	figs2 := figures(t, ctx2, "#charts figure.chart", 30*time.Second)
	if other := totals(figs2); fmt.Sprint(other) != fmt.Sprint(before) {
		t.Errorf("a second browser's charts say %v, the first's %v", other, before)
	}
	if got := text(t, ctx2, `document.querySelector('[data-range="15m"]').getAttribute("aria-pressed")`); got != "true" {
		t.Errorf("the range in the address (#range=15m) is not the one shown")
	}
	stub.Store(false)
	waitTrue(t, ctx2, "alice among the top keys", `[...document.querySelectorAll("button.key-link")].some((b) => b.textContent === "alice")`, 30*time.Second)
	if err := chromedp.Do(ctx2, chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("button.key-link")].find((b) => b.textContent === "alice").click()`)); err != nil {
		t.Fatal(err)
	}
	if trackSpec() == "track" { // the service has no usage endpoint: a 404
		waitTrue(t, ctx2, "the drill-down's advice", `document.querySelector("#drill .note").textContent.includes("No series for this policy: track it with track 1m for 24h")`, 30*time.Second)
	}

	if errs := tab1.errors(); len(errs) != 0 {
		t.Errorf("the console of the first tab:\n%s", strings.Join(errs, "\n"))
	}
	for _, e := range tab2.errors() {
		// The 404 of the usage endpoint is logged by the browser as a
		// failed resource; nothing else may be.
		if !strings.Contains(e, "404") || !strings.Contains(e, "/usage?") {
			t.Errorf("the console of the second tab: %s", e)
		}
	}
}

// thousands writes n as the page does: 1,820.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// shoot saves a screenshot of the whole page as PNG.
func shoot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}
