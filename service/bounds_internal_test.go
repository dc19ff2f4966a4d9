package service

import (
	"context"
	"testing"
	"time"
)

// TestBoundsForget: a node's bound is forgotten once no decision asked for
// it for forgetAfter, at the next sweep (a new node, or Links), but never
// while a call holds or waits for its slot, and never the store's one node
// "". A decision that comes back makes a new bound.
func TestBoundsForget(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := &bounds{
		newBound: func(string) *nodeBound { return &nodeBound{gate: newGate(1, 10, time.Second, &queueGauge{})} },
		now:      func() time.Time { return now },
	}
	at := func(d time.Duration) { now = time.Unix(1_700_000_000, 0).Add(d) }
	has := func(node string, want bool) {
		t.Helper()
		if got := b.lookup(node) != nil; got != want {
			t.Errorf("at %v node %q kept: %v; want %v", now.Unix()-1_700_000_000, node, got, want)
		}
	}

	// Each new node sweeps, so that of the four made at 0 s only the last
	// is still marked asked for; the others were last asked for at 0 s.
	a, first := b.of("a"), b.of("b")
	b.of("")
	busy := b.of("busy")
	if err := busy.gate.acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	at(30 * time.Second)
	b.sweep(now) // busy: asked for since the last sweep, seen at 30 s
	at(59 * time.Second)
	if b.of("a") != a {
		t.Fatal(`of("a") made a new bound for a kept node`)
	}
	b.sweep(now)   // a: seen at 59 s
	has("b", true) // 59 s unasked
	at(60 * time.Second)
	b.of("c") // a new node sweeps
	has("b", false)
	has("a", true)
	has("busy", true)
	has("", true)
	has("c", true)

	at(10 * time.Minute)
	b.sweep(now)
	has("a", false)
	has("c", true)    // asked for when made, after the last sweep: seen now
	has("busy", true) // holds its slot
	has("", true)
	at(11 * time.Minute)
	b.sweep(now)
	has("c", false)
	has("busy", true)
	busy.gate.release()
	b.sweep(now)
	has("busy", false)
	has("", true)

	if b.of("b") == first {
		t.Error(`of("b") after b was forgotten returned the old bound`)
	}
}
