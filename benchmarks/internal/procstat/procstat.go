// Package procstat samples CPU time on Linux for the benchmark commands:
// the machine's busy and steal time from /proc/stat, this process's own
// time from getrusage, and the utime+stime of other processes from
// /proc/<pid>/stat. Two samples give the shares of all CPUs that each of
// them used in between, and the share left to foreign processes (the
// machine's neighbours), so that a run disturbed by a neighbour can be
// told apart, or avoided with WaitQuiet.
package procstat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clkTck is USER_HZ, the unit of the CPU times of /proc/stat and
// /proc/<pid>/stat: 100 until Init reads `getconf CLK_TCK`.
var clkTck int64 = 100

// nCPU is the number of CPUs that shares are a part of.
var nCPU = runtime.NumCPU()

// Init sets the clock tick from `getconf CLK_TCK`. Until it is called,
// ticks are taken to be 1/100 s, Linux's USER_HZ on every common
// architecture.
func Init() error {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return fmt.Errorf("getconf CLK_TCK: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("getconf CLK_TCK: %q", out)
	}
	clkTck = n
	return nil
}

// ClockTick returns the clock ticks per second of the CPU times that
// Sample holds.
func ClockTick() int64 { return clkTck }

// CPUs returns the number of CPUs that shares are percentages of.
func CPUs() int { return nCPU }

// Ticks converts n clock ticks to a duration.
func Ticks(n int64) time.Duration { return time.Duration(n * int64(time.Second) / clkTck) }

// Sample is one reading of the CPU counters, taken by Read.
type Sample struct {
	// At is when the sample was read.
	At time.Time
	// Busy is the machine's user, nice and system time, in ticks. Interrupt
	// time is left out: loopback traffic is processed in softirq, which no
	// process's CPU time includes.
	Busy int64
	// Steal is the machine's steal time, in ticks.
	Steal int64
	// Self is this process's user and system time (getrusage).
	Self time.Duration
	// Pids holds the utime+stime of each process given to Read, in the
	// same order, in ticks.
	Pids []int64
}

// Read samples the machine's CPU time, this process's and that of each of
// pids.
func Read(pids ...int) (Sample, error) {
	s := Sample{At: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	if s.Busy, s.Steal, err = ParseStat(string(b)); err != nil {
		return s, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s, err
	}
	s.Self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	s.Pids = make([]int64, len(pids))
	for i, pid := range pids {
		if s.Pids[i], err = procTicks(pid); err != nil {
			return s, err
		}
	}
	return s, nil
}

// ParseStat reads the first line of a /proc/stat text (cpu user nice
// system idle iowait irq softirq steal …) and returns the busy time (user,
// nice and system) and the steal time of all CPUs, in ticks.
func ParseStat(text string) (busy, steal int64, err error) {
	line, _, _ := strings.Cut(text, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, errors.New("/proc/stat: unexpected first line")
	}
	v := make([]int64, len(f))
	for i := 1; i < len(f); i++ {
		v[i], _ = strconv.ParseInt(f[i], 10, 64)
	}
	return v[1] + v[2] + v[3], v[8], nil
}

// ParsePidStat returns utime+stime (fields 14 and 15) of a
// /proc/<pid>/stat text, in ticks.
func ParsePidStat(text string) (int64, error) {
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: the fields are counted from its last ')'.
	i := strings.LastIndexByte(text, ')')
	if i < 0 || i+2 > len(text) {
		return 0, errors.New("unexpected format")
	}
	g := strings.Fields(text[i+2:]) // g[0] is field 3 (state)
	if len(g) < 13 {
		return 0, errors.New("too few fields")
	}
	ut, err1 := strconv.ParseInt(g[11], 10, 64)
	st, err2 := strconv.ParseInt(g[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return ut + st, nil
}

// procTicks is utime+stime of pid, in ticks.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	n, err := ParsePidStat(string(b))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return n, nil
}

// Shares are the CPU time used between two samples, each as a percentage
// of all CPUs over the interval.
type Shares struct {
	// Foreign is the busy time of the processes other than this one and
	// those sampled (never below 0).
	Foreign float64
	// Steal is the time the hypervisor gave to other guests.
	Steal float64
	// Self is this process's time.
	Self float64
	// Pids holds the time of each sampled process, in the order of Read.
	Pids []float64
}

// Shares returns the CPU time used between a and b (read with the same
// pids) as percentages of all CPUs over wall, the interval's length as the
// caller measured it (b.At.Sub(a.At), or the span of the work itself).
func (b Sample) Shares(a Sample, wall time.Duration) Shares {
	capacity := wall.Seconds() * float64(nCPU)
	pct := func(d time.Duration) float64 { return d.Seconds() / capacity * 100 }
	self := b.Self - a.Self
	others := self
	s := Shares{Self: pct(self), Steal: pct(Ticks(b.Steal - a.Steal)), Pids: make([]float64, len(b.Pids))}
	for i := range b.Pids {
		d := Ticks(b.Pids[i] - a.Pids[i])
		others += d
		s.Pids[i] = pct(d)
	}
	s.Foreign = max(0, pct(Ticks(b.Busy-a.Busy)-others))
	return s
}

// WaitQuiet waits, up to limit, until the processes other than this one
// and pids use at most maxForeign % of all CPUs over one second, so that a
// run does not start in a neighbour's burst. It returns the last reading,
// or -1 when it could not read the counters or ctx ended.
func WaitQuiet(ctx context.Context, maxForeign float64, limit time.Duration, pids ...int) float64 {
	deadline := time.Now().Add(limit)
	for {
		a, err := Read(pids...)
		if err != nil {
			return -1
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return -1
		}
		b, err := Read(pids...)
		if err != nil {
			return -1
		}
		f := b.Shares(a, b.At.Sub(a.At)).Foreign
		if f <= maxForeign || time.Now().After(deadline) {
			return f
		}
	}
}
