package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
)

// UsageVectors returns the project's vectors that query usage (ops series
// and list, SPEC.md "Per-key usage series"): every step of them is one a
// floodgate.Store and a usage.Lister can replay.
func UsageVectors() ([]ProjectVector, error) {
	all, err := ProjectVectors()
	if err != nil {
		return nil, err
	}
	var out []ProjectVector
	for _, v := range all {
		if slices.ContainsFunc(v.Steps, func(s ProjectStep) bool { return s.Op == "series" || s.Op == "list" }) {
			out = append(out, v)
		}
	}
	return out, nil
}

// ReplayUsageVectors replays vectors of UsageVectors on store, which must
// be a usage.Lister, moving clock to each step's time, and reports every
// mismatch with t.Errorf. Each vector runs under its own policy name
// (prefix, "u", its index, its name). It returns the steps replayed and the
// mismatches.
func ReplayUsageVectors(t testing.TB, store floodgate.Store, clock *ManualClock, prefix string, vs []ProjectVector) (steps, mismatches int) {
	t.Helper()
	lister, ok := store.(usage.Lister)
	if !ok {
		t.Fatalf("%T is not a usage.Lister", store)
	}
	ctx := context.Background()
	for i := range vs {
		v := &vs[i]
		if v.Group || len(v.Members) != 1 {
			t.Fatalf("%s %s: usage vectors have one policy", v.File, v.Name)
		}
		p := v.Members[0].Policy
		p.Name = (&Vector{Name: v.Name}).PolicyName(prefix+"u", i)
		for j, s := range v.Steps {
			clock.SetMicros(s.At)
			steps++
			fail := func(format string, args ...any) {
				mismatches++
				t.Errorf("%s %s step %d (%s at %d): %s", v.File, v.Name, j, s.Op, s.At-BaseMicros, fmt.Sprintf(format, args...))
			}
			switch s.Op {
			case "reset":
				if err := store.Reset(ctx, &p, s.Keys[0]); err != nil {
					fail("reset: %v", err)
				}
			case "add", "peek":
				d, err := store.Take(ctx, floodgate.Request{Policy: &p, Key: s.Keys[0], N: s.N, Peek: s.Op == "peek"})
				if err != nil {
					fail("%v", err)
				} else if s.Expect != nil {
					if msg := s.Expect.Mismatch(d); msg != "" {
						fail("%s", msg)
					}
				}
			case "series":
				sum, err := seriesOf(ctx, lister, &p, s.Keys[0], s.From, s.To, s.Step)
				if msg := checkQuery(s.Expect, err); msg != "" {
					fail("%s", msg)
				} else if err == nil {
					if msg := seriesMismatch(s.Expect.Series, &sum); msg != "" {
						fail("%s", msg)
					}
				}
			case "list":
				q := usage.Query{Policy: p.Name, Resolution: p.SeriesResolution, Retention: p.SeriesRetention, Window: s.Window, Limit: s.Limit}
				if q.Limit == 0 {
					q.Limit = 2
				}
				var err error
				if s.Sort != "" {
					q.By, err = usage.ParseOrder(s.Sort)
					if err != nil {
						err = &usage.QueryError{Field: "sort", Msg: err.Error()}
					}
				}
				q.Ascending = s.Order == "asc"
				var got []usage.Record
				if err == nil {
					got, _, err = ListAll(ctx, lister, q)
				}
				if msg := checkQuery(s.Expect, err); msg != "" {
					fail("%s", msg)
				} else if err == nil {
					if msg := keysMismatch(*s.Expect.Keys, got); msg != "" {
						fail("%s", msg)
					}
				}
			default:
				fail("not a usage vector's op")
			}
		}
	}
	return steps, mismatches
}

// seriesOf asks lister for the series of key under p and summarizes it
// from..to (nil: the defaults, SPEC.md) at step.
func seriesOf(ctx context.Context, lister usage.Lister, p *floodgate.Policy, key string, from, to *int64, step time.Duration) (usage.Summary, error) {
	s, err := lister.Series(ctx, usage.SeriesQuery{Policy: p.Name, Key: key, Resolution: p.SeriesResolution, Retention: p.SeriesRetention})
	if err != nil {
		return usage.Summary{}, err
	}
	t := s.Now
	if to != nil {
		t = time.UnixMicro(*to)
	}
	f := t.Add(-p.SeriesRetention)
	if from != nil {
		f = time.UnixMicro(*from)
	}
	return s.Summarize(f, t, step)
}

// ListAll pages through a listing until its end and returns every key in
// order, and the number of pages.
func ListAll(ctx context.Context, lister usage.Lister, q usage.Query) ([]usage.Record, int, error) {
	var all []usage.Record
	for pages := 1; ; pages++ {
		page, err := lister.ListKeys(ctx, q)
		if err != nil {
			return nil, pages, err
		}
		if len(page.Records) > q.Limit {
			return nil, pages, fmt.Errorf("a page of %d keys, above the limit of %d", len(page.Records), q.Limit)
		}
		all = append(all, page.Records...)
		if page.Next == "" {
			return all, pages, nil
		}
		if pages > 1_000_000 {
			return nil, pages, errors.New("a listing of over a million pages")
		}
		q.Cursor = page.Next
	}
}

// checkQuery compares a query's error with the expectation: "" when they
// agree (no error and none expected, or an error naming the parameter
// expected).
func checkQuery(e *ProjectExpect, err error) string {
	var qe *usage.QueryError
	switch {
	case e.Error == "" && err != nil:
		return fmt.Sprintf("error %v, want none", err)
	case e.Error == "":
		return ""
	case err == nil:
		return fmt.Sprintf("no error, want one naming %s", e.Error)
	case !errors.As(err, &qe) || !errors.Is(err, usage.ErrInvalidQuery):
		return fmt.Sprintf("error %v is not a *usage.QueryError", err)
	case qe.Field != e.Error:
		return fmt.Sprintf("error %v names %s, want %s", err, qe.Field, e.Error)
	}
	return ""
}

func seriesMismatch(e *SeriesExpect, s *usage.Summary) string {
	var got [][3]int64
	for _, p := range s.Points {
		got = append(got, [3]int64{p.T.UnixMicro() - BaseMicros, p.Requests, p.Denied})
	}
	var diffs []string
	if !slices.Equal(got, e.Points) {
		diffs = append(diffs, fmt.Sprintf("points %v want %v", got, e.Points))
	}
	stats := func(name string, want StatsExpect, st usage.Stats) {
		at := "none"
		if !st.PeakAt.IsZero() {
			at = fmt.Sprint(st.PeakAt.UnixMicro() - BaseMicros)
		}
		wantAt := "none"
		if want.PeakAtUS != nil {
			wantAt = fmt.Sprint(*want.PeakAtUS)
		}
		if st.Sum != want.Sum || st.Mean != want.Mean || st.Peak != want.Peak || at != wantAt {
			diffs = append(diffs, fmt.Sprintf("%s sum %d mean %v peak %d at %s; want sum %d mean %v peak %d at %s",
				name, st.Sum, st.Mean, st.Peak, at, want.Sum, want.Mean, want.Peak, wantAt))
		}
	}
	stats("requests", e.Requests, s.Requests)
	stats("denied", e.Denied, s.Denied)
	return strings.Join(diffs, "; ")
}

func keysMismatch(want []KeyExpect, got []usage.Record) string {
	format := func(k KeyExpect) string {
		s := fmt.Sprintf("%s:%d/%d@%d-%d", k.Key, k.Requests, k.Denied, k.FirstSeenUS, k.LastSeenUS)
		if k.WindowRequests != nil {
			s += fmt.Sprintf(" w%d/%d", *k.WindowRequests, *k.WindowDenied)
		}
		return s
	}
	var g, w []string
	for i, r := range got {
		k := KeyExpect{Key: r.Key, Requests: r.Requests, Denied: r.Denied,
			FirstSeenUS: r.FirstSeen.UnixMicro() - BaseMicros, LastSeenUS: r.LastSeen.UnixMicro() - BaseMicros}
		if i < len(want) && want[i].WindowRequests != nil {
			k.WindowRequests, k.WindowDenied = &r.WindowRequests, &r.WindowDenied
		}
		g = append(g, format(k))
	}
	for _, k := range want {
		if k.WindowDenied == nil && k.WindowRequests != nil {
			k.WindowDenied = new(int64)
		}
		w = append(w, format(k))
	}
	if !slices.Equal(g, w) {
		return fmt.Sprintf("keys %v\nwant %v", g, w)
	}
	return ""
}

// testUsageVectors replays UsageVectors.
func (h *Harness) testUsageVectors(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	if _, ok := store.(usage.Lister); !ok {
		t.Skip("store is not a usage.Lister")
	}
	vs, err := UsageVectors()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("no usage vectors")
	}
	steps, mismatches := ReplayUsageVectors(t, store, clock, h.Prefix, vs)
	t.Logf("conformance: usage vectors (%s): %d vectors, %d steps replayed, %d mismatches", t.Name(), len(vs), steps, mismatches)
}

// seriesModel is what SPEC.md's "Per-key usage series" says a key's series
// holds, for the property tests: every add recorded at max(now, last) in
// its bucket, requests and denied, and the totals.
type seriesModel struct {
	first, last      int64
	requests, denied int64
	buckets          map[int64][2]int64 // bucket start (µs) -> requests, denied
}

func (m *seriesModel) add(at, n, res int64, denied bool) {
	if m.buckets == nil {
		m.buckets = map[int64][2]int64{}
		m.first = at
	}
	m.last = max(m.last, at)
	start := m.last / res * res
	b := m.buckets[start]
	b[0] += n
	m.requests += n
	if denied {
		b[1] += n
		m.denied += n
	}
	m.buckets[start] = b
}

// series returns the model's buckets that count at now.
func (m *seriesModel) series(now, keep int64) []usage.Bucket {
	var out []usage.Bucket
	for start, b := range m.buckets {
		if usage.Counts(start, now, keep) {
			out = append(out, usage.Bucket{Start: time.UnixMicro(start), Requests: b[0], Denied: b[1]})
		}
	}
	slices.SortFunc(out, func(a, b usage.Bucket) int { return a.Start.Compare(b.Start) })
	return out
}

// usagePolicies are the policies of the series property tests: several
// algorithms, count_denied on and off, series of several shapes. Their
// retention of an hour keeps every key's totals through a test (whose
// clock moves a few minutes), so that they run from the first add; the
// buckets expire by their own rule.
var usagePolicies = []string{
	"fixed_window 4/2s track 1s for 20s retention 1h",
	"fixed_window 3/5s count_denied track 2s for 10s retention 1h",
	"sliding_log 3/4s track 1s for 30s retention 1h",
	"sliding_log 3/4s count_denied false track 3s for 9s retention 1h",
	"gcra 2/1s burst 3 track 5s for 15s retention 1h",
	"token_bucket 5/3s burst 2 count_denied track 1s for 5s retention 1h",
	"sliding_window 3/2s resolution 1s, 5/10s resolution 2s track 4s for 1m retention 1h",
	"ar1 3/1s decay 2 count_denied track 1s for 12s retention 1h",
}

// testUsageSeries drives random adds and peeks (the clock sometimes going
// back) through every usage policy and checks, at random moments, each
// key's series against the model (same buckets, hence the same points,
// sums, means and peaks at any step), the expiry of buckets at the µs
// (SPEC.md rule 2), and the listing of every order against the model's
// totals and windows, through pages of a few keys.
func (h *Harness) testUsageSeries(t *testing.T) {
	rng := newRand(t)
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	lister, ok := store.(usage.Lister)
	if !ok {
		t.Skip("store is not a usage.Lister")
	}
	ctx := context.Background()
	keys := []string{"a", "{b}", "c:d", "ü", strings.Repeat("e", 100)}
	for pi, text := range usagePolicies {
		p, err := floodgate.ParsePolicy(h.name(fmt.Sprintf("series%d", pi)), text)
		if err != nil {
			t.Fatal(err)
		}
		res, keep := int64(p.SeriesResolution/time.Microsecond), int64(p.SeriesRetention/time.Microsecond)
		models := map[string]*seriesModel{}
		at := BaseMicros
		for j := 0; j < 250; j++ {
			switch rng.IntN(4) {
			case 0:
			case 1:
				at += rng.Int64N(1000)
			default:
				at += rng.Int64N(3_000_000)
			}
			now := at
			if j > 0 && rng.IntN(10) == 0 {
				now -= rng.Int64N(1_500_000) // the clock goes back, recorded at the key's last add
			}
			clock.SetMicros(now)
			key := keys[rng.IntN(len(keys))]
			n := 1 + rng.Int64N(3)
			peek := rng.IntN(6) == 0
			d := take(t, store, &p, key, n, peek)
			if !peek {
				if models[key] == nil {
					models[key] = &seriesModel{}
				}
				models[key].add(now, n, res, !d.Allowed)
			}
			if rng.IntN(25) != 0 {
				continue
			}
			// A check, at the newest time so far or a little later.
			check := at + rng.Int64N(2*res)
			clock.SetMicros(check)
			for _, k := range keys {
				s, err := lister.Series(ctx, usage.SeriesQuery{Policy: p.Name, Key: k, Resolution: p.SeriesResolution, Retention: p.SeriesRetention})
				if err != nil {
					t.Fatalf("%s: Series(%q): %v", text, k, err)
				}
				var want []usage.Bucket
				if m := models[k]; m != nil {
					want = m.series(check, keep)
				}
				if !slices.Equal(s.Buckets, want) {
					t.Fatalf("%s op %d: Series(%q) at %d = %v, want %v", text, j, k, check-BaseMicros, s.Buckets, want)
				}
				if s.Now.UnixMicro() != check {
					t.Fatalf("%s: Series's now %d, want %d", text, s.Now.UnixMicro(), check)
				}
				step := p.SeriesResolution * time.Duration(1+rng.IntN(3))
				from, to := time.UnixMicro(check-keep-res), time.UnixMicro(check+res)
				got, err := s.Summarize(from, to, step)
				if err != nil {
					t.Fatal(err)
				}
				ws := usage.Series{Now: s.Now, Resolution: s.Resolution, Retention: s.Retention, Buckets: want}
				exp, _ := ws.Summarize(from, to, step)
				if !summaryEqual(&got, &exp) {
					t.Fatalf("%s: summary of %q differs from the model's", text, k)
				}
			}
			h.checkListings(t, lister, &p, models, check, rng)
			clock.SetMicros(at)
		}
		// Every bucket stops counting at its start + retention, to the µs.
		last := int64(0)
		for _, m := range models {
			for start := range m.buckets {
				last = max(last, start)
			}
		}
		for _, now := range []int64{last + keep - 1, last + keep} {
			clock.SetMicros(now)
			for k, m := range models {
				s, err := lister.Series(ctx, usage.SeriesQuery{Policy: p.Name, Key: k, Resolution: p.SeriesResolution, Retention: p.SeriesRetention})
				if err != nil {
					t.Fatal(err)
				}
				if want := m.series(now, keep); !slices.Equal(s.Buckets, want) {
					t.Fatalf("%s: Series(%q) at the newest bucket's expiry %+d µs = %v, want %v", text, k, now-(last+keep), s.Buckets, want)
				}
			}
		}
	}
}

func summaryEqual(a, b *usage.Summary) bool {
	return slices.Equal(a.Points, b.Points) && a.Requests == b.Requests && a.Denied == b.Denied
}

// checkListings lists p's keys at now in every order, both ways, with and
// without a window, in pages of 1 to 3 keys, and compares them with the
// model.
func (h *Harness) checkListings(t *testing.T, lister usage.Lister, p *floodgate.Policy, models map[string]*seriesModel, now int64, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	res := int64(p.SeriesResolution / time.Microsecond)
	for by := usage.ByRequests; by <= usage.ByUsage; by++ {
		for _, asc := range []bool{false, true} {
			q := usage.Query{Policy: p.Name, Resolution: p.SeriesResolution, Retention: p.SeriesRetention,
				By: by, Ascending: asc, Limit: 1 + rng.IntN(3)}
			if rng.IntN(2) == 0 || by == usage.ByUsage {
				q.Window = time.Duration(res*(1+rng.Int64N(int64(p.SeriesRetention/p.SeriesResolution)))) * time.Microsecond
			}
			want := make([]usage.Record, 0, len(models))
			for k, m := range models {
				r := usage.Record{Key: k, FirstSeen: time.UnixMicro(m.first), LastSeen: time.UnixMicro(m.last), Requests: m.requests, Denied: m.denied}
				if q.Window > 0 {
					for _, b := range m.series(now, int64(p.SeriesRetention/time.Microsecond)) {
						if usage.InWindow(b.Start.UnixMicro(), now, int64(q.Window/time.Microsecond)) {
							r.WindowRequests += b.Requests
							r.WindowDenied += b.Denied
						}
					}
				}
				want = append(want, r)
			}
			qc := q
			if err := qc.Check(); err != nil {
				t.Fatal(err)
			}
			qc.Sort(want)
			got, pages, err := ListAll(ctx, lister, q)
			if err != nil {
				t.Fatalf("%s: listing by %v asc=%v window %s: %v", p.String(), by, asc, q.Window, err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: listing by %v asc=%v window %s in pages of %d (%d pages):\n got %v\nwant %v", p.String(), by, asc, q.Window, q.Limit, pages, got, want)
			}
		}
	}
}

// testUsagePaging lists 2,000 tracked keys in pages of 150 through
// cursors: each key exactly once, in order; a cursor of another query is
// refused, naming the cursor.
func (h *Harness) testUsagePaging(t *testing.T) {
	clock := NewManualClock(time.UnixMicro(BaseMicros))
	store := h.open(t, clock)
	lister, ok := store.(usage.Lister)
	if !ok {
		t.Skip("store is not a usage.Lister")
	}
	ctx := context.Background()
	p, err := floodgate.ParsePolicy(h.name("paging"), "fixed_window 1000/1h track")
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	reqs := make([]floodgate.Request, n)
	for i := range reqs {
		reqs[i] = floodgate.Request{Policy: &p, Key: fmt.Sprintf("key%04d", i), N: int64(1 + i%97)}
	}
	takeAll(t, store, reqs)
	q := usage.Query{Policy: p.Name, By: usage.ByRequests, Limit: 150}
	got, pages, err := ListAll(ctx, lister, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("listed %d keys in %d pages, want %d", len(got), pages, n)
	}
	seen := map[string]bool{}
	for i, r := range got {
		if seen[r.Key] {
			t.Fatalf("key %s listed twice", r.Key)
		}
		seen[r.Key] = true
		if i > 0 && !q.Less(&got[i-1], &r) {
			t.Fatalf("keys %d and %d out of order: %+v, %+v", i-1, i, got[i-1], r)
		}
	}
	t.Logf("%d keys in %d pages of at most %d", n, pages, q.Limit)
	// A cursor belongs to its query.
	first, err := lister.ListKeys(ctx, usage.Query{Policy: p.Name, By: usage.ByRequests, Limit: 10})
	if err != nil || first.Next == "" {
		t.Fatalf("first page: %v, next %q", err, first.Next)
	}
	for _, other := range []usage.Query{
		{Policy: p.Name, By: usage.ByDenied, Limit: 10},
		{Policy: p.Name, By: usage.ByRequests, Ascending: true, Limit: 10},
		{Policy: h.name("paging-other"), By: usage.ByRequests, Limit: 10},
	} {
		other.Cursor = first.Next
		_, err := lister.ListKeys(ctx, other)
		var qe *usage.QueryError
		if !errors.As(err, &qe) || qe.Field != "cursor" {
			t.Errorf("a cursor of another query (%v asc=%v %s): %v, want a *usage.QueryError naming cursor", other.By, other.Ascending, other.Policy, err)
		}
	}
	bad := usage.Query{Policy: p.Name, By: usage.ByRequests, Limit: 10, Cursor: "not-a-cursor"}
	var qe *usage.QueryError
	if _, err := lister.ListKeys(ctx, bad); !errors.As(err, &qe) || qe.Field != "cursor" {
		t.Errorf("a malformed cursor: %v, want a *usage.QueryError naming cursor", err)
	}
}

// takeAll decides reqs, in batches of 500 when the store is a
// storekit.BatchStore.
func takeAll(t *testing.T, store floodgate.Store, reqs []floodgate.Request) {
	t.Helper()
	ctx := context.Background()
	if bs, ok := store.(storekit.BatchStore); ok {
		out := make([]storekit.Outcome, 500)
		for i := 0; i < len(reqs); i += len(out) {
			batch := reqs[i:min(i+len(out), len(reqs))]
			bs.TakeBatch(ctx, batch, out)
			for j := range batch {
				if out[j].Err != nil {
					t.Fatalf("TakeBatch: %v", out[j].Err)
				}
			}
		}
		return
	}
	for i := range reqs {
		if _, err := store.Take(ctx, reqs[i]); err != nil {
			t.Fatalf("Take: %v", err)
		}
	}
}
