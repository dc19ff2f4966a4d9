package cli

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/redisstore"
)

var update = flag.Bool("update", false, "rewrite docs/operations.md's generated sections")

// generated are docs/operations.md's sections generated from the code,
// each between "<!-- begin generated: NAME -->" and "<!-- end generated -->".
func generated() map[string]string {
	var env strings.Builder
	env.WriteString("| variable | used by | meaning |\n|---|---|---|\n")
	for _, v := range environment {
		fmt.Fprintf(&env, "| `%s` | %s | %s |\n", v.name, strings.Join(v.cmds, ", "), v.doc)
	}

	var flags strings.Builder
	flags.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	e := &environ{stdout: io.Discard, stderr: io.Discard}
	e.serveFlagSet(&serveFlags{}).VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if arg != "" && arg != "value" {
			name += " " + arg
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&flags, "| `%s` | %s | %s |\n", name, def, strings.ReplaceAll(usage, "\n", " "))
	})

	return map[string]string{
		"floodgate config defaults": "```yaml\n" + string(config.DefaultsYAML()) + "```\n",
		"environment":               env.String(),
		"serve flags":               flags.String(),
	}
}

// TestDocsGenerated: docs/operations.md embeds exactly what the code
// generates: the configuration with its defaults, the environment
// variables, serve's flags. "go test ./internal/cli -run TestDocsGenerated
// -update" rewrites them.
func TestDocsGenerated(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "operations.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := doc
	for name, want := range generated() {
		begin := []byte("<!-- begin generated: " + name + " -->\n")
		const endMark = "<!-- end generated -->"
		i := bytes.Index(out, begin)
		if i < 0 {
			t.Errorf("docs/operations.md has no %q section", name)
			continue
		}
		j := bytes.Index(out[i:], []byte(endMark))
		if j < 0 {
			t.Errorf("docs/operations.md: section %q has no end", name)
			continue
		}
		start, end := i+len(begin), i+j
		if got := string(out[start:end]); got != want {
			if !*update {
				t.Errorf("docs/operations.md's %q differs from what the code generates; run\n"+
					"  go test ./internal/cli -run TestDocsGenerated -update\nwant:\n%s\ngot:\n%s", name, want, got)
			}
			out = append(append(append([]byte{}, out[:start]...), want...), out[end:]...)
		}
	}
	if *update && !bytes.Equal(out, doc) {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("docs/operations.md rewritten")
	}
}

// TestConfigDefaults: "floodgate config defaults" prints the generated
// file, and "floodgate check" accepts it; store.prefix's default is the
// store's.
func TestConfigDefaults(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Run(t.Context(), []string{"config", "defaults"}, &stdout, &stderr, func(string) string { return "" }); code != 0 {
		t.Fatalf("config defaults: exit %d: %s", code, stderr.String())
	}
	if !bytes.Equal(stdout.Bytes(), config.DefaultsYAML()) {
		t.Error("config defaults does not print config.DefaultsYAML")
	}
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(file, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := Run(t.Context(), []string{"check", "--config", file}, io.Discard, &stderr, func(string) string { return "" }); code != 0 {
		t.Errorf("check refuses the defaults: exit %d: %s", code, stderr.String())
	}
	if config.DefaultPrefix != redisstore.DefaultPrefix {
		t.Errorf("config.DefaultPrefix %q, redisstore.DefaultPrefix %q", config.DefaultPrefix, redisstore.DefaultPrefix)
	}
	for _, args := range [][]string{{"config"}, {"config", "nope"}, {"config", "defaults", "env"}} {
		stderr.Reset()
		if code := Run(t.Context(), args, io.Discard, &stderr, func(string) string { return "" }); code != 2 ||
			!strings.Contains(stderr.String(), "want one of defaults or env") {
			t.Errorf("%q: exit %d, %q; want 2 and the choices named", args, code, stderr.String())
		}
	}
}
