package main

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
// /proc/<pid>/stat, from `getconf CLK_TCK` (set by initClkTck).
var clkTck int64 = 100

func initClkTck() error {
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

var nCPU = runtime.NumCPU()

// cpuSample is one reading of the machine's busy (user, nice, system) and
// steal time from /proc/stat, in ticks; this process's CPU time
// (getrusage: the load generator); and the utime+stime of redis-server and
// of the contender from /proc/<pid>/stat, in ticks.
type cpuSample struct {
	at                time.Time
	busy, steal       int64
	self              time.Duration
	redis, contender  int64
	redisCommandStats []cmdStat // INFO commandstats at the reading
}

func readCPU(redisPid, contenderPid int) (cpuSample, error) {
	s := cpuSample{at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s, errors.New("/proc/stat: unexpected first line")
	}
	v := make([]int64, len(f))
	for i := 1; i < len(f); i++ {
		v[i], _ = strconv.ParseInt(f[i], 10, 64)
	}
	// user nice system idle iowait irq softirq steal: interrupt time is
	// left out of busy (loopback traffic is processed in softirq, which no
	// process's time includes).
	s.busy = v[1] + v[2] + v[3]
	s.steal = v[8]
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s, err
	}
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if s.redis, err = procTicks(redisPid); err != nil {
		return s, err
	}
	if s.contender, err = procTicks(contenderPid); err != nil {
		return s, err
	}
	return s, nil
}

// procTicks is utime+stime of pid (fields 14 and 15 of /proc/<pid>/stat),
// in clock ticks.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	str := string(b)
	i := strings.LastIndexByte(str, ')')
	if i < 0 || i+2 > len(str) {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	g := strings.Fields(str[i+2:]) // g[0] is field 3 (state)
	if len(g) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(g[11], 10, 64)
	st, err2 := strconv.ParseInt(g[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return ut + st, nil
}

func ticks(n int64) time.Duration { return time.Duration(n * int64(time.Second) / clkTck) }

// shares returns, as percentages of all CPUs between a and b: the busy
// time of other processes (foreign), steal, the load generator's,
// redis-server's and the contender's CPU.
func (b cpuSample) shares(a cpuSample) (foreign, steal, self, redis, contender float64) {
	capacity := b.at.Sub(a.at).Seconds() * float64(nCPU)
	pct := func(d time.Duration) float64 { return d.Seconds() / capacity * 100 }
	busy := ticks(b.busy - a.busy)
	selfD := b.self - a.self
	redisD := ticks(b.redis - a.redis)
	contD := ticks(b.contender - a.contender)
	foreign = max(0, pct(busy-selfD-redisD-contD))
	return foreign, pct(ticks(b.steal - a.steal)), pct(selfD), pct(redisD), pct(contD)
}

// waitQuiet waits (up to limit) until other processes than this one and
// redis-server use at most maxForeign % of all CPUs over one second, so
// that a run does not start in a neighbour's burst. It returns the last
// reading.
func waitQuiet(ctx context.Context, redisPid int, maxForeign float64, limit time.Duration) float64 {
	deadline := time.Now().Add(limit)
	self := os.Getpid()
	for {
		a, err := readCPU(redisPid, self)
		if err != nil {
			return -1
		}
		if !sleepCtx(ctx, time.Second) {
			return -1
		}
		b, err := readCPU(redisPid, self)
		if err != nil {
			return -1
		}
		b.contender = a.contender // self counted once
		f, _, _, _, _ := b.shares(a)
		if f <= maxForeign || time.Now().After(deadline) {
			return f
		}
	}
}
