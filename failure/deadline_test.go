package failure

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestDeadlineCtx(t *testing.T) {
	t.Run("expires without Done", func(t *testing.T) {
		// An hour away, so that no pause of a loaded machine reaches it.
		early := newDeadlineCtx(context.Background(), time.Hour)
		defer early.release()
		if err := early.Err(); err != nil {
			t.Fatalf("Err = %v before the deadline", err)
		}
		c := newDeadlineCtx(context.Background(), 20*time.Millisecond)
		defer c.release()
		time.Sleep(25 * time.Millisecond)
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err = %v after the deadline", err)
		}
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second): // only a hang
			t.Fatal("Done did not close after the deadline")
		}
	})
	t.Run("Done closes at the deadline", func(t *testing.T) {
		c := newDeadlineCtx(context.Background(), 20*time.Millisecond)
		defer c.release()
		start := time.Now()
		var wg sync.WaitGroup
		for range 4 { // Done from several goroutines at once
			wg.Go(func() { <-c.Done() })
		}
		wg.Wait()
		// Not before the deadline (less the clock's granularity); the
		// upper bound only catches a Done that never closes.
		if took := time.Since(start); took < 15*time.Millisecond || took > 10*time.Second {
			t.Errorf("Done closed after %v, want about 20ms", took)
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Errorf("Err = %v", c.Err())
		}
	})
	t.Run("parent canceled", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		c := newDeadlineCtx(parent, time.Hour)
		defer c.release()
		if c.Value(ctxKey{}) != "v" {
			t.Error("parent's value lost")
		}
		cancel()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Errorf("Err = %v without Done", c.Err())
		}
		<-c.Done()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Errorf("Err = %v after Done", c.Err())
		}
	})
	t.Run("deadline is the earlier", func(t *testing.T) {
		parent, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pd, _ := parent.Deadline()
		c := newDeadlineCtx(parent, time.Hour)
		if d, ok := c.Deadline(); !ok || !d.Equal(pd) {
			t.Errorf("Deadline = %v, %v; want the parent's %v", d, ok, pd)
		}
		c = newDeadlineCtx(parent, time.Second)
		if d, ok := c.Deadline(); !ok || !d.Before(pd) {
			t.Errorf("Deadline = %v, %v; want its own", d, ok)
		}
	})
	t.Run("release stops the timer", func(t *testing.T) {
		c := newDeadlineCtx(context.Background(), time.Hour)
		done := c.Done()
		c.release()
		select {
		case <-done:
		default:
			t.Error("Done still open after release")
		}
		c.release() // idempotent
	})
	t.Run("children are canceled", func(t *testing.T) {
		c := newDeadlineCtx(context.Background(), 10*time.Millisecond)
		defer c.release()
		child, cancel := context.WithCancel(c)
		defer cancel()
		select {
		case <-child.Done():
		case <-time.After(10 * time.Second): // only a hang
			t.Fatal("a child of the context was not canceled at its deadline")
		}
	})
}

type ctxKey struct{}
