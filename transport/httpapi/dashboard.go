package httpapi

import (
	"embed"
	"net/http"
	"strings"
)

// The dashboard is one page and its script and style sheet, embedded: no
// file, script, font or style comes from anywhere else, and the
// Content-Security-Policy says so to the browser.
//
//go:embed dashboard
var dashboardFiles embed.FS

// dashboardCSP allows the page's own script, style and fetches, and
// nothing else: no inline script or style, no frames, no forms.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// dashboardAssets are the files under /dashboard/ and their types.
var dashboardAssets = map[string]string{
	"app.js":      "text/javascript; charset=utf-8",
	"app.css":     "text/css; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// dashboard serves GET /dashboard (the page) and /dashboard/NAME (its
// assets). The page names its assets and endpoints relative to itself, so
// that it works behind a proxy that adds a path prefix.
func (a *api) dashboard(w http.ResponseWriter, r *http.Request) {
	name := "index.html"
	ctype := "text/html; charset=utf-8"
	if rest, ok := strings.CutPrefix(r.URL.Path, "/dashboard/"); ok {
		if rest == "" {
			w.Header().Set("Location", "../dashboard")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		var known bool
		if ctype, known = dashboardAssets[rest]; !known {
			writeError(w, http.StatusNotFound, "not_found", "", "no dashboard file "+clip(rest))
			return
		}
		name = rest
	}
	data, err := dashboardFiles.ReadFile("dashboard/" + name)
	if err != nil { // cannot happen: the files are embedded
		a.log.Error("dashboard file missing", "name", name, "error", err)
		writeError(w, http.StatusInternalServerError, "internal", "", "internal error")
		return
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(data)
	}
}
