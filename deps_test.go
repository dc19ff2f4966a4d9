package floodgate_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/floodgatehq/floodgate"

// fence says what one package of the module may depend on (transitively),
// by module-relative path ("" is the root package).
type fence struct {
	// own lists the packages of this module it may depend on; a trailing
	// "/..." allows a subtree. nil means any except those in notOwn.
	own []string
	// notOwn lists packages of this module it must never depend on.
	notOwn []string
	// thirdParty allows modules outside the standard library.
	thirdParty bool
}

// fences encodes DESIGN.md's rule: dependencies point inward to the root.
// A new package fails TestDependencyDirection until it gets a line here.
var fences = map[string]fence{
	"":              {own: []string{}},
	"internal/algo": {own: []string{""}},
	"floodgatetest": {own: []string{""}},
	"memstore":      {own: []string{"", "internal/algo"}},
	"redisstore":    {own: []string{""}, notOwn: storesMustNot, thirdParty: true},

	"httplimit":           {own: []string{""}},
	"config":              {own: []string{""}, thirdParty: true},
	"service":             {own: []string{"", "config", "httplimit"}, thirdParty: true},
	"transport/httpapi":   {own: []string{"", "config", "httplimit", "service"}, thirdParty: true},
	"transport/envoyrls":  {own: []string{"", "config", "httplimit", "service"}, thirdParty: true},
	"internal/telemetry":  {own: []string{""}, thirdParty: true},
	"httplimit/luascript": {own: []string{"", "httplimit"}, thirdParty: true},

	// The load generator drives a store or a running service from the
	// outside: it may read the configuration's rules (to predict which
	// one a descriptor meets) but not reach into the service itself.
	"internal/bench": {own: []string{"", "internal/algo", "redisstore", "config"}, thirdParty: true},

	"internal/testreport": {own: []string{}},
	"internal/redistest":  {own: []string{}},
	// The version a build is stamped with: anything may read it, and it
	// reads only the standard library.
	"internal/buildinfo": {own: []string{}},
}

// storesMustNot is what no store may import: configuration, the service,
// transports, the CLI.
var storesMustNot = []string{"config", "service", "transport/...", "internal/cli", "httplimit"}

func matches(pattern, pkg string) bool {
	if sub, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == sub || strings.HasPrefix(pkg, sub+"/")
	}
	return pattern == pkg
}

func anyMatch(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, pkg) })
}

// violations checks one package's dependencies (import paths) against its
// fence and returns what breaks it.
func violations(pkg string, deps []string) []string {
	f, ok := fences[pkg]
	if !ok {
		return []string{"no fence in deps_test.go for package " + pkg + ": add one from DESIGN.md's rules"}
	}
	var bad []string
	for _, dep := range deps {
		rel, own := strings.CutPrefix(dep, module)
		if own && (rel == "" || rel[0] == '/') {
			rel = strings.TrimPrefix(rel, "/")
			if strings.HasPrefix(rel, "internal/") && strings.HasSuffix(rel, "test") && !strings.HasSuffix(pkg, "test") {
				bad = append(bad, dep+" (test helpers stay out of production code)")
			}
			if f.own != nil && !anyMatch(f.own, rel) || anyMatch(f.notOwn, rel) {
				bad = append(bad, dep)
			}
			continue
		}
		first, _, _ := strings.Cut(dep, "/")
		if strings.Contains(first, ".") && !f.thirdParty {
			bad = append(bad, dep+" (outside the standard library)")
		}
	}
	return bad
}

// TestDependencyDirection enforces DESIGN.md's layering with go list -deps.
func TestDependencyDirection(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}}|{{join .Deps \",\"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 4 {
		t.Fatalf("go list found %d packages", len(lines))
	}
	for _, line := range lines {
		path, deps, _ := strings.Cut(line, "|")
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if strings.HasPrefix(rel, "cmd/") || strings.HasPrefix(rel, "examples/") || rel == "internal/cli" {
			continue // programs wire everything together
		}
		if _, ok := fences[rel]; !ok {
			t.Errorf("package %s has no fence in deps_test.go: add one from DESIGN.md's rules", path)
			continue
		}
		for _, v := range violations(rel, strings.Split(deps, ",")) {
			t.Errorf("package %s must not depend on %s", path, v)
		}
	}
}

// TestFenceChecker shows that the checker flags what it should.
func TestFenceChecker(t *testing.T) {
	saved := fences["redisstore"]
	fences["redisstore"] = fence{own: nil, notOwn: storesMustNot, thirdParty: true}
	defer func() { fences["redisstore"] = saved }() // other tests read it, in any order
	for _, c := range []struct {
		pkg  string
		deps []string
		bad  int
	}{
		{"", []string{"fmt", "time"}, 0},
		{"", []string{"fmt", module + "/memstore"}, 1},
		{"", []string{"github.com/redis/go-redis/v9"}, 1},
		{"internal/algo", []string{"math", module}, 0},
		{"memstore", []string{module, module + "/internal/algo", "sync"}, 0},
		{"memstore", []string{module + "/floodgatetest"}, 1},
		{"redisstore", []string{module, "github.com/redis/go-redis/v9"}, 0},
		{"redisstore", []string{module + "/service"}, 1},
		{"redisstore", []string{module + "/transport/envoyrls"}, 1},
		{"redisstore", []string{module + "/internal/redistest"}, 1},
		{"newpkg", []string{"fmt"}, 1},
	} {
		if got := violations(c.pkg, c.deps); len(got) != c.bad {
			t.Errorf("violations(%q, %v) = %v, want %d", c.pkg, c.deps, got, c.bad)
		}
	}
}
