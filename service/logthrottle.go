package service

import (
	"sync"
	"time"
)

// logThrottle lets one log line of a kind through per interval and counts
// the ones it holds back, so that a store that fails every request does
// not write a line per request (at 10,000 requests per second, a
// gigabyte of logs an hour). The zero value is ready; interval 0 means a
// second.
type logThrottle struct {
	interval time.Duration

	mu         sync.Mutex
	next       time.Time // when the next line may be written
	suppressed int64     // lines held back since the last one written
}

// allow reports whether a line may be written at now, and how many were
// held back before it.
func (l *logThrottle) allow(now time.Time) (ok bool, suppressed int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	every := l.interval
	if every <= 0 {
		every = time.Second
	}
	l.next = now.Add(every)
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
