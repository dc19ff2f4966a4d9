package usage_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/usage"
)

// TestTop: the top n of random usages equal the first n of all of
// them sorted, for every order.
func TestCheckQuery(t *testing.T) {
	for _, c := range []struct {
		by    usage.Order
		limit int
		want  string // "" for no error
	}{
		{usage.ByRequests, 1, ""},
		{usage.ByLastSeen, 100, ""},
		{0, 10, "TopKeys: sort order 0: must be ByRequests, ByDenied or ByLastSeen"},
		{usage.ByLastSeen + 1, 10, "TopKeys: sort order 4: must be ByRequests, ByDenied or ByLastSeen"},
		{usage.ByDenied, 0, "TopKeys: limit 0: must be ≥ 1"},
		{usage.ByDenied, -3, "TopKeys: limit -3: must be ≥ 1"},
	} {
		err := usage.CheckQuery(c.by, c.limit)
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("CheckQuery(%d, %d) = %v, want %q", c.by, c.limit, err, c.want)
		}
	}
}

func TestTop(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all []usage.Record
	for i := 0; i < 500; i++ {
		all = append(all, usage.Record{
			Key:      fmt.Sprintf("k%03d", rng.IntN(300)),
			LastSeen: time.UnixMicro(rng.Int64N(50)),
			Requests: rng.Int64N(20),
			Denied:   rng.Int64N(5),
		})
	}
	for _, by := range []usage.Order{usage.ByRequests, usage.ByDenied, usage.ByLastSeen} {
		want := slices.Clone(all)
		slices.SortStableFunc(want, func(a, b usage.Record) int {
			switch {
			case by.Less(&a, &b):
				return -1
			case by.Less(&b, &a):
				return 1
			}
			return 0
		})
		for _, n := range []int{1, 7, 500, 600} {
			top := usage.NewTop(by, n)
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
