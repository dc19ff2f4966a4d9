package floodgate

import (
	"container/heap"
	"fmt"
	"slices"
)

// UsageTop keeps the first n usages in an order, for implementations of
// UsageLister: Add every candidate, then take Sorted. It is not safe for
// concurrent use.
type UsageTop struct {
	by    UsageOrder
	n     int
	items []KeyUsage // a heap with the last in order on top
}

// CheckUsageQuery returns an error naming the argument when by is not a
// UsageOrder or limit is below 1: the checks every UsageLister's TopKeys
// makes before it looks at any key.
func CheckUsageQuery(by UsageOrder, limit int) error {
	if by < ByRequests || by > ByLastSeen {
		return fmt.Errorf("TopKeys: sort order %d: must be ByRequests, ByDenied or ByLastSeen", by)
	}
	if limit < 1 {
		return fmt.Errorf("TopKeys: limit %d: must be ≥ 1", limit)
	}
	return nil
}

// NewUsageTop returns a UsageTop keeping n ≥ 1 usages in order by.
func NewUsageTop(by UsageOrder, n int) *UsageTop {
	return &UsageTop{by: by, n: n}
}

// Add offers u; it is kept if it is among the first n so far.
func (t *UsageTop) Add(u KeyUsage) {
	if len(t.items) < t.n {
		heap.Push((*usageHeap)(t), u)
	} else if t.n > 0 && t.by.Less(&u, &t.items[0]) {
		t.items[0] = u
		heap.Fix((*usageHeap)(t), 0)
	}
}

// Sorted returns the usages kept, first in order first.
func (t *UsageTop) Sorted() []KeyUsage {
	out := slices.Clone(t.items)
	slices.SortFunc(out, func(a, b KeyUsage) int {
		switch {
		case t.by.Less(&a, &b):
			return -1
		case t.by.Less(&b, &a):
			return 1
		}
		return 0
	})
	return out
}

type usageHeap UsageTop

func (h *usageHeap) Len() int           { return len(h.items) }
func (h *usageHeap) Less(i, j int) bool { return h.by.Less(&h.items[j], &h.items[i]) }
func (h *usageHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *usageHeap) Push(x any)         { h.items = append(h.items, x.(KeyUsage)) }
func (h *usageHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}
