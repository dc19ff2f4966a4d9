// Command thirdparty writes floodgate's THIRD_PARTY notice for the Go
// binaries given as arguments, and fails if a linked module's license is
// not permissive (see package thirdparty).
//
//	go run ./cmd/thirdparty -modroot .. -o ../dist/THIRD_PARTY.md ../dist/floodgate_*/floodgate
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/floodgatehq/floodgate/tools/thirdparty"
)

func main() {
	modRoot := flag.String("modroot", "..", "the floodgate module's `directory`, where go mod download runs")
	out := flag.String("o", "THIRD_PARTY.md", "the notice's `file`")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "thirdparty: give the binaries to list")
		os.Exit(2)
	}
	if err := run(*modRoot, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(modRoot, out string, binaries []string) error {
	mods, goVersion, err := thirdparty.FromBinaries(binaries...)
	if err != nil {
		return err
	}
	resolved, err := thirdparty.Resolve(modRoot, mods)
	if err != nil {
		return err
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("thirdparty: go env GOROOT: %w", err)
	}
	goLicense, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "LICENSE"))
	if err != nil {
		return fmt.Errorf("thirdparty: the Go license: %w", err)
	}
	if _, err := thirdparty.Classify(goLicense); err != nil {
		return fmt.Errorf("thirdparty: the Go license: %w", err)
	}
	var b bytes.Buffer
	if err := thirdparty.Write(&b, goVersion, string(goLicense), resolved); err != nil {
		return err
	}
	return os.WriteFile(out, b.Bytes(), 0o644)
}
