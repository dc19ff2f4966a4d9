// Package thirdparty writes the THIRD_PARTY notice that ships with
// floodgate's binaries, its image and its Debian package: every module
// linked into the binary, its license as identified by
// github.com/google/licensecheck, and the license's text from the module
// cache. It refuses a module whose license it cannot identify or that is
// not on the permissive list.
package thirdparty

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/licensecheck"
)

// Permissive are the SPDX identifiers a dependency's license may have:
// licenses that ask for no more than keeping the notice (and, for
// Apache-2.0, its NOTICE file).
var Permissive = map[string]bool{
	"Apache-2.0":   true,
	"BSD-2-Clause": true,
	"BSD-3-Clause": true,
	"MIT":          true,
	"MIT-0":        true,
	"ISC":          true,
	"0BSD":         true,
	"Zlib":         true,
	"Unlicense":    true,
	"CC0-1.0":      true,
}

// ErrNotPermissive is returned (wrapped, naming the module) for a license
// that is not in Permissive or that licensecheck cannot identify.
var ErrNotPermissive = errors.New("thirdparty: license not identified as permissive")

// MinCoverage is the share of a license file, in percent, that
// licensecheck must recognise as licenses of Permissive. Below it the
// file holds terms no one has reviewed.
const MinCoverage = 75

// Module is a Go module linked into the binary.
type Module struct {
	Path, Version string
	Dir           string   // its directory in the module cache
	Licenses      []string // SPDX identifiers found, sorted
	Texts         []File   // LICENSE, COPYING, NOTICE files, by name
}

// File is a license or notice file of a module.
type File struct {
	Name, Text string
}

// Classify identifies the licenses of one license file's text. It returns
// their sorted SPDX identifiers, or an error wrapping ErrNotPermissive
// when a license found is not permissive or less than MinCoverage percent
// of the text is recognised.
func Classify(text []byte) ([]string, error) {
	cov := licensecheck.Scan(text)
	seen := map[string]bool{}
	var ids []string
	for _, m := range cov.Match {
		if !seen[m.ID] {
			seen[m.ID] = true
			ids = append(ids, m.ID)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !Permissive[id] {
			return ids, fmt.Errorf("%w: %s", ErrNotPermissive, id)
		}
	}
	if len(ids) == 0 || cov.Percent < MinCoverage {
		return ids, fmt.Errorf("%w: only %.0f%% of the text recognised (%s)", ErrNotPermissive, cov.Percent, strings.Join(ids, ", "))
	}
	return ids, nil
}

// isLicenseFile reports whether a module's top-level file is a license or
// notice to ship.
func isLicenseFile(name string) (license, notice bool) {
	n := strings.ToUpper(name)
	for _, p := range []string{"LICENSE", "LICENCE", "COPYING", "UNLICENSE"} {
		if strings.HasPrefix(n, p) {
			return true, false
		}
	}
	return false, strings.HasPrefix(n, "NOTICE")
}

// Load reads the license and notice files of the module in dir and
// classifies its licenses.
func Load(path, version, dir string) (Module, error) {
	m := Module{Path: path, Version: version, Dir: dir}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return m, fmt.Errorf("thirdparty: %s: %w", path, err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		license, notice := isLicenseFile(e.Name())
		if e.IsDir() || (!license && !notice) {
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return m, fmt.Errorf("thirdparty: %s: %w", path, err)
		}
		m.Texts = append(m.Texts, File{Name: e.Name(), Text: string(text)})
		if !license {
			continue
		}
		ids, err := Classify(text)
		if err != nil {
			return m, fmt.Errorf("%s %s: %s: %w", path, version, e.Name(), err)
		}
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				m.Licenses = append(m.Licenses, id)
			}
		}
	}
	if len(m.Licenses) == 0 {
		return m, fmt.Errorf("%w: %s %s has no LICENSE file", ErrNotPermissive, path, version)
	}
	sort.Strings(m.Licenses)
	return m, nil
}

// FromBinaries returns the modules linked into the given Go binaries (the
// union of their build information) and the Go release that built them.
func FromBinaries(paths ...string) (mods map[string]string, goVersion string, err error) {
	mods = map[string]string{}
	for _, p := range paths {
		bi, err := buildinfo.ReadFile(p)
		if err != nil {
			return nil, "", fmt.Errorf("thirdparty: %w", err)
		}
		if goVersion != "" && bi.GoVersion != goVersion {
			return nil, "", fmt.Errorf("thirdparty: %s built by %s, others by %s", p, bi.GoVersion, goVersion)
		}
		goVersion = bi.GoVersion
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			mods[d.Path] = d.Version
		}
	}
	return mods, goVersion, nil
}

// FromPackages returns the modules that "go list -deps" finds under the
// packages pkgs of the module in modRoot, for each GOOS/GOARCH pair
// given as "os/arch": what a build would link, without building.
func FromPackages(modRoot string, platforms []string, pkgs ...string) (map[string]string, error) {
	mods := map[string]string{}
	for _, pl := range platforms {
		goos, goarch, _ := strings.Cut(pl, "/")
		cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}"}, pkgs...)...)
		cmd.Dir = modRoot
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("thirdparty: go list for %s: %v\n%s", pl, err, stderr.String())
		}
		for _, line := range strings.Split(string(out), "\n") {
			if p, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				mods[p] = v
			}
		}
	}
	return mods, nil
}

// Resolve finds each module in the module cache (with "go mod download
// -json", run in modRoot, which needs no network for modules already
// there) and loads its licenses. Every refusal is reported, joined.
func Resolve(modRoot string, mods map[string]string) ([]Module, error) {
	paths := make([]string, 0, len(mods))
	for p := range mods {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	args := []string{"mod", "download", "-json"}
	for _, p := range paths {
		args = append(args, p+"@"+mods[p])
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = modRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("thirdparty: go mod download: %v\n%s", err, stderr.String())
	}
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var d struct{ Path, Version, Dir, Error string }
		if err := dec.Decode(&d); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("thirdparty: go mod download: %w", err)
		}
		if d.Error != "" {
			return nil, fmt.Errorf("thirdparty: %s@%s: %s", d.Path, d.Version, d.Error)
		}
		dirs[d.Path] = d.Dir
	}
	var out2 []Module
	var errs []error
	for _, p := range paths {
		m, err := Load(p, mods[p], dirs[p])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out2 = append(out2, m)
	}
	return out2, errors.Join(errs...)
}

// Write writes the notice: a table of the modules and their licenses,
// then each license and notice text in full. The output depends on its
// arguments only, so a release rebuilt from the same commit is identical.
func Write(w io.Writer, goVersion, goLicense string, mods []Module) error {
	var b strings.Builder
	b.WriteString("# Third-party software in floodgate\n\n")
	b.WriteString("floodgate is distributed under the Apache License 2.0 (LICENSE). Its binaries\n")
	b.WriteString("contain the Go runtime and standard library and the Go modules below, each under\n")
	b.WriteString("the license named, whose text follows. This file is generated by make release\n")
	b.WriteString("(tools/cmd/thirdparty) from the binaries' build information.\n\n")
	b.WriteString("| module | version | license |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| Go standard library and runtime | %s | BSD-3-Clause |\n", goVersion)
	for _, m := range mods {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", m.Path, m.Version, strings.Join(m.Licenses, ", "))
	}
	fmt.Fprintf(&b, "\n## Go standard library and runtime %s (BSD-3-Clause)\n\n", goVersion)
	writeText(&b, "LICENSE", goLicense)
	for _, m := range mods {
		fmt.Fprintf(&b, "\n## %s %s (%s)\n\n", m.Path, m.Version, strings.Join(m.Licenses, ", "))
		for i, f := range m.Texts {
			if i > 0 {
				b.WriteString("\n")
			}
			writeText(&b, f.Name, f.Text)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeText(b *strings.Builder, name, text string) {
	fence := "```"
	for strings.Contains(text, fence) {
		fence += "`"
	}
	fmt.Fprintf(b, "%s:\n\n%stext\n%s\n%s\n", name, fence, strings.TrimRight(text, "\n"), fence)
}
