package floodgatetest

import (
	"sync/atomic"
	"time"
)

// ManualClock is a storekit.Clock that only moves when told to, for tests
// and replays. Its resolution is the microsecond, the unit of every
// decision. It is safe for concurrent use.
type ManualClock struct {
	us atomic.Int64
}

// NewManualClock returns a clock stopped at t.
func NewManualClock(t time.Time) *ManualClock {
	c := &ManualClock{}
	c.Set(t)
	return c
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// Micros returns the clock's time in µs since the Unix epoch.
func (c *ManualClock) Micros() int64 { return c.us.Load() }

// Set moves the clock to t, forwards or backwards.
func (c *ManualClock) Set(t time.Time) { c.us.Store(t.UnixMicro()) }

// SetMicros moves the clock to us µs since the Unix epoch.
func (c *ManualClock) SetMicros(us int64) { c.us.Store(us) }

// Advance moves the clock by d, which may be negative.
func (c *ManualClock) Advance(d time.Duration) { c.us.Add(int64(d / time.Microsecond)) }
