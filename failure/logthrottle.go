package failure

import (
	"sync/atomic"
	"time"
)

// logThrottle lets one log line of a kind through per interval and counts
// the ones it holds back, so that a store that fails every request does
// not write a line per request (at 10,000 requests per second, a
// gigabyte of logs an hour). It takes no lock: a dead store's requests all
// pass through it. The zero value is ready; interval 0 means a second.
type logThrottle struct {
	interval time.Duration

	next       atomic.Int64 // ns since the Unix epoch: when the next line may be written
	suppressed atomic.Int64 // lines held back since the last one written
}

// allow reports whether a line may be written at now, and how many were
// held back before it.
func (l *logThrottle) allow(now time.Time) (ok bool, suppressed int64) {
	t := now.UnixNano()
	next := l.next.Load()
	every := l.interval
	if every <= 0 {
		every = time.Second
	}
	if t < next || !l.next.CompareAndSwap(next, t+int64(every)) {
		l.suppressed.Add(1) // not due, or another goroutine wrote the line
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}
