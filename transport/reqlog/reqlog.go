// Package reqlog is what both transports (the HTTP/JSON API and Envoy's
// gRPC API) do with every request they answer: report it to an observer
// for metrics, and write an access log line in which keys appear only as
// salted digests (service.KeyDigest), never as they came.
package reqlog

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
)

// Observer receives every request answered, for metrics
// (internal/telemetry's Metrics implements it): its transport ("http",
// "grpc"), endpoint (an HTTP route such as "/v1/check", a gRPC method;
// "other" when none served it) and code (an HTTP status or a gRPC code),
// all from bounded sets. It is called concurrently and must not block.
type Observer interface {
	Request(transport, endpoint, code string, took time.Duration)
}

// AccessLog configures the access log. Its zero value writes none.
type AccessLog struct {
	// Logger receives the lines; nil means none.
	Logger *slog.Logger
	// Sample is the share of requests logged at level info, from 0 (none)
	// to 1 (all). Every request is logged at level debug besides.
	Sample float64
}

// Note is what a handler adds to its request's access log line.
type Note struct {
	Domain   string   // the Envoy domain asked
	Policies []string // the policies decided
	Keys     []string // their keys' digests
	Allowed  *bool    // the verdict, when there is one
	Degraded bool     // a failure mode made a decision
	Problem  string   // the error code of a refused request
}

type noteKey struct{}

// WithNote returns ctx carrying n, for the handler to fill.
func WithNote(ctx context.Context, n *Note) context.Context {
	return context.WithValue(ctx, noteKey{}, n)
}

// NoteOf returns the note ctx carries, or nil when the access log is off:
// handlers fill it only when it is not nil.
func NoteOf(ctx context.Context) *Note {
	n, _ := ctx.Value(noteKey{}).(*Note)
	return n
}

// Line is one request's access log line.
type Line struct {
	Transport, Method, Endpoint, Code, Remote string
	Took                                      time.Duration
	Note                                      *Note
}

// Enabled reports whether Write can write a line for a request of ctx:
// the logger takes lines at debug, or at info when some are sampled. A
// transport fills the request's Note only then, sparing the work of lines
// that are never written.
func (a AccessLog) Enabled(ctx context.Context) bool {
	if a.Logger == nil {
		return false
	}
	return a.Logger.Enabled(ctx, slog.LevelDebug) || a.Sample > 0 && a.Logger.Enabled(ctx, slog.LevelInfo)
}

// Write logs l: at level info for a sampled request, else at debug.
func (a AccessLog) Write(ctx context.Context, l Line) {
	if a.Logger == nil {
		return
	}
	level := slog.LevelDebug
	if a.Sample > 0 && rand.Float64() < a.Sample {
		level = slog.LevelInfo
	}
	if !a.Logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("transport", l.Transport), slog.String("method", l.Method), slog.String("endpoint", l.Endpoint),
		slog.String("code", l.Code), slog.Duration("took", l.Took), slog.String("remote", RemoteHost(l.Remote)),
	}
	if n := l.Note; n != nil {
		if n.Domain != "" {
			attrs = append(attrs, slog.String("domain", n.Domain))
		}
		if len(n.Policies) > 0 {
			attrs = append(attrs, slog.String("policies", strings.Join(n.Policies, ",")))
		}
		if len(n.Keys) > 0 {
			attrs = append(attrs, slog.String("keys", strings.Join(n.Keys, ",")))
		}
		if n.Allowed != nil {
			attrs = append(attrs, slog.Bool("allowed", *n.Allowed))
		}
		if n.Degraded {
			attrs = append(attrs, slog.Bool("degraded", true))
		}
		if n.Problem != "" {
			attrs = append(attrs, slog.String("error", n.Problem))
		}
	}
	a.Logger.LogAttrs(ctx, level, "request", attrs...)
}

// RemoteHost is a peer's address without its port.
func RemoteHost(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		return strings.Trim(addr[:i], "[]")
	}
	return addr
}
