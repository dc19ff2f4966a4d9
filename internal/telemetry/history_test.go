package telemetry

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgatehq/floodgate/failure"
)

// clock is a manual clock for a History.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// h0 is 3 s into a 10 s slot (and into a minute: 12:00:03).
var h0 = time.Date(2030, 1, 1, 12, 0, 3, 0, time.UTC)

func newHistory(t *testing.T, o HistoryOptions) (*History, *clock) {
	t.Helper()
	c := &clock{t: h0}
	o.Now = c.now
	h, err := NewHistory(o)
	if err != nil {
		t.Fatal(err)
	}
	return h, c
}

func policyOf(t *testing.T, r HistoryRange, name string) PolicyHistory {
	t.Helper()
	for _, p := range r.Policies {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no series %q in %v", name, r.Policies)
	return PolicyHistory{}
}

func TestHistorySteps(t *testing.T) {
	h, c := newHistory(t, HistoryOptions{})
	// 12:00:03: 2 allowed, 1 denied (degraded). 12:00:15: 3 allowed.
	// 12:00:41: 1 denied. Now 12:00:47.
	h.Decision("api", true, false)
	h.Decision("api", true, false)
	h.Decision("api", false, true)
	c.advance(12 * time.Second)
	for range 3 {
		h.Decision("api", true, false)
	}
	h.Decision("login", true, false)
	c.advance(26 * time.Second)
	h.Decision("api", false, false)
	c.advance(6 * time.Second)

	r := h.Query(h0.Add(-time.Hour), c.now(), 10*time.Second)
	wantTimes := []time.Time{h0.Add(-3 * time.Second), h0.Add(7 * time.Second), h0.Add(17 * time.Second), h0.Add(27 * time.Second), h0.Add(37 * time.Second)}
	if !slices.Equal(r.Times, wantTimes) {
		t.Fatalf("times %v, want %v (steps from the one recording began in to the one in progress)", r.Times, wantTimes)
	}
	// The first step was recorded from 12:00:03, the last to 12:00:47.
	if want := []float64{7, 10, 10, 10, 7}; !slices.Equal(r.Seconds, want) {
		t.Errorf("seconds %v, want %v", r.Seconds, want)
	}
	api := policyOf(t, r, "api")
	if want := []int64{2, 3, 0, 0, 0}; !slices.Equal(api.Allowed, want) {
		t.Errorf("api allowed %v, want %v", api.Allowed, want)
	}
	if want := []int64{1, 0, 0, 0, 1}; !slices.Equal(api.Denied, want) {
		t.Errorf("api denied %v, want %v", api.Denied, want)
	}
	if want := []int64{1, 0, 0, 0, 0}; !slices.Equal(api.Degraded, want) {
		t.Errorf("api degraded %v, want %v", api.Degraded, want)
	}
	if names := []string{r.Policies[0].Name, r.Policies[1].Name}; len(r.Policies) != 2 || names[0] != "api" || names[1] != "login" {
		t.Errorf("policies %v, want api and login", r.Policies)
	}
	if r.Overflow != nil {
		t.Errorf("overflow %v with two policies of 64", r.Overflow)
	}

	// 30 s steps, aligned on the epoch: 12:00:00 and 12:00:30.
	r = h.Query(h0, c.now(), 25*time.Second)
	if r.Step != 30*time.Second {
		t.Errorf("step %s, want 25s rounded up to 30s", r.Step)
	}
	if want := []time.Time{h0.Add(-3 * time.Second), h0.Add(27 * time.Second)}; !slices.Equal(r.Times, want) {
		t.Errorf("times %v, want %v", r.Times, want)
	}
	if want := []float64{27, 17}; !slices.Equal(r.Seconds, want) {
		t.Errorf("seconds %v, want %v", r.Seconds, want)
	}
	api = policyOf(t, r, "api")
	if !slices.Equal(api.Allowed, []int64{5, 0}) || !slices.Equal(api.Denied, []int64{1, 1}) {
		t.Errorf("api at 30s: allowed %v denied %v, want [5 0] [1 1]", api.Allowed, api.Denied)
	}

	// A range that ends at a step boundary has no step past it; one
	// that is empty has none at all.
	r = h.Query(h0.Add(7*time.Second), h0.Add(27*time.Second), 10*time.Second)
	if want := []time.Time{h0.Add(7 * time.Second), h0.Add(17 * time.Second)}; !slices.Equal(r.Times, want) {
		t.Errorf("[12:00:10, 12:00:30): times %v, want %v", r.Times, want)
	}
	if r := h.Query(c.now(), c.now(), 10*time.Second); len(r.Times) != 0 || len(policyOf(t, r, "api").Allowed) != 0 {
		t.Errorf("an empty range has steps: %v", r.Times)
	}
	// The future is cut at now.
	if r := h.Query(h0, c.now().Add(time.Hour), time.Minute); !r.To.Equal(c.now()) || len(r.Times) != 1 {
		t.Errorf("to in an hour: to %s, %d steps; want now, 1", r.To, len(r.Times))
	}
}

func TestHistoryRetention(t *testing.T) {
	h, c := newHistory(t, HistoryOptions{Resolution: time.Second, Retention: time.Minute})
	h.Decision("api", true, false)
	c.advance(30 * time.Second)
	h.Decision("api", true, false)
	c.advance(30 * time.Second) // 60 s after the first: it has left the ring
	r := h.Query(h0.Add(-time.Hour), c.now(), time.Minute)
	if !r.From.Equal(c.now().Add(-time.Minute)) {
		t.Errorf("from %s, want now - retention", r.From)
	}
	var sum int64
	for _, n := range policyOf(t, r, "api").Allowed {
		sum += n
	}
	if sum != 1 {
		t.Errorf("allowed %d in the last minute, want 1 (the first decision is past the retention)", sum)
	}

	// The ring wraps: a slot's cell is reused a retention later, and the
	// old counts are not revived.
	c.advance(30 * time.Second) // the cell of the second decision again
	h.Decision("api", false, false)
	c.advance(500 * time.Millisecond)
	r = h.Query(c.now().Add(-time.Minute), c.now().Add(time.Second), time.Second)
	api := policyOf(t, r, "api")
	var allowed, denied int64
	for i := range api.Allowed {
		allowed += api.Allowed[i]
		denied += api.Denied[i]
	}
	if allowed != 0 || denied != 1 {
		t.Errorf("after the ring wrapped: allowed %d denied %d, want 0 1", allowed, denied)
	}
	if n := len(r.Times); n != 60 {
		t.Errorf("%d steps of 1 s in the last minute, want 60", n)
	}
}

func TestHistoryBound(t *testing.T) {
	h, c := newHistory(t, HistoryOptions{Resolution: time.Second, Retention: time.Minute, MaxPolicies: 2})
	h.Decision("a", true, false)
	h.Decision("b", true, false)
	h.Decision("c", false, false) // past the bound: the overflow
	h.Decision("d", false, false)
	c.advance(time.Millisecond)
	r := h.Query(h0.Add(-time.Minute), c.now().Add(time.Second), time.Minute)
	if len(r.Policies) != 2 || r.Policies[0].Name != "a" || r.Policies[1].Name != "b" {
		t.Fatalf("policies %v, want a and b", r.Policies)
	}
	if r.Overflow == nil || r.Overflow.Denied[0] != 2 || r.Overflow.Allowed[0] != 0 {
		t.Fatalf("overflow %+v, want 2 denied (c and d)", r.Overflow)
	}
	// a goes on; b, removed by a reload, is dropped once its last count
	// leaves the retention, and c takes its place.
	for range 61 {
		c.advance(time.Second)
		h.Decision("a", true, false)
	}
	h.Decision("c", true, false)
	c.advance(time.Millisecond)
	r = h.Query(c.now().Add(-time.Minute), c.now().Add(time.Second), time.Minute)
	var names []string
	for _, p := range r.Policies {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"a", "c"}) || r.Overflow != nil {
		t.Errorf("policies %v, overflow %v; want a, c and no overflow", names, r.Overflow)
	}
}

func TestHistoryStore(t *testing.T) {
	h, c := newHistory(t, HistoryOptions{})
	for _, d := range []time.Duration{3 * time.Microsecond, 3 * time.Microsecond, 40 * time.Microsecond, 2 * time.Second} {
		h.StoreCall(d, nil)
	}
	h.StoreCall(time.Millisecond, fmt.Errorf("x: %w", errors.ErrUnsupported))
	h.StoreCall(0, failure.ErrBreakerOpen) // failed, not timed
	c.advance(10 * time.Second)
	h.StoreCall(time.Microsecond, nil)
	r := h.Query(h0, c.now().Add(time.Second), 10*time.Second)
	if len(r.Store.Latency) != 2 {
		t.Fatalf("%d store steps, want 2", len(r.Store.Latency))
	}
	l := r.Store.Latency[0]
	if l.Count != 5 || !slices.Equal(r.Store.Errors, []int64{2, 0}) {
		t.Errorf("calls %d, errors %v; want 5 timed, [2 0]", l.Count, r.Store.Errors)
	}
	cum := map[float64]int64{}
	for _, b := range l.Buckets {
		cum[b.LE] = b.Count
	}
	// 2 in (2µs, 5µs], 1 in (25µs, 50µs], 1 in (500µs, 1ms], 1 past 1 s.
	if cum[.000002] != 0 || cum[.000005] != 2 || cum[.00005] != 3 || cum[.001] != 4 || cum[1] != 4 {
		t.Errorf("cumulative buckets %v", l.Buckets)
	}
	if l := r.Store.Latency[1]; l.Count != 1 || l.Buckets[0].Count != 1 {
		t.Errorf("second step %+v, want one call within 2 µs", l)
	}
}

// TestHistoryBytes checks the memory figures History's doc gives.
func TestHistoryBytes(t *testing.T) {
	h, c := newHistory(t, HistoryOptions{})
	fresh := h.Bytes()
	if fresh > 4096 {
		t.Errorf("an empty history holds %d bytes", fresh)
	}
	for range 24 * 360 {
		h.Decision("api", true, false)
		h.StoreCall(time.Microsecond, nil)
		c.advance(10 * time.Second)
	}
	grown := h.Bytes() - fresh
	series := int(unsafe.Sizeof(policySeries{})) + 24*8 + len("api") // its fixed part: the struct, 24 chunk pointers, the name
	if want := 138_240 + 691_200 + series; grown != want {
		t.Errorf("a day of one policy grew the history by %d bytes, want %d: 138,240 + 691,200 (rings) + %d (series)", grown, want, series)
	}
	if s := unsafe.Sizeof(storeCell{}); s != 80 {
		t.Errorf("a store cell is %d bytes, want 80", s)
	}
	if s := unsafe.Sizeof(policyCell{}); s != 16 {
		t.Errorf("a policy cell is %d bytes, want 16", s)
	}
	// Another day adds nothing: the rings are reused.
	before := h.Bytes()
	for range 24 * 360 {
		h.Decision("api", false, false)
		c.advance(10 * time.Second)
	}
	if after := h.Bytes(); after != before {
		t.Errorf("a second day grew the history from %d to %d bytes", before, after)
	}
}

func TestHistoryOptions(t *testing.T) {
	for _, o := range []HistoryOptions{
		{Resolution: -time.Second},
		{Resolution: 7 * time.Second}, // 24 h is no multiple of 7 s
		{Resolution: time.Minute, Retention: time.Second},
		{MaxPolicies: -1},
		{Resolution: time.Nanosecond, Retention: 10 * time.Second}, // too many slots
	} {
		if _, err := NewHistory(o); !errors.Is(err, ErrHistoryOptions) {
			t.Errorf("NewHistory(%+v): %v, want ErrHistoryOptions", o, err)
		}
	}
	h, err := NewHistory(HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Resolution() != 10*time.Second || h.Retention() != 24*time.Hour || h.MaxPolicies() != 64 {
		t.Errorf("defaults: %s, %s, %d", h.Resolution(), h.Retention(), h.MaxPolicies())
	}
}

// TestHistoryConcurrent counts from many goroutines while others query:
// no count is lost (run it with -race).
func TestHistoryConcurrent(t *testing.T) {
	h, c := newHistory(t, HistoryOptions{Resolution: time.Second, Retention: time.Hour, MaxPolicies: 4})
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		// The clock moves on under the counting, but by at most 100 s:
		// however long the workers are held up, nothing they count falls
		// out of the hour kept.
		for step := 0; ; step++ {
			select {
			case <-stop:
				return
			default:
				h.Query(h0, c.now(), time.Second)
				if step < 1000 {
					c.advance(100 * time.Millisecond)
				}
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				h.Decision(fmt.Sprintf("p%d", (w+i)%6), i%3 != 0, i%5 == 0)
				h.StoreCall(time.Duration(i)*time.Microsecond, nil)
			}
		})
	}
	wg.Wait()
	close(stop)
	r := h.Query(h0, c.now().Add(time.Hour), time.Hour)
	var decisions, degraded int64
	for _, p := range append(r.Policies, *r.Overflow) {
		for i := range p.Allowed {
			decisions += p.Allowed[i] + p.Denied[i]
			degraded += p.Degraded[i]
		}
	}
	var calls int64
	for _, l := range r.Store.Latency {
		calls += l.Count
	}
	if decisions != workers*each || calls != workers*each || degraded != workers*each/5 {
		t.Errorf("counted %d decisions (%d degraded), %d calls; want %d (%d), %d", decisions, degraded, calls, workers*each, workers*each/5, workers*each)
	}
	if len(r.Policies) != 4 {
		t.Errorf("%d policy series, want the bound, 4", len(r.Policies))
	}
}

func BenchmarkHistoryDecision(b *testing.B) {
	h, err := NewHistory(HistoryOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Decision("api", true, false)
		}
	})
}

func BenchmarkHistoryStoreCall(b *testing.B) {
	h, err := NewHistory(HistoryOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.StoreCall(50*time.Microsecond, nil)
		}
	})
}

// BenchmarkMetricsDecision is the whole observer call, Prometheus counters
// and history: against BenchmarkHistoryDecision, the history's share.
func BenchmarkMetricsDecision(b *testing.B) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Decision("api", true, false, false)
		}
	})
}

// BenchmarkMetricsRequest is the observer call of one answered request.
func BenchmarkMetricsRequest(b *testing.B) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Request("grpc", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "OK", time.Millisecond)
		}
	})
}
