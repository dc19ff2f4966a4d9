package failure

import (
	"context"
	"sync"
	"time"
)

// deadlineCtx is context.WithDeadline(parent, deadline) whose timer is
// started only when someone asks for Done. A store that never waits (the
// memory store does not look at its context) then costs no timer and
// three fewer allocations per request, while one that waits (a Redis
// client selecting on Done, or setting socket deadlines from Deadline)
// sees a context that behaves exactly as the standard one: Done closes at
// the deadline or when parent is done, Err says why.
//
// It is safe for concurrent use. release must be called once the calls it
// bounds have returned.
type deadlineCtx struct {
	context.Context // the parent; its values are this context's
	deadline        time.Time

	mu     sync.Mutex
	inner  context.Context // context.WithDeadline(parent, deadline), made by the first Done
	cancel context.CancelFunc
}

func newDeadlineCtx(parent context.Context, d time.Duration) *deadlineCtx {
	return &deadlineCtx{Context: parent, deadline: time.Now().Add(d)}
}

// Deadline returns the earlier of the parent's deadline and this one.
func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done starts the timer on its first call.
func (c *deadlineCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithDeadline(c.Context, c.deadline)
	}
	return c.inner.Done()
}

// Err is the parent's error, or context.DeadlineExceeded once the
// deadline has passed.
func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner != nil {
		return inner.Err()
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// release stops the timer, if Done started one.
func (c *deadlineCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// String names the context for debugging.
func (c *deadlineCtx) String() string { return "failure.deadlineCtx" }
