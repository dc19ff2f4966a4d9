// Package usage is floodgate's per-key usage tracking, as stores keep it
// for policies with Track set (SPEC.md, "Per-key usage metadata" and
// "Per-key usage series"): what a key asked for and was denied, when it
// was first and last seen, and, with a series, both per bucket of time.
// Stores that keep it implement Lister; Top, Query and Series help them
// rank keys, page through them and answer series queries alike.
//
// Every exported function and method of this package is safe for
// concurrent use, except Top's, as its documentation says.
package usage

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"time"
)

// Lister is implemented by stores that keep per-key usage for policies
// with Track set. Test for it with a type assertion.
type Lister interface {
	// TopKeys returns up to limit keys of the named policy with tracked
	// usage, sorted by the given order (largest or most recent first, then
	// by key), one of ByRequests, ByDenied and ByLastSeen. Keys whose usage
	// has expired are not listed.
	TopKeys(ctx context.Context, policy string, by Order, limit int) ([]Record, error)

	// ListKeys returns one page of the tracked keys of q.Policy, in q's
	// order (SPEC.md, "Listing keys"): the first page when q.Cursor is
	// empty, else the page after the one that returned the cursor. Every
	// key holding usage throughout a listing is on exactly one of its
	// pages. A page may hold fewer than q.Limit keys, even none, before
	// the listing ends: only a Page with an empty Next ends it. A query
	// the store refuses gives a *QueryError.
	ListKeys(ctx context.Context, q Query) (Page, error)

	// Series returns the usage series of q.Key under q.Policy: the
	// buckets that count at the store's clock, oldest first (no bucket
	// when the key holds none). A query the store refuses gives a
	// *QueryError.
	Series(ctx context.Context, q SeriesQuery) (Series, error)
}

// Order is the sort order of a listing.
type Order uint8

const (
	// ByRequests sorts by the total cost asked, largest first.
	ByRequests Order = iota + 1
	// ByDenied sorts by the total cost denied, largest first.
	ByDenied
	// ByLastSeen sorts by the time of the last add, most recent first.
	ByLastSeen
	// ByFirstSeen sorts by the time of the first add, most recent first.
	ByFirstSeen
	// ByUsage sorts by the cost asked inside the listing's window
	// (Record.WindowRequests), largest first.
	ByUsage
)

var orderNames = [...]string{ByRequests: "requests", ByDenied: "denied", ByLastSeen: "last_seen", ByFirstSeen: "first_seen", ByUsage: "usage"}

// String returns "requests", "denied", "last_seen", "first_seen" or
// "usage".
func (o Order) String() string {
	if o >= ByRequests && o <= ByUsage {
		return orderNames[o]
	}
	return fmt.Sprintf("Order(%d)", uint8(o))
}

// ParseOrder parses "requests", "denied", "last_seen", "first_seen" or
// "usage".
func ParseOrder(s string) (Order, error) {
	for o := ByRequests; o <= ByUsage; o++ {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("usage: sort order %q: must be requests, denied, last_seen, first_seen or usage", clip(s))
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Record is the tracked usage of one key under one policy. Only adds
// count; peeks do not.
type Record struct {
	Key       string
	FirstSeen time.Time // the first add, by the store's clock
	LastSeen  time.Time // the last add
	Requests  int64     // sum of the costs asked
	Denied    int64     // sum of the costs denied

	// WindowRequests and WindowDenied are the same sums over the buckets
	// of the listing's window (Query.Window), for a policy with a series;
	// 0 without a window.
	WindowRequests int64
	WindowDenied   int64
}

// Less reports whether a sorts before b in order o: larger (or more
// recent) first, then by key. Stores use it so that every store lists keys
// in the same order.
func (o Order) Less(a, b *Record) bool {
	switch o {
	case ByRequests:
		if a.Requests != b.Requests {
			return a.Requests > b.Requests
		}
	case ByDenied:
		if a.Denied != b.Denied {
			return a.Denied > b.Denied
		}
	case ByLastSeen:
		if !a.LastSeen.Equal(b.LastSeen) {
			return a.LastSeen.After(b.LastSeen)
		}
	case ByFirstSeen:
		if !a.FirstSeen.Equal(b.FirstSeen) {
			return a.FirstSeen.After(b.FirstSeen)
		}
	case ByUsage:
		if a.WindowRequests != b.WindowRequests {
			return a.WindowRequests > b.WindowRequests
		}
	}
	return a.Key < b.Key
}

// Value returns r's value in order o: a count, or a time in µs since the
// Unix epoch.
func (o Order) Value(r *Record) int64 {
	switch o {
	case ByRequests:
		return r.Requests
	case ByDenied:
		return r.Denied
	case ByLastSeen:
		return r.LastSeen.UnixMicro()
	case ByFirstSeen:
		return r.FirstSeen.UnixMicro()
	case ByUsage:
		return r.WindowRequests
	}
	return 0
}

// CheckQuery returns an error naming the argument when by is not an Order
// or limit is below 1: the checks every Lister's TopKeys makes before it
// looks at any key.
func CheckQuery(by Order, limit int) error {
	if by < ByRequests || by > ByLastSeen {
		return fmt.Errorf("TopKeys: sort order %d: must be ByRequests, ByDenied or ByLastSeen", by)
	}
	if limit < 1 {
		return fmt.Errorf("TopKeys: limit %d: must be ≥ 1", limit)
	}
	return nil
}

// Top keeps the first n records in an order, for implementations of
// Lister: Add every candidate, then take Sorted. It is not safe for
// concurrent use.
type Top struct {
	by    Order
	n     int
	items []Record // a heap with the last in order on top
}

// NewTop returns a Top keeping n ≥ 1 records in order by.
func NewTop(by Order, n int) *Top {
	return &Top{by: by, n: n}
}

// Add offers r; it is kept if it is among the first n so far.
func (t *Top) Add(r Record) {
	if len(t.items) < t.n {
		heap.Push((*recordHeap)(t), r)
	} else if t.n > 0 && t.by.Less(&r, &t.items[0]) {
		t.items[0] = r
		heap.Fix((*recordHeap)(t), 0)
	}
}

// Sorted returns the records kept, first in order first.
func (t *Top) Sorted() []Record {
	out := slices.Clone(t.items)
	slices.SortFunc(out, func(a, b Record) int {
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

type recordHeap Top

func (h *recordHeap) Len() int           { return len(h.items) }
func (h *recordHeap) Less(i, j int) bool { return h.by.Less(&h.items[j], &h.items[i]) }
func (h *recordHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *recordHeap) Push(x any)         { h.items = append(h.items, x.(Record)) }
func (h *recordHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}
