package floodgate

import (
	"context"
	"time"
)

// SetWaitHooks replaces the clock Wait compares deadlines with and the sleep
// it uses, for tests.
func SetWaitHooks(l *Limiter, now func() time.Time, sleep func(context.Context, time.Duration) error) {
	l.now, l.sleep = now, sleep
}
