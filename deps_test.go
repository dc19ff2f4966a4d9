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
	// own lists every package of this module it may depend on; a trailing
	// "/..." allows a subtree. Empty: none.
	own []string
	// thirdParty allows modules outside the standard library.
	thirdParty bool
}

// fences encodes DESIGN.md's rule: dependencies point inward to the root.
// Every package has its line, listing what it may depend on; there are no
// exceptions. A new package fails TestDependencyDirection until it gets a
// line here.
var fences = map[string]fence{
	// The caller's surface, and the kits beside it: the standard library
	// and the root alone.
	"":         {},
	"usage":    {},
	"storekit": {own: []string{""}},
	"rlheader": {own: []string{""}},

	// The algorithms and the stores.
	"internal/algo": {own: []string{"", "storekit"}},
	"memstore":      {own: []string{"", "storekit", "usage", "internal/algo"}},
	"redisstore":    {own: []string{"", "storekit", "usage", "internal/algo"}, thirdParty: true},
	"floodgatetest": {own: []string{"", "storekit", "usage", "internal/algo"}},

	// The failure policy, and the middleware (which never imports a
	// store, the service or the failure policy: callers wrap their stores;
	// it reads the store kit's group helpers for Config.Atomic).
	"failure":             {own: []string{"", "storekit", "internal/throttle"}},
	"httplimit":           {own: []string{"", "storekit", "rlheader"}},
	"httplimit/luascript": {own: []string{"internal/throttle", "", "storekit", "rlheader", "failure", "httplimit"}, thirdParty: true},

	// The service and what serves it.
	"config":             {own: []string{"internal/throttle", "", "storekit", "failure", "internal/auth"}, thirdParty: true},
	"service":            {own: []string{"internal/throttle", "", "storekit", "usage", "failure", "config", "internal/auth"}, thirdParty: true},
	"rls":                {own: []string{"internal/throttle", "", "storekit", "usage", "failure", "config", "internal/auth", "rlheader", "service"}, thirdParty: true},
	"transport/httpapi":  {own: []string{"transport/reqlog", "internal/throttle", "", "storekit", "usage", "failure", "config", "internal/auth", "rlheader", "service", "rls", "internal/telemetry"}, thirdParty: true},
	"transport/envoyrls": {own: []string{"transport/reqlog", "internal/throttle", "", "storekit", "usage", "failure", "config", "internal/auth", "rlheader", "service", "rls"}, thirdParty: true},
	"transport/reqlog":   {},
	"internal/tracing":   {thirdParty: true},
	"internal/telemetry": {own: []string{"internal/throttle", "", "storekit", "failure"}, thirdParty: true},

	// The load generator drives a store or a running service from the
	// outside: it asks the service which rule applies, and holds what it
	// admits to the algorithms' own bound.
	"internal/bench": {own: []string{"", "storekit", "usage", "internal/algo", "redisstore"}, thirdParty: true},

	// The programs, which wire everything together (but test helpers).
	"internal/cli": {own: []string{"internal/tracing", "internal/throttle", "", "storekit", "usage", "failure", "config", "rlheader", "service", "rls", "internal/algo",
		"memstore", "redisstore", "internal/bench", "internal/telemetry", "transport/...", "internal/buildinfo", "internal/auth", "internal/certs", "internal/connlimit"}, thirdParty: true},
	"cmd/floodgate": {own: []string{"internal/tracing", "internal/throttle", "", "storekit", "usage", "failure", "config", "rlheader", "service", "rls", "internal/algo",
		"memstore", "redisstore", "internal/bench", "internal/telemetry", "transport/...", "internal/cli", "internal/buildinfo", "internal/auth", "internal/certs", "internal/connlimit"}, thirdParty: true},
	"examples/quickstart": {own: []string{"", "storekit", "usage", "internal/algo", "memstore"}},
	"examples/llm-budget": {own: []string{"", "storekit", "usage", "internal/algo", "memstore", "redisstore", "rlheader"}, thirdParty: true},
	"examples/api": {own: []string{"internal/throttle", "", "storekit", "usage", "internal/algo", "memstore", "redisstore", "failure", "rlheader", "httplimit"},
		thirdParty: true},

	// Test helpers.
	"internal/testreport":   {},
	"internal/throttle":     {},
	"internal/redistest":    {},
	"internal/delayproxy":   {}, // a link's latency, for tests and benchmarks
	"internal/rlheadertest": {thirdParty: true},
	// The version a build is stamped with: anything may read it, and it
	// reads only the standard library.
	"internal/buildinfo": {},

	// The service's credentials, its TLS files and its connection caps:
	// the standard library alone.
	"internal/auth":      {},
	"internal/certs":     {},
	"internal/connlimit": {},
	"internal/certtest":  {},
}

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
			if !anyMatch(f.own, rel) {
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
		{"redisstore", []string{module + "/internal/redistest"}, 2},
		{"internal/cli", []string{module + "/transport/httpapi", module + "/service"}, 0},
		{"internal/cli", []string{module + "/internal/redistest"}, 2},
		{"httplimit", []string{module + "/failure"}, 1},
		{"newpkg", []string{"fmt"}, 1},
	} {
		if got := violations(c.pkg, c.deps); len(got) != c.bad {
			t.Errorf("violations(%q, %v) = %v, want %d", c.pkg, c.deps, got, c.bad)
		}
	}
}
