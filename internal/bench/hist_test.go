package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestBuckets checks the bucket arithmetic: every bucket's highest value
// maps back to it, buckets are contiguous, exact below 1,024 ns and never
// wider than 1/512 of their values.
func TestBuckets(t *testing.T) {
	prevHigh := uint64(0)
	for i := range nBuckets - 1 {
		hi := bucketHigh(i)
		if got := bucketOf(hi); got != i {
			t.Fatalf("bucketOf(bucketHigh(%d) = %d) = %d", i, hi, got)
		}
		if i > 0 {
			lo := prevHigh + 1
			if got := bucketOf(lo); got != i {
				t.Fatalf("bucketOf(%d), the value after bucket %d, = %d, want %d", lo, i-1, got, i)
			}
			if width := hi - lo + 1; i < 1<<subBits && width != 1 || width*512 > lo && lo >= 1<<subBits {
				t.Fatalf("bucket %d holds %d..%d: width %d", i, lo, hi, width)
			}
		}
		prevHigh = hi
	}
	if got := bucketOf(1 << 62); got != nBuckets-1 {
		t.Errorf("bucketOf(2^62) = %d, want the last bucket %d", got, nBuckets-1)
	}
}

// TestQuantiles compares the histogram's quantiles with the exact ones of
// a sorted sample: never below, and at most 1/512 above.
func TestQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var vals []time.Duration
	for range 100000 {
		// Log-uniform from 1 µs to 10 s.
		v := time.Duration(1e3 * pow10(rng.Float64()*7))
		vals = append(vals, v)
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		rank := max(1, int(float64(len(vals))*q+0.999999))
		exact := vals[rank-1]
		got := h.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/512 {
			t.Errorf("Quantile(%v) = %v, want %v (+1/512 at most)", q, got, exact)
		}
	}
	if h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
		t.Errorf("Min, Max = %v, %v; want %v, %v", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
	}
	if h.Count() != uint64(len(vals)) {
		t.Errorf("Count = %d, want %d", h.Count(), len(vals))
	}
}

func pow10(x float64) float64 {
	r := 1.0
	for x >= 1 {
		r *= 10
		x--
	}
	// 10^x for 0 ≤ x < 1, well enough for a test's sample.
	return r * (1 + x*(2.302585+x*(2.650949+x*(2.034679+x*1.171255))))
}

// TestHistogramSmallAndMerge: values below 1,024 ns are exact, and a
// merge is the histogram of both samples.
func TestHistogramSmallAndMerge(t *testing.T) {
	var a, b, all Histogram
	for v := range 1000 {
		d := time.Duration(v)
		if v%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		all.Record(d)
	}
	a.Merge(&b)
	for _, q := range []float64{0.01, 0.25, 0.5, 0.75, 0.99} {
		if a.Quantile(q) != all.Quantile(q) {
			t.Errorf("merged Quantile(%v) = %v, want %v", q, a.Quantile(q), all.Quantile(q))
		}
	}
	if got := a.Quantile(0.5); got != 499 {
		t.Errorf("Quantile(0.5) of 0..999 ns = %v, want 499ns exactly", got)
	}
	if a.Min() != 0 || a.Max() != 999 || a.Mean() != 499 {
		t.Errorf("Min, Max, Mean = %v, %v, %v; want 0s, 999ns, 499ns", a.Min(), a.Max(), a.Mean())
	}
	var empty Histogram
	if empty.Quantile(0.99) != 0 || empty.Min() != 0 || empty.Mean() != 0 {
		t.Error("an empty histogram should read 0 everywhere")
	}
}
