package main

import (
	"context"
	"fmt"
	"net"
	"os"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// floorEnv names the environment variable that turns this program into the
// floor contender: a gRPC server of Envoy's RLS v3 API on the address it
// holds, answering OK to every ShouldRateLimit without deciding anything.
// The harness starts its own executable with it set (env.start), so the
// floor needs no build of its own; TestMain honours it too, so that the
// tests' binary can be the floor.
const floorEnv = "ENVOYLOAD_FLOOR_ADDR"

// floorServer is the floor: it reads each request (the gRPC server decodes
// it) and answers the smallest valid response, OK overall and one OK status
// per descriptor, as a service that admits everything would. It touches no
// store. Its CPU per decision is what grpc-go's server costs for a
// ShouldRateLimit on this machine, before any rate limiting: the floor
// every Go service of this API stands on, floodgate and
// envoyproxy/ratelimit alike.
type floorServer struct {
	rls.UnimplementedRateLimitServiceServer
}

func (floorServer) ShouldRateLimit(_ context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	st := make([]*rls.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range st {
		st[i] = &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
	}
	return &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK, Statuses: st}, nil
}

// serveFloorFromEnv serves the floor when floorEnv is set, and never
// returns then: it exits on a listen error, and otherwise runs until it is
// signalled (the harness sends SIGTERM; Go's default for it is to exit).
// It returns at once when floorEnv is unset.
func serveFloorFromEnv() {
	addr := os.Getenv(floorEnv)
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoyload floor: %v\n", err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(srv, floorServer{})
	err = srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "envoyload floor: %v\n", err)
	os.Exit(1)
}
