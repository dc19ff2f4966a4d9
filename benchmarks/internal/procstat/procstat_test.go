package procstat

import (
	"testing"
	"time"
)

// A /proc/stat of a two-CPU machine, as read on Linux 6.
const statText = `cpu  128757 3 17803 130047 343 11 4064 84 0 0
cpu0 64700 0 8969 64597 216 0 1997 43 0 0
cpu1 64057 3 8834 65449 127 11 2067 41 0 0
intr 5139791 0 9 0 0 0 0 0 0 0 0 0 0 0 0 0 0
ctxt 9512733
btime 1764153600
processes 24330
procs_running 2
procs_blocked 0
`

func TestParseStat(t *testing.T) {
	busy, steal, err := ParseStat(statText)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(128757 + 3 + 17803); busy != want {
		t.Errorf("busy = %d, want %d (user+nice+system)", busy, want)
	}
	if steal != 84 {
		t.Errorf("steal = %d, want 84", steal)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3 4 5\n"} {
		if _, _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q) gave no error", bad)
		}
	}
}

func TestParsePidStat(t *testing.T) {
	// The command name holds a space and parentheses: fields are counted
	// from the last ')'. utime is 1523, stime 310.
	const text = "4242 (redis (x) y) S 1 4242 4242 0 -1 4194560 2851 0 0 0 1523 310 0 0 20 0 5 0 141400 3133440 389 18446744073709551615\n"
	n, err := ParsePidStat(text)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1523+310 {
		t.Errorf("ParsePidStat = %d, want %d", n, 1523+310)
	}
	for _, bad := range []string{"4242 redis S 1", "4242 (redis) S 1 2 3", "4242 (redis) S 1 4242 4242 0 -1 4194560 2851 0 0 0 x 310 0"} {
		if _, err := ParsePidStat(bad); err == nil {
			t.Errorf("ParsePidStat(%q) gave no error", bad)
		}
	}
}

func TestShares(t *testing.T) {
	defer func(tck int64, n int) { clkTck, nCPU = tck, n }(clkTck, nCPU)
	clkTck, nCPU = 100, 2
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := Sample{At: at, Busy: 1000, Steal: 10, Self: time.Second, Pids: []int64{500, 700}}
	// Over 2 s of 2 CPUs (400 ticks): 300 ticks busy, of which this
	// process 0.5 s (50 ticks), the first pid 80 ticks, the second 20:
	// 150 ticks foreign; 8 ticks of steal.
	b := Sample{At: at.Add(2 * time.Second), Busy: 1300, Steal: 18, Self: 1500 * time.Millisecond, Pids: []int64{580, 720}}
	s := b.Shares(a, b.At.Sub(a.At))
	want := Shares{Foreign: 37.5, Steal: 2, Self: 12.5, Pids: []float64{20, 5}}
	if s.Foreign != want.Foreign || s.Steal != want.Steal || s.Self != want.Self || len(s.Pids) != 2 || s.Pids[0] != want.Pids[0] || s.Pids[1] != want.Pids[1] {
		t.Errorf("Shares = %+v, want %+v", s, want)
	}
	// More time accounted to the processes than the machine was busy
	// (counters read at slightly different instants): no negative share.
	b.Busy = 1100
	if f := b.Shares(a, 2*time.Second).Foreign; f != 0 {
		t.Errorf("Foreign = %v, want 0", f)
	}
}

func TestTicks(t *testing.T) {
	defer func(tck int64) { clkTck = tck }(clkTck)
	clkTck = 100
	if d := Ticks(123); d != 1230*time.Millisecond {
		t.Errorf("Ticks(123) = %s at 100 Hz, want 1.23s", d)
	}
}
