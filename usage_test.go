package floodgate_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
)

// TestUsageTop: the top n of random usages equal the first n of all of
// them sorted, for every order.
func TestCheckUsageQuery(t *testing.T) {
	for _, c := range []struct {
		by    floodgate.UsageOrder
		limit int
		want  string // "" for no error
	}{
		{floodgate.ByRequests, 1, ""},
		{floodgate.ByLastSeen, 100, ""},
		{0, 10, "TopKeys: sort order 0: must be ByRequests, ByDenied or ByLastSeen"},
		{floodgate.ByLastSeen + 1, 10, "TopKeys: sort order 4: must be ByRequests, ByDenied or ByLastSeen"},
		{floodgate.ByDenied, 0, "TopKeys: limit 0: must be ≥ 1"},
		{floodgate.ByDenied, -3, "TopKeys: limit -3: must be ≥ 1"},
	} {
		err := floodgate.CheckUsageQuery(c.by, c.limit)
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("CheckUsageQuery(%d, %d) = %v, want %q", c.by, c.limit, err, c.want)
		}
	}
}

func TestUsageTop(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all []floodgate.KeyUsage
	for i := 0; i < 500; i++ {
		all = append(all, floodgate.KeyUsage{
			Key:      fmt.Sprintf("k%03d", rng.IntN(300)),
			LastSeen: time.UnixMicro(rng.Int64N(50)),
			Requests: rng.Int64N(20),
			Denied:   rng.Int64N(5),
		})
	}
	for _, by := range []floodgate.UsageOrder{floodgate.ByRequests, floodgate.ByDenied, floodgate.ByLastSeen} {
		want := slices.Clone(all)
		slices.SortStableFunc(want, func(a, b floodgate.KeyUsage) int {
			switch {
			case by.Less(&a, &b):
				return -1
			case by.Less(&b, &a):
				return 1
			}
			return 0
		})
		for _, n := range []int{1, 7, 500, 600} {
			top := floodgate.NewUsageTop(by, n)
			for _, u := range all {
				top.Add(u)
			}
			got := top.Sorted()
			w := want[:min(n, len(want))]
			for i := range w { // equal usages may tie; compare the sort keys
				if by.Less(&got[i], &w[i]) || by.Less(&w[i], &got[i]) {
					t.Fatalf("%v top %d: item %d is %+v, want %+v", by, n, i, got[i], w[i])
				}
			}
			if len(got) != len(w) {
				t.Fatalf("%v top %d: %d items, want %d", by, n, len(got), len(w))
			}
		}
	}
}
