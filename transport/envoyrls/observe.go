package envoyrls

import (
	"context"
	"strings"
	"time"

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
		md, _ := metadata.FromIncomingContext(ctx)
		ctx = otel.GetTextMapPropagator().Extract(ctx, mdCarrier(md))
		ctx, span := tracer.Start(ctx, strings.TrimPrefix(info.FullMethod, "/"), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", info.FullMethod)))
		var n *reqlog.Note
		if access.Enabled(ctx) {
			n = &reqlog.Note{}
			ctx = reqlog.WithNote(ctx, n)
		}
		resp, err := handler(ctx, req)
		took := time.Since(start)
		st := status.Code(err)
		code := st.String()
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st)))
		if err != nil {
			span.SetStatus(otelcodes.Error, code)
		}
		span.End()
		if obs != nil {
			obs.Request("grpc", info.FullMethod, code, took)
		}
		remote := ""
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			remote = p.Addr.String()
		}
		access.Write(ctx, reqlog.Line{Transport: "grpc", Method: "POST", Endpoint: info.FullMethod, Code: code, Remote: remote, Took: took, Note: n})
		return resp, err
	}
}

// mdCarrier reads W3C trace context from gRPC metadata, whose keys are
// lower case.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
