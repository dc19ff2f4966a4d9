// Package buildinfo says which floodgate a binary is: its version, the
// commit it was built from, when that commit was made, and the Go release
// that compiled it.
//
// A release build (make release) sets all three through the linker:
//
//	go build -ldflags "-X github.com/floodgatehq/floodgate/internal/buildinfo.version=v0.1.0
//	  -X github.com/floodgatehq/floodgate/internal/buildinfo.revision=<commit>
//	  -X github.com/floodgatehq/floodgate/internal/buildinfo.date=<commit time, RFC 3339 UTC>"
//
// Without them, Read falls back on what the Go toolchain recorded in the
// binary (runtime/debug.ReadBuildInfo): the module version for
// "go install github.com/floodgatehq/floodgate/cmd/floodgate@v0.1.0", and
// the vcs.revision, vcs.time and vcs.modified settings of a build from a
// git checkout made with -buildvcs=true (the toolchain's default outside
// this project's CI, which sets GOFLAGS=-buildvcs=false).
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set with -ldflags -X by the release build; empty otherwise. They are
// variables, not constants, only so that the linker can set them: nothing
// assigns them at run time.
var (
	version  string // a tag such as v0.1.0, or git describe's v0.1.0-3-gabc1234-dirty
	revision string // the full commit hash
	date     string // the commit's time, RFC 3339 in UTC
)

// Devel is the Version of a build that recorded no version: go build or go
// run from a checkout without the release build's -ldflags.
const Devel = "(devel)"

// Unknown stands for a Revision or Date the build did not record.
const Unknown = "unknown"

// Info describes a binary. Every field is non-empty.
type Info struct {
	// Version is the release (v0.1.0), git describe's form of a commit
	// after or beside one (v0.1.0-3-gabc1234, with -dirty for uncommitted
	// changes), or Devel.
	Version string
	// Revision is the commit's full hash (with "-dirty" appended when the
	// toolchain recorded uncommitted changes), or Unknown.
	Revision string
	// Date is the commit's time as RFC 3339 in UTC, or Unknown. It is the
	// commit's time rather than the build's, so that two builds of one
	// commit are identical.
	Date string
	// GoVersion is the Go release that compiled the binary (go1.26.8).
	GoVersion string
}

// Read returns the running binary's Info. It is cheap, never fails and is
// safe for concurrent use.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(bi, version, revision, date)
}

// resolve combines the linker's values (which win) with what the
// toolchain recorded in bi (which may be nil).
func resolve(bi *debug.BuildInfo, ldVersion, ldRevision, ldDate string) Info {
	in := Info{Version: ldVersion, Revision: ldRevision, Date: ldDate, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != Devel {
			in.Version = bi.Main.Version
		}
		var rev, at string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if in.Revision == "" && rev != "" {
			in.Revision = rev
			if dirty {
				in.Revision += "-dirty"
			}
		}
		if in.Date == "" {
			in.Date = at
		}
	}
	if in.Version == "" {
		in.Version = Devel
	}
	if in.Revision == "" {
		in.Revision = Unknown
	}
	if in.Date == "" {
		in.Date = Unknown
	}
	return in
}

// ShortRevision is Revision cut to its first 12 hex digits (keeping a
// "-dirty" suffix), as String prints it.
func (in Info) ShortRevision() string {
	rev, suffix, _ := strings.Cut(in.Revision, "-")
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if suffix != "" {
		return rev + "-" + suffix
	}
	return rev
}

// String is the line "floodgate version" prints, always of the shape
// "floodgate VERSION (REVISION, DATE, GOVERSION)":
//
//	floodgate v0.1.0 (6d60f8d1a2b3, 2026-11-26T05:04:00Z, go1.26.8)   a release build
//	floodgate v0.1.0 (unknown, unknown, go1.26.8)                     go install ...@v0.1.0
//	floodgate (devel) (unknown, unknown, go1.26.8)                    go build, no VCS stamp
func (in Info) String() string {
	return "floodgate " + in.Version + " (" + in.ShortRevision() + ", " + in.Date + ", " + in.GoVersion + ")"
}
