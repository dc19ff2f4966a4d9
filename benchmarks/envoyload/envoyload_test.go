package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/benchmarks/redisserver"
)

// The binaries are built once for the package's tests (envoyproxy/ratelimit
// takes about 40 s to build the first time, then comes from the build
// cache).
var (
	buildOnce      sync.Once
	fgBin, rlBin   string
	buildErr       error
	buildDir       string
	root, rlModule = "../..", "../ratelimit"
)

func binaries(t *testing.T) (string, string) {
	t.Helper()
	if !redisserver.Available() {
		t.Skip("redis-server not in PATH")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "envoyload-test-")
		if buildErr == nil {
			fgBin, rlBin, buildErr = build(root, rlModule, buildDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return fgBin, rlBin
}

func TestMain(m *testing.M) {
	serveFloorFromEnv() // the tests' binary is the floor contender too
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// TestContendersDecideRight proves that every contender loads the domain
// file and decides by it, on the harness's own Redis setup: the rule
// `check` (5 per hour) admits exactly the first 5 of 10 sequential requests
// of a value, and exactly 5 of 4 × 10 concurrent requests of another.
func TestContendersDecideRight(t *testing.T) {
	fg, rl := binaries(t)
	ctx := context.Background()
	srv, err := redisserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	csrv, cadmin, err := startCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer csrv.Stop()
	defer cadmin.Close()
	e := &env{work: t.TempDir(), floodgate: fg, ratelimit: rl, redisAddr: srv.Addr, clusterAddr: csrv.Addr}
	for i, c := range contenders() {
		t.Run(c.name, func(t *testing.T) {
			p, err := e.start(ctx, c, i)
			if err != nil {
				t.Fatal(err)
			}
			defer p.stop()
			cl, err := dial(p.grpcAddr, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.close()

			if c.kind == "floor" {
				// The floor decides nothing: it admits everything.
				for range 10 {
					code, err := cl.check(ctx, 0, "check", "floor", 5*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					if code != codeOK {
						t.Fatalf("the floor answered %v, want OK to every request", code)
					}
				}
				return
			}

			// A window boundary (the top of the hour) between the first
			// and the last request would reset the counter: try again then.
			for try := 0; ; try++ {
				hour := time.Now().Truncate(time.Hour)
				value := fmt.Sprintf("seq-%d-%d", try, rand.Uint64())
				var got []string
				for range 10 {
					code, err := cl.check(ctx, 0, "check", value, 5*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, code.String())
				}
				if !time.Now().Truncate(time.Hour).Equal(hour) && try < 3 {
					continue
				}
				want := strings.Repeat("OK ", 5) + strings.TrimSpace(strings.Repeat("OVER_LIMIT ", 5))
				if s := strings.Join(got, " "); s != want {
					t.Errorf("10 requests of one value: %s, want %s", s, want)
				}
				break
			}

			for try := 0; ; try++ {
				hour := time.Now().Truncate(time.Hour)
				value := fmt.Sprintf("conc-%d-%d", try, rand.Uint64())
				var ok, over atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, 4)
				for g := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 10 {
							code, err := cl.check(ctx, g, "check", value, 5*time.Second)
							if err != nil {
								errs <- err
								return
							}
							switch code {
							case codeOK:
								ok.Add(1)
							case codeOverLimit:
								over.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
				if !time.Now().Truncate(time.Hour).Equal(hour) && try < 3 {
					continue
				}
				if ok.Load() != 5 || over.Load() != 35 {
					t.Errorf("4 × 10 concurrent requests of one value: %d OK, %d OVER_LIMIT; want 5 and 35", ok.Load(), over.Load())
				}
				break
			}
		})
	}
}

// TestRunEndToEnd runs the whole harness in miniature (one pass, short
// runs, the two plain contenders and the floor, three workloads) and checks
// what every run answered: no errors, every decision under the
// out-of-reach limit OK, and over the 100/s limit at most 100 OK per second
// the measured window touches (the floor: every decision OK). It asserts
// nothing about speed.
func TestRunEndToEnd(t *testing.T) {
	fg, rl := binaries(t)
	out := t.TempDir()
	var logBuf bytes.Buffer
	o := options{
		root: root, rlModule: rlModule, fgBin: fg, rlBin: rl,
		passes: 1, warmup: 100 * time.Millisecond, duration: 400 * time.Millisecond,
		openRate: 500, openWorkers: 16, conns: 2,
		contenders: regexp.MustCompile(`^(ratelimit|ratelimit-localcache|floodgate|floor)$`),
		workloads:  regexp.MustCompile(`^(hot16|overlimit|open)$`),
		maxForeign: 100, maxTries: 1, outDir: out, logw: &logBuf,
		commandLine: "go test", redisServer: "redis-server",
	}
	var stdout bytes.Buffer
	rows, err := run(context.Background(), o, &stdout)
	if err != nil {
		t.Fatalf("%v\n%s", err, logBuf.String())
	}
	if len(rows) != 12 {
		t.Fatalf("%d runs, want 12 (4 contenders × 3 workloads)", len(rows))
	}
	for _, r := range rows {
		name := r.w.name + "/" + r.c.name
		res := r.res
		if res.errors != 0 || res.unsent != 0 {
			t.Errorf("%s: %d errors (first: %v), %d unsent", name, res.errors, res.firstErr, res.unsent)
		}
		if res.decisions() == 0 || len(res.lat) == 0 {
			t.Errorf("%s: no decisions measured", name)
		}
		if r.degraded > 0 {
			t.Errorf("%s: %d degraded decisions", name, r.degraded)
		}
		switch {
		case r.c.kind == "floor":
			if res.overLimit != 0 {
				t.Errorf("%s: %d OVER_LIMIT from the floor, which admits everything", name, res.overLimit)
			}
		case r.w.rule == "user":
			if res.overLimit != 0 {
				t.Errorf("%s: %d OVER_LIMIT under a limit of 10^9 per minute", name, res.overLimit)
			}
		case r.w.rule == "hot":
			// The window [warm-up end, end) of 400 ms touches at most two
			// one-second windows.
			if res.ok > 200 {
				t.Errorf("%s: %d OK over a limit of 100 per second in 400 ms", name, res.ok)
			}
			if res.overLimit == 0 {
				t.Errorf("%s: no OVER_LIMIT answer from one hot key over its limit", name)
			}
		}
	}
	report, err := os.ReadFile(filepath.Join(out, "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(report, stdout.Bytes()) {
		t.Error("envoy.md differs from the report on stdout")
	}
	for _, want := range []string{"| 1 key under its limit (10^9/min), closed c=16 | ratelimit |", "| 1 key over its limit (100/s), closed c=64 | floodgate |", "open 500/s", "| workload | baseline |"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	// The floor's table: a row for each closed workload, none for the
	// open loop.
	_, floor, _ := strings.Cut(string(report), "The floor (")
	floor, _, _ = strings.Cut(floor, "Contenders:")
	for _, want := range []string{"| 1 key under its limit (10^9/min), closed c=16 | ratelimit |", "| 1 key over its limit (100/s), closed c=64 | ratelimit-localcache |"} {
		if !strings.Contains(floor, want) {
			t.Errorf("the floor's table lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(floor, "open 500/s") {
		t.Errorf("the floor's table has the open loop:\n%s", report)
	}
	tsv, err := os.ReadFile(filepath.Join(out, "envoy.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(tsv), "\n"); n != 13 {
		t.Errorf("envoy.tsv has %d lines, want a header and 12 runs", n)
	}
}
