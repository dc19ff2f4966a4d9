package httpapi

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, api *statsAPI, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "203.0.113.7:5555"
	r.Header.Set("Authorization", "Bearer "+testToken) // /v1/stats is an admin endpoint
	w := httptest.NewRecorder()
	api.h.ServeHTTP(w, r)
	return w
}

func TestDashboard(t *testing.T) {
	api := newStatsAPI(t, true)
	bodies := map[string]string{}
	for path, ctype := range map[string]string{
		"/dashboard":             "text/html; charset=utf-8",
		"/dashboard/app.js":      "text/javascript; charset=utf-8",
		"/dashboard/app.css":     "text/css; charset=utf-8",
		"/dashboard/favicon.svg": "image/svg+xml",
	} {
		w := get(t, api, "GET", path)
		h := w.Header()
		if w.Code != 200 || h.Get("Content-Type") != ctype || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d, Content-Type %q, X-Content-Type-Options %q; want 200 %q nosniff",
				path, w.Code, h.Get("Content-Type"), h.Get("X-Content-Type-Options"), ctype)
		}
		// The policy allows this origin only, and no inline code.
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			!strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		for _, src := range regexp.MustCompile(`'[a-z-]+'|\S+:`).FindAllString(csp, -1) {
			if src != "'self'" && src != "'none'" {
				t.Errorf("GET %s: Content-Security-Policy allows %s", path, src)
			}
		}
		if w.Body.Len() < 200 {
			t.Errorf("GET %s: %d bytes", path, w.Body.Len())
		}
		bodies[path] = w.Body.String()
		if w := get(t, api, "HEAD", path); w.Code != 200 || w.Body.Len() != 0 {
			t.Errorf("HEAD %s: %d, %d bytes", path, w.Code, w.Body.Len())
		}
	}

	// The page loads its own files, relative to itself, and nothing from
	// elsewhere; no inline script or style (the policy would block them).
	page := bodies["/dashboard"]
	for _, want := range []string{`<script src="dashboard/app.js" defer></script>`, `<link rel="stylesheet" href="dashboard/app.css">`,
		`<link rel="icon" href="dashboard/favicon.svg" type="image/svg+xml">`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if n := strings.Count(page, "<script"); n != 1 || strings.Contains(page, "<style") || strings.Contains(page, " style=") {
		t.Errorf("the page has %d scripts, or inline style", n)
	}
	for path, body := range bodies {
		// The SVG namespace's name is a URI the script names, not a
		// resource it loads (the policy would refuse that anyway).
		body = strings.ReplaceAll(body, `"http://www.w3.org/2000/svg"`, `"svg"`)
		if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|localStorage|sessionStorage|document\.cookie|innerHTML|eval\(`).FindString(body); m != "" {
			t.Errorf("%s uses %q", path, m)
		}
	}
	// The script reads the stats, the history, the admin key listing and
	// a key's usage, every request alike: relative to the page, with the
	// token as the API expects and same-origin credentials.
	js := bodies["/dashboard/app.js"]
	for _, want := range []string{`request("v1/stats")`, `request("v1/stats/history?"`, `request("v1/keys?"`,
		`request(path)`, `"v1/keys/" + encodeURIComponent(d.key) + "/usage?"`,
		`"Bearer " + token`, `credentials: "same-origin"`, "setTimeout(poll, POLL_MS)"} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js lacks %s", want)
		}
	}

	// /dashboard/ leads to the page; other names are not found.
	if w := get(t, api, "GET", "/dashboard/"); w.Code != 301 || w.Header().Get("Location") != "../dashboard" {
		t.Errorf("GET /dashboard/: %d, Location %q", w.Code, w.Header().Get("Location"))
	}
	for _, path := range []string{"/dashboard/index.html", "/dashboard/nope.js", "/dashboard/dashboard/app.js", "/dashboard/app.js/", "/dashboardx"} {
		if w := get(t, api, "GET", path); w.Code != 404 || !strings.Contains(w.Body.String(), `"not_found"`) {
			t.Errorf("GET %s: %d %s, want 404 not_found", path, w.Code, w.Body)
		}
	}
	if w := get(t, api, "POST", "/dashboard"); w.Code != 405 {
		t.Errorf("POST /dashboard: %d, want 405", w.Code)
	}
}

// TestDashboardOff: without Dashboard the page and its files are not
// found; /v1/stats stays, as /metrics does. Without Stats neither is
// served.
func TestDashboardOff(t *testing.T) {
	api := newStatsAPI(t, false)
	for _, path := range []string{"/dashboard", "/dashboard/", "/dashboard/app.js", "/dashboard/app.css"} {
		if w := get(t, api, "GET", path); w.Code != 404 || !strings.Contains(w.Body.String(), `"not_found"`) {
			t.Errorf("GET %s with the dashboard off: %d %s", path, w.Code, w.Body)
		}
	}
	if w := get(t, api, "GET", "/v1/stats"); w.Code != 200 {
		t.Errorf("GET /v1/stats with the dashboard off: %d", w.Code)
	}

	plain := &statsAPI{testAPI: newAPI(t, true)}
	for _, path := range []string{"/v1/stats", "/dashboard"} {
		if w := get(t, plain, "GET", path); w.Code != 404 {
			t.Errorf("GET %s without Stats: %d, want 404", path, w.Code)
		}
	}
}
