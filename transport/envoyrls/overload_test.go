package envoyrls_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/transport/envoyrls"
)

// heldStore holds decisions until released while hold is set.
type heldStore struct {
	floodgate.Store
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if s.hold.Load() {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.Take(ctx, req)
}

// TestOverloadedResourceExhausted: a request refused by the overload bound
// (one call in flight, held; the queue's wait 1ms) is RESOURCE_EXHAUSTED
// over gRPC, and overloaded with Retry-After on /json, with the status
// overload.status says (503 by default, or 429); no status is made up for
// it.
func TestOverloadedResourceExhausted(t *testing.T) {
	for _, code := range []int{0, 429} {
		t.Run(fmt.Sprint("status=", code), func(t *testing.T) { testOverloaded(t, code) })
	}
}

func testOverloaded(t *testing.T, code int) {
	conf := `
overload: {max_inflight: 1, max_queue: 1, queue_wait: 1ms}
`
	want := 503
	if code != 0 {
		conf = fmt.Sprintf("overload: {max_inflight: 1, max_queue: 1, queue_wait: 1ms, status: %d}\n", code)
		want = code
	}
	cfg, err := config.Parse(config.Source{Name: "f.yaml", Data: []byte(conf)}, sourcesOf(t, "example1.yaml")[0])
	if err != nil {
		t.Fatal(err)
	}
	clock := floodgatetest.NewManualClock(t0)
	ms, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	st := &heldStore{Store: ms, entered: make(chan struct{}), release: make(chan struct{})}
	svc, err := service.New(cfg, service.Options{Store: st, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := envoyrls.Register(grpc.NewServer(), eng)
	req := &rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: ds(desc("database", "users"))}

	st.hold.Store(true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.ShouldRateLimit(context.Background(), req)
	}()
	select {
	case <-st.entered:
	case <-time.After(time.Minute):
		t.Fatal("the first request never reached the store")
	}
	st.hold.Store(false)
	_, err = srv.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gRPC while overloaded: %v; want RESOURCE_EXHAUSTED", err)
	}
	w := httptest.NewRecorder()
	envoyrls.JSONHandler(eng, 1<<20).ServeHTTP(w, httptest.NewRequest("POST", "/json", strings.NewReader(`{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`)))
	if w.Code != want || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"overloaded"`) {
		t.Errorf("/json while overloaded: %d %v %s; want %d overloaded, Retry-After 1", w.Code, w.Header(), w.Body, want)
	}
	close(st.release)
	wg.Wait()
	if resp, err := srv.ShouldRateLimit(context.Background(), req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("after the held call: %v, %v; want OK", resp, err)
	}
}
