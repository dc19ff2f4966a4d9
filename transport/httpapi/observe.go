package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/floodgatehq/floodgate/transport/reqlog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's own methods.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// tracer starts the API's server spans (a no-op unless tracing is on).
var tracer = otel.Tracer("github.com/floodgatehq/floodgate/transport/httpapi")

// observe wraps the API's mux: it joins the caller's trace (W3C trace
// context) with a server span, times every request, reports it to the
// observer under the route that served it, and writes the access log.
func (a *api) observe(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, "HTTP "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method)))
		sw := &statusWriter{ResponseWriter: w}
		var n *reqlog.Note
		if a.o.Access.Enabled(ctx) {
			n = &reqlog.Note{}
			ctx = reqlog.WithNote(ctx, n)
		}
		r = r.WithContext(ctx)
		mux.ServeHTTP(sw, r)
		took := time.Since(start)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		endpoint := r.Pattern // set by the mux
		if endpoint == "" || endpoint == "/" {
			endpoint = "other"
		}
		span.SetName(r.Method + " " + endpoint)
		span.SetAttributes(attribute.String("http.route", endpoint), attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
		span.End()
		code := strconv.Itoa(sw.status)
		if a.o.Requests != nil {
			a.o.Requests.Request("http", endpoint, code, took)
		}
		a.o.Access.Write(r.Context(), reqlog.Line{
			Transport: "http", Method: r.Method, Endpoint: endpoint, Code: code, Remote: r.RemoteAddr, Took: took, Note: n,
		})
	})
}
