package httpapi

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/service"
)

// heldStore holds every decision until released: a store call in flight
// for as long as a test needs.
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

// TestOverloaded: a decision refused by the overload bound (one call in
// flight, held; the queue's wait 1ms) is 503 overloaded with Retry-After,
// or 429 when overload.status says so; never a degraded decision.
func TestOverloaded(t *testing.T) {
	for _, status := range []int{503, 429} {
		clock := floodgatetest.NewManualClock(t0)
		ms, err := memstore.New(memstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		defer ms.Close()
		st := &heldStore{Store: ms, entered: make(chan struct{}), release: make(chan struct{})}
		conf := testConfig + "overload: {max_inflight: 1, max_queue: 1, queue_wait: 1ms, status: " + map[int]string{503: "503", 429: "429"}[status] + "}\n"
		api := newAPIWith(t, st, clock, conf, Options{Logger: quietLogger()})
		st.hold.Store(true)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			api.svc.Check(context.Background(), []service.Item{{Policy: "api", Key: "held"}})
		}()
		<-st.entered
		st.hold.Store(false)
		a := api.post(t, "/v1/check", `{"policy":"api","key":"k"}`)
		if code, _ := errorOf(t, a); a.status != status || code != "overloaded" || a.header.Get("Retry-After") != "1" {
			t.Errorf("status %d: check while overloaded: %d %v %s; want %d overloaded, Retry-After 1", status, a.status, a.header, a.raw, status)
		}
		close(st.release)
		wg.Wait()
		a = api.post(t, "/v1/check", `{"policy":"api","key":"k"}`)
		if ds := decisions(t, a); a.status != 200 || len(ds) != 1 || ds[0]["degraded"] != nil {
			t.Errorf("status %d: check after the held call: %d %s; want 200, decided by the store", status, a.status, a.raw)
		}
	}
}
