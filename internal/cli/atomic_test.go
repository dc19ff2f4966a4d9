package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/internal/cli"
)

// TestCheckAtomicDomains: check marks the atomic domains, and refuses
// envoy.atomic_domains with store.type redis-cluster, naming the field.
func TestCheckAtomicDomains(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "floodgate.yaml"), []byte("envoy:\n  atomic_domains: [edge]\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "plain.yaml"), []byte("domain: plain\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644)
	code, out, errOut := run(t, map[string]string{cli.EnvConfig: dir}, "check")
	if code != 0 || !strings.Contains(out, "edge.yaml:1, atomic") || strings.Contains(out, "plain.yaml:1, atomic") {
		t.Fatalf("check: exit %d, stderr %q\n%s\nwant edge marked atomic, plain not", code, errOut, out)
	}
	os.WriteFile(filepath.Join(dir, "floodgate.yaml"), []byte("store:\n  addrs: [\"127.0.0.1:7000\"]\nenvoy:\n  atomic_domains: [edge]\n"), 0o644)
	code, _, errOut = run(t, map[string]string{cli.EnvConfig: dir}, "check")
	if code != 1 || !strings.Contains(errOut, "floodgate.yaml:4: envoy.atomic_domains: not with store.type redis-cluster") {
		t.Fatalf("check on a cluster: exit %d, stderr %q; want envoy.atomic_domains refused at floodgate.yaml:4", code, errOut)
	}
}
