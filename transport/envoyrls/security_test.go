package envoyrls_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/auth"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/transport/envoyrls"
)

// rawCodec sends and receives a message's bytes as they are, so that a
// test can send what a protobuf library would refuse to encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// wire builds a RateLimitRequest's wire form: a domain and one descriptor
// of key, value entries, the strings as raw bytes.
func wire(domain string, kv ...string) []byte {
	var entries []byte
	for i := 0; i+1 < len(kv); i += 2 {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, kv[i])
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, kv[i+1])
		entries = protowire.AppendTag(entries, 1, protowire.BytesType)
		entries = protowire.AppendBytes(entries, e)
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, entries)
	return b
}

// TestInvalidUTF8OverGRPC: a request whose strings are not valid UTF-8 is
// InvalidArgument naming the field (not the Internal error of protobuf
// decoding), and counts nothing; bytes that are no request are
// InvalidArgument too.
func TestInvalidUTF8OverGRPC(t *testing.T) {
	h := newHarness(t, "demo.yaml")
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(req []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var resp []byte
		return conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, &req, &resp, grpc.ForceCodec(rawCodec{}))
	}
	for _, c := range []struct {
		req  []byte
		want string
	}{
		{wire("rl", "foo", "a\xffb"), "descriptors[0].entries[0].value: not valid UTF-8"},
		{wire("rl", "foo", "x", "b\xfe", "y"), "descriptors[0].entries[1].key: not valid UTF-8"},
		{wire("r\xc3", "foo", "x"), "domain: not valid UTF-8"},
		// Well-formed at the top, but a descriptor that is no message.
		{protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0x0a, 0x10, 'x'}), "not a RateLimitRequest"},
	} {
		err := call(c.req)
		if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || s.Message() != c.want && !strings.HasPrefix(s.Message(), c.want) {
			t.Errorf("%q: %v; want InvalidArgument %q", c.req, err, c.want)
		}
	}
	// The same bytes, valid, are decided; nothing above was counted.
	if err := call(wire("rl", "foo", "foo")); err != nil {
		t.Fatalf("a valid request of raw bytes: %v", err)
	}
	resp, err := h.grpcCall(t, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: ds(desc("foo", "foo"))})
	if err != nil || resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("the second request of foo=foo: %v %v; want OK(0)", resp, err)
	}
	// FromProto refuses what a Go caller can build.
	if _, err := envoyrls.FromProto(&rlsv3.RateLimitRequest{Domain: "rl", Descriptors: ds(desc("foo", "a\xffb"))}); err == nil ||
		!strings.Contains(err.Error(), "descriptors[0].entries[0].value: not valid UTF-8") {
		t.Errorf("FromProto of an invalid value: %v", err)
	}
}

// TestJSONErrors: /json's errors are JSON whatever the body holds (control
// bytes, invalid UTF-8), never name a socket address, and a Content-Type
// other than JSON is 415, as on the other endpoints.
func TestJSONErrors(t *testing.T) {
	h := newHarness(t, "demo.yaml")
	for _, body := range []string{
		"\x00\x01\x1f{", "{\"domain\":\"rl\xff\"}", "\xff\xfe", "{\"domain\":\"\u2028\"", `{"domain":"<script>"}`,
		"{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[{\"key\":\"foo\",\"value\":\"a\xffb\"}]}]}",
		`{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"a\udc00b"}]}]}`,
	} {
		code, hdr, resp := h.jsonPost(t, []byte(body))
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(resp, &e); err != nil || code != 400 || hdr.Get("Content-Type") != "application/json" || e.Error.Code == "" {
			t.Errorf("body %q: %d %q: %v; want 400, a JSON error", body, code, resp, err)
		}
	}
	for ct, want := range map[string]int{
		"application/json":                  400,
		"application/json; charset=utf-8":   400,
		"application/x-www-form-urlencoded": 400,
		"text/plain":                        415,
		"multipart/form-data; boundary=x":   415,
		"application/json;;":                415,
	} {
		res, err := http.Post(h.url, ct, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error struct{ Code string } }
		json.NewDecoder(res.Body).Decode(&e)
		res.Body.Close()
		if res.StatusCode != want || (want == 415) != (e.Error.Code == "unsupported_media_type") {
			t.Errorf("Content-Type %q: %d %s, want %d", ct, res.StatusCode, e.Error.Code, want)
		}
	}
	// A body that cannot be read to its end: a generic message, not the
	// connection's error with its addresses.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/json", failingReader{})
	envoyrls.JSONHandler(nil, 1<<20).ServeHTTP(rec, req)
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != 400 || e.Error.Code != "unreadable_body" ||
		strings.Contains(e.Error.Message, "10.1.2.3") || strings.Contains(e.Error.Message, "read tcp") {
		t.Errorf("an unreadable body: %d %s", rec.Code, rec.Body)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) {
	return 0, &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 8080},
		Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 40000}, Err: errors.New("connection reset by peer")}
}

// observer records the credential checks.
type observer struct {
	mu      sync.Mutex
	clients []string
	refused []string
}

func (o *observer) ClientRequest(transport, client string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.clients = append(o.clients, transport+"/"+client)
}

func (o *observer) AuthRefused(transport, surface, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refused = append(o.refused, transport+"/"+surface+"/"+reason)
}

// TestAuthenticate: with client tokens, ShouldRateLimit needs the
// authorization metadata of a client (or the admin token): Unauthenticated
// without it or with a wrong one, decided with one. gRPC health needs
// none.
func TestAuthenticate(t *testing.T) {
	const alice, admin = "alice-token-0123456789", "admin-token-0123456789"
	path := filepath.Join(t.TempDir(), "clients")
	if err := os.WriteFile(path, []byte("alice "+alice+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clients := &auth.Clients{}
	if err := clients.Load(path); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(sourcesOf(t, "demo.yaml")...)
	if err != nil {
		t.Fatal(err)
	}
	// A manual clock that stands still: foo=foo's window of a minute cannot
	// end between the calls below, however long a loaded machine stalls
	// them.
	clock := floodgatetest.NewManualClock(t0)
	store, _ := memstore.New(memstore.WithClock(clock))
	defer store.Close()
	svc, err := service.New(cfg, service.Options{Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	obs := &observer{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(envoyrls.Authenticate(clients, func() string { return admin }, obs)))
	envoyrls.Register(gs, eng)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: ds(desc("foo", "foo"))}
	call := func(md ...string) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if len(md) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, md...)
		}
		return client.ShouldRateLimit(ctx, req)
	}
	for _, md := range [][]string{nil, {"authorization", "Bearer wrong-token-0123456789"}, {"authorization", "Basic " + alice},
		{"authorization", alice}, {"authorization", "Bearer " + alice, "authorization", "Bearer " + alice}} {
		if _, err := call(md...); status.Code(err) != codes.Unauthenticated {
			t.Errorf("metadata %q: %v, want Unauthenticated", md, err)
		}
	}
	// Decided: foo=foo takes 2 a minute, so the third is over.
	for i, tok := range []string{"Bearer " + alice, "bearer " + alice, "Bearer " + admin} {
		want := rlsv3.RateLimitResponse_OK
		if i == 2 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp, err := call("authorization", tok)
		if err != nil || resp.OverallCode != want {
			t.Errorf("authorization %q: %v %v, want %s", tok, resp, err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health without a token: %v", err)
	}
	got := fmt.Sprint(obs.clients, obs.refused)
	want := "[grpc/alice grpc/alice grpc/admin] [grpc/client/missing grpc/client/invalid grpc/client/missing grpc/client/missing grpc/client/invalid]"
	if got != want {
		t.Errorf("observed %s\nwant     %s", got, want)
	}
}
