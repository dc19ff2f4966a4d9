package envoyrls

import (
	"context"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgatehq/floodgate/transport/reqlog"
)

// tracer starts the gRPC server spans (a no-op unless tracing is on).
var tracer = otel.Tracer("github.com/floodgatehq/floodgate/transport/envoyrls")

// Interceptor returns a unary server interceptor that joins the caller's
// trace (W3C trace context in the call's metadata) with a server span,
// reports every call to obs (nil: none) under its method and gRPC code,
// and writes the access log. Install it with grpc.ChainUnaryInterceptor.
func Interceptor(obs reqlog.Observer, access reqlog.AccessLog) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		ctx = otel.GetTextMapPropagator().Extract(ctx, mdCarrier{ctx})
		opts := rlsSpanOptions
		if info.FullMethod != rlsv3.RateLimitService_ShouldRateLimit_FullMethodName {
			opts = spanOptions(info.FullMethod)
		}
		ctx, span := tracer.Start(ctx, strings.TrimPrefix(info.FullMethod, "/"), opts...)
		var n *reqlog.Note
		if access.Enabled(ctx) {
			n = &reqlog.Note{}
			ctx = reqlog.WithNote(ctx, n)
		}
		resp, err := handler(ctx, req)
		took := time.Since(start)
		st := status.Code(err)
		code := st.String()
		if span.IsRecording() { // else both are no-ops
			span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st)))
			if err != nil {
				span.SetStatus(otelcodes.Error, code)
			}
		}
		span.End()
		if obs != nil {
			obs.Request("grpc", info.FullMethod, code, took)
		}
		if n != nil || access.Enabled(ctx) {
			remote := ""
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				remote = p.Addr.String()
			}
			access.Write(ctx, reqlog.Line{Transport: "grpc", Method: "POST", Endpoint: info.FullMethod, Code: code, Remote: remote, Took: took, Note: n})
		}
		return resp, err
	}
}

// rlsSpanOptions are the span options of ShouldRateLimit, made once.
var rlsSpanOptions = spanOptions(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)

// spanOptions are the options of a server span for a call of method.
func spanOptions(method string) []trace.SpanStartOption {
	return []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", method))}
}

// mdCarrier reads W3C trace context from a call's incoming gRPC metadata,
// whose keys are lower case. It looks up only the keys asked for:
// metadata.FromIncomingContext would copy every entry of every call. Set
// is a no-op, as a carrier to extract from needs none.
type mdCarrier struct{ ctx context.Context }

func (c mdCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) {}

func (c mdCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
