package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrInvalid is wrapped by every error Load returns for a configuration it
// refuses (as opposed to a file it cannot read).
var ErrInvalid = errors.New("config: invalid configuration")

// Error is one problem of a configuration: where it is (file, line and the
// path of the field), and what is wrong. It wraps ErrInvalid.
type Error struct {
	File string // as given to Load, or "<built-in>"
	Line int    // 1-based; 0 when the problem is the file as a whole
	Path string // the field, such as policies.login.limits[1].resolution
	Msg  string
}

// Error returns "file:line: path: message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Errors is every problem of a configuration, in file and line order. It
// wraps ErrInvalid (and each *Error).
type Errors []*Error

// Error returns one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// collector gathers problems while a configuration is read.
type collector struct {
	errs Errors
	// atomicFile and atomicLine are where envoy.atomic_domains is, for
	// the check of its names once every domain is read.
	atomicFile string
	atomicLine int
}

func (c *collector) add(file string, line int, path, format string, args ...any) {
	c.errs = append(c.errs, &Error{File: file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// err returns the problems sorted by file and line, or nil.
func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	sort.SliceStable(c.errs, func(i, j int) bool {
		a, b := c.errs[i], c.errs[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})
	return c.errs
}
