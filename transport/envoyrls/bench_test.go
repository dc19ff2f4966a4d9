package envoyrls_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/internal/telemetry"
	"github.com/floodgatehq/floodgate/internal/tracing"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/transport/envoyrls"
	"github.com/floodgatehq/floodgate/transport/reqlog"
)

// benchDomain is the domain of benchmarks/envoyload.
const benchDomain = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1000000000
`

// BenchmarkServeShouldRateLimit is one decision as floodgate serve's gRPC
// server runs it after decoding, on a memory store: the interceptors
// (trace context with tracing off, metrics, access log at info with no
// sampling), the conversions, the engine and the service.
func BenchmarkServeShouldRateLimit(b *testing.B) {
	// Tracing off, as serve sets it up without OTEL_* variables.
	b.Setenv("OTEL_SDK_DISABLED", "true")
	if _, _, err := tracing.Setup(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Parse(config.Source{Name: "bench.yaml", Data: []byte(benchDomain)})
	if err != nil {
		b.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	svc, err := service.New(cfg, service.Options{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		b.Fatal(err)
	}
	metrics, err := telemetry.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	srv := envoyrls.Register(grpc.NewServer(), eng)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	icept := envoyrls.Interceptor(metrics, reqlog.AccessLog{Logger: log})
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	handler := func(ctx context.Context, req any) (any, error) {
		return srv.ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
		":authority", "127.0.0.1:8081", "content-type", "application/grpc", "user-agent", "grpc-go/1.85.0", "te", "trailers"))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1, Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(i)}},
		}}}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := icept(ctx, reqs[i%len(reqs)], info, handler)
		if err != nil {
			b.Fatal(err)
		}
		if resp.(*rlsv3.RateLimitResponse).OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatal("not OK")
		}
	}
}
