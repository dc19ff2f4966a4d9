package throttle

import (
	"sync"
	"testing"
	"time"
)

func TestLog(t *testing.T) {
	var l Log
	at := time.Unix(1_700_000_000, 0)
	if ok, held := l.Allow(at); !ok || held != 0 {
		t.Fatalf("first line: %v, %d", ok, held)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 10 {
				if ok, _ := l.Allow(at.Add(500 * time.Millisecond)); ok {
					t.Error("a line within the second")
				}
			}
		})
	}
	wg.Wait()
	if ok, held := l.Allow(at.Add(time.Second)); !ok || held != 100 {
		t.Fatalf("a second later: %v, %d held back; want true, 100", ok, held)
	}
	l2 := Log{Interval: time.Minute}
	l2.Allow(at)
	if ok, _ := l2.Allow(at.Add(59 * time.Second)); ok {
		t.Error("Interval a minute: a line within it")
	}
}
