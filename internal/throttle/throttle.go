// Package throttle keeps a log from drowning: it lets one line of a kind
// through per interval and counts the ones it held back, so that a store
// that fails every request does not write a line per request (at 10,000
// requests a second, a gigabyte of logs an hour).
package throttle

import (
	"sync/atomic"
	"time"
)

// Log lets one line through per Interval. It takes no lock: every request
// of a failing store may pass through it. The zero value is ready; an
// Interval of 0 means a second. It is safe for concurrent use.
type Log struct {
	Interval time.Duration

	next       atomic.Int64 // ns since the Unix epoch: when the next line may be written
	suppressed atomic.Int64 // lines held back since the last one written
}

// Allow reports whether a line may be written at now, and how many were
// held back before it.
func (l *Log) Allow(now time.Time) (ok bool, suppressed int64) {
	t := now.UnixNano()
	next := l.next.Load()
	every := l.Interval
	if every <= 0 {
		every = time.Second
	}
	if t < next || !l.next.CompareAndSwap(next, t+int64(every)) {
		l.suppressed.Add(1) // not due, or another goroutine wrote the line
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}
