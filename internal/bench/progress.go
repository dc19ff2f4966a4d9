package bench

import (
	"fmt"
	"io"
	"time"
)

// ttyRedraw is how often the progress line is redrawn on a terminal.
const ttyRedraw = 250 * time.Millisecond

// progress shows the run's progress on cfg.Progress until stop closes:
// on a terminal one line redrawn in place, otherwise a plain line every
// ProgressEvery. The terminal line is erased at the end, so that the
// summary starts on a clean line.
func (r *run) progress(stop <-chan struct{}) {
	every := r.cfg.ProgressEvery
	if r.cfg.ProgressMode == ProgressTTY {
		every = ttyRedraw
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var lastDecided int64
	lastAt := r.clk.now()
	for {
		select {
		case <-stop:
			if r.cfg.ProgressMode == ProgressTTY {
				io.WriteString(r.cfg.Progress, "\r\x1b[K")
			}
			return
		case <-t.C:
		}
		now := r.clk.now()
		c := r.counts()
		decided := c.allowed + c.denied
		rate := 0.0
		if dt := now - lastAt; dt > 0 {
			rate = float64(decided-lastDecided) / dt.Seconds()
		}
		lastDecided, lastAt = decided, now
		line := r.progressLine(now, c, rate)
		if r.cfg.ProgressMode == ProgressTTY {
			fmt.Fprintf(r.cfg.Progress, "\r%s\x1b[K", line)
		} else {
			fmt.Fprintln(r.cfg.Progress, line)
		}
	}
}

// progressLine is one progress report: time, decisions/s over the last
// interval, allowed/denied/errors so far, p99 so far, and time left.
func (r *run) progressLine(now time.Duration, c counts, rate float64) string {
	p99 := r.histogram().Quantile(0.99)
	line := fmt.Sprintf("%6.1fs  %s decisions/s  allowed %s  denied %s  errors %s  p99 %s",
		now.Seconds(), formatCount(rate), formatCount(float64(c.allowed)), formatCount(float64(c.denied)),
		formatCount(float64(c.errors)), fmtUS(micros(p99)))
	if c.backpressure > 0 {
		line += fmt.Sprintf("  backpressure %s", formatCount(float64(c.backpressure)))
	}
	if left, ok := r.timeLeft(now, c, rate); ok {
		line += fmt.Sprintf("  %s left", left.Round(100*time.Millisecond))
	}
	return line
}

// timeLeft estimates the time left: to the deadline, or for the requests
// still to send at the current rate, whichever comes first.
func (r *run) timeLeft(now time.Duration, c counts, rate float64) (time.Duration, bool) {
	left, ok := time.Duration(0), false
	if r.deadline > 0 {
		left, ok = max(r.deadline-now, 0), true
	}
	if r.cfg.Iterations > 0 && rate > 0 {
		todo := r.cfg.Iterations*int64(r.cfg.Concurrency) - (c.allowed + c.denied + c.backpressure + c.errors)
		est := time.Duration(float64(max(todo, 0)) / rate * float64(time.Second))
		if !ok || est < left {
			left, ok = est, true
		}
	}
	return left, ok
}
