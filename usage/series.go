package usage

import (
	"errors"
	"fmt"
	"time"
)

// MaxCount is the largest count a series or a sum holds: 2^53-1, as
// floodgate.MaxCost (counts saturate there, in every store alike).
const MaxCount int64 = 1<<53 - 1

// MaxPoints is the most points Summarize returns.
const MaxPoints = 10_000

// ErrInvalidQuery is wrapped by every *QueryError: a query a Lister, or
// Summarize, refuses before looking at any key.
var ErrInvalidQuery = errors.New("usage: invalid query")

// QueryError is a query refused, naming the parameter at fault as the HTTP
// API names it (from, to, step, sort, order, window, limit, cursor,
// policy).
type QueryError struct {
	Field string
	Msg   string
}

func (e *QueryError) Error() string { return "usage: " + e.Field + ": " + e.Msg }

// Unwrap returns ErrInvalidQuery.
func (e *QueryError) Unwrap() error { return ErrInvalidQuery }

func queryError(field, format string, args ...any) error {
	return &QueryError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// SeriesQuery names the usage series of one key (Lister.Series).
type SeriesQuery struct {
	// Policy is the tracked policy's name, Key the key.
	Policy, Key string

	// Resolution and Retention are the policy's series
	// (floodgate.Policy.SeriesResolution and SeriesRetention): the width of
	// a bucket, and how long one counts.
	Resolution, Retention time.Duration
}

// Check returns a *QueryError when q cannot name a series.
func (q *SeriesQuery) Check() error {
	if q.Resolution <= 0 || q.Retention < q.Resolution {
		return queryError("policy", "policy %q keeps no usage series (track <resolution> for <retention>)", clip(q.Policy))
	}
	if q.Key == "" {
		return queryError("key", "empty key")
	}
	return nil
}

// Bucket is one bucket of a usage series (SPEC.md, "Per-key usage
// series"): the costs asked and denied by the adds recorded in
// [Start, Start+resolution).
type Bucket struct {
	Start    time.Time
	Requests int64
	Denied   int64
}

// Series is the usage series a store holds for one key: the buckets that
// count at Now (a bucket starting at s counts while Now < s + Retention),
// oldest first, empty buckets left out. Now is the store's clock when it
// read them.
type Series struct {
	Now                   time.Time
	Resolution, Retention time.Duration
	Buckets               []Bucket
}

// Counts reports whether the bucket starting at start (µs) counts at now
// (µs) for a retention of keep µs: now < start + keep (SPEC.md, "Per-key
// usage series", rule 2).
func Counts(start, now, keep int64) bool { return now < start+keep }

// InWindow reports whether the bucket starting at start (µs) is inside a
// window of w µs ending at now: it started at or before now and counts
// under the retention rule with w in place of the retention.
func InWindow(start, now, w int64) bool { return start <= now && now < start+w }

// SatAdd returns a+b for counts 0 ≤ a, b ≤ MaxCount, saturating at
// MaxCount.
func SatAdd(a, b int64) int64 {
	if a > MaxCount-b {
		return MaxCount
	}
	return a + b
}

// Point is one step of a summarized series: the sums of the buckets that
// start in [T, T+step).
type Point struct {
	T        time.Time
	Requests int64
	Denied   int64
}

// Stats summarizes one count over the points of a Summary.
type Stats struct {
	Sum  int64   // over the points, saturating at MaxCount
	Mean float64 // Sum per point; 0 with no point
	Peak int64   // the largest point
	// PeakAt is the time of the first point holding Peak; the zero Time
	// when Peak is 0 (no point holds any).
	PeakAt time.Time
}

// Summary is a series re-bucketed to a step, as SPEC.md's series query
// defines it.
type Summary struct {
	From, To   time.Time // the query's bounds, as asked
	Step       time.Duration
	Resolution time.Duration
	Points     []Point
	Requests   Stats
	Denied     Stats
}

// Summarize re-buckets s to step over [from, to) (SPEC.md, "Querying one
// key's series"): the points are the steps of the grid m·step (from the
// Unix epoch) that meet [from, to), oldest first, each the sum of the
// buckets of s starting in it, with the sum, mean (per point) and peak of
// each count. A zero step means s.Resolution. The error is a *QueryError
// naming step (not a whole multiple of the resolution, or more than
// MaxPoints points) or from (after to).
func (s *Series) Summarize(from, to time.Time, step time.Duration) (Summary, error) {
	res := s.Resolution
	if step == 0 {
		step = res
	}
	switch {
	case res <= 0:
		return Summary{}, queryError("policy", "the series has no resolution")
	case step < res:
		return Summary{}, queryError("step", "%s is finer than the stored resolution (%s)", step, res)
	case step%res != 0:
		return Summary{}, queryError("step", "%s is not a whole multiple of the stored resolution (%s)", step, res)
	case from.After(to):
		return Summary{}, queryError("from", "%s is after to (%s)", from.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano))
	}
	stepUS := int64(step / time.Microsecond)
	lo := floorDiv(from.UnixMicro(), stepUS) * stepUS
	hi := -floorDiv(-to.UnixMicro(), stepUS) * stepUS // ceil
	n := (hi - lo) / stepUS
	if n > MaxPoints {
		return Summary{}, queryError("step", "%s over %s gives %d points, more than %d: widen the step or narrow the range", step, to.Sub(from), n, MaxPoints)
	}
	sum := Summary{From: from, To: to, Step: step, Resolution: res, Points: make([]Point, n)}
	for i := range sum.Points {
		sum.Points[i].T = time.UnixMicro(lo + int64(i)*stepUS)
	}
	for _, b := range s.Buckets {
		start := b.Start.UnixMicro()
		if start < lo || start >= hi {
			continue
		}
		p := &sum.Points[(start-lo)/stepUS]
		p.Requests = SatAdd(p.Requests, b.Requests)
		p.Denied = SatAdd(p.Denied, b.Denied)
	}
	for i := range sum.Points {
		p := &sum.Points[i]
		sum.Requests.add(p.Requests, p.T)
		sum.Denied.add(p.Denied, p.T)
	}
	if n > 0 {
		sum.Requests.Mean = float64(sum.Requests.Sum) / float64(n)
		sum.Denied.Mean = float64(sum.Denied.Sum) / float64(n)
	}
	return sum, nil
}

func (st *Stats) add(v int64, t time.Time) {
	st.Sum = SatAdd(st.Sum, v)
	if v > st.Peak {
		st.Peak, st.PeakAt = v, t
	}
}

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
