package luascript

import (
	"errors"
	"strconv"
	"testing"
)

// replyOf builds a script reply from fuzz bytes, as go-redis hands replies
// over: strings, int64s, nils, nested lists (and values of other types, as
// a driver could give). It consumes b and returns the rest.
func replyOf(b []byte, depth int) (any, []byte) {
	if len(b) == 0 {
		return nil, b
	}
	tag, b := b[0], b[1:]
	switch tag % 7 {
	case 0: // a string of the next byte's length
		n := 0
		if len(b) > 0 {
			n, b = int(b[0]), b[1:]
		}
		n = min(n, len(b))
		return string(b[:n]), b[n:]
	case 1: // an integer
		var v int64
		for i := 0; i < 8 && len(b) > 0; i++ {
			v, b = v<<8|int64(b[0]), b[1:]
		}
		return v, b
	case 2:
		return nil, b
	case 3: // a list of up to 7 elements
		if depth > 4 {
			return []any{}, b
		}
		n := 0
		if len(b) > 0 {
			n, b = int(b[0]%8), b[1:]
		}
		list := make([]any, 0, n)
		for i := 0; i < n; i++ {
			var v any
			v, b = replyOf(b, depth+1)
			list = append(list, v)
		}
		return list, b
	case 4:
		return "allow", b
	case 5:
		return "deny", b
	}
	return 3.5, b // a float: no Redis reply is one
}

// FuzzParseReply drives the decoding of a script's reply: it never
// panics; a refusal wraps ErrMalformedReply; what it accepts is "allow" or
// "deny" with header fields whose names are HTTP tokens and whose values
// hold no control character, each from the reply.
func FuzzParseReply(f *testing.F) {
	f.Add([]byte{3, 2, 4, 3, 3, 0, 2, '1', '0', 0, 2, '6', '0', 0, 1, '9'})
	f.Add([]byte{3, 2, 5, 3, 1, 3, 2, 0, 5, 'x', '-', 'a', 'b', 'c', 1, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Add([]byte{3, 3, 4, 3, 1, 0, 3, 'a', '\n', 'b', 6})
	f.Add([]byte{3, 1, 4})
	f.Add([]byte{0, 5, 'a', 'l', 'l', 'o', 'w'})
	names := FixedWindowHeaders()
	f.Fuzz(func(t *testing.T, data []byte) {
		reply, _ := replyOf(data, 0)
		allowed, fields, err := parseReply(reply, names)
		if err != nil {
			if !errors.Is(err, ErrMalformedReply) || allowed || fields != nil {
				t.Fatalf("refusal %v: allowed %v, fields %v", err, allowed, fields)
			}
			return
		}
		list := reply.([]any)
		if allowed != (list[0] == "allow") || !allowed && list[0] != "deny" {
			t.Fatalf("verdict %v from %v", allowed, list[0])
		}
		values := list[1].([]any)
		if len(fields) != len(values) {
			t.Fatalf("%d fields from %d values", len(fields), len(values))
		}
		for i, fv := range fields {
			if !validName(fv[0]) || !validValue(fv[1]) {
				t.Fatalf("field %d: %q: %q", i, fv[0], fv[1])
			}
			want := values[i]
			if pair, ok := want.([]any); ok {
				want = pair[1]
			}
			if s, ok := want.(int64); ok {
				want = strconv.FormatInt(s, 10)
			}
			if want != fv[1] {
				t.Fatalf("field %d: value %q, the reply's %v", i, fv[1], want)
			}
		}
	})
}
