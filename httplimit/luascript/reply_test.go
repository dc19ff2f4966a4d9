package luascript

import (
	"errors"
	"slices"
	"testing"
)

func TestParseReply(t *testing.T) {
	names := FixedWindowHeaders()
	type fields = [][2]string
	for _, c := range []struct {
		name    string
		reply   any
		allowed bool
		want    fields
	}{
		{"seed fixed window", []any{"allow", []any{"10", "60", "9"}}, true,
			fields{{"x-ratelimit-limit", "10"}, {"x-ratelimit-reset", "60"}, {"x-ratelimit-remaining", "9"}}},
		{"seed pair", []any{"allow", []any{"10", []any{"x-acme-header", "60"}, "9"}}, true,
			fields{{"x-ratelimit-limit", "10"}, {"x-acme-header", "60"}, {"x-ratelimit-remaining", "9"}}},
		{"deny", []any{"deny", []any{"10", "0", "0"}}, false,
			fields{{"x-ratelimit-limit", "10"}, {"x-ratelimit-reset", "0"}, {"x-ratelimit-remaining", "0"}}},
		{"fewer values than names", []any{"allow", []any{"10"}}, true, fields{{"x-ratelimit-limit", "10"}}},
		{"no values", []any{"deny", []any{}}, false, fields{}},
		{"pair past the names", []any{"deny", []any{"1", "2", "3", []any{"retry-after", "7"}}}, false,
			fields{{"x-ratelimit-limit", "1"}, {"x-ratelimit-reset", "2"}, {"x-ratelimit-remaining", "3"}, {"retry-after", "7"}}},
		{"integers", []any{"allow", []any{int64(10), []any{"x-n", int64(-1)}}}, true, fields{{"x-ratelimit-limit", "10"}, {"x-n", "-1"}}},
		{"further elements ignored", []any{"allow", []any{"1"}, "extra", []any{int64(3)}}, true, fields{{"x-ratelimit-limit", "1"}}},
	} {
		allowed, got, err := parseReply(c.reply, names)
		if err != nil || allowed != c.allowed || !slices.Equal(got, c.want) {
			t.Errorf("%s: parseReply = %v, %v, %v; want %v, %v", c.name, allowed, got, err, c.allowed, c.want)
		}
	}
	for _, c := range []struct {
		name  string
		reply any
	}{
		{"not a list", "allow"},
		{"nil", nil},
		{"one element", []any{"allow"}},
		{"unknown verdict", []any{"block", []any{}}},
		{"verdict not a string", []any{int64(1), []any{}}},
		{"values not a list", []any{"allow", "10"}},
		{"more plain values than names", []any{"allow", []any{"1", "2", "3", "4"}}},
		{"a triple", []any{"allow", []any{[]any{"a", "b", "c"}}}},
		{"a pair of lists", []any{"allow", []any{[]any{[]any{}, "b"}}}},
		{"nil value", []any{"allow", []any{nil}}},
		{"bad name", []any{"allow", []any{[]any{"x header", "1"}}}},
		{"empty name", []any{"allow", []any{[]any{"", "1"}}}},
		{"bad value", []any{"allow", []any{"1\r\nx-injected: 1"}}},
	} {
		_, _, err := parseReply(c.reply, names)
		if !errors.Is(err, ErrMalformedReply) {
			t.Errorf("%s: parseReply error %v, want ErrMalformedReply", c.name, err)
		}
	}
}

func TestPositiveInt(t *testing.T) {
	for v, want := range map[any]bool{1: true, int64(60): true, "10": true, uint(3): true, 0: false, "-1": false, "x": false, 1.5: false, nil: false} {
		if got := positiveInt(v); got != want {
			t.Errorf("positiveInt(%#v) = %v", v, got)
		}
	}
}
