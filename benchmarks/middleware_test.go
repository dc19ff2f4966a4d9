package benchmarks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	sethhttp "github.com/sethvargo/go-limiter/httplimit"
	sethmem "github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululehttp "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulumem "github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/memstore"
)

// BenchmarkMiddleware measures what an HTTP rate limiting middleware adds
// to a handler on the allowed path: BenchmarkMiddleware/<serial|parallel>/
// lib=<bare|floodgate|ulule|sethvargo>. Every middleware keys requests by
// the peer address (one key: every request comes from 203.0.113.7), uses a
// memory store and the fixed-window workload (10^9 per hour, the window
// opened by the key's first request), and sets its rate limit header
// fields: floodgate's httplimit its defaults (RateLimit-Policy, RateLimit;
// Retry-After only on denials), ulule/limiter's stdlib middleware and
// go-limiter's httplimit their X-RateLimit-Limit, -Remaining and -Reset.
// "bare" is the handler alone. The handler writes "ok"; the response
// writer discards it and keeps its header map, cleared between requests,
// so that what is measured is the middleware. A benchmark fails if a
// request is denied.
func BenchmarkMiddleware(b *testing.B) {
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			for _, c := range middlewareContenders(fixedWorkload) {
				b.Run("lib="+c.name, func(b *testing.B) {
					h := c.new(b)(okHandler)
					if mode == "serial" {
						benchHandlerSerial(b, h)
					} else {
						benchHandlerParallel(b, h)
					}
				})
			}
		})
	}
}

// middlewareContender is one library's middleware around a handler.
type middlewareContender struct {
	name string
	new  func(tb testing.TB) func(http.Handler) http.Handler
}

func middlewareContenders(p fixedParams) []middlewareContender {
	return []middlewareContender{
		{"bare", func(tb testing.TB) func(http.Handler) http.Handler {
			return func(h http.Handler) http.Handler { return h }
		}},
		{"floodgate", func(tb testing.TB) func(http.Handler) http.Handler {
			s, err := memstore.New()
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { s.Close() })
			lim, err := floodgate.NewLimiter(s, floodgate.Policy{
				Name: "bench_fixed_window", Algorithm: floodgate.FixedWindow,
				Max: p.max, Window: p.window, Align: floodgate.AlignFirst,
			})
			if err != nil {
				tb.Fatal(err)
			}
			mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Key: httplimit.RemoteIP()}}})
			if err != nil {
				tb.Fatal(err)
			}
			return mw
		}},
		{"ulule", func(tb testing.TB) func(http.Handler) http.Handler {
			// The stdlib middleware's default key is the client IP
			// (limiter.GetIPKey: RemoteAddr, no proxy headers trusted).
			lim := ulule.New(ulumem.NewStore(), ulule.Rate{Period: p.window, Limit: p.max})
			return ululehttp.NewMiddleware(lim).Handler
		}},
		{"sethvargo", func(tb testing.TB) func(http.Handler) http.Handler {
			st, err := sethmem.New(&sethmem.Config{Tokens: uint64(p.max), Interval: p.window})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { st.Close(context.Background()) })
			mw, err := sethhttp.NewMiddleware(st, sethhttp.IPKeyFunc())
			if err != nil {
				tb.Fatal(err)
			}
			return mw.Handle
		}},
	}
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok"))
})

// discardWriter is a ResponseWriter that keeps only the status and a
// header map reused from one request to the next.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.code = 0
}

func benchRequest() *http.Request {
	r := httptest.NewRequest("GET", "/hello", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	return r
}

// serveOne serves r and reports whether it was allowed.
func serveOne(h http.Handler, w *discardWriter, r *http.Request) bool {
	w.reset()
	h.ServeHTTP(w, r)
	return w.code == http.StatusOK
}

func benchHandlerSerial(b *testing.B, h http.Handler) {
	r, w := benchRequest(), &discardWriter{h: http.Header{}}
	if !serveOne(h, w, r) { // creates the key's state
		b.Fatalf("first request: status %d", w.code)
	}
	denied := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if !serveOne(h, w, r) {
			denied++
		}
	}
	b.StopTimer()
	if denied > 0 {
		b.Fatalf("%d of %d requests denied, want none", denied, b.N)
	}
}

func benchHandlerParallel(b *testing.B, h http.Handler) {
	if w := (&discardWriter{h: http.Header{}}); !serveOne(h, w, benchRequest()) {
		b.Fatalf("first request: status %d", w.code)
	}
	var denied atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r, w := benchRequest(), &discardWriter{h: http.Header{}}
		var d int64
		for pb.Next() {
			if !serveOne(h, w, r) {
				d++
			}
		}
		denied.Add(d)
	})
	b.StopTimer()
	if n := denied.Load(); n > 0 {
		b.Fatal(fmt.Sprintf("%d requests denied, want none", n))
	}
}
