package cli_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// holdFlood keeps n connections to addr open and silent until the
// benchmark ends. With redial, each one the server closes is dialled again
// redial later, as a persistent attacker would; without, it stays closed.
func holdFlood(b *testing.B, addr string, n int, redial time.Duration) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 30 * time.Second}
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					stop := context.AfterFunc(ctx, func() { c.Close() })
					io.Copy(io.Discard, c) // until the server closes it
					stop()
					c.Close()
				}
				if redial == 0 {
					<-ctx.Done()
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(redial):
				}
			}
		}()
	}
}

// BenchmarkIdleFlood measures what a normal client waits for an answer on
// a new connection (as a health probe makes one) while 5,000 silent
// connections to each listener are held open (limits.max_connections:
// 1000): "held" opens them once, "redial" opens each again 100 ms after
// the server closes it (a flood of some 40,000 connections a second per
// listener, from the normal client's own address). It reports the
// latency's p50 and p99 and the share of probes that failed (a redial
// flood from one address can close a newcomer before the server reads its
// request; the defence against it is a per-address limit at the network's
// edge). BENCHMARKS.md records the figures.
func BenchmarkIdleFlood(b *testing.B) {
	const cap, n = 1000, 5000
	if lim := raiseFileLimit(b); lim < uint64(2*n+2*cap+1024) {
		b.Skipf("open files limited to %d: %d needed", lim, 2*n+2*cap+1024)
	}
	conf := writeFile(b, "floodgate.yaml", fmt.Sprintf("policies:\n  api: \"gcra 10/1s\"\nlimits:\n  max_connections: %d\n", cap))
	for _, sc := range []struct {
		name   string
		idle   int
		redial time.Duration
	}{{"none", 0, 0}, {"held", n, 0}, {"redial", n, 100 * time.Millisecond}} {
		b.Run("flood="+sc.name, func(b *testing.B) {
			s := startServe(b, nil, "--config", conf)
			if sc.idle > 0 {
				holdFlood(b, s.http, sc.idle, sc.redial)
				holdFlood(b, s.grpc, sc.idle, sc.redial)
				time.Sleep(2 * time.Second) // the flood in place
			}
			probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			b.Run("http", func(b *testing.B) {
				took := make([]time.Duration, 0, b.N)
				failed := 0
				for i := 0; i < b.N; i++ {
					start := time.Now()
					res, err := probe.Get("http://" + s.http + "/healthz")
					if err != nil {
						failed++
						continue
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					took = append(took, time.Since(start))
				}
				report(b, took, failed)
			})
			b.Run("grpc", func(b *testing.B) {
				took := make([]time.Duration, 0, b.N)
				failed := 0
				for i := 0; i < b.N; i++ {
					start := time.Now()
					conn := grpcDial(b, s.grpc, nil)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
					cancel()
					conn.Close()
					if err != nil {
						failed++
						continue
					}
					took = append(took, time.Since(start))
				}
				report(b, took, failed)
			})
		})
	}
}

// report adds the p50 and p99 of took, in milliseconds, and the share of
// failed probes, in percent, to b's results.
func report(b *testing.B, took []time.Duration, failed int) {
	b.ReportMetric(100*float64(failed)/float64(b.N), "failed-%")
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	q := func(p float64) float64 {
		return float64(took[min(len(took)-1, int(p*float64(len(took))))]) / 1e6
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
