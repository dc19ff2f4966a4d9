package shipcheck

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/floodgatehq/floodgate/internal/cli"
)

// repo is the floodgate repository's root, from this package's directory.
const repo = "../.."

// dist returns the directory of make release's artifacts, or skips the
// test (fails it under SHIP_REQUIRE=1) when there is none.
func dist(t *testing.T) string {
	t.Helper()
	d := os.Getenv("SHIP_DIST")
	if d == "" {
		d = filepath.Join(repo, "dist")
	}
	if _, err := os.Stat(filepath.Join(d, "SHA256SUMS")); err != nil {
		if os.Getenv("SHIP_REQUIRE") != "" {
			t.Fatalf("no release artifacts in %s (SHIP_REQUIRE is set): %v", d, err)
		}
		t.Skipf("no release artifacts in %s: run make release (make ship-check runs this with them)", d)
	}
	return d
}

// tool returns the path of a tool pinned in tools/go.mod, building it if
// needed.
func tool(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "tool", "-n", name).Output()
	if err != nil {
		t.Fatalf("go tool -n %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// floodgateCheck runs "floodgate check --config path" in-process and
// returns its exit status and output.
func floodgateCheck(path string) (int, string) {
	return floodgateCheckEnv(path, nil)
}

// floodgateCheckEnv is floodgateCheck with the environment variables of
// env (and no others), as a container that sets them runs serve.
func floodgateCheckEnv(path string, env map[string]string) (int, string) {
	var out, errOut syncBuffer
	code := cli.Run(context.Background(), []string{"check", "--config", path}, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String() + errOut.String()
}
