package floodgate

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Errors returned by floodgate and its stores. Callers test for them with
// errors.Is; the errors actually returned wrap them with context (which
// policy, which field), but never with the key being limited.
var (
	// ErrInvalidPolicy is returned by Policy.Validate, ParsePolicy and every
	// operation given a policy that breaks a rule of SPEC.md. The wrapping
	// error is a *PolicyError (or several joined) naming the field, the value
	// and what is allowed.
	ErrInvalidPolicy = errors.New("floodgate: invalid policy")

	// ErrInvalidKey is returned when a key is empty or longer than the
	// store's maximum key length, and by Limiter for a key that is not
	// valid UTF-8 (which the service's HTTP and gRPC APIs refuse too).
	ErrInvalidKey = errors.New("floodgate: invalid key")

	// ErrInvalidCost is returned when a cost is below 1 (for Store.Take) or
	// above MaxCost.
	ErrInvalidCost = errors.New("floodgate: invalid cost")

	// ErrClosed is returned by a store's operations after Close.
	ErrClosed = errors.New("floodgate: store closed")

	// ErrUnavailable is returned by a store that cannot reach its backend:
	// connection refused, timeout, a cluster that is down, a reply that
	// cannot be decoded. A denial is never an error.
	ErrUnavailable = errors.New("floodgate: store unavailable")

	// ErrNeverAllowed is returned by Limiter.Wait and Limiter.WaitN when the
	// cost exceeds what the policy can ever admit at once, so waiting would
	// never end.
	ErrNeverAllowed = errors.New("floodgate: cost exceeds what the policy can ever admit")

	// ErrWouldExceedDeadline is returned by Limiter.Wait and Limiter.WaitN
	// when the wait needed is longer than the time left before the context's
	// deadline; Wait returns it at once instead of sleeping first.
	ErrWouldExceedDeadline = errors.New("floodgate: wait would exceed context deadline")
)

// PolicyError describes one invalid parameter of a policy. It wraps
// ErrInvalidPolicy. Validate joins one PolicyError per problem found, so all
// of them can be reported at once.
type PolicyError struct {
	// Policy is the policy's name; empty when the policy has none yet.
	Policy string
	// Field is the parameter's name as written in configuration files, with
	// an index for limits: "burst", "limits[1].resolution".
	Field string
	// Value is the offending value as text; empty when the field is missing.
	Value string
	// Allowed says what the field accepts: "an integer ≥ 1".
	Allowed string
}

// Error returns "floodgate: policy "name": field = value: allowed".
func (e *PolicyError) Error() string {
	var b strings.Builder
	b.WriteString("floodgate: policy")
	if e.Policy != "" {
		b.WriteString(" ")
		b.WriteString(quote(e.Policy))
	}
	b.WriteString(": ")
	b.WriteString(e.Field)
	if e.Value != "" {
		b.WriteString(" = ")
		b.WriteString(e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Allowed)
	return b.String()
}

// Unwrap returns ErrInvalidPolicy.
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

// quote quotes s with strconv.Quote, shortened to about 64 bytes: names are
// bounded, but values may come from user input.
func quote(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}
