package envoyrls_test

// The harness of the conformance tests: a service on a memory store driven
// by a manual clock, served by a real gRPC server on a loopback port (with
// a real go-control-plane client) and by the /json handler behind an
// httptest server. Every scenario runs once per transport, each on a fresh
// harness, so that both see the same counters from zero.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/transport/envoyrls"
)

// t0 is 2024-05-04 12:30:00 UTC, the spec's §8 clock: a multiple of 60
// seconds. (§8 also calls it a multiple of 3600; it is not: it lies 1800 s
// into its hour, so an hour's duration_until_reset is 1800s. The tests
// compute resets from the clock.)
var t0 = time.Unix(1714825800, 0)

type harness struct {
	clock    *floodgatetest.ManualClock
	svc      *service.Service
	client   rlsv3.RateLimitServiceClient
	url      string // the /json endpoint
	grpcAddr string
}

// newHarness starts a service on the given configuration sources: file
// names under testdata/ (ending in .yaml) or inline YAML.
func newHarness(t testing.TB, sources ...string) *harness {
	t.Helper()
	cfg, err := config.Parse(sourcesOf(t, sources...)...)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	clock := floodgatetest.NewManualClock(t0)
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc, err := service.New(cfg, service.Options{Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	envoyrls.Register(gs, eng)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	mux := http.NewServeMux()
	mux.Handle("/json", envoyrls.JSONHandler(eng, 1<<20))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	return &harness{clock: clock, svc: svc, client: rlsv3.NewRateLimitServiceClient(conn), url: hs.URL + "/json", grpcAddr: lis.Addr().String()}
}

func sourcesOf(t testing.TB, sources ...string) []config.Source {
	t.Helper()
	var out []config.Source
	for i, s := range sources {
		if strings.HasSuffix(s, ".yaml") && !strings.Contains(s, "\n") {
			data, err := os.ReadFile(filepath.Join("testdata", s))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, config.Source{Name: s, Data: data})
			continue
		}
		out = append(out, config.Source{Name: fmt.Sprintf("inline%d.yaml", i), Data: []byte(s)})
	}
	return out
}

// grpcCall sends req over gRPC. Its deadline is a hang check only: far
// above what a loaded machine (two suites at once on 2 cores, under -race)
// adds to a call.
func (h *harness) grpcCall(t testing.TB, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return h.client.ShouldRateLimit(ctx, req)
}

// jsonPost posts body to /json and returns the status and the body.
func (h *harness) jsonPost(t testing.TB, body []byte) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Post(h.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// jsonCall sends req through /json in protojson and decodes the answer,
// checking that the HTTP status follows the overall code (§5: 429 for
// OVER_LIMIT, 200 for OK).
func (h *harness) jsonCall(t testing.TB, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	code, hdr, data := h.jsonPost(t, body)
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("/json Content-Type %q, want application/json", ct)
	}
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(data, &resp); err != nil {
		t.Fatalf("/json answered %d %s: %v", code, data, err)
	}
	want := map[rlsv3.RateLimitResponse_Code]int{
		rlsv3.RateLimitResponse_OK:         http.StatusOK,
		rlsv3.RateLimitResponse_OVER_LIMIT: http.StatusTooManyRequests,
		rlsv3.RateLimitResponse_UNKNOWN:    http.StatusInternalServerError,
	}[resp.OverallCode]
	if code != want {
		t.Errorf("/json status %d for overall code %s, want %d", code, resp.OverallCode, want)
	}
	return &resp
}

// transport is how a test reaches the service.
type transport struct {
	name string
	call func(h *harness, t testing.TB, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse
}

var transports = []transport{
	{"grpc", func(h *harness, t testing.TB, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := h.grpcCall(t, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}},
	{"json", (*harness).jsonCall},
}

// Request builders.

// desc is a descriptor of key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets a descriptor's hits_addend (0 included).
func hits(n uint64, d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// override sets a descriptor's limit override.
func override(rpu uint32, unit typev3.RateLimitUnit, d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

// Expectations.

type unit = rlsv3.RateLimitResponse_RateLimit_Unit

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
	week   = rlsv3.RateLimitResponse_RateLimit_WEEK
	month  = rlsv3.RateLimitResponse_RateLimit_MONTH
	year   = rlsv3.RateLimitResponse_RateLimit_YEAR

	codeOK   = rlsv3.RateLimitResponse_OK
	codeOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

var unitSeconds = map[unit]int64{second: 1, minute: 60, hour: 3600, day: 86400, week: 604800, month: 2592000, year: 31536000}

// lim is a current_limit.
type lim struct {
	name string
	rpu  uint32
	unit unit
}

func L(rpu uint32, u unit) lim { return lim{rpu: rpu, unit: u} }

// st is a wanted descriptor status. When limit is set, duration_until_reset
// must be the seconds left in the unit's epoch-aligned window (§2.3).
type st struct {
	code  rlsv3.RateLimitResponse_Code
	rem   uint32
	limit *lim
	down  bool // rem falls by one at each repetition of the step
	// reset, when set, is the wanted duration_until_reset instead of the
	// unit's window (floodgate policies reset when their state empties).
	reset time.Duration
}

// ok is OK(r) under l.
func ok(r uint32, l lim) st { return st{code: codeOK, rem: r, limit: &l} }

// countdown is OK(r), OK(r-1), … over a step's repetitions.
func countdown(r uint32, l lim) st { return st{code: codeOK, rem: r, limit: &l, down: true} }

// over is OVER_LIMIT under l, remaining 0.
func over(l lim) st { return st{code: codeOver, limit: &l} }

// shadowed is a shadow-mode rule over its limit: OK, remaining 0, with the
// limit and the reset (§4.5).
func shadowed(l lim) st { return st{code: codeOK, limit: &l} }

var (
	// noLimit is {code: OK}: no current_limit, no reset (§4.8).
	noLimit = st{code: codeOK}
	// unlimited is {code: OK, limit_remaining: MaxUint32} (§4.4).
	unlimited = st{code: codeOK, rem: 4294967295}
)

// step sends one request, times times (1 when 0), after moving the clock.
type step struct {
	note    string
	at      time.Time // when set, the clock is set to it (before advance)
	advance time.Duration
	domain  string // "" means the scenario's
	hits    uint32 // the request's hits_addend
	descs   []*rlv3.RateLimitDescriptor
	times   int
	want    []st
	// overall is the wanted overall code; 0 means OVER_LIMIT when a wanted
	// status is, else OK.
	overall rlsv3.RateLimitResponse_Code
}

type scenario struct {
	name    string
	sources []string
	domain  string
	steps   []step
}

// expected builds the response a step's repetition i must get at now.
func (s step) expected(i int, now time.Time) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: s.overall}
	anyOver := false
	for _, w := range s.want {
		ps := &rlsv3.RateLimitResponse_DescriptorStatus{Code: w.code, LimitRemaining: w.rem}
		if w.down {
			ps.LimitRemaining -= uint32(i)
		}
		if w.limit != nil {
			ps.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: w.limit.name, RequestsPerUnit: w.limit.rpu, Unit: w.limit.unit}
			div := unitSeconds[w.limit.unit]
			ps.DurationUntilReset = durationpb.New(time.Duration(div-now.Unix()%div) * time.Second)
			if w.reset != 0 {
				ps.DurationUntilReset = durationpb.New(w.reset)
			}
		}
		if w.code == codeOver {
			anyOver = true
		}
		out.Statuses = append(out.Statuses, ps)
	}
	if out.OverallCode == rlsv3.RateLimitResponse_UNKNOWN {
		out.OverallCode = codeOK
		if anyOver {
			out.OverallCode = codeOver
		}
	}
	return out
}

// run plays a scenario's steps over one transport on a fresh harness.
func (sc scenario) run(t *testing.T, tr transport) {
	h := newHarness(t, sc.sources...)
	for si, s := range sc.steps {
		if !s.at.IsZero() {
			h.clock.Set(s.at)
		}
		h.clock.Advance(s.advance)
		dom := s.domain
		if dom == "" {
			dom = sc.domain
		}
		req := &rlsv3.RateLimitRequest{Domain: dom, Descriptors: s.descs, HitsAddend: s.hits}
		n := max(s.times, 1)
		for i := range n {
			got := tr.call(h, t, req)
			got.ResponseHeadersToAdd = nil // TestResponseHeaders checks them
			want := s.expected(i, h.clock.Now())
			if !proto.Equal(got, want) {
				t.Fatalf("step %d (%s), request %d of %d:\n got: %s\nwant: %s", si, s.note, i+1, n,
					prototext.Format(got), prototext.Format(want))
			}
		}
	}
}

func runScenarios(t *testing.T, scs []scenario) {
	for _, sc := range scs {
		for _, tr := range transports {
			t.Run(sc.name+"/"+tr.name, func(t *testing.T) { sc.run(t, tr) })
		}
	}
}
