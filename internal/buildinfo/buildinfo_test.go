package buildinfo

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	const rev = "6d60f8d1a2b3c4d5e6f708192a3b4c5d6e7f8091"
	vcs := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/floodgatehq/floodgate", Version: Devel},
			Settings: []debug.BuildSetting{
				{Key: "-trimpath", Value: "true"},
				{Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: rev},
				{Key: "vcs.time", Value: "2026-11-20T10:00:00Z"},
				{Key: "vcs.modified", Value: modified},
			},
		}
	}
	installed := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/floodgatehq/floodgate", Version: "v0.2.0"}}
	for _, c := range []struct {
		name                   string
		bi                     *debug.BuildInfo
		ldVersion, ldRev, ldAt string
		want                   Info
		line                   string
	}{
		{"release build", vcs("false"), "v0.1.0", rev, "2026-11-26T05:04:00Z",
			Info{"v0.1.0", rev, "2026-11-26T05:04:00Z", "go1.26.8"},
			"floodgate v0.1.0 (6d60f8d1a2b3, 2026-11-26T05:04:00Z, go1.26.8)"},
		{"ldflags win over the module version", installed, "v0.1.0-3-g6d60f8d-dirty", rev, "2026-11-26T05:04:00Z",
			Info{"v0.1.0-3-g6d60f8d-dirty", rev, "2026-11-26T05:04:00Z", "go1.26.8"},
			"floodgate v0.1.0-3-g6d60f8d-dirty (6d60f8d1a2b3, 2026-11-26T05:04:00Z, go1.26.8)"},
		{"go install @version", installed, "", "", "",
			Info{"v0.2.0", Unknown, Unknown, "go1.26.8"},
			"floodgate v0.2.0 (unknown, unknown, go1.26.8)"},
		{"checkout with VCS stamping", vcs("false"), "", "", "",
			Info{Devel, rev, "2026-11-20T10:00:00Z", "go1.26.8"},
			"floodgate (devel) (6d60f8d1a2b3, 2026-11-20T10:00:00Z, go1.26.8)"},
		{"checkout with changes", vcs("true"), "", "", "",
			Info{Devel, rev + "-dirty", "2026-11-20T10:00:00Z", "go1.26.8"},
			"floodgate (devel) (6d60f8d1a2b3-dirty, 2026-11-20T10:00:00Z, go1.26.8)"},
		{"-buildvcs=false", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: Devel}}, "", "", "",
			Info{Devel, Unknown, Unknown, "go1.26.8"},
			"floodgate (devel) (unknown, unknown, go1.26.8)"},
		{"no build info", nil, "", "", "",
			Info{Devel, Unknown, Unknown, runtime.Version()},
			"floodgate (devel) (unknown, unknown, " + runtime.Version() + ")"},
	} {
		got := resolve(c.bi, c.ldVersion, c.ldRev, c.ldAt)
		if got != c.want {
			t.Errorf("%s: resolve = %+v, want %+v", c.name, got, c.want)
		}
		if s := got.String(); s != c.line {
			t.Errorf("%s: String() = %q, want %q", c.name, s, c.line)
		}
	}
}

// TestRead checks the running test binary's Info: this package's tests
// are built without the release ldflags and, here, without VCS stamping
// (GOFLAGS=-buildvcs=false), so only the shape can be asserted.
func TestRead(t *testing.T) {
	in := Read()
	if in.Version == "" || in.Revision == "" || in.Date == "" {
		t.Fatalf("Read() = %+v: a field is empty", in)
	}
	if in.GoVersion != runtime.Version() {
		t.Errorf("GoVersion = %q, want %q", in.GoVersion, runtime.Version())
	}
	re := regexp.MustCompile(`^floodgate \S+ \([0-9a-z-]+, \S+, go\S+\)$`)
	if s := in.String(); !re.MatchString(s) {
		t.Errorf("String() = %q, want it to match %s", s, re)
	}
}
