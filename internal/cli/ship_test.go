package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/internal/buildinfo"
	"github.com/floodgatehq/floodgate/internal/cli"
)

// TestVersion: "version" and "--version" print buildinfo's line. These
// tests are built without the release's -ldflags (and here without VCS
// stamping), so the stamped form is tested by cmd/floodgate's
// TestVersionStamp and by make ship-check.
func TestVersion(t *testing.T) {
	want := buildinfo.Read().String() + "\n"
	line := regexp.MustCompile(`^floodgate \S+ \([0-9a-z-]+, \S+, go1\.\S+\)\n$`)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, stdout, stderr := run(t, nil, args...)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("floodgate %s: exit %d, stdout %q, stderr %q; want 0, %q", args[0], code, stdout, stderr, want)
		}
		if !line.MatchString(stdout) {
			t.Errorf("floodgate %s: %q does not match %s", args[0], stdout, line)
		}
	}
	if got := "floodgate " + cli.Version() + "\n"; got != want {
		t.Errorf("Version() = %q, want the line without the program's name: %q", got, want)
	}
	if code, stdout, _ := run(t, nil, "version", "--help"); code != 0 || !strings.Contains(stdout, "Usage: floodgate version") {
		t.Errorf("floodgate version --help: exit %d\n%s", code, stdout)
	}
	if code, stdout, stderr := run(t, nil, "version", "extra"); code != 2 || stdout != "" || !strings.Contains(stderr, `takes no arguments, found "extra"`) {
		t.Errorf("floodgate version extra: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
