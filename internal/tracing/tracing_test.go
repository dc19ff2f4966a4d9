package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "OTLP"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, true},
	} {
		if got := Enabled(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("Enabled(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// TestSetupOffStartsNoSpan: with tracing off, Setup installs a provider
// whose spans carry the caller's span context (an incoming W3C
// traceparent still names the caller's trace) and record nothing, and
// starting one allocates no span: at most the context that holds it.
func TestSetupOffStartsNoSpan(t *testing.T) {
	t.Setenv("OTEL_SDK_DISABLED", "true")
	// A tracer taken before Setup, as floodgate's packages take theirs.
	tracer := otel.Tracer("github.com/floodgatehq/floodgate/internal/tracing/test")
	if _, on, err := Setup(context.Background(), "test"); err != nil || on {
		t.Fatalf("Setup: on %v, err %v; want off", on, err)
	}
	carrier := propagation.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	parent := otel.GetTextMapPropagator().Extract(context.Background(), carrier)
	ctx, span := tracer.Start(parent, "call")
	span.End()
	want := trace.SpanContextFromContext(parent)
	if got := trace.SpanContextFromContext(ctx); !want.IsValid() || !got.Equal(want) {
		t.Errorf("the span's context %v; want the caller's %v", got, want)
	}
	if span.IsRecording() {
		t.Error("a span records with tracing off")
	}
	allocs := testing.AllocsPerRun(100, func() {
		_, s := tracer.Start(parent, "call")
		s.End()
	})
	if allocs > 1 {
		t.Errorf("%v allocations to start and end a span with tracing off; want at most 1 (the context)", allocs)
	}
}
