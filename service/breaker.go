package service

import (
	"sync/atomic"
	"time"
)

// breaker stops calling a failing store for a moment: after
// breakerFailures consecutive failures it opens for breakerPause, during
// which the failure policy decides at once instead of every request
// waiting for the store's timeout; then calls go through again, and one
// success closes it.
type breaker struct {
	failures  atomic.Int32
	openUntil atomic.Int64 // unix ns
}

const (
	breakerFailures = 5
	breakerPause    = 500 * time.Millisecond
)

func (b *breaker) open(now time.Time) bool {
	return now.UnixNano() < b.openUntil.Load()
}

func (b *breaker) failure(now time.Time) {
	if b.failures.Add(1) >= breakerFailures {
		b.openUntil.Store(now.Add(breakerPause).UnixNano())
		b.failures.Store(0)
	}
}

func (b *breaker) success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
}
