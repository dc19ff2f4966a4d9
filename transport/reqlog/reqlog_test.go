package reqlog

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRemoteHost(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:5123":   "10.0.0.1",
		"[::1]:80":        "::1",
		"host":            "host",
		"":                "",
		"@unix-socket:12": "@unix-socket",
	} {
		if got := RemoteHost(in); got != want {
			t.Errorf("RemoteHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestWriteLevels(t *testing.T) {
	ctx := context.Background()
	allowed := false
	l := Line{Transport: "http", Method: "POST", Endpoint: "/v1/check", Code: "429", Remote: "127.0.0.1:9",
		Took: time.Millisecond, Note: &Note{Policies: []string{"api"}, Keys: []string{"abc123"}, Allowed: &allowed, Problem: ""}}

	// Sample 1 at level info: every line written, with the note's fields.
	var buf bytes.Buffer
	AccessLog{Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Sample: 1}.Write(ctx, l)
	got := lines(t, &buf)
	if len(got) != 1 {
		t.Fatalf("%d lines, want 1", len(got))
	}
	m := got[0]
	if m["level"] != "INFO" || m["remote"] != "127.0.0.1" || m["policies"] != "api" || m["keys"] != "abc123" || m["allowed"] != false {
		t.Errorf("line = %v", m)
	}
	if _, ok := m["degraded"]; ok {
		t.Errorf("degraded written for a decision that was not: %v", m)
	}

	// Sample 0 at level info: nothing; at level debug: every line, at debug.
	buf.Reset()
	AccessLog{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}.Write(ctx, l)
	if buf.Len() != 0 {
		t.Errorf("unsampled line written at info: %s", buf.String())
	}
	AccessLog{Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}.Write(ctx, l)
	if got := lines(t, &buf); len(got) != 1 || got[0]["level"] != "DEBUG" {
		t.Errorf("debug lines = %v", got)
	}

	// No logger: nothing, and no panic.
	AccessLog{}.Write(ctx, l)
}

func TestNote(t *testing.T) {
	if NoteOf(context.Background()) != nil {
		t.Fatal("note without WithNote")
	}
	n := &Note{}
	if NoteOf(WithNote(context.Background(), n)) != n {
		t.Fatal("NoteOf does not return the note WithNote put")
	}
}

func TestEnabled(t *testing.T) {
	ctx := context.Background()
	info := slog.New(slog.NewJSONHandler(io.Discard, nil))
	debug := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	warn := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, c := range []struct {
		a    AccessLog
		want bool
	}{
		{AccessLog{}, false},
		{AccessLog{Logger: info}, false},
		{AccessLog{Logger: info, Sample: 0.01}, true},
		{AccessLog{Logger: debug}, true},
		{AccessLog{Logger: warn, Sample: 1}, false},
	} {
		if got := c.a.Enabled(ctx); got != c.want {
			t.Errorf("Enabled(logger %v, sample %v) = %v, want %v", c.a.Logger != nil, c.a.Sample, got, c.want)
		}
	}
}
