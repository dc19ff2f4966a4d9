package memstore

import (
	"math"
	"testing"
	"testing/fstest"
)

const (
	meminfo16G = "MemTotal:       16777216 kB\nMemFree:         1000 kB\n"
	mountV2    = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
	mountV1    = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"36 31 0:33 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestSizing(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		name    string
		fs      fstest.MapFS
		goLimit int64
		memory  int64
		source  string
	}{
		{
			name: "cgroup v2, a container's own cgroup",
			fs: fstest.MapFS{
				"proc/self/cgroup":         file("0::/\n"),
				"proc/self/mountinfo":      file(mountV2),
				"sys/fs/cgroup/memory.max": file("536870912\n"),
				"proc/meminfo":             file(meminfo16G),
			},
			memory: 512 << 20, source: "cgroup v2 memory.max",
		},
		{
			name: "cgroup v2, a systemd service limited by its slice",
			fs: fstest.MapFS{
				"proc/self/cgroup":    file("0::/system.slice/fg.service\n"),
				"proc/self/mountinfo": file(mountV2),
				"sys/fs/cgroup/system.slice/fg.service/memory.max": file("max\n"),
				"sys/fs/cgroup/system.slice/memory.max":            file("1073741824\n"),
				"proc/meminfo":                                     file(meminfo16G),
			},
			memory: gib, source: "cgroup v2 memory.max",
		},
		{
			name: "cgroup v2, the least along the path",
			fs: fstest.MapFS{
				"proc/self/cgroup":              file("0::/a/b\n"),
				"proc/self/mountinfo":           file(mountV2),
				"sys/fs/cgroup/a/b/memory.max":  file("3221225472\n"),
				"sys/fs/cgroup/a/memory.max":    file("2147483648\n"),
				"sys/fs/cgroup/memory.max":      file("max\n"),
				"proc/meminfo":                  file(meminfo16G),
				"sys/fs/cgroup/a/b/memory.high": file("1\n"), // not a limit we read
			},
			memory: 2 * gib, source: "cgroup v2 memory.max",
		},
		{
			name: "cgroup v2 mounted at the cgroup's own root (namespace)",
			fs: fstest.MapFS{
				"proc/self/cgroup":            file("0::/kubepods/pod1/c1\n"),
				"proc/self/mountinfo":         file("30 23 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"),
				"sys/fs/cgroup/c1/memory.max": file("268435456\n"),
				"proc/meminfo":                file(meminfo16G),
			},
			memory: 256 << 20, source: "cgroup v2 memory.max",
		},
		{
			name: "cgroup v1 without a limit (this machine's case)",
			fs: fstest.MapFS{
				"proc/self/cgroup":    file("9:name=systemd:/\n4:memory:/process_api/79028a\n0::/\n"),
				"proc/self/mountinfo": file(mountV1),
				"sys/fs/cgroup/memory/process_api/79028a/memory.limit_in_bytes": file("9223372036854771712\n"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes":                    file("9223372036854771712\n"),
				"proc/meminfo": file(meminfo16G),
			},
			memory: 16 * gib, source: "/proc/meminfo MemTotal",
		},
		{
			name: "cgroup v1, a container's cgroup mounted as its root",
			fs: fstest.MapFS{
				"proc/self/cgroup":                           file("4:memory:/docker/abc\n"),
				"proc/self/mountinfo":                        file("35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes": file("805306368\n"),
				"proc/meminfo":                               file(meminfo16G),
			},
			memory: 768 << 20, source: "cgroup v1 memory.limit_in_bytes",
		},
		{
			name: "a mount point with a space",
			fs: fstest.MapFS{
				"proc/self/cgroup":            file("0::/\n"),
				"proc/self/mountinfo":         file(`30 23 0:26 / /sys/fs/my\040cg rw - cgroup2 cgroup2 rw` + "\n"),
				"sys/fs/my cg/memory.max":     file("134217728\n"),
				"proc/meminfo":                file(meminfo16G),
				"sys/fs/cgroup/memory.max":    file("1\n"), // not where it is mounted
				"sys/fs/my\\040cg/memory.max": file("2\n"),
			},
			memory: 128 << 20, source: "cgroup v2 memory.max",
		},
		{
			name: "cgroup v1, a mount root that is only a prefix of the path",
			fs: fstest.MapFS{
				"proc/self/cgroup":                                  file("4:memory:/docker/abcdef\n"),
				"proc/self/mountinfo":                               file("35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes":        file("805306368\n"),
				"sys/fs/cgroup/memory/def/memory.limit_in_bytes":    file("1\n"), // not its cgroup
				"sys/fs/cgroup/memory/abcdef/memory.limit_in_bytes": file("2\n"),
				"proc/meminfo":                                      file(meminfo16G),
			},
			memory: 768 << 20, source: "cgroup v1 memory.limit_in_bytes",
		},
		{
			name: "GOMEMLIMIT below the cgroup's limit",
			fs: fstest.MapFS{
				"proc/self/cgroup":         file("0::/\n"),
				"proc/self/mountinfo":      file(mountV2),
				"sys/fs/cgroup/memory.max": file("1073741824\n"),
				"proc/meminfo":             file(meminfo16G),
			},
			goLimit: 300 << 20,
			memory:  300 << 20, source: "GOMEMLIMIT",
		},
		{
			name: "a cgroup limit above physical memory",
			fs: fstest.MapFS{
				"proc/self/cgroup":         file("0::/\n"),
				"proc/self/mountinfo":      file(mountV2),
				"sys/fs/cgroup/memory.max": file("68719476736\n"),
				"proc/meminfo":             file(meminfo16G),
			},
			memory: 16 * gib, source: "/proc/meminfo MemTotal",
		},
		{
			name:   "nothing to read",
			fs:     fstest.MapFS{},
			memory: FallbackMemory, source: "fallback",
		},
		{
			name: "garbage",
			fs: fstest.MapFS{
				"proc/self/cgroup":         file("0::/\n"),
				"proc/self/mountinfo":      file("garbage\n" + mountV2),
				"sys/fs/cgroup/memory.max": file("lots\n"),
				"proc/meminfo":             file("MemTotal: many kB\n"),
			},
			memory: FallbackMemory, source: "fallback",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			goLimit := c.goLimit
			if goLimit == 0 {
				goLimit = math.MaxInt64
			}
			got := sizing(c.fs, goLimit)
			want := Sizing{Memory: c.memory, Source: c.source, MaxKeys: int(c.memory / MemoryFraction / EntryBytes)}
			if got != want {
				t.Errorf("sizing = %+v, want %+v", got, want)
			}
		})
	}
}

// TestSizingSmall: a tiny limit still gives a bound of at least one entry.
func TestSizingSmall(t *testing.T) {
	got := sizing(fstest.MapFS{"proc/meminfo": file("MemTotal: 1 kB\n")}, math.MaxInt64)
	if got.Memory != 1024 || got.MaxKeys != 1 {
		t.Errorf("sizing = %+v, want 1024 bytes and 1 key", got)
	}
}
