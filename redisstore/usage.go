package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
)

// TopKeys lists up to limit keys of the named policy with tracked usage,
// in the order by (see usage.Lister). It scans every master for
// the policy's usage hashes (SCAN, so Redis keeps serving meanwhile), reads
// them in pipelined batches and keeps the best limit. Its cost grows with
// the number of keys in Redis; it is meant for an operator's query, not
// for every request. With WithHashedKeys the keys listed are the hashes.
func (s *Store) TopKeys(ctx context.Context, policy string, by usage.Order, limit int) ([]usage.Record, error) {
	if s.closed.Load() {
		return nil, floodgate.ErrClosed
	}
	if err := usage.CheckQuery(by, limit); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if err := checkName(policy); err != nil {
		return nil, err
	}
	now, err := s.now(ctx)
	if err != nil {
		return nil, err
	}
	head := s.prefix + ":" + policy + ":{"
	top := usage.NewTop(by, limit)
	err = s.b.scan(ctx, head+"*}:u", func(ctx context.Context, keys []string) error {
		rows, err := s.b.hmget(ctx, keys, "f", "l", "r", "d", "x")
		if err != nil {
			return err
		}
		for i, row := range rows {
			u, ok := parseUsage(keys[i], head, row, now)
			if !ok {
				continue
			}
			top.Add(u)
		}
		return nil
	})
	if err != nil {
		return nil, classify(ctx, err)
	}
	return top.Sorted(), nil
}

// parseUsage reads one usage hash; ok is false for a hash that vanished,
// has expired by the store's clock, or does not belong to the policy.
func parseUsage(redisKey, head string, row []any, now int64) (usage.Record, bool) {
	key, ok := strings.CutPrefix(redisKey, head)
	if !ok {
		return usage.Record{}, false
	}
	key, ok = strings.CutSuffix(key, "}:u")
	if !ok || key == "" || len(row) != 5 {
		return usage.Record{}, false
	}
	key = tagUnsafe(key)
	var v [5]int64
	for i, f := range row {
		s, ok := f.(string)
		if !ok {
			return usage.Record{}, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return usage.Record{}, false
		}
		v[i] = n
	}
	if v[4] <= now {
		return usage.Record{}, false
	}
	return usage.Record{
		Key:       key,
		FirstSeen: time.UnixMicro(v[0]),
		LastSeen:  time.UnixMicro(v[1]),
		Requests:  v[2],
		Denied:    v[3],
	}, true
}

// checkName returns an error when name cannot be a policy's.
func checkName(name string) error {
	probe := floodgate.Policy{Name: name, Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1}
	return probe.Validate()
}

// now returns the store's time in µs: the caller's clock (WithClock) or
// the server's.
func (s *Store) now(ctx context.Context) (int64, error) {
	if s.clock != nil {
		return s.clock.Now().UnixMicro(), nil
	}
	t, err := s.b.time(ctx)
	if err != nil {
		return 0, classify(ctx, err)
	}
	return t, nil
}

// usageKey returns the usage hash of key under the named policy, as a
// policy with hashTag writes it.
func (s *Store) usageKey(policy string, hashTag bool, key string) string {
	return s.keyHead(policy, hashTag, key) + "u"
}

// usageHash is a usage hash read whole (common.lua, track and
// track_series): the totals, and a series' head (field s) and chunks.
type usageHash struct {
	first, last, requests, denied, expires int64
	res                                    int64 // g: the series' resolution, 0 for none
	b, q, e                                int64 // the newest bucket
	chunks                                 map[int64]string
}

// parseUsageHash reads a hash; ok is false for a missing or malformed
// one.
func parseUsageHash(m map[string]string) (u usageHash, ok bool) {
	num := func(f string, dst *int64) bool {
		v, err := strconv.ParseInt(m[f], 10, 64)
		*dst = v
		return err == nil
	}
	if !num("f", &u.first) || !num("l", &u.last) || !num("r", &u.requests) || !num("d", &u.denied) || !num("x", &u.expires) {
		return usageHash{}, false
	}
	if h := m["s"]; len(h) == 24 || len(h) == 32 {
		var v [4]float64
		for i := 0; i < len(h)/8; i++ {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64([]byte(h[8*i:])))
		}
		u.b, u.q, u.res, u.e = int64(v[0]), int64(v[1]), int64(v[2]), int64(v[3])
		if u.res <= 0 || u.q < 0 || u.e < 0 {
			u.res = 0 // a series we cannot read: none
		}
	}
	for f, v := range m {
		if f == "" || f[0] < '0' || f[0] > '9' {
			continue
		}
		if c, err := strconv.ParseInt(f, 10, 64); err == nil {
			if u.chunks == nil {
				u.chunks = make(map[int64]string)
			}
			u.chunks[c] = v
		}
	}
	return u, true
}

// record returns the totals as a record of key.
func (u *usageHash) record(key string) usage.Record {
	return usage.Record{Key: key, FirstSeen: time.UnixMicro(u.first), LastSeen: time.UnixMicro(u.last), Requests: u.requests, Denied: u.denied}
}

// buckets calls fn with every bucket of the series that counts at now
// under a retention of keep µs, oldest first, when the series was written
// at resolution res (µs); a series of another resolution has none.
func (u *usageHash) buckets(now, res, keep int64, fn func(start, r, d int64)) {
	if u.res != res || res <= 0 {
		return
	}
	cs := make([]int64, 0, len(u.chunks))
	for c := range u.chunks {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	for _, c := range cs {
		rec := u.chunks[c]
		for i := 0; i < len(rec); {
			slot := int64(rec[i])
			r, n1 := binary.Uvarint([]byte(rec[i+1:]))
			if n1 <= 0 {
				break
			}
			d, n2 := binary.Uvarint([]byte(rec[i+1+n1:]))
			if n2 <= 0 {
				break
			}
			i += 1 + n1 + n2
			k := c*seriesChunk + slot
			if slot < seriesChunk && k < u.b && usage.Counts(k*res, now, keep) {
				fn(k*res, int64(r), int64(d))
			}
		}
	}
	if u.q > 0 && usage.Counts(u.b*res, now, keep) {
		fn(u.b*res, u.q, u.e)
	}
}

// seriesChunk is common.lua's CHUNK: the buckets of one chunk field.
const seriesChunk = 16

// Series returns the usage series of one key (see usage.Lister): one
// HGETALL of its usage hash, decoded here, keeping the buckets that count
// at the store's time under q's retention. A key whose series was written
// at another resolution than q's (its policy changed) has none until its
// next add starts it afresh.
func (s *Store) Series(ctx context.Context, q usage.SeriesQuery) (usage.Series, error) {
	if s.closed.Load() {
		return usage.Series{}, floodgate.ErrClosed
	}
	if err := q.Check(); err != nil {
		return usage.Series{}, fmt.Errorf("redisstore: %w", err)
	}
	if err := checkName(q.Policy); err != nil {
		return usage.Series{}, err
	}
	if err := storekit.CheckKey(q.Key, s.maxKeyLen); err != nil {
		return usage.Series{}, err
	}
	now, err := s.now(ctx)
	if err != nil {
		return usage.Series{}, err
	}
	maps, err := s.b.hgetall(ctx, []string{s.usageKey(q.Policy, false, q.Key)})
	if _, _, tagged := leadingTag(q.Key); err == nil && len(maps[0]) == 0 && tagged {
		// The query names no policy's options: a policy with hash_tag
		// wrote the key by its tag.
		maps, err = s.b.hgetall(ctx, []string{s.usageKey(q.Policy, true, q.Key)})
	}
	if err != nil {
		return usage.Series{}, classify(ctx, err)
	}
	out := usage.Series{Now: time.UnixMicro(now), Resolution: q.Resolution, Retention: q.Retention}
	u, ok := parseUsageHash(maps[0])
	if !ok || u.expires <= now {
		return out, nil
	}
	u.buckets(now, int64(q.Resolution/time.Microsecond), int64(q.Retention/time.Microsecond), func(start, r, d int64) {
		out.Buckets = append(out.Buckets, usage.Bucket{Start: time.UnixMicro(start), Requests: r, Denied: d})
	})
	return out, nil
}

// Paged listings (ListKeys). A listing scans the policy's usage hashes
// master by master, in address order, a bounded number of SCAN calls per
// page, and adds what it reads to a snapshot in Redis: a sorted set of the
// keys by their score in the query's order (usage.Query.Score; ties sort
// by member, the key, as the order wants) and a hash of their records,
// both under the hash tag of the listing's random id, expiring ten
// minutes after the last page. Once every master is scanned, pages read
// the snapshot by rank. So each page costs Redis at most listScanCalls
// SCANs of listScanCount and the reads of the keys they found, or one
// ZRANGE and one HMGET of a page; and every key that holds usage
// throughout the listing is in the snapshot once (a key SCAN returns twice
// is written twice, under one member).
const (
	listScanCount = 1000
	listScanCalls = 10
	listTTL       = 10 * time.Minute
)

// listState is a listing's position, as its cursor carries it.
type listState struct {
	id      [8]byte // the snapshot's
	reading bool    // every master scanned: pages read the snapshot
	nodes   [8]byte // a digest of the masters' addresses when scanning began
	node    uint64  // the master being scanned, an index in address order
	cursor  uint64  // its SCAN cursor
	offset  uint64  // reading: the rank of the page's first key
}

func (st *listState) encode() []byte {
	b := append([]byte(nil), st.id[:]...)
	if st.reading {
		b = append(b, 1)
		return binary.AppendUvarint(b, st.offset)
	}
	b = append(b, 0)
	b = append(b, st.nodes[:]...)
	b = binary.AppendUvarint(b, st.node)
	return binary.AppendUvarint(b, st.cursor)
}

func decodeListState(b []byte) (st listState, ok bool) {
	if len(b) < 9 {
		return st, false
	}
	copy(st.id[:], b)
	rest := b[9:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, false
		}
		rest = rest[n:]
		return v, true
	}
	switch b[8] {
	case 1:
		st.reading = true
		if st.offset, ok = uv(); !ok {
			return st, false
		}
	case 0:
		if len(rest) < 8 {
			return st, false
		}
		copy(st.nodes[:], rest)
		rest = rest[8:]
		if st.node, ok = uv(); !ok {
			return st, false
		}
		if st.cursor, ok = uv(); !ok {
			return st, false
		}
	default:
		return st, false
	}
	return st, len(rest) == 0
}

func nodesDigest(addrs []string) (d [8]byte) {
	sum := sha256.Sum256([]byte(strings.Join(addrs, ",")))
	copy(d[:], sum[:])
	return d
}

// snapshotKeys returns the sorted set and the hash of a listing's
// snapshot.
func (s *Store) snapshotKeys(id [8]byte) (zkey, hkey string) {
	tag := s.prefix + ":list:{" + hex.EncodeToString(id[:]) + "}:"
	return tag + "z", tag + "h"
}

// ListKeys returns one page of the tracked keys of q.Policy (see
// usage.Lister and the comment above listScanCount). While the listing
// scans, its pages hold no key; then they hold q.Limit keys each, but the
// last. A listing whose keys all fit in its first page, scanned in one
// go, returns them without a snapshot. With WithHashedKeys the keys
// listed are the hashes.
func (s *Store) ListKeys(ctx context.Context, q usage.Query) (usage.Page, error) {
	if s.closed.Load() {
		return usage.Page{}, floodgate.ErrClosed
	}
	if err := q.Check(); err != nil {
		return usage.Page{}, fmt.Errorf("redisstore: %w", err)
	}
	if err := checkName(q.Policy); err != nil {
		return usage.Page{}, err
	}
	first := q.Cursor == ""
	var st listState
	var now int64
	if first {
		t, err := s.now(ctx)
		if err != nil {
			return usage.Page{}, err
		}
		now = t
		rand.Read(st.id[:])
	} else {
		t, state, err := q.ParseCursor()
		if err != nil {
			return usage.Page{}, fmt.Errorf("redisstore: %w", err)
		}
		var ok bool
		if st, ok = decodeListState(state); !ok {
			return usage.Page{}, fmt.Errorf("redisstore: %w", &usage.QueryError{Field: "cursor", Msg: "malformed: pass the next_cursor of the page before, unchanged"})
		}
		now = t.UnixMicro()
	}
	page := usage.Page{Now: time.UnixMicro(now)}
	zkey, hkey := s.snapshotKeys(st.id)
	if !st.reading {
		found, err := s.scanListing(ctx, &q, &st, first, now)
		if err != nil {
			return usage.Page{}, err
		}
		if !st.reading {
			if err := s.addSnapshot(ctx, &q, zkey, hkey, found); err != nil {
				return usage.Page{}, err
			}
			page.Next = q.NewCursor(page.Now, st.encode())
			return page, nil
		}
		if first {
			// Scanned in one go: the page comes from memory, and the
			// snapshot is written only for the pages after it.
			found = dedupe(found)
			q.Sort(found)
			if len(found) <= q.Limit {
				page.Records = found
				return page, nil
			}
			if err := s.addSnapshot(ctx, &q, zkey, hkey, found); err != nil {
				return usage.Page{}, err
			}
			st.offset = uint64(q.Limit)
			page.Records = found[:q.Limit:q.Limit]
			page.Next = q.NewCursor(page.Now, st.encode())
			return page, nil
		}
		if err := s.addSnapshot(ctx, &q, zkey, hkey, found); err != nil {
			return usage.Page{}, err
		}
	}
	start := int64(st.offset)
	members, recs, err := s.b.snapshotRange(ctx, zkey, hkey, start, start+int64(q.Limit), listTTL)
	if err != nil {
		return usage.Page{}, classify(ctx, err)
	}
	if len(members) == 0 && start > 0 {
		// A snapshot is never empty past rank 0 but when it expired.
		return usage.Page{}, fmt.Errorf("redisstore: %w", usage.ExpiredCursor("the listing's snapshot in Redis is gone"))
	}
	more := len(members) > q.Limit
	if more {
		members = members[:q.Limit]
	}
	for i, m := range members {
		str, _ := recs[i].(string)
		r, ok := decodeSnapshotRecord(m, str)
		if !ok {
			return usage.Page{}, fmt.Errorf("redisstore: %w", usage.ExpiredCursor("the listing's snapshot in Redis is incomplete"))
		}
		page.Records = append(page.Records, r)
	}
	if more {
		st.offset += uint64(len(members))
		page.Next = q.NewCursor(page.Now, st.encode())
	}
	return page, nil
}

// scanListing runs up to listScanCalls SCANs of the listing from st's
// position, returns the records of the keys they found that hold usage at
// now, and moves st on (to reading once every master is scanned).
func (s *Store) scanListing(ctx context.Context, q *usage.Query, st *listState, first bool, now int64) ([]usage.Record, error) {
	nodes, err := s.b.masters(ctx)
	if err != nil {
		return nil, classify(ctx, err)
	}
	digest := nodesDigest(nodes)
	if first {
		st.nodes = digest
	} else if digest != st.nodes || st.node > uint64(len(nodes)) {
		return nil, fmt.Errorf("redisstore: %w", usage.ExpiredCursor("the Redis masters changed since the listing began"))
	}
	head := s.prefix + ":" + q.Policy + ":{"
	var found []usage.Record
	for calls := 0; calls < listScanCalls && st.node < uint64(len(nodes)); calls++ {
		keys, next, err := s.b.scanNode(ctx, nodes[st.node], st.cursor, head+"*}:u", listScanCount)
		if errors.Is(err, errNodeGone) {
			return nil, fmt.Errorf("redisstore: %w", usage.ExpiredCursor("the Redis masters changed since the listing began"))
		}
		if err != nil {
			return nil, classify(ctx, err)
		}
		recs, err := s.readRecords(ctx, q, head, keys, now)
		if err != nil {
			return nil, err
		}
		found = append(found, recs...)
		if next == 0 {
			st.node++
		}
		st.cursor = next
	}
	st.reading = st.node >= uint64(len(nodes))
	return found, nil
}

// readRecords reads the usage hashes keys (of the policy whose keys start
// with head) and returns the records of those that hold usage at now,
// with the window sums q asks for.
func (s *Store) readRecords(ctx context.Context, q *usage.Query, head string, keys []string, now int64) ([]usage.Record, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var out []usage.Record
	if q.Window == 0 {
		rows, err := s.b.hmget(ctx, keys, "f", "l", "r", "d", "x")
		if err != nil {
			return nil, classify(ctx, err)
		}
		for i, row := range rows {
			if u, ok := parseUsage(keys[i], head, row, now); ok {
				out = append(out, u)
			}
		}
		return out, nil
	}
	maps, err := s.b.hgetall(ctx, keys)
	if err != nil {
		return nil, classify(ctx, err)
	}
	res, keep, w := int64(q.Resolution/time.Microsecond), int64(q.Retention/time.Microsecond), int64(q.Window/time.Microsecond)
	for i, m := range maps {
		key, ok := strings.CutPrefix(keys[i], head)
		if !ok {
			continue
		}
		if key, ok = strings.CutSuffix(key, "}:u"); !ok || key == "" {
			continue
		}
		u, ok := parseUsageHash(m)
		if !ok || u.expires <= now {
			continue
		}
		r := u.record(tagUnsafe(key))
		u.buckets(now, res, keep, func(start, req, den int64) {
			if usage.InWindow(start, now, w) {
				r.WindowRequests = usage.SatAdd(r.WindowRequests, req)
				r.WindowDenied = usage.SatAdd(r.WindowDenied, den)
			}
		})
		out = append(out, r)
	}
	return out, nil
}

// addSnapshot writes records to a listing's snapshot.
func (s *Store) addSnapshot(ctx context.Context, q *usage.Query, zkey, hkey string, records []usage.Record) error {
	if len(records) == 0 {
		return nil
	}
	scores := make([]float64, len(records))
	members := make([]string, len(records))
	encoded := make([]string, len(records))
	for i := range records {
		r := &records[i]
		scores[i] = float64(q.Score(r))
		members[i] = r.Key
		encoded[i] = encodeSnapshotRecord(r)
	}
	if err := s.b.snapshotAdd(ctx, zkey, hkey, scores, members, encoded, listTTL); err != nil {
		return classify(ctx, err)
	}
	return nil
}

// encodeSnapshotRecord packs a record's numbers as uvarints: first and
// last seen (µs), requests, denied, and the window's.
func encodeSnapshotRecord(r *usage.Record) string {
	b := make([]byte, 0, 6*binary.MaxVarintLen64)
	for _, v := range []int64{r.FirstSeen.UnixMicro(), r.LastSeen.UnixMicro(), r.Requests, r.Denied, r.WindowRequests, r.WindowDenied} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return string(b)
}

func decodeSnapshotRecord(key, s string) (usage.Record, bool) {
	var v [6]int64
	b := []byte(s)
	for i := range v {
		x, n := binary.Uvarint(b)
		if n <= 0 || x > 1<<63-1 {
			return usage.Record{}, false
		}
		v[i], b = int64(x), b[n:]
	}
	if len(b) != 0 {
		return usage.Record{}, false
	}
	return usage.Record{Key: key, FirstSeen: time.UnixMicro(v[0]), LastSeen: time.UnixMicro(v[1]), Requests: v[2], Denied: v[3],
		WindowRequests: v[4], WindowDenied: v[5]}, true
}

// dedupe keeps the last record of each key (SCAN may return a key twice).
func dedupe(records []usage.Record) []usage.Record {
	at := make(map[string]int, len(records))
	out := records[:0]
	for _, r := range records {
		if i, seen := at[r.Key]; seen {
			out[i] = r
			continue
		}
		at[r.Key] = len(out)
		out = append(out, r)
	}
	return out
}
