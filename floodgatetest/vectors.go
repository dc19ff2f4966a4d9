package floodgatetest

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// The public conformance vectors of SPEC.md, copied from the project's
// shared vectors folder (a test keeps the copy in step).
//
//go:embed testdata/vectors/*.json
var vectorFS embed.FS

// BaseMicros is the time base added to every vector's at_us before it is
// replayed against a store: 1,699,992,000 s, a multiple of every duration
// the vectors use, so epoch-aligned windows fall where the vectors expect.
const BaseMicros int64 = 1_699_992_000_000_000

// Vector is one conformance vector: a policy and steps replayed from empty
// state (SPEC.md, "Vector file format").
type Vector struct {
	Name   string           `json:"name"`
	Source string           `json:"source"`
	Policy floodgate.Policy `json:"policy"`
	Steps  []Step           `json:"steps"`

	// File is the file the vector was read from.
	File string `json:"-"`
}

// Step is one operation of a vector.
type Step struct {
	AtMicros int64   `json:"at_us"`
	Key      string  `json:"key"`
	Op       string  `json:"op"` // add, peek or reset
	N        *int64  `json:"n,omitempty"`
	Expect   *Expect `json:"expect,omitempty"`
}

// Cost returns the step's n, 1 when absent.
func (s *Step) Cost() int64 {
	if s.N == nil {
		return 1
	}
	return *s.N
}

// Expect holds the fields a step checks; absent fields are not checked.
// Durations are µs, -1 meaning never.
type Expect struct {
	Allowed      *bool  `json:"allowed,omitempty"`
	Limit        *int64 `json:"limit,omitempty"`
	Remaining    *int64 `json:"remaining,omitempty"`
	RetryAfterUS *int64 `json:"retry_after_us,omitempty"`
	ResetAfterUS *int64 `json:"reset_after_us,omitempty"`
}

// Mismatch compares d with the expectation and describes every difference,
// or returns "" when d agrees.
func (e *Expect) Mismatch(d floodgate.Decision) string {
	if e == nil {
		return ""
	}
	var diffs []string
	if e.Allowed != nil && *e.Allowed != d.Allowed {
		diffs = append(diffs, fmt.Sprintf("allowed=%v want %v", d.Allowed, *e.Allowed))
	}
	check := func(name string, want *int64, got int64) {
		if want != nil && *want != got {
			diffs = append(diffs, fmt.Sprintf("%s=%d want %d", name, got, *want))
		}
	}
	check("limit", e.Limit, d.Limit)
	check("remaining", e.Remaining, d.Remaining)
	check("retry_after_us", e.RetryAfterUS, Micros(d.RetryAfter))
	check("reset_after_us", e.ResetAfterUS, Micros(d.ResetAfter))
	return strings.Join(diffs, ", ")
}

// Micros converts a decision's duration to SPEC.md's µs: -1 for
// floodgate.Never.
func Micros(d time.Duration) int64 {
	if d == floodgate.Never {
		return -1
	}
	return int64(d / time.Microsecond)
}

// PolicyName returns the name under which the suite replays vector i of a
// set: the policy names of the vector files are empty, and two vectors must
// never share state.
func (v *Vector) PolicyName(prefix string, i int) string {
	name := make([]byte, 0, len(v.Name))
	for _, c := range []byte(v.Name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
			name = append(name, c)
		default:
			name = append(name, '_')
		}
	}
	s := fmt.Sprintf("%s%d-%s", prefix, i, name)
	if len(s) > storekit.MaxNameLen {
		s = s[:storekit.MaxNameLen]
	}
	return s
}

// PublicVectors returns the vectors embedded in this package: the public
// set of SPEC.md, one file per algorithm.
func PublicVectors() ([]Vector, error) {
	sub, err := fs.Sub(vectorFS, "testdata/vectors")
	if err != nil {
		return nil, err
	}
	return LoadVectors(sub)
}

// LoadVectorDir reads every *.json file of a folder as vectors.
func LoadVectorDir(dir string) ([]Vector, error) {
	return LoadVectors(os.DirFS(dir))
}

// LoadVectors reads every *.json file at the top of fsys, in name order.
func LoadVectors(fsys fs.FS) ([]Vector, error) {
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var all []Vector
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		vs, err := ParseVectors(data, name)
		if err != nil {
			return nil, err
		}
		all = append(all, vs...)
	}
	return all, nil
}

// ParseVectors decodes a vector file: a JSON array of vectors, or one
// vector object. Each vector's policy must be valid once named; every step
// must have a known op and, for add and peek, a cost ≥ 1.
func ParseVectors(data []byte, file string) ([]Vector, error) {
	data = bytes.TrimSpace(data)
	var vs []Vector
	var err error
	if len(data) > 0 && data[0] == '{' {
		var v Vector
		err = json.Unmarshal(data, &v)
		vs = []Vector{v}
	} else {
		err = json.Unmarshal(data, &vs)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i := range vs {
		v := &vs[i]
		v.File = filepath.Base(file)
		p := v.Policy
		p.Name = "vector"
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("%s: vector %s: %w", file, v.Name, err)
		}
		if len(v.Steps) == 0 {
			return nil, fmt.Errorf("%s: vector %s: no steps", file, v.Name)
		}
		for j, s := range v.Steps {
			switch s.Op {
			case "add", "peek":
				if s.Cost() < 1 {
					return nil, fmt.Errorf("%s: vector %s step %d: n = %d, want ≥ 1", file, v.Name, j, s.Cost())
				}
			case "reset":
			default:
				return nil, fmt.Errorf("%s: vector %s step %d: op %q, want add, peek or reset", file, v.Name, j, s.Op)
			}
			if s.Key == "" {
				return nil, fmt.Errorf("%s: vector %s step %d: empty key", file, v.Name, j)
			}
		}
	}
	return vs, nil
}
