package config

import (
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// reader walks the YAML nodes of one file, reporting problems with their
// line and path to a collector.
type reader struct {
	file     string
	c        *collector
	override *StoreOverride // the store's kind and addresses in use, when not the files'
}

func (r *reader) errorf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	r.c.add(r.file, line, path, format, args...)
}

// field is one key of a mapping.
type field struct {
	key   string
	line  int
	value *yaml.Node
}

// mapping returns the fields of a mapping node in order, or reports that n
// is not a mapping. Duplicate keys are reported.
func (r *reader) mapping(n *yaml.Node, path string) ([]field, bool) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		r.errorf(n, path, "want a mapping (key: value lines), found %s", describe(n))
		return nil, false
	}
	var out []field
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			r.errorf(k, join(path, k.Value), "appears twice")
			continue
		}
		seen[k.Value] = true
		out = append(out, field{key: k.Value, line: k.Line, value: v})
	}
	return out, true
}

// fields reads a mapping whose keys must be among allowed; it reports
// unknown keys (naming the allowed ones) and returns the known ones.
func (r *reader) fields(n *yaml.Node, path string, allowed ...string) map[string]field {
	fs, ok := r.mapping(n, path)
	if !ok {
		return nil
	}
	out := make(map[string]field, len(fs))
	for _, f := range fs {
		if !contains(allowed, f.key) {
			r.c.add(r.file, f.line, join(path, f.key), "unknown field; allowed here: %s", strings.Join(allowed, ", "))
			continue
		}
		out[f.key] = f
	}
	return out
}

func (r *reader) sequence(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		r.errorf(n, path, "want a list, found %s", describe(n))
		return nil, false
	}
	return n.Content, true
}

func (r *reader) scalar(n *yaml.Node, path, want string) (string, bool) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		r.errorf(n, path, "want %s, found %s", want, describe(n))
		return "", false
	}
	return n.Value, true
}

func (r *reader) str(n *yaml.Node, path string) (string, bool) {
	return r.scalar(n, path, "a string")
}

func (r *reader) boolean(n *yaml.Node, path string) (bool, bool) {
	s, ok := r.scalar(n, path, "true or false")
	if !ok {
		return false, false
	}
	switch s {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	r.errorf(n, path, "want true or false, found %q", s)
	return false, false
}

func (r *reader) integer(n *yaml.Node, path string, min, max int64) (int64, bool) {
	s, ok := r.scalar(n, path, "an integer")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < min || v > max {
		r.errorf(n, path, "want an integer from %d to %d, found %q", min, max, s)
		return 0, false
	}
	return v, true
}

// duration reads a Go duration string ("250ms", "1m30s") ≥ min.
func (r *reader) duration(n *yaml.Node, path string, min time.Duration) (time.Duration, bool) {
	s, ok := r.scalar(n, path, `a duration such as "250ms" or "1m30s"`)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		r.errorf(n, path, `want a duration such as "250ms" or "1m30s", found %q`, s)
		return 0, false
	}
	if d < min {
		r.errorf(n, path, "want a duration of at least %s, found %s", min, d)
		return 0, false
	}
	return d, true
}

func (r *reader) strings(n *yaml.Node, path string) ([]string, bool) {
	items, ok := r.sequence(n, path)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		s, ok := r.str(item, path+"["+strconv.Itoa(i)+"]")
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// maxAliasNodes bounds the nodes aliases may add to a file: the readers
// walk aliases expanded, so that a few nested ones ("billion laughs")
// would take forever.
const maxAliasNodes = 100_000

// checkAliases reports an alias inside the node its anchor names (it would
// expand without end) and aliases that add more than maxAliasNodes nodes;
// it returns false then.
func (r *reader) checkAliases(doc *yaml.Node) bool {
	var written func(n *yaml.Node) int
	written = func(n *yaml.Node) int {
		s := 1
		for _, c := range n.Content {
			s += written(c)
		}
		return s
	}
	limit := written(doc) + maxAliasNodes
	sizes := map[*yaml.Node]int{} // expanded sizes, at most limit+1
	open := map[*yaml.Node]bool{} // nodes being sized
	ok := true
	var size func(n *yaml.Node) int
	size = func(n *yaml.Node) int {
		if s, done := sizes[n]; done {
			return s
		}
		open[n] = true
		s := 1
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			if open[n.Alias] {
				r.errorf(n, "", "alias *%s is inside the node its anchor names: it would repeat without end", n.Value)
				ok = false
			} else {
				s += size(n.Alias)
			}
		}
		for _, c := range n.Content {
			s = min(s+size(c), limit+1)
		}
		delete(open, n)
		sizes[n] = min(s, limit+1)
		return sizes[n]
	}
	if size(doc) > limit && ok {
		r.errorf(doc, "", "aliases expand this file by more than %d nodes", maxAliasNodes)
		ok = false
	}
	return ok
}

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func describe(n *yaml.Node) string {
	n = resolve(n)
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "an empty value"
	case n.Kind == yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	}
	return "something else"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
