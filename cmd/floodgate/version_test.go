package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionStamp builds the binary with the stamp make release gives it
// (version, revision and date set through -ldflags -X; the compiled
// packages come from TestMain's build) and checks the line "floodgate
// version" prints.
func TestVersionStamp(t *testing.T) {
	const (
		pkg = "github.com/floodgatehq/floodgate/internal/buildinfo"
		rev = "0123456789abcdef0123456789abcdef01234567"
		at  = "2026-11-26T05:04:00Z"
	)
	bin := filepath.Join(t.TempDir(), "floodgate")
	ldflags := "-X " + pkg + ".version=v0.1.0 -X " + pkg + ".revision=" + rev + " -X " + pkg + ".date=" + at
	if out, err := exec.Command(goTool(), "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	goVersion, err := exec.Command(goTool(), "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "floodgate v0.1.0 (0123456789ab, 2026-11-26T05:04:00Z, " + strings.TrimSpace(string(goVersion)) + ")\n"
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil || string(out) != want {
			t.Errorf("floodgate %s: %q, %v; want %q", arg, out, err, want)
		}
	}
}

// goTool is the go command of the toolchain running the tests.
func goTool() string {
	if root := runtime.GOROOT(); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
