package envoyrls

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
)

const fuzzDomain = `
domain: rl
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: bar
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: "/api/*"
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
  - key: g
    rate_limit: {floodgate: "gcra 10/1s burst 3", name: g}
`

// fuzzEngine is an engine on a memory store over fuzzDomain.
func fuzzEngine(f *testing.F) *rls.Engine {
	f.Helper()
	cfg, err := config.Parse(config.Source{Name: "rl.yaml", Data: []byte(fuzzDomain)},
		config.Source{Name: "floodgate.yaml", Data: []byte("limits: {max_descriptors: 8, max_key_bytes: 256}\n")})
	if err != nil {
		f.Fatal(err)
	}
	store, err := memstore.New(memstore.WithMaxKeys(10_000))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	svc, err := service.New(cfg, service.Options{Store: store})
	if err != nil {
		f.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		f.Fatal(err)
	}
	return eng
}

// seedRequests are requests of every shape the service takes.
func seedRequests() []*rlsv3.RateLimitRequest {
	e := func(kv ...string) *rlv3.RateLimitDescriptor {
		d := &rlv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	over := e("foo", "x")
	over.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_DAY}
	hits := e("foo", "y")
	hits.HitsAddend = wrapperspb.UInt64(0)
	return []*rlsv3.RateLimitRequest{
		{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{e("foo", "a")}},
		{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{e("foo", "a", "bar", "b"), e("path", "/api/v1"), e("free", "1")}, HitsAddend: 3},
		{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{over, hits, e("g", "1")}},
		{Domain: "other", Descriptors: []*rlv3.RateLimitDescriptor{e("k", "v")}},
		{Domain: "rl"},
		{Descriptors: []*rlv3.RateLimitDescriptor{e("foo", "a")}},
	}
}

// FuzzShouldRateLimit drives the gRPC path from the wire: decodeRequest
// (what the service's handler does with a call's bytes), FromProto, and
// the engine. It never panics; a refusal is InvalidArgument (decoding) or
// an error naming a field; an answer has one status per descriptor, each
// OK or OVER_LIMIT, and encodes.
func FuzzShouldRateLimit(f *testing.F) {
	eng := fuzzEngine(f)
	for _, r := range seedRequests() {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x0a\x02rl\x12\x0a\x0a\x08\x0a\x03foo\x12\x01\xff"))
	f.Add([]byte{0x12, 0x03, 0x0a, 0x10, 'x'})
	f.Fuzz(func(t *testing.T, data []byte) {
		var pr rlsv3.RateLimitRequest
		if err := decodeRequest(data, &pr); err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("decodeRequest: %v, want InvalidArgument", err)
			}
			return
		}
		req, err := FromProto(&pr)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("FromProto: an empty error")
			}
			return
		}
		resp, err := eng.ShouldRateLimit(context.Background(), req)
		if err != nil {
			var re *service.RequestError
			if !errors.As(err, &re) || re.Code == "" || re.Msg == "" {
				t.Fatalf("ShouldRateLimit: %v, want a *service.RequestError with a code and message", err)
			}
			if s, _ := status.FromError(grpcError(err)); s.Code() != codes.InvalidArgument {
				t.Fatalf("grpcError(%v) = %v, want InvalidArgument", err, s.Code())
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		for i, st := range resp.Statuses {
			if st.Code != rls.CodeOK && st.Code != rls.CodeOverLimit {
				t.Fatalf("status %d: code %v", i, st.Code)
			}
		}
		if _, err := proto.Marshal(ToProto(resp)); err != nil {
			t.Fatalf("the answer does not encode: %v", err)
		}
	})
}

// FuzzJSON drives POST /json with any body: it never panics; it answers
// 200, 429 or a 4xx, always with Content-Type application/json and a body
// that is valid JSON — an answer in protojson, or an error object with a
// code and a message — whatever bytes the body held.
func FuzzJSON(f *testing.F) {
	h := JSONHandler(fuzzEngine(f), 1<<16)
	for _, r := range seedRequests() {
		b, err := protojson.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{``, ` `, `null`, `[]`, `{}`, `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"\xff"}]}]}`,
		"{\"domain\":\"\x00\x01\"}", `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"\udc00"}]}]}`,
		`{"domain":"rl","hitsAddend":-1}`, `{"domain":"rl","descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("the answer is not JSON: %q", w.Body)
		}
		if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("an error without a code and message: %s", w.Body)
			}
			return
		}
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatalf("the answer is not a RateLimitResponse: %v", err)
		}
	})
}
