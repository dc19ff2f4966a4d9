package telemetry

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgatehq/floodgate/failure"
)

// History keeps the service's recent past in memory, so that a dashboard
// shows charts from the moment it opens: per policy, the decisions
// allowed, denied and degraded; for the store, its calls' latency (as a
// histogram) and failures. It counts in slots of a fixed resolution (10
// seconds by default) and keeps a retention (24 hours by default) in a
// ring per series, so its memory is bounded:
//
//   - a policy's ring takes 16 bytes a slot (138,240 bytes at 10 s for
//     24 h), allocated an hour of slots at a time as they are first
//     written;
//   - the store's ring takes 80 bytes a slot (691,200 bytes at 10 s for
//     24 h), allocated the same way;
//   - at most MaxPolicies policy series are kept (64 by default); the
//     decisions of further policies are counted together in one overflow
//     series. A series written to for no slot of the retention (a policy
//     a reload removed, a day later) is dropped and its place freed.
//
// The default bound is thus 65 × 138,240 + 691,200 bytes (9.7 MB) of
// rings, plus a few hundred bytes per series; Bytes reports what is held.
// Nothing per key is kept: policy names come from the configuration.
//
// History is per process: it starts empty and is lost when the process
// stops; replicas keep their own. Its methods are safe for concurrent
// use. Counting (Decision, StoreCall) takes no lock but when a slot is
// first written, or a series first seen.
type History struct {
	res, ret  time.Duration
	slots     int // ret / res
	maxSeries int // policy series besides the overflow
	now       func() time.Time
	start     time.Time // when recording began (with its monotonic reading)
	epoch     int64     // start's slot boundary, Unix ns: slot 0 begins there
	startOff  time.Duration

	series   sync.Map // policy name -> *policySeries
	mu       sync.Mutex
	count    int // series in the map; guarded by mu
	overflow *policySeries
	store    ring[storeCell, *storeCell]
}

// HistoryOptions configures a History. Its zero value is the default:
// 10 s slots for 24 h, 64 policy series, the system clock.
type HistoryOptions struct {
	// Resolution is the length of a slot; 0 means 10 s.
	Resolution time.Duration
	// Retention is how far back the history goes, a multiple of
	// Resolution; 0 means 24 h.
	Retention time.Duration
	// MaxPolicies bounds the policy series kept; 0 means 64.
	MaxPolicies int
	// Now is the clock; nil means time.Now. Slots are counted on the
	// clock's monotonic reading where it has one, so a change of the wall
	// clock moves no count.
	Now func() time.Time
}

// Default history settings.
const (
	DefaultHistoryResolution  = 10 * time.Second
	DefaultHistoryRetention   = 24 * time.Hour
	DefaultHistoryMaxPolicies = 64
)

// chunkSlots is how many slots of a ring are allocated at once.
const chunkSlots = 360

// ErrHistoryOptions is returned by NewHistory for options it cannot
// use.
var ErrHistoryOptions = errors.New("telemetry: invalid history options")

// NewHistory returns an empty History that starts recording now. It
// fails with ErrHistoryOptions when the resolution or the retention is
// negative, the retention is not a whole number of slots (at most 2^31),
// or MaxPolicies is negative.
func NewHistory(o HistoryOptions) (*History, error) {
	if o.Resolution == 0 {
		o.Resolution = DefaultHistoryResolution
	}
	if o.Retention == 0 {
		o.Retention = DefaultHistoryRetention
	}
	if o.MaxPolicies == 0 {
		o.MaxPolicies = DefaultHistoryMaxPolicies
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Resolution < 0 || o.Retention < o.Resolution || o.Retention%o.Resolution != 0 || o.Retention/o.Resolution > 1<<31 || o.MaxPolicies < 0 {
		return nil, fmt.Errorf("%w: resolution %s, retention %s (a positive multiple of it), max policies %d",
			ErrHistoryOptions, o.Resolution, o.Retention, o.MaxPolicies)
	}
	h := &History{res: o.Resolution, ret: o.Retention, slots: int(o.Retention / o.Resolution), maxSeries: o.MaxPolicies, now: o.Now}
	h.start = o.Now()
	ns := h.start.UnixNano()
	h.epoch = ns - mod(ns, int64(h.res))
	h.startOff = time.Duration(ns - h.epoch)
	h.overflow = h.newSeries("")
	h.store.init(h.slots)
	return h, nil
}

// mod is a modulo that is never negative (for times before 1970).
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// Resolution returns the length of a slot.
func (h *History) Resolution() time.Duration { return h.res }

// Retention returns how far back the history goes.
func (h *History) Retention() time.Duration { return h.ret }

// MaxPolicies returns the bound on policy series.
func (h *History) MaxPolicies() int { return h.maxSeries }

// Now returns the time on the history's clock, the time base of Query.
func (h *History) Now() time.Time { return h.now() }

// Since returns when recording began.
func (h *History) Since() time.Time { return h.start }

// slotAt returns the slot number of t: slot 0 holds the start. ok is false
// before the start.
func (h *History) slotAt(t time.Time) (int64, bool) {
	d := t.Sub(h.start) + h.startOff
	if d < 0 {
		return 0, false
	}
	return int64(d / h.res), true
}

// slotTime returns when slot s begins.
func (h *History) slotTime(s int64) time.Time {
	return time.Unix(0, h.epoch+s*int64(h.res)).UTC()
}

// Decision counts one decision of policy.
func (h *History) Decision(policy string, allowed, degraded bool) {
	s, ok := h.slotAt(h.now())
	if !ok {
		return
	}
	c := h.seriesFor(policy, s).ring.at(s, h.slots)
	if c == nil {
		return
	}
	if allowed {
		c.allowed.Add(1)
	} else {
		c.denied.Add(1)
	}
	if degraded {
		c.degraded.Add(1)
	}
}

// StoreCall counts one store call: its latency unless the breaker kept it
// from the store, and its failure when err is not nil.
func (h *History) StoreCall(took time.Duration, err error) {
	s, ok := h.slotAt(h.now())
	if !ok {
		return
	}
	c := h.store.at(s, h.slots)
	if c == nil {
		return
	}
	if err != nil {
		c.errors.Add(1)
	}
	if !errors.Is(err, failure.ErrBreakerOpen) {
		c.counts[sort.SearchFloat64s(storeBuckets[:], took.Seconds())].Add(1)
	}
}

// policySeries is one policy's ring.
type policySeries struct {
	name string
	ring ring[policyCell, *policyCell]
}

func (h *History) newSeries(name string) *policySeries {
	ps := &policySeries{name: name}
	ps.ring.init(h.slots)
	return ps
}

// seriesFor returns the series of policy, adding it when there is room,
// else the overflow series. s is the slot being counted, to drop expired
// series when the bound is reached.
func (h *History) seriesFor(policy string, s int64) *policySeries {
	if v, ok := h.series.Load(policy); ok {
		return v.(*policySeries)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.series.Load(policy); ok {
		return v.(*policySeries)
	}
	if h.count >= h.maxSeries {
		h.dropExpiredLocked(s)
		if h.count >= h.maxSeries {
			return h.overflow
		}
	}
	ps := h.newSeries(policy)
	ps.ring.last.Store(s + 1) // not expired before its first count
	h.series.Store(policy, ps)
	h.count++
	return ps
}

// dropExpiredLocked drops the series with no slot in the retention that
// ends at slot now. The caller holds h.mu.
func (h *History) dropExpiredLocked(now int64) {
	h.series.Range(func(k, v any) bool {
		if last := v.(*policySeries).ring.last.Load(); last == 0 || last-1 <= now-int64(h.slots) {
			h.series.Delete(k)
			h.count--
		}
		return true
	})
}

// Bytes returns the memory the history holds: its rings' allocated slots
// and each series' fixed part.
func (h *History) Bytes() int {
	n := int(unsafe.Sizeof(*h)) + h.store.bytes() + h.overflow.bytes()
	h.series.Range(func(_, v any) bool {
		n += v.(*policySeries).bytes() + len(v.(*policySeries).name)
		return true
	})
	return n
}

func (ps *policySeries) bytes() int { return int(unsafe.Sizeof(*ps)) + ps.ring.bytes() }

// HistoryRange is what History.Query returns: the counts of each step of
// a range, every series with one value per step.
type HistoryRange struct {
	// From and To are the range asked, From no earlier than the retention
	// allows and To no later than now.
	From, To time.Time
	// Step is the length of a step, a multiple of the resolution; steps
	// begin at multiples of Step since the Unix epoch.
	Step       time.Duration
	Resolution time.Duration
	Retention  time.Duration
	// Since is when recording began.
	Since time.Time
	// Times is when each step begins: the step holding From first, then
	// each step to the one holding the instant before To. Steps before
	// the recording began, or wholly past the retention, are left out.
	Times []time.Time
	// Seconds is how much of each step was recorded: Step, but for the
	// step recording began in and the step in progress. A rate is a
	// count divided by it.
	Seconds []float64
	// Policies are the policy series, by name.
	Policies []PolicyHistory
	// Overflow counts the decisions of policies past MaxPolicies; nil
	// when there were none in the range.
	Overflow *PolicyHistory
	// Store is the store's calls.
	Store StoreHistory
	// MaxPolicies is the bound on policy series; Bytes the memory held.
	MaxPolicies int
	Bytes       int
}

// PolicyHistory is one policy's decisions per step.
type PolicyHistory struct {
	Name                      string
	Allowed, Denied, Degraded []int64
}

// StoreHistory is the store's calls per step: the latency of those made
// (a histogram, as in StoreCalls), and how many failed, a breaker kept
// from the store included.
type StoreHistory struct {
	Latency []Histogram
	Errors  []int64
}

// Histogram is Count observations in cumulative buckets (finite upper
// bounds in seconds, ascending; the +Inf bucket is Count).
type Histogram struct {
	Count   int64
	Buckets []Bucket
}

// Query returns the steps of [from, to): to is capped at now, from at the
// retention's start; step is rounded up to a multiple of the resolution
// (the resolution when it is smaller). A step is counted whole, so the
// first may begin before from and the last reach past to, but for the
// step in progress, counted to now. The range holds no step when from is
// not before to.
func (h *History) Query(from, to time.Time, step time.Duration) HistoryRange {
	now := h.now()
	cur, ok := h.slotAt(now)
	if !ok {
		cur = -1
	}
	oldest := max(cur-int64(h.slots)+1, 0) // the oldest slot the rings hold
	if step < h.res {
		step = h.res
	}
	if r := step % h.res; r != 0 {
		step += h.res - r
	}
	if to.After(now) {
		to = now
	}
	if earliest := now.Add(-h.ret); from.Before(earliest) {
		from = earliest
	}
	out := HistoryRange{
		From: from.UTC(), To: to.UTC(), Step: step, Resolution: h.res, Retention: h.ret, Since: h.start.UTC(),
		MaxPolicies: h.maxSeries, Times: []time.Time{}, Seconds: []float64{},
		Store: StoreHistory{Latency: []Histogram{}, Errors: []int64{}},
	}
	h.mu.Lock()
	h.dropExpiredLocked(cur)
	h.mu.Unlock()
	out.Bytes = h.Bytes()
	if cur < 0 {
		out.Policies = []PolicyHistory{}
		return out
	}

	// Steps are aligned on the Unix epoch; slots on it too, and a step is
	// a whole number of slots, so a step is the slots [first, end).
	stepNS := int64(step)
	firstNS := from.UnixNano() - mod(from.UnixNano(), stepNS)
	lastNS := to.UnixNano() - 1 - mod(to.UnixNano()-1, stepNS)
	// Recorded: from the start (or the oldest slot held) to now.
	recFrom := h.start
	if oldest > 0 {
		recFrom = h.slotTime(oldest)
	}
	if begin := recFrom.UnixNano() - mod(recFrom.UnixNano(), stepNS); firstNS < begin {
		firstNS = begin
	}
	type span struct{ from, to int64 } // slots [from, to) of a step
	var spans []span
	for t := firstNS; t <= lastNS && from.Before(to); t += stepNS {
		a, b := (t-h.epoch)/int64(h.res), (t+stepNS-h.epoch)/int64(h.res)
		if t < h.epoch { // the step recording began in
			a = 0
		}
		a, b = max(a, oldest), min(b, cur+1)
		if a >= b {
			continue
		}
		st, en := time.Unix(0, t), time.Unix(0, t+stepNS)
		covered := min(en.Sub(recFrom), time.Duration(stepNS), now.Sub(st), now.Sub(recFrom))
		if covered <= 0 {
			continue
		}
		spans = append(spans, span{a, b})
		out.Times = append(out.Times, st.UTC())
		out.Seconds = append(out.Seconds, covered.Seconds())
	}

	read := func(ps *policySeries) (PolicyHistory, bool) {
		p := PolicyHistory{Name: ps.name, Allowed: make([]int64, len(spans)), Denied: make([]int64, len(spans)), Degraded: make([]int64, len(spans))}
		nonzero := false
		for i, sp := range spans {
			for s := sp.from; s < sp.to; s++ {
				c := ps.ring.read(s, h.slots)
				if c == nil {
					continue
				}
				a, d, g, ok := c.load(uint32(s + 1))
				if ok {
					p.Allowed[i] += int64(a)
					p.Denied[i] += int64(d)
					p.Degraded[i] += int64(g)
					nonzero = nonzero || a+d+g > 0
				}
			}
		}
		return p, nonzero
	}
	h.series.Range(func(_, v any) bool {
		p, _ := read(v.(*policySeries))
		out.Policies = append(out.Policies, p)
		return true
	})
	slices.SortFunc(out.Policies, func(a, b PolicyHistory) int { return strings.Compare(a.Name, b.Name) })
	if out.Policies == nil {
		out.Policies = []PolicyHistory{}
	}
	if p, nonzero := read(h.overflow); nonzero {
		out.Overflow = &p
	}
	for _, sp := range spans {
		var counts [len(storeBuckets) + 1]int64
		var errs int64
		for s := sp.from; s < sp.to; s++ {
			if c := h.store.read(s, h.slots); c != nil {
				errs += c.load(uint32(s+1), &counts)
			}
		}
		hist := Histogram{Buckets: make([]Bucket, len(storeBuckets))}
		for i, le := range storeBuckets {
			hist.Count += counts[i]
			hist.Buckets[i] = Bucket{LE: le, Count: hist.Count}
		}
		hist.Count += counts[len(storeBuckets)]
		out.Store.Latency = append(out.Store.Latency, hist)
		out.Store.Errors = append(out.Store.Errors, errs)
	}
	return out
}

// ring is a series' slots: slot s lives in cell s mod n, stamped s+1 (0:
// never written), in chunks of chunkSlots allocated when first written.
type ring[C any, P cellPtr[C]] struct {
	mu     sync.Mutex // guards claiming a cell and allocating a chunk
	chunks []atomic.Pointer[[chunkSlots]C]
	alloc  atomic.Int64 // chunks allocated
	last   atomic.Int64 // the newest slot claimed, plus 1; 0: none
}

// cellPtr is what a ring needs of a cell.
type cellPtr[C any] interface {
	*C
	stamp() *atomic.Uint32
	clear()
}

func (r *ring[C, P]) init(slots int) {
	r.chunks = make([]atomic.Pointer[[chunkSlots]C], (slots+chunkSlots-1)/chunkSlots)
}

// at returns the cell of slot s, claimed for s (cleared, if it held an
// older slot), to count into; nil if it holds a newer slot than s.
func (r *ring[C, P]) at(s int64, n int) P {
	i := int(s % int64(n))
	ch := r.chunks[i/chunkSlots].Load()
	if ch == nil {
		r.mu.Lock()
		if ch = r.chunks[i/chunkSlots].Load(); ch == nil {
			ch = new([chunkSlots]C)
			r.chunks[i/chunkSlots].Store(ch)
			r.alloc.Add(1)
		}
		r.mu.Unlock()
	}
	c := P(&ch[i%chunkSlots])
	want := uint32(s + 1)
	if got := c.stamp().Load(); got != want {
		if got > want {
			return nil
		}
		r.mu.Lock()
		if got = c.stamp().Load(); got < want {
			// Unstamp first, so that a reader never takes the cleared
			// counts for the old slot's.
			c.stamp().Store(0)
			c.clear()
			c.stamp().Store(want)
			if s+1 > r.last.Load() {
				r.last.Store(s + 1)
			}
		}
		r.mu.Unlock()
		if got > want {
			return nil
		}
	}
	return c
}

// read returns the cell slot s would be in, nil when its chunk was never
// written. The caller checks its stamp.
func (r *ring[C, P]) read(s int64, n int) P {
	i := int(s % int64(n))
	ch := r.chunks[i/chunkSlots].Load()
	if ch == nil {
		return nil
	}
	return P(&ch[i%chunkSlots])
}

// bytes returns the memory the ring holds beyond its struct (which its
// owner's counts).
func (r *ring[C, P]) bytes() int {
	var c C
	return len(r.chunks)*int(unsafe.Sizeof(r.chunks[0])) + int(r.alloc.Load())*chunkSlots*int(unsafe.Sizeof(c))
}

// policyCell is a policy's decisions in one slot: 16 bytes.
type policyCell struct {
	slot                      atomic.Uint32
	allowed, denied, degraded atomic.Uint32
}

func (c *policyCell) stamp() *atomic.Uint32 { return &c.slot }
func (c *policyCell) clear() {
	c.allowed.Store(0)
	c.denied.Store(0)
	c.degraded.Store(0)
}

// load reads the cell's counts if it holds the slot stamped want.
func (c *policyCell) load(want uint32) (allowed, denied, degraded uint32, ok bool) {
	if c.slot.Load() != want {
		return 0, 0, 0, false
	}
	allowed, denied, degraded = c.allowed.Load(), c.denied.Load(), c.degraded.Load()
	return allowed, denied, degraded, c.slot.Load() == want
}

// storeCell is the store's calls in one slot: 80 bytes.
type storeCell struct {
	slot   atomic.Uint32
	errors atomic.Uint32
	counts [len(storeBuckets) + 1]atomic.Uint32 // per bucket, not cumulative; the last is +Inf
}

func (c *storeCell) stamp() *atomic.Uint32 { return &c.slot }
func (c *storeCell) clear() {
	c.errors.Store(0)
	for i := range c.counts {
		c.counts[i].Store(0)
	}
}

// load adds the cell's counts to counts and returns its errors, if it
// holds the slot stamped want.
func (c *storeCell) load(want uint32, counts *[len(storeBuckets) + 1]int64) int64 {
	if c.slot.Load() != want {
		return 0
	}
	var mine [len(storeBuckets) + 1]int64
	for i := range c.counts {
		mine[i] = int64(c.counts[i].Load())
	}
	errs := int64(c.errors.Load())
	if c.slot.Load() != want {
		return 0
	}
	for i := range mine {
		counts[i] += mine[i]
	}
	return errs
}
