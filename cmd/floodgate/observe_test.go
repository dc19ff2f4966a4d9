package main_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// receiver is an OTLP/gRPC trace receiver in the test process: it keeps
// every span floodgate exports.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *receiver) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *receiver) inTrace(traceID string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if hex.EncodeToString(s.GetTraceId()) == traceID {
			out = append(out, s)
		}
	}
	return out
}

// TestObservability: after a mixed run (a good request, an unknown policy,
// garbage, Envoy requests for a domain and for none), /metrics counts the
// requests by transport, endpoint and code, the unknown policy and domain,
// the failure mode and the build; the traces exported to an OTLP receiver
// join the callers' W3C trace context, from the transport down to the
// store call, with the policy and verdict and never the key; and the
// access log at level debug has every request, keys as digests only.
func TestObservability(t *testing.T) {
	t.Parallel()
	const secret = "zq-secret-user@example.com"
	rcv := &receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, rcv)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)

	dir := t.TempDir()
	replaceFile(t, dir+"/floodgate.yaml", "policies: {api: \"fixed_window 5/1h\"}\n")
	replaceFile(t, dir+"/edge.yaml", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	s := start(t, cleanEnv("OTEL_EXPORTER_OTLP_ENDPOINT=http://"+ln.Addr().String(), "OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_BSP_SCHEDULE_DELAY=50"),
		"serve", "--config", dir, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--watch", "0", "--log-level", "debug")

	// HTTP: a good request in the caller's trace, an unknown policy, garbage.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("POST", "http://"+s.http+"/v1/check", strings.NewReader(`{"policy":"api","key":"`+secret+`"}`))
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("check: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, _, _ := post(s.http, "/v1/check", `{"policy":"nope","key":"k"}`); resp == nil || resp.StatusCode != 404 {
		t.Fatalf("unknown policy: %v", resp)
	}
	if resp, _, _ := post(s.http, "/v1/check", `{garbage`); resp == nil || resp.StatusCode != 400 {
		t.Fatalf("garbage: %v", resp)
	}
	// gRPC: a known domain in another trace, and an unknown one.
	const grpcTrace = "0af7651916cd43dd8448eb211c80319c"
	rls := rlsv3.NewRateLimitServiceClient(dialGRPC(t, s.grpc))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+grpcTrace+"-b7ad6b7169203331-01")
	for _, dom := range []string{"edge", "nowhere"} {
		if _, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: dom, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("user", secret)}}); err != nil {
			t.Fatalf("ShouldRateLimit(%s): %v", dom, err)
		}
	}

	_, metrics := get(t, s.http, "/metrics")
	for _, want := range []string{
		`floodgate_requests_total{code="200",endpoint="/v1/check",transport="http"} 1`,
		`floodgate_requests_total{code="404",endpoint="/v1/check",transport="http"} 1`,
		`floodgate_requests_total{code="400",endpoint="/v1/check",transport="http"} 1`,
		`floodgate_requests_total{code="OK",endpoint="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",transport="grpc"} 2`,
		`floodgate_request_duration_seconds_count{endpoint="/v1/check",transport="http"} 3`,
		`floodgate_unknown_policy_requests_total 1`,
		`floodgate_unknown_domain_requests_total 1`,
		`floodgate_failure_mode{mode="open"} 1`,
		`floodgate_failure_mode{mode="closed"} 0`,
		`floodgate_build_info{`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Traces: wait for the exporter's batches.
	var httpSpans, grpcSpans []*tracepb.Span
	deadline := time.Now().Add(20 * time.Second)
	for {
		httpSpans, grpcSpans = rcv.inTrace(traceID), rcv.inTrace(grpcTrace)
		if len(httpSpans) >= 2 && len(grpcSpans) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	names := func(spans []*tracepb.Span) map[string]*tracepb.Span {
		m := map[string]*tracepb.Span{}
		for _, sp := range spans {
			m[sp.GetName()] = sp
		}
		return m
	}
	hs := names(httpSpans)
	server, store := hs["POST /v1/check"], hs["floodgate.store"]
	if server == nil || store == nil {
		t.Fatalf("spans of the HTTP trace: %v; want POST /v1/check and floodgate.store", keysOf(hs))
	}
	if hex.EncodeToString(server.GetParentSpanId()) != "00f067aa0ba902b7" || string(store.GetParentSpanId()) != string(server.GetSpanId()) {
		t.Errorf("the spans do not nest under the caller's: server parent %x, store parent %x, server %x",
			server.GetParentSpanId(), store.GetParentSpanId(), server.GetSpanId())
	}
	attrs := map[string]string{}
	for _, a := range store.GetAttributes() {
		attrs[a.GetKey()] = fmt.Sprint(a.GetValue().GetValue())
	}
	if !strings.Contains(attrs["floodgate.policy"], "api") || !strings.Contains(attrs["floodgate.allowed"], "true") || !strings.Contains(attrs["floodgate.algorithm"], "fixed_window") {
		t.Errorf("the store span's attributes: %v", attrs)
	}
	gsn := names(grpcSpans)
	if gsn["envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"] == nil || gsn["floodgate.store"] == nil {
		t.Errorf("spans of the gRPC trace: %v", keysOf(gsn))
	}
	rcv.mu.Lock()
	for _, sp := range rcv.spans {
		dump := sp.String()
		if strings.Contains(dump, secret) {
			t.Errorf("span %s holds the key: %s", sp.GetName(), dump)
		}
	}
	rcv.mu.Unlock()

	// The access log: every request at level debug, keys as digests.
	logs := s.logs.String()
	if n := strings.Count(logs, "msg=request"); n < 6 || !strings.Contains(logs, "domain=nowhere") || !strings.Contains(logs, "error=unknown_policy") {
		t.Errorf("%d access log lines, want one per request (at least 6)", n)
	}
	if strings.Contains(logs, secret) {
		t.Errorf("the log holds the key:\n%s", logs)
	}
	s.stop()
}

func keysOf(m map[string]*tracepb.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
