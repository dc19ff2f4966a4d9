package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/auth"
	"github.com/floodgatehq/floodgate/memstore"
)

// noAdminConfig is testConfig without an admin token, as a fresh
// installation has it: admin.allow_loopback is off.
var noAdminConfig = strings.Replace(testConfig, "admin:\n  token: \""+testToken+"\"\n", "", 1)

func newAPIConf(t *testing.T, conf string, o Options) *testAPI {
	t.Helper()
	clock := floodgatetest.NewManualClock(t0)
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	return newAPIWith(t, store, clock, conf, o)
}

// adminCalls are a request to each admin endpoint.
var adminCalls = []call{
	{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`},
	{method: "GET", path: "/v1/keys?policy=uploads"},
	{method: "POST", path: "/v1/refund", body: `{"policy":"api","key":"k","n":1}`},
}

// TestAdminWithoutToken: with no admin token configured (and
// admin.allow_loopback off, the default), the admin endpoints answer 403
// to everyone, loopback included.
func TestAdminWithoutToken(t *testing.T) {
	if strings.Contains(noAdminConfig, "admin") {
		t.Fatalf("the configuration still has an admin section:\n%s", noAdminConfig)
	}
	api := newAPIConf(t, noAdminConfig, Options{})
	for _, c := range adminCalls {
		for _, remote := range []string{"127.0.0.1:1", "[::1]:2", "203.0.113.7:5555"} {
			c.remote = remote
			a := api.do(t, c)
			if code, _ := errorOf(t, a); a.status != 403 || code != "admin_disabled" || !strings.Contains(a.raw, "admin.token") {
				t.Errorf("%s %s from %s: %d %s, want 403 admin_disabled naming admin.token", c.method, c.path, remote, a.status, a.raw)
			}
			c.auth = "Bearer " + testToken // a token opens nothing when none is configured
			if a := api.do(t, c); a.status != 403 {
				t.Errorf("%s %s from %s with a token: %d, want 403", c.method, c.path, remote, a.status)
			}
			c.auth = ""
		}
	}
}

// TestAdminAllowLoopback: admin.allow_loopback opens the admin endpoints
// to loopback peers that name a loopback host, and to nobody else: not a
// remote peer, and not a page of a foreign name resolving to 127.0.0.1
// (DNS rebinding).
func TestAdminAllowLoopback(t *testing.T) {
	api := newAPIConf(t, noAdminConfig+"admin:\n  allow_loopback: true\n", Options{})
	for _, c := range []struct {
		remote, host string
		status       int
	}{
		{"127.0.0.1:1", "localhost:8080", 200},
		{"127.0.0.1:1", "127.0.0.1:8080", 200},
		{"[::1]:2", "[::1]:8080", 200},
		{"127.0.0.1:1", "LOCALHOST", 200},
		{"203.0.113.7:5555", "localhost:8080", 403},
		{"127.0.0.1:1", "evil.example:8080", 403},
		{"127.0.0.1:1", "127.0.0.1.nip.io:8080", 403},
		{"127.0.0.1", "localhost", 403}, // an unparsable peer address
	} {
		for _, ac := range adminCalls {
			ac.remote, ac.host = c.remote, c.host
			if a := api.do(t, ac); a.status != c.status {
				t.Errorf("%s %s from %s to Host %s: %d %s, want %d", ac.method, ac.path, c.remote, c.host, a.status, a.raw, c.status)
			}
		}
	}
}

// TestAdminThroughProxy: behind a reverse proxy on the same host every
// client is a loopback peer. Without an admin token, the admin endpoints
// still answer 403 through it (even with admin.allow_loopback, as long as
// the proxy passes the public Host on); with one, 401 without it.
func TestAdminThroughProxy(t *testing.T) {
	for _, c := range []struct {
		name   string
		conf   string
		status int
		code   string
	}{
		{"no token", noAdminConfig, 403, "admin_disabled"},
		{"no token, allow_loopback", noAdminConfig + "admin:\n  allow_loopback: true\n", 403, "admin_disabled"},
		{"a token", testConfig, 401, "unauthorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := newAPIConf(t, c.conf, Options{})
			backend := httptest.NewServer(api.h)
			defer backend.Close()
			target, _ := url.Parse(backend.URL)
			proxy := httputil.NewSingleHostReverseProxy(target) // keeps the client's Host
			front := httptest.NewServer(proxy)
			defer front.Close()
			for _, ac := range adminCalls {
				req, _ := http.NewRequest(ac.method, front.URL+ac.path, strings.NewReader(ac.body))
				req.Host = "floodgate.example.com"
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Forwarded-For", "203.0.113.9")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != c.status || !strings.Contains(string(body), `"`+c.code+`"`) {
					t.Errorf("%s %s through the proxy: %d %s, want %d %s", ac.method, ac.path, res.StatusCode, body, c.status, c.code)
				}
			}
		})
	}
}

// TestAdminCrossOrigin: a browser page of another origin cannot use the
// admin endpoints, whatever the configuration; /v1/reset takes JSON only,
// so that no HTML form can post to it.
func TestAdminCrossOrigin(t *testing.T) {
	loop := newAPIConf(t, noAdminConfig+"admin:\n  allow_loopback: true\n", Options{})
	withToken := newAPI(t, true)
	form := call{method: "POST", path: "/v1/reset", body: "policy=api&key=k", contentType: "application/x-www-form-urlencoded"}
	for _, c := range []struct {
		name   string
		api    *testAPI
		c      call
		header http.Header
		status int
		code   string
	}{
		{"cross-site form post", loop, form, http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}, 403, "cross_origin"},
		{"form post with Origin only", loop, form, http.Header{"Origin": {"https://evil.example"}}, 403, "cross_origin"},
		{"same-site form post", loop, form, http.Header{"Sec-Fetch-Site": {"same-site"}}, 403, "cross_origin"},
		{"form post without browser headers", loop, form, nil, 415, "unsupported_media_type"},
		{"form post, same origin", loop, form, http.Header{"Origin": {"http://localhost:8080"}, "Sec-Fetch-Site": {"same-origin"}}, 415, "unsupported_media_type"},
		{"no Content-Type", loop, call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, contentType: "-"}, nil, 415, "unsupported_media_type"},
		{"text/plain", loop, call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, contentType: "text/plain"}, nil, 415, "unsupported_media_type"},
		{"cross-site JSON with the token", withToken, call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, auth: "Bearer " + testToken},
			http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403, "cross_origin"},
		{"cross-site GET of keys", loop, call{method: "GET", path: "/v1/keys?policy=uploads"}, http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403, "cross_origin"},
		{"GET of keys from another Origin", loop, call{method: "GET", path: "/v1/keys?policy=uploads"}, http.Header{"Origin": {"http://localhost:9999"}}, 403, "cross_origin"},
		{"same-origin GET of keys (the dashboard)", loop, call{method: "GET", path: "/v1/keys?policy=uploads"}, http.Header{"Sec-Fetch-Site": {"same-origin"}}, 200, ""},
		{"same-origin JSON reset", loop, call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`},
			http.Header{"Origin": {"http://localhost:8080"}, "Sec-Fetch-Site": {"same-origin"}}, 200, ""},
		{"JSON reset with a charset", loop, call{method: "POST", path: "/v1/reset", body: `{"policy":"api","key":"k"}`, contentType: "application/json; charset=utf-8"}, nil, 200, ""},
		// The decision endpoints take no cross-origin POST either.
		{"cross-site form post to check", loop, call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"}`, contentType: "application/x-www-form-urlencoded"},
			http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403, "cross_origin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.c.header = c.header
			a := c.api.do(t, c.c)
			code := ""
			if a.status >= 400 {
				code, _ = errorOf(t, a)
			}
			if a.status != c.status || code != c.code {
				t.Errorf("%d %s, want %d %s", a.status, a.raw, c.status, c.code)
			}
		})
	}
}

// TestBearerScheme: the scheme's name is case-insensitive; the token is
// not.
func TestBearerScheme(t *testing.T) {
	api := newAPI(t, true)
	for auth, status := range map[string]int{
		"Bearer " + testToken:                    200,
		"bearer " + testToken:                    200,
		"BEARER " + testToken:                    200,
		"Bearer   " + testToken:                  200,
		"Bearer " + strings.ToUpper(testToken):   401,
		"Basic " + testToken:                     401,
		"Bearer":                                 401,
		"Bearer" + testToken:                     401,
		"Bearer " + testToken + " " + testToken:  401,
		"Bearer " + testToken[:len(testToken)-1]: 401,
	} {
		if a := api.do(t, call{method: "GET", path: "/v1/keys?policy=uploads", auth: auth, remote: "203.0.113.7:5555"}); a.status != status {
			t.Errorf("Authorization %q: %d %s, want %d", auth, a.status, a.raw, status)
		}
	}
}

// TestInvalidUTF8Keys: a key that is not Unicode is refused with 400
// invalid_key naming the field, never decided as U+FFFD (which would make
// a\xffb and a\xfeb one counter); a valid one, escaped or not, is decided.
func TestInvalidUTF8Keys(t *testing.T) {
	api := newAPI(t, true)
	for _, c := range []struct {
		path, body, field string
	}{
		{"/v1/check", "{\"policy\":\"api\",\"key\":\"a\xffb\"}", "key"},
		{"/v1/check", "{\"policy\":\"api\",\"key\":\"a\xfeb\"}", "key"},
		{"/v1/peek", `{"policy":"api","key":"a\udcffb"}`, "key"},
		{"/v1/check", `{"policy":"api","key":"\ud800"}`, "key"},
		{"/v1/check", `{"policy":"api","key":"\ud800\u0041"}`, "key"},
		{"/v1/check", "{\"requests\":[{\"policy\":\"api\",\"key\":\"ok\"},{\"policy\":\"api\",\"key\":\"\xc3\"}]}", "requests[1].key"},
	} {
		a := api.post(t, c.path, c.body)
		if code, field := errorOf(t, a); a.status != 400 || code != "invalid_key" || field != c.field || !strings.Contains(a.raw, "UTF-8") {
			t.Errorf("%s %q: %d %s, want 400 invalid_key %s", c.path, c.body, a.status, a.raw, c.field)
		}
	}
	a := api.do(t, call{method: "POST", path: "/v1/reset", body: "{\"policy\":\"api\",\"key\":\"a\xffb\"}", auth: "Bearer " + testToken})
	if code, field := errorOf(t, a); a.status != 400 || code != "invalid_key" || field != "key" {
		t.Errorf("reset of an invalid key: %d %s", a.status, a.raw)
	}
	// Valid ones: raw, escaped, a surrogate pair, and U+FFFD written out.
	for _, body := range []string{`{"policy":"api","key":"grüße"}`, `{"policy":"api","key":"gr\u00fc\u00dfe"}`,
		`{"policy":"api","key":"\ud83d\ude00"}`, `{"policy":"api","key":"\ufffd"}`, `{"policy":"api","key":"a\\ud800"}`} {
		if a := api.post(t, "/v1/check", body); a.status != 200 {
			t.Errorf("check %s: %d %s", body, a.status, a.raw)
		}
	}
	// Two spellings of one key are one counter: grüße twice above.
	a = api.post(t, "/v1/peek", `{"policy":"api","key":"grüße"}`)
	if r := num(decisions(t, a)[0]["remaining"]); r != 17 {
		t.Errorf("grüße after two checks: remaining %d, want 17 (20 - 2 - this peek)", r)
	}
}

// recorder is an auth.Observer that remembers what it was told.
type recorder struct {
	mu      sync.Mutex
	clients map[string]int
	refused map[string]int
}

func (r *recorder) ClientRequest(transport, client string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients[transport+"/"+client]++
}

func (r *recorder) AuthRefused(transport, surface, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused[transport+"/"+surface+"/"+reason]++
}

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
)

func tokensFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clients")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestClientAuth: with a tokens file, the decision endpoints need a
// client's token (or the admin token): 401 without one, or with a wrong
// one; decided with one, and counted under the client's name. Probes and
// metrics stay open.
func TestClientAuth(t *testing.T) {
	clients := &auth.Clients{}
	path := tokensFile(t, "# clients\nalice "+aliceToken+"\n\nbob\t"+bobToken+"\n")
	if err := clients.Load(path); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{clients: map[string]int{}, refused: map[string]int{}}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]string{}) })
	api := newAPIConf(t, testConfig, Options{Clients: clients, Auth: rec, Metrics: metrics,
		EnvoyJSON: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]string{"envoy": "ok"}) })})
	decisionCalls := []call{
		{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"}`},
		{method: "POST", path: "/v1/peek", body: `{"policy":"api","key":"k"}`},
		{method: "POST", path: "/v1/reserve", body: `{"policy":"api","key":"r","n":1}`},
		{method: "GET", path: "/v1/policies"},
		{method: "POST", path: "/v1/envoy/rule", body: `{"domain":"edge","entries":[{"key":"remote_address","value":"1.2.3.4"}]}`},
		{method: "POST", path: "/json", body: `{}`},
	}
	for _, c := range decisionCalls {
		for _, bad := range []string{"", "Bearer nope-nope-nope-nope", "Basic " + aliceToken, "Bearer " + aliceToken + "x"} {
			c.auth = bad
			a := api.do(t, c)
			if code, _ := errorOf(t, a); a.status != 401 || code != "unauthorized" || a.header.Get("WWW-Authenticate") != `Bearer realm="floodgate"` {
				t.Errorf("%s %s with Authorization %q: %d %s, want 401 unauthorized", c.method, c.path, bad, a.status, a.raw)
			}
		}
		for _, good := range []string{"Bearer " + aliceToken, "bearer " + bobToken, "Bearer " + testToken} {
			c.auth = good
			if a := api.do(t, c); a.status != 200 {
				t.Errorf("%s %s with a good token: %d %s", c.method, c.path, a.status, a.raw)
			}
		}
	}
	n := len(decisionCalls)
	for key, want := range map[string]int{"http/alice": n, "http/bob": n, "http/admin": n} {
		if rec.clients[key] != want {
			t.Errorf("client requests %s: %d, want %d (all: %v)", key, rec.clients[key], want, rec.clients)
		}
	}
	if rec.refused["http/client/missing"] != 2*n || rec.refused["http/client/invalid"] != 2*n {
		t.Errorf("refusals: %v, want %d missing and %d invalid", rec.refused, 2*n, 2*n)
	}
	// The check with a good token was decided: the key spent 3 of 20.
	a := api.do(t, call{method: "POST", path: "/v1/peek", body: `{"policy":"api","key":"k"}`, auth: "Bearer " + aliceToken})
	if r := num(decisions(t, a)[0]["remaining"]); r != 16 {
		t.Errorf("after three checks: remaining %d, want 16", r)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if a := api.do(t, call{method: "GET", path: path}); a.status != 200 {
			t.Errorf("GET %s without a token: %d", path, a.status)
		}
	}
	// The admin endpoints keep their own token: a client's opens nothing.
	if a := api.do(t, call{method: "GET", path: "/v1/keys?policy=uploads", auth: "Bearer " + aliceToken}); a.status != 401 {
		t.Errorf("keys with a client's token: %d", a.status)
	}

	// A reload of the file takes bob away.
	if err := os.WriteFile(path, []byte("alice "+aliceToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := clients.Refresh(); !changed || err != nil {
		t.Fatalf("Refresh: %v %v", changed, err)
	}
	if a := api.do(t, call{method: "POST", path: "/v1/check", body: `{"policy":"api","key":"k"}`, auth: "Bearer " + bobToken}); a.status != 401 {
		t.Errorf("check with a token removed from the file: %d", a.status)
	}
	// Off: without a tokens file the endpoints take anyone.
	if err := clients.Load(""); err != nil {
		t.Fatal(err)
	}
	if a := api.post(t, "/v1/check", `{"policy":"api","key":"k"}`); a.status != 200 {
		t.Errorf("check with client authentication off: %d", a.status)
	}
}
