package memstore

import (
	"bufio"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// The default bound. A Store created without WithMaxKeys or WithUnbounded
// holds at most
//
//	memory limit / MemoryFraction / EntryBytes
//
// entries, where the memory limit is what DefaultSizing finds.
const (
	// MemoryFraction is the share of the process's memory limit the
	// default bound gives the store: a quarter. Go's collector lets the
	// heap grow to about twice its live size before collecting (GOGC=100),
	// so a store whose live entries fill a quarter of the limit peaks near
	// half of it, and the other half is left to the rest of the process
	// (the service's buffers and goroutines, a fallback store, clients).
	MemoryFraction = 4

	// EntryBytes is the memory the default bound counts per entry: 512
	// bytes. Measured with keys of 11 bytes after one request, an entry
	// costs 135 bytes (fixed_window, token_bucket, gcra) to 311
	// (sliding_window with two limits; docs/operations.md, "The memory
	// store's bound"); the margin covers longer keys and logs of a few
	// entries.
	// Keys of hundreds of bytes, or sliding_log and sliding_window states
	// holding many entries (16 bytes each), cost more: size WithMaxKeys
	// from that table for such policies.
	EntryBytes = 512

	// FallbackMemory is the memory limit assumed when none can be read
	// (not Linux, or /proc and /sys unreadable): 1 GiB.
	FallbackMemory = 1 << 30
)

// Sizing is how the default bound is computed: from which memory limit,
// found where. DefaultSizing returns it; New applies it.
type Sizing struct {
	// Memory is the memory the process may use, in bytes: the least of
	// its cgroup's limit, GOMEMLIMIT and the machine's physical memory,
	// or FallbackMemory when none of them can be read.
	Memory int64

	// Source says where Memory comes from: "cgroup v2 memory.max",
	// "cgroup v1 memory.limit_in_bytes", "GOMEMLIMIT",
	// "/proc/meminfo MemTotal" or "fallback".
	Source string

	// MaxKeys is the bound: Memory / MemoryFraction / EntryBytes, at
	// least 1.
	MaxKeys int
}

// DefaultSizing returns the bound New gives a Store without WithMaxKeys or
// WithUnbounded, reading the limits in force now: the memory limit of the
// process's cgroup (v2 memory.max, or v1 memory.limit_in_bytes; the
// least along the cgroup's ancestors, as the kernel applies every one of
// them), the Go runtime's soft limit (GOMEMLIMIT, or debug.SetMemoryLimit)
// when one is set, and the machine's physical memory (MemTotal of
// /proc/meminfo), whichever is least. It is safe for concurrent use.
func DefaultSizing() Sizing {
	return sizing(os.DirFS("/"), debug.SetMemoryLimit(-1))
}

// sizing is DefaultSizing reading the files of root (a file system rooted
// at "/") and given the runtime's memory limit (math.MaxInt64: none).
func sizing(root fs.FS, goLimit int64) Sizing {
	sz := Sizing{Memory: math.MaxInt64}
	consider := func(n int64, source string) {
		if n > 0 && n < sz.Memory {
			sz.Memory, sz.Source = n, source
		}
	}
	if n, version, ok := cgroupLimit(root); ok {
		consider(n, version)
	}
	if goLimit > 0 && goLimit < math.MaxInt64 {
		consider(goLimit, "GOMEMLIMIT")
	}
	if n, ok := memTotal(root); ok {
		consider(n, "/proc/meminfo MemTotal")
	}
	if sz.Source == "" {
		sz.Memory, sz.Source = FallbackMemory, "fallback"
	}
	sz.MaxKeys = int(max(1, min(sz.Memory/MemoryFraction/EntryBytes, math.MaxInt32)))
	return sz
}

// memTotal returns MemTotal of /proc/meminfo, in bytes.
func memTotal(root fs.FS) (int64, bool) {
	f, err := root.Open("proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb <= 0 || kb > math.MaxInt64/1024 {
			return 0, false
		}
		return kb * 1024, true
	}
	return 0, false
}

// cgroupLimit returns the memory limit of the process's cgroup, in bytes,
// and which file gave it; ok is false when there is none (no cgroup, or
// no limit set). The cgroup's directory is found as the kernel documents
// it: the process's cgroup path (/proc/self/cgroup) under the mount of its
// hierarchy (/proc/self/mountinfo), less the mount's own root (a container
// sees its cgroup mounted as "/"). Limits of the ancestors up to the mount
// count too.
func cgroupLimit(root fs.FS) (limit int64, source string, ok bool) {
	cg, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, "", false
	}
	mi, err := fs.ReadFile(root, "proc/self/mountinfo")
	if err != nil {
		return 0, "", false
	}
	var v1, v2 string // the cgroup paths of the memory controller
	hasV1, hasV2 := false, false
	for line := range strings.Lines(string(cg)) {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(strings.TrimRight(line, "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, hasV2 = parts[2], true
		} else if hasController(parts[1], "memory") {
			v1, hasV1 = parts[2], true
		}
	}
	best := int64(math.MaxInt64)
	for line := range strings.Lines(string(mi)) {
		// id parent major:minor root mountpoint options [tags...] - fstype source superoptions
		fields := strings.Fields(line)
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 > len(fields) {
			continue
		}
		mroot, mpoint, fstype := unescape(fields[3]), unescape(fields[4]), fields[sep+1]
		var cgPath, file, name string
		switch {
		case fstype == "cgroup2" && hasV2:
			cgPath, file, name = v2, "memory.max", "cgroup v2 memory.max"
		case fstype == "cgroup" && hasV1 && hasController(fields[sep+3], "memory"):
			cgPath, file, name = v1, "memory.limit_in_bytes", "cgroup v1 memory.limit_in_bytes"
		default:
			continue
		}
		if n, found := limitAlong(root, mroot, mpoint, cgPath, file); found && n < best {
			best, source = n, name
		}
	}
	if source == "" {
		return 0, "", false
	}
	return best, source, true
}

// limitAlong returns the least limit in file along the cgroup directory of
// cgPath (on a hierarchy whose root mroot is mounted at mpoint) and its
// ancestors up to the mount point.
func limitAlong(root fs.FS, mroot, mpoint, cgPath, file string) (int64, bool) {
	cgPath, mroot = path.Clean(cgPath), path.Clean(mroot)
	rel := "/"
	switch {
	case mroot == "/":
		rel = cgPath
	case strings.HasPrefix(cgPath, mroot+"/"):
		rel = cgPath[len(mroot):]
	}
	// Otherwise the cgroup is the mount's root, or outside what is mounted
	// (another namespace's view): the mount's root is the nearest
	// directory there is to read.
	dir := path.Join(mpoint, rel)
	stop := path.Clean(mpoint)
	best, found := int64(math.MaxInt64), false
	for {
		if n, ok := readLimit(root, path.Join(dir, file)); ok && n < best {
			best, found = n, true
		}
		if dir == stop || dir == "/" || dir == "." {
			break
		}
		dir = path.Dir(dir)
	}
	return best, found
}

// readLimit reads a cgroup memory limit file: a number of bytes, or "max"
// (v2) or a number of 2^62 or more (v1's "unlimited",
// 9223372036854771712) for none.
func readLimit(root fs.FS, name string) (int64, bool) {
	b, err := fs.ReadFile(root, strings.TrimPrefix(name, "/"))
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}

// hasController reports whether the comma-separated list has c.
func hasController(list, c string) bool {
	for x := range strings.SplitSeq(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash ("\040").
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
