// Package auth holds the credentials of floodgate's service: the one
// validation every bearer token goes through, wherever it comes from (a
// flag, the environment, a file, the configuration), the parsing of the
// Authorization field, the admin token's constant-time comparison, and
// Clients, the named bearer tokens of the decision APIs read from a file
// that is re-read when it changes.
//
// A token never appears in an error, a log line or a metric: errors give
// its length or its line in a file, and metrics the name it stands for.
//
// Every exported function and method is safe for concurrent use.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// MinTokenLen is the shortest token accepted, in characters (bytes: a
// token is printable ASCII).
const MinTokenLen = 16

// MaxTokenLen is the longest token accepted, in bytes.
const MaxTokenLen = 4096

// ErrWeakToken is wrapped by CheckToken's errors: a token too short, too
// long, or holding a character that cannot travel in an Authorization
// field.
var ErrWeakToken = errors.New("auth: unusable token")

// CheckToken returns nil when tok can serve as a bearer token: from
// MinTokenLen to MaxTokenLen characters, each printable ASCII other than
// a space (what RFC 6750's b64token and common secret generators
// produce). The error wraps ErrWeakToken and never contains the token.
func CheckToken(tok string) error {
	switch {
	case len(tok) < MinTokenLen:
		return fmt.Errorf("%w: %d characters, want at least %d", ErrWeakToken, len(tok), MinTokenLen)
	case len(tok) > MaxTokenLen:
		return fmt.Errorf("%w: %d bytes, want at most %d", ErrWeakToken, len(tok), MaxTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%w: character %d is not printable ASCII (spaces, control characters and non-ASCII are not allowed)", ErrWeakToken, i+1)
		}
	}
	return nil
}

// Bearer returns the token of an Authorization field value of the Bearer
// scheme. The scheme's name is case-insensitive (RFC 9110, 11.1) and may
// be followed by several spaces; ok is false for another scheme, or no
// token.
func Bearer(field string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(field, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(rest, " ")
	if token == "" {
		return "", false
	}
	return token, true
}

// Token is a secret kept as its SHA-256 digest, compared in constant
// time. The zero Token matches nothing.
type Token struct {
	digest [sha256.Size]byte
	set    bool
}

// NewToken returns tok as a Token; an empty tok is the zero Token.
func NewToken(tok string) Token {
	if tok == "" {
		return Token{}
	}
	return Token{digest: sha256.Sum256([]byte(tok)), set: true}
}

// IsZero reports whether t is the zero Token.
func (t Token) IsZero() bool { return !t.set }

// Equal reports whether presented is t's token. Both are hashed before
// the comparison, so that its time depends on neither the token nor the
// length of what was presented.
func (t Token) Equal(presented string) bool {
	d := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1 && t.set
}

// Observer receives the outcome of every authenticated surface's checks,
// for metrics (internal/telemetry's Metrics implements it). Names come
// from the tokens file (a bounded set); tokens are never passed. It is
// called concurrently, on the request path, and must not block.
type Observer interface {
	// ClientRequest counts a decision request of an authenticated client:
	// transport is "http" or "grpc", client the token's name ("mtls" for
	// a client certificate alone, "admin" for the admin token).
	ClientRequest(transport, client string)
	// AuthRefused counts a request refused for its credentials: surface is
	// "client" or "admin"; reason "missing", "invalid" or, for admin,
	// "disabled" (no admin token configured) and "cross_origin".
	AuthRefused(transport, surface, reason string)
}
