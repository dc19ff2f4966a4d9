package cli_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgatehq/floodgate/internal/buildinfo"
	"github.com/floodgatehq/floodgate/internal/cli"
)

// TestVersion: "version" and "--version" print buildinfo's line. These
// tests are built without the release's -ldflags (and here without VCS
// stamping), so the stamped form is tested by cmd/floodgate's
// TestVersionStamp and by make ship-check.
func TestVersion(t *testing.T) {
	want := buildinfo.Read().String() + "\n"
	line := regexp.MustCompile(`^floodgate \S+ \([0-9a-z-]+, \S+, go1\.\S+\)\n$`)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, stdout, stderr := run(t, nil, args...)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("floodgate %s: exit %d, stdout %q, stderr %q; want 0, %q", args[0], code, stdout, stderr, want)
		}
		if !line.MatchString(stdout) {
			t.Errorf("floodgate %s: %q does not match %s", args[0], stdout, line)
		}
	}
	if got := "floodgate " + cli.Version() + "\n"; got != want {
		t.Errorf("Version() = %q, want the line without the program's name: %q", got, want)
	}
	if code, stdout, _ := run(t, nil, "version", "--help"); code != 0 || !strings.Contains(stdout, "Usage: floodgate version") {
		t.Errorf("floodgate version --help: exit %d\n%s", code, stdout)
	}
	if code, stdout, stderr := run(t, nil, "version", "extra"); code != 2 || stdout != "" || !strings.Contains(stderr, `takes no arguments, found "extra"`) {
		t.Errorf("floodgate version extra: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestShutdownDelay: after SIGTERM (the context's end), serve with
// --shutdown-delay answers /readyz with 503 and gRPC health NOT_SERVING at
// once, goes on deciding requests, and exits only once the delay is over.
func TestShutdownDelay(t *testing.T) {
	const delay = 3 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--shutdown-delay", delay.String()},
			&out, &errOut, func(string) string { return "" })
	}()
	re := regexp.MustCompile(`msg="floodgate serving".* http=(\S+) grpc=(\S+)`)
	var m []string
	for deadline := time.Now().Add(20 * time.Second); m == nil; {
		if m = re.FindStringSubmatch(errOut.String()); m != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", errOut.String())
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d:\n%s", code, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	base := "http://" + m[1]
	get := func(path string) (int, error) {
		res, err := http.Get(base + path)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, nil
	}
	check := func() (int, error) {
		res, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","key":"alice"}`))
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, nil
	}
	conn, err := grpc.NewClient(m[2], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	status := func() (healthpb.HealthCheckResponse_ServingStatus, error) {
		res, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return 0, err
		}
		return res.Status, nil
	}
	if code, err := get("/readyz"); code != 200 {
		t.Fatalf("GET /readyz before SIGTERM: %d %v", code, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if st, _ := status(); st == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gRPC health never said SERVING")
		}
		time.Sleep(10 * time.Millisecond)
	}

	term := time.Now()
	cancel() // what SIGTERM does to Main's context
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(errOut.String(), "unready, serving on for the shutdown delay"); {
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown delay logged:\n%s", errOut.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	ready, readyErr := get("/readyz")
	grpcStatus, grpcErr := status()
	checked, checkErr := check()
	// The answers are those of the delay only if all three calls ended
	// within it (they take milliseconds); on a machine too slow for that,
	// only the exit time below is checked.
	if time.Since(term) < delay {
		if ready != http.StatusServiceUnavailable {
			t.Errorf("GET /readyz during the shutdown delay: %d %v, want 503", ready, readyErr)
		}
		if grpcStatus != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("gRPC health during the shutdown delay: %v %v, want NOT_SERVING", grpcStatus, grpcErr)
		}
		if checked != 200 {
			t.Errorf("POST /v1/check during the shutdown delay: %d %v, want 200 (still serving)", checked, checkErr)
		}
	} else {
		t.Logf("the calls outlasted the %v delay; their answers are not those of the delay", delay)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d:\n%s", code, errOut.String())
		}
		if took := time.Since(term); took < delay {
			t.Errorf("serve exited %v after SIGTERM, before its %v shutdown delay", took, delay)
		}
	case <-time.After(delay + 30*time.Second):
		t.Fatalf("serve did not exit after its shutdown delay:\n%s", errOut.String())
	}
}
