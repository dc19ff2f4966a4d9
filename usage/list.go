package usage

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"strconv"
	"time"
)

// MaxLimit is the most keys one page of a listing holds.
const MaxLimit = 10_000

// Query asks a Lister for one page of a tracked policy's keys (SPEC.md,
// "Listing keys").
type Query struct {
	// Policy is the tracked policy's name.
	Policy string

	// Resolution and Retention are the policy's series
	// (floodgate.Policy.SeriesResolution and SeriesRetention); zero when it
	// keeps none.
	Resolution, Retention time.Duration

	// By is the order; zero means ByRequests. Ascending reverses it
	// (smallest or oldest first); ties are broken by key, ascending, in
	// both orders.
	By        Order
	Ascending bool

	// Window, when not zero, adds each key's WindowRequests and
	// WindowDenied: its buckets that start at or before the listing's now
	// and less than Window before it. 0 < Window ≤ Retention, for a
	// policy with a series. ByUsage needs a series; its window defaults to
	// the retention.
	Window time.Duration

	// Limit is the most keys of the page, 1 to MaxLimit.
	Limit int

	// Cursor is empty for a listing's first page, else the Next of the
	// page before.
	Cursor string
}

// Check fills q's defaults (By, ByUsage's Window) and returns a
// *QueryError naming the parameter that q cannot have: what every
// Lister's ListKeys checks before it looks at any key. It does not read
// the cursor (ParseCursor does).
func (q *Query) Check() error {
	if q.By == 0 {
		q.By = ByRequests
	}
	series := q.Resolution > 0 && q.Retention >= q.Resolution
	switch {
	case q.By < ByRequests || q.By > ByUsage:
		return queryError("sort", "%v: want requests, denied, last_seen, first_seen or usage", q.By)
	case q.Limit < 1 || q.Limit > MaxLimit:
		return queryError("limit", "%d: want 1 to %d", q.Limit, MaxLimit)
	case q.By == ByUsage && !series:
		return queryError("sort", "usage needs a policy with a usage series (track <resolution> for <retention>); %q keeps none", clip(q.Policy))
	case q.Window != 0 && !series:
		return queryError("window", "policy %q keeps no usage series (track <resolution> for <retention>)", clip(q.Policy))
	case q.Window < 0:
		return queryError("window", "%s: want a duration above 0", q.Window)
	case q.Window > q.Retention:
		return queryError("window", "%s is longer than the series' retention (%s)", q.Window, q.Retention)
	case q.Window%time.Microsecond != 0:
		return queryError("window", "%s: want a whole number of microseconds", q.Window)
	}
	if q.By == ByUsage && q.Window == 0 {
		q.Window = q.Retention
	}
	return nil
}

// Less reports whether a comes before b in q's order.
func (q *Query) Less(a, b *Record) bool {
	va, vb := q.By.Value(a), q.By.Value(b)
	if va != vb {
		return (va < vb) == q.Ascending
	}
	return a.Key < b.Key
}

// Sort sorts records in q's order.
func (q *Query) Sort(records []Record) {
	slices.SortFunc(records, func(a, b Record) int {
		switch {
		case q.Less(&a, &b):
			return -1
		case q.Less(&b, &a):
			return 1
		}
		return 0
	})
}

// Score returns r's place in q's order as a number that sorts the same
// way, ties aside (which are broken by key): the value of q.By, negated
// for a descending order. Every value is below 2^53, so the score is exact
// as a float64, as a Redis sorted set keeps it.
func (q *Query) Score(r *Record) int64 {
	v := q.By.Value(r)
	if !q.Ascending {
		return -v
	}
	return v
}

// Page is one page of a listing (Lister.ListKeys).
type Page struct {
	// Records are the page's keys, in the query's order.
	Records []Record
	// Next is the cursor of the next page; empty when the listing ends.
	Next string
	// Now is the listing's time: its first page's, at the store's clock.
	// Windows and expiry are reckoned at it on every page.
	Now time.Time
}

// cursorVersion starts every cursor; a cursor of another version is
// refused.
const cursorVersion = 1

// fingerprint identifies a listing's query: what a cursor may not change.
func (q *Query) fingerprint() []byte {
	h := sha256.New()
	h.Write([]byte(q.Policy))
	h.Write([]byte{0, byte(q.By)})
	if q.Ascending {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	h.Write(strconv.AppendInt(nil, int64(q.Window/time.Microsecond), 10))
	return h.Sum(nil)[:8]
}

// NewCursor returns the cursor of the next page of q's listing, whose time
// is now and whose store-specific position is state.
func (q *Query) NewCursor(now time.Time, state []byte) string {
	b := make([]byte, 0, 1+8+binary.MaxVarintLen64+len(state))
	b = append(b, cursorVersion)
	b = append(b, q.fingerprint()...)
	b = binary.AppendVarint(b, now.UnixMicro())
	b = append(b, state...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseCursor reads q.Cursor, made by NewCursor for the same query: it
// returns the listing's time and the store's position. The error is a
// *QueryError naming cursor when the cursor is malformed or belongs to
// another query (another policy, order or window).
func (q *Query) ParseCursor() (now time.Time, state []byte, err error) {
	b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil || len(b) < 10 || b[0] != cursorVersion {
		return time.Time{}, nil, queryError("cursor", "malformed: pass the next_cursor of the page before, unchanged")
	}
	if !bytes.Equal(b[1:9], q.fingerprint()) {
		return time.Time{}, nil, queryError("cursor", "from another query: a cursor continues the listing of the policy, sort, order and window that returned it")
	}
	us, n := binary.Varint(b[9:])
	if n <= 0 {
		return time.Time{}, nil, queryError("cursor", "malformed: pass the next_cursor of the page before, unchanged")
	}
	return time.UnixMicro(us), b[9+n:], nil
}

// ExpiredCursor returns the *QueryError of a cursor whose listing the store no
// longer holds (it expired, or the store restarted or changed shape).
func ExpiredCursor(why string) error {
	return queryError("cursor", "expired (%s): start the listing again without a cursor", why)
}
