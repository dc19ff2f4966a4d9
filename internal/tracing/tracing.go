// Package tracing turns on OpenTelemetry tracing for floodgate serve when
// the operator asks for it with the standard OTEL_* environment variables:
// spans are exported over OTLP/gRPC, W3C trace context is read from
// incoming requests, and the spans that floodgate's packages start (the
// transports, the service, the store call) join the caller's trace. Off by
// default: without the variables, Setup installs OpenTelemetry's no-op
// tracer provider, which costs next to nothing.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace/noop"
)

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// or OTEL_TRACES_EXPORTER=otlp, unless OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider and W3C trace context
// propagator when Enabled: an OTLP/gRPC exporter configured by the
// OTEL_EXPORTER_OTLP_* variables, a batch span processor (OTEL_BSP_*), the
// sampler of OTEL_TRACES_SAMPLER (parent-based always-on by default), and
// a resource naming the service (OTEL_SERVICE_NAME, else "floodgate") and
// its version. It returns a function that flushes and stops the exporter,
// and whether tracing is on. The propagator is installed either way, so
// that trace context is carried through even when this process does not
// export.
//
// When tracing is off it installs the no-op provider (trace/noop): its
// spans carry the caller's span context, as those of OpenTelemetry's
// default global provider do, but starting one allocates no span, where
// the default's allocates one on every call (BenchmarkServeShouldRateLimit
// in transport/envoyrls: 13 allocations, 1,495 bytes a decision, against
// 17 and 1,879 with the default). Call Setup once per
// process, before any span starts: tracers taken from the global provider
// earlier follow the first provider installed, and only that one.
func Setup(ctx context.Context, version string) (shutdown func(context.Context) error, on bool, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	nop := func(context.Context) error { return nil }
	if !Enabled(os.Getenv) {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return nop, false, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nop, false, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("floodgate"), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil {
		return nop, false, fmt.Errorf("tracing: the resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, true, nil
}
