package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/memstore"
)

func ExampleNew() {
	// A stopped clock keeps the output below exact however slowly the
	// example runs; a real program leaves the store its own clock.
	store, err := memstore.New(memstore.WithClock(floodgatetest.NewManualClock(time.Unix(1_700_000_000, 0))))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	// Two requests per minute per client address, the window opened by
	// the client's first request.
	policy, err := floodgate.ParsePolicy("per-ip", "fixed_window 2/1m align first")
	if err != nil {
		panic(err)
	}
	lim, err := floodgate.NewLimiter(store, policy)
	if err != nil {
		panic(err)
	}
	limit, err := httplimit.New(httplimit.Config{
		Rules: []httplimit.Rule{{Limiter: lim, Key: httplimit.RemoteIP()}},
	})
	if err != nil {
		panic(err)
	}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.RemoteAddr = "203.0.113.7:4711"
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
		for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := rec.Header().Get(k); v != "" {
				fmt.Printf("  %s: %s\n", k, v)
			}
		}
	}
	// Output:
	// 200
	//   RateLimit-Policy: "per-ip";q=2;w=60
	//   RateLimit: "per-ip";r=1;t=60
	// 200
	//   RateLimit-Policy: "per-ip";q=2;w=60
	//   RateLimit: "per-ip";r=0;t=60
	// 429
	//   RateLimit-Policy: "per-ip";q=2;w=60
	//   RateLimit: "per-ip";r=0;t=60
	//   Retry-After: 60
}

func ExampleClientIP() {
	// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For.
	key, err := httplimit.ClientIP(httplimit.IPConfig{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Header:         httplimit.XForwardedFor,
	})
	if err != nil {
		panic(err)
	}
	for _, c := range []struct{ peer, xff string }{
		{"10.1.2.3:5000", "192.0.2.1, 198.51.100.9"}, // the client prepended 192.0.2.1 itself
		{"10.1.2.3:5000", "2001:db8:1:2::77"},
		{"203.0.113.7:4711", "198.51.100.9"}, // not from the load balancer: ignored
	} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = c.peer
		req.Header.Set("X-Forwarded-For", c.xff)
		k, err := key(req)
		fmt.Println(k, err)
	}
	// Output:
	// 198.51.100.9/32 <nil>
	// 2001:db8:1:2::/64 <nil>
	// 203.0.113.7/32 <nil>
}
