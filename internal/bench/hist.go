package bench

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The histogram is log-linear, as HdrHistogram's: values below 2^subBits
// ns have a bucket each; above, every power of two is split into
// 2^(subBits-1) equal buckets, so a bucket is never wider than 1/512 of
// the values it holds (about three significant digits). Values from
// 2^histMaxBits ns (137 s) up are counted in the last bucket; the exact
// maximum is kept beside.
const (
	subBits     = 10
	histMaxBits = 37
	halfSub     = 1 << (subBits - 1)
	nBuckets    = (histMaxBits-subBits+1)*halfSub + halfSub
)

// Histogram counts latencies in log-linear buckets. Record may run
// concurrently with Snapshot and Merge (the counters are atomic), but not
// with another Record on the same Histogram: each worker owns one.
type Histogram struct {
	counts [nBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Uint64 // ns
	min    atomic.Uint64 // ns; 0 until the first value (then value+1)
	max    atomic.Uint64 // ns
}

// bucketOf returns the bucket of v ns.
func bucketOf(v uint64) int {
	if v >= 1<<histMaxBits {
		return nBuckets - 1
	}
	e := max(0, bits.Len64(v)-subBits)
	return e<<(subBits-1) + int(v>>e)
}

// bucketHigh returns the largest value of bucket i, in ns.
func bucketHigh(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	e := i>>(subBits-1) - 1
	mant := uint64(i - e<<(subBits-1))
	return (mant+1)<<e - 1
}

// Record adds one latency; negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	if m := h.min.Load(); m == 0 || v+1 < m {
		h.min.Store(v + 1)
	}
	if v > h.max.Load() {
		h.max.Store(v)
	}
}

// Count returns how many values were recorded.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Merge adds o's counts to h. It must not run concurrently with Record on
// h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	h.sum.Add(o.sum.Load())
	if m := o.min.Load(); m != 0 && (h.min.Load() == 0 || m < h.min.Load()) {
		h.min.Store(m)
	}
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
}

// Quantile returns the latency at or below which a fraction q (0 to 1) of
// the values lie: the highest value of the bucket holding the value of
// rank ⌈q·n⌉, capped by the exact maximum. It is 0 when nothing was
// recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max.Load()))
		}
	}
	return h.Max()
}

// Min returns the smallest latency recorded, exactly.
func (h *Histogram) Min() time.Duration {
	if m := h.min.Load(); m != 0 {
		return time.Duration(m - 1)
	}
	return 0
}

// Max returns the largest latency recorded, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Mean returns the mean latency.
func (h *Histogram) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}
