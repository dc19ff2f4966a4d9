package memstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/usage"
)

// TopKeys lists up to limit keys of the named policy with tracked usage,
// in the order by (see usage.Lister). It walks every shard, one at
// a time, so it costs time in proportion to the keys held; decisions on
// other shards go on meanwhile.
func (s *Store) TopKeys(ctx context.Context, policy string, by usage.Order, limit int) ([]usage.Record, error) {
	if s.closed.Load() {
		return nil, floodgate.ErrClosed
	}
	if err := usage.CheckQuery(by, limit); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	top := usage.NewTop(by, limit)
	err := s.eachUsage(ctx, policy, func(e *entry, now int64) {
		top.Add(record(e))
	})
	if err != nil {
		return nil, err
	}
	return top.Sorted(), nil
}

// eachUsage calls fn, under its shard's lock, with every entry of the named
// policy that holds usage at the store's time, which it reads once per
// shard.
func (s *Store) eachUsage(ctx context.Context, policy string, fn func(e *entry, now int64)) error {
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return err
		}
		sh := &s.shards[i]
		now := s.now()
		sh.mu.Lock()
		for _, head := range sh.m {
			for e := head; e != nil; e = e.next {
				if e.policy.Policy.Name == policy && e.use != nil && e.keep(now) {
					fn(e, now)
				}
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

func record(e *entry) usage.Record {
	return usage.Record{
		Key:       e.key,
		FirstSeen: time.UnixMicro(e.use.first),
		LastSeen:  time.UnixMicro(e.use.last),
		Requests:  e.use.requests,
		Denied:    e.use.denied,
	}
}

// keySeries is the usage series of an entry (SPEC.md, "Per-key usage
// series"): its newest bucket, and the older ones packed, oldest first.
// Buckets are indexed k, the bucket of [k·res, (k+1)·res) µs.
type keySeries struct {
	res     int64 // µs, the resolution it was written at
	k, r, d int64 // the newest bucket: index, requests, denied; r is 0 before the first
	// log holds the older buckets, oldest first, each as three uvarints:
	// its index less the one before it (base for the first), requests,
	// denied. tail is the index of the last one (base when log is empty).
	log        []byte
	base, tail int64
}

// record adds an add of cost n, denied or not, at time t (µs), under a
// retention of keep µs.
func (s *keySeries) record(t, keep, n int64, denied bool) {
	var dn int64
	if denied {
		dn = n
	}
	k := t / s.res
	switch {
	case s.r == 0:
		s.k, s.r, s.d = k, n, dn
		s.base, s.tail = k, k
		return
	case k <= s.k: // k < s.k cannot happen: t never goes back
		s.r = usage.SatAdd(s.r, n)
		s.d = usage.SatAdd(s.d, dn)
		return
	}
	// A new bucket: the newest is packed, if it still counts, and
	// the buckets that no longer do are dropped.
	if usage.Counts(s.k*s.res, t, keep) {
		s.log = binary.AppendUvarint(s.log, uint64(s.k-s.tail))
		s.log = binary.AppendUvarint(s.log, uint64(s.r))
		s.log = binary.AppendUvarint(s.log, uint64(s.d))
		s.tail = s.k
	}
	s.k, s.r, s.d = k, n, dn
	s.trim(t, keep)
}

// trim drops the packed buckets that no longer count at t.
func (s *keySeries) trim(t, keep int64) {
	off, base := 0, s.base
	for off < len(s.log) {
		dk, n1 := binary.Uvarint(s.log[off:])
		_, n2 := binary.Uvarint(s.log[off+n1:])
		_, n3 := binary.Uvarint(s.log[off+n1+n2:])
		k := base + int64(dk)
		if usage.Counts(k*s.res, t, keep) {
			break
		}
		off, base = off+n1+n2+n3, k
	}
	if off == 0 {
		return
	}
	s.log, s.base = s.log[off:], base
	if len(s.log) == 0 {
		s.log, s.tail = nil, base
	} else if cap(s.log) > 2*len(s.log)+64 {
		s.log = slices.Clone(s.log)
	}
}

// buckets calls fn with every bucket that counts at now under a retention
// of keep µs, oldest first.
func (s *keySeries) buckets(now, keep int64, fn func(start, r, d int64)) {
	k := s.base
	for off := 0; off < len(s.log); {
		dk, n1 := binary.Uvarint(s.log[off:])
		r, n2 := binary.Uvarint(s.log[off+n1:])
		d, n3 := binary.Uvarint(s.log[off+n1+n2:])
		off += n1 + n2 + n3
		k += int64(dk)
		if usage.Counts(k*s.res, now, keep) {
			fn(k*s.res, int64(r), int64(d))
		}
	}
	if s.r > 0 && usage.Counts(s.k*s.res, now, keep) {
		fn(s.k*s.res, s.r, s.d)
	}
}

// Series returns the usage series of one key (see usage.Lister): the
// buckets that count at the store's time under q's retention. A key whose
// series was written at another resolution than q's (its policy changed)
// has none until its next add starts it afresh.
func (s *Store) Series(ctx context.Context, q usage.SeriesQuery) (usage.Series, error) {
	if s.closed.Load() {
		return usage.Series{}, floodgate.ErrClosed
	}
	if err := q.Check(); err != nil {
		return usage.Series{}, fmt.Errorf("memstore: %w", err)
	}
	res, keep := int64(q.Resolution/time.Microsecond), int64(q.Retention/time.Microsecond)
	h := s.hash(q.Key)
	sh := s.shardOf(h)
	now := s.now()
	out := usage.Series{Now: time.UnixMicro(now), Resolution: q.Resolution, Retention: q.Retention}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, q.Policy, q.Key)
	if e == nil || e.use == nil || e.use.series == nil || e.use.series.res != res || !e.keep(now) {
		return out, nil
	}
	e.use.series.buckets(now, keep, func(start, r, d int64) {
		out.Buckets = append(out.Buckets, usage.Bucket{Start: time.UnixMicro(start), Requests: r, Denied: d})
	})
	return out, nil
}

// windowSums sets r's window sums from e's series, at now.
func windowSums(r *usage.Record, e *entry, q *usage.Query, now int64) {
	sr := e.use.series
	if q.Window == 0 || sr == nil || sr.res != int64(q.Resolution/time.Microsecond) {
		return
	}
	w := int64(q.Window / time.Microsecond)
	sr.buckets(now, int64(q.Retention/time.Microsecond), func(start, req, den int64) {
		if usage.InWindow(start, now, w) {
			r.WindowRequests = usage.SatAdd(r.WindowRequests, req)
			r.WindowDenied = usage.SatAdd(r.WindowDenied, den)
		}
	})
}

// Listings: a listing's first page sorts every key of the policy that
// holds usage, at the store's time; when more than one page remains, the
// sorted records are kept (a snapshot) for the pages that follow, so that
// every key is on exactly one page whatever decisions change meanwhile.
const (
	maxListings = 16               // snapshots kept at once; the oldest goes first
	listingTTL  = 10 * time.Minute // a snapshot unused this long is dropped
)

type listings struct {
	mu sync.Mutex
	m  map[uint64]*listing
}

type listing struct {
	records []usage.Record
	used    time.Time // the last page's, by the process's clock
}

// ListKeys returns one page of the tracked keys of q.Policy (see
// usage.Lister). The first page walks every shard, as TopKeys does, and
// sorts what it found; later pages read the sorted snapshot it kept, for
// up to ten minutes after the last page (16 listings at most: a cursor of
// one dropped for a newer is refused as expired).
func (s *Store) ListKeys(ctx context.Context, q usage.Query) (usage.Page, error) {
	if s.closed.Load() {
		return usage.Page{}, floodgate.ErrClosed
	}
	if err := q.Check(); err != nil {
		return usage.Page{}, fmt.Errorf("memstore: %w", err)
	}
	if q.Cursor != "" {
		return s.nextPage(&q)
	}
	now := s.now()
	var all []usage.Record
	err := s.eachUsage(ctx, q.Policy, func(e *entry, _ int64) {
		r := record(e)
		windowSums(&r, e, &q, now)
		all = append(all, r)
	})
	if err != nil {
		return usage.Page{}, err
	}
	q.Sort(all)
	page := usage.Page{Now: time.UnixMicro(now)}
	if len(all) <= q.Limit {
		page.Records = all
		return page, nil
	}
	var idb [8]byte
	rand.Read(idb[:])
	id := binary.LittleEndian.Uint64(idb[:])
	s.lists.mu.Lock()
	if s.lists.m == nil {
		s.lists.m = make(map[uint64]*listing)
	}
	s.lists.dropStale()
	s.lists.m[id] = &listing{records: all, used: time.Now()}
	s.lists.mu.Unlock()
	page.Records = slices.Clone(all[:q.Limit])
	page.Next = q.NewCursor(page.Now, cursorState(id, q.Limit))
	return page, nil
}

// nextPage serves a page after the first from its listing's snapshot.
func (s *Store) nextPage(q *usage.Query) (usage.Page, error) {
	now, state, err := q.ParseCursor()
	if err != nil {
		return usage.Page{}, fmt.Errorf("memstore: %w", err)
	}
	id, off, ok := parseCursorState(state)
	if !ok {
		return usage.Page{}, fmt.Errorf("memstore: %w", &usage.QueryError{Field: "cursor", Msg: "malformed: pass the next_cursor of the page before, unchanged"})
	}
	s.lists.mu.Lock()
	defer s.lists.mu.Unlock()
	l := s.lists.m[id]
	if l == nil || time.Since(l.used) > listingTTL || off > len(l.records) {
		return usage.Page{}, fmt.Errorf("memstore: %w", usage.ExpiredCursor("the store no longer holds this listing"))
	}
	l.used = time.Now()
	end := min(off+q.Limit, len(l.records))
	page := usage.Page{Records: slices.Clone(l.records[off:end]), Now: now}
	if end < len(l.records) {
		page.Next = q.NewCursor(now, cursorState(id, end))
	}
	return page, nil
}

// dropStale forgets snapshots unused for listingTTL, then the least
// recently used while there are maxListings or more. mu must be held.
func (l *listings) dropStale() {
	for id, x := range l.m {
		if time.Since(x.used) > listingTTL {
			delete(l.m, id)
		}
	}
	for len(l.m) >= maxListings {
		var oldest uint64
		var at time.Time
		first := true
		for id, x := range l.m {
			if first || x.used.Before(at) {
				oldest, at, first = id, x.used, false
			}
		}
		delete(l.m, oldest)
	}
}

func cursorState(id uint64, off int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, id)
	return binary.AppendUvarint(b, uint64(off))
}

func parseCursorState(b []byte) (id uint64, off int, ok bool) {
	if len(b) < 9 {
		return 0, 0, false
	}
	o, n := binary.Uvarint(b[8:])
	if n <= 0 || 8+n != len(b) || o > 1<<31 {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b), int(o), true
}
