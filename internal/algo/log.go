package algo

// Entry is one element of a Log: a sliding-window bucket (T is the bucket
// index, N its cost) or a sliding-log entry (T in µs, N units). N saturates
// at satMax, which no decision can tell from a larger value: every max is
// below it.
type Entry struct {
	T, N int64
}

// Log is a queue of entries in increasing T, with their running sum. Old
// entries leave at the front, new ones join at the back; its buffer is
// reused, so a key whose log stays about the same length allocates nothing.
type Log struct {
	e    []Entry // live entries are e[head:]
	head int
	sum  int64 // exact sum of N over e[head:], unless over
	over bool  // the sum overflowed int64 (over 1023 saturated entries); count by walking
}

// Len returns the number of entries.
func (l *Log) Len() int { return len(l.e) - l.head }

// At returns the i-th entry, oldest first.
func (l *Log) At(i int) Entry { return l.e[l.head+i] }

// Clear removes every entry, keeping the buffer.
func (l *Log) Clear() {
	l.e = l.e[:0]
	l.head = 0
	l.sum = 0
	l.over = false
}

// Push adds n at t, which must be ≥ the newest entry's T; an entry with the
// same T grows instead.
func (l *Log) Push(t, n int64) {
	if k := len(l.e); k > l.head && l.e[k-1].T == t {
		old := l.e[k-1].N
		l.e[k-1].N = satAdd(old, n)
		l.addSum(l.e[k-1].N - old)
		return
	}
	if len(l.e) == cap(l.e) && l.head > 0 {
		k := copy(l.e, l.e[l.head:])
		l.e = l.e[:k]
		l.head = 0
	}
	n = min(n, satMax)
	l.e = append(l.e, Entry{T: t, N: n})
	l.addSum(n)
}

func (l *Log) addSum(d int64) {
	if l.sum > 1<<63-1-d {
		l.over = true
	}
	l.sum += d
}

// DropFront removes the k oldest entries.
func (l *Log) DropFront(k int) {
	if k == 0 {
		return
	}
	for i := l.head; i < l.head+k; i++ {
		l.sum -= l.e[i].N
	}
	l.head += k
	if l.head == len(l.e) {
		l.Clear()
	} else if l.over {
		l.recount()
	}
}

// recount recomputes the running sum after an overflow, if it fits again.
func (l *Log) recount() {
	l.sum, l.over = 0, false
	for _, e := range l.e[l.head:] {
		l.addSum(e.N)
	}
}

// Live returns how many of the oldest entries have expired at now, and the
// sum of N over the others, saturating at satMax. An entry expires at
// T·scale + span (SPEC.md rule 10: it no longer counts at exactly that µs).
func (l *Log) Live(scale, span, now int64) (expired int, count int64) {
	var gone int64
	i := l.head
	for ; i < len(l.e) && l.e[i].T*scale+span <= now; i++ {
		gone += l.e[i].N
	}
	expired = i - l.head
	if !l.over {
		return expired, min(l.sum-gone, satMax)
	}
	for ; i < len(l.e); i++ {
		count = satAdd(count, l.e[i].N)
	}
	return expired, count
}

// Wait returns when enough entries will have expired for the newest ones,
// plus the cost pending (the add of a call that records, not stored yet, at
// the current entry whose expiry is pendingExpiry), to sum to at most
// budget: the expiry of the newest entry that must go. Entries before first
// have expired already. It walks from the newest entry and stops as soon as
// the sum passes budget, so no sum it forms exceeds the max it serves.
// With nothing to free it returns now.
func (l *Log) Wait(first int, scale, span, budget, pending, pendingExpiry, now int64) int64 {
	s := pending
	if s > budget {
		return pendingExpiry
	}
	for i := l.Len() - 1; i >= first; i-- {
		e := l.At(i)
		s = satAdd(s, e.N)
		if s > budget {
			return e.T*scale + span
		}
	}
	return now
}
