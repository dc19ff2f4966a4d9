package floodgate

import "fmt"

// Algorithm names one of the rate limiting algorithms of SPEC.md. The zero
// value is invalid, so a Policy that forgets to choose one fails Validate.
type Algorithm uint8

// The algorithms. docs/algorithms.md explains the math of each.
const (
	// SlidingWindow counts costs in buckets of Limit.Resolution and admits a
	// request while the buckets younger than Limit.Window hold at most
	// Limit.Max. A policy may combine several limits (all must admit).
	SlidingWindow Algorithm = iota + 1
	// AR1 keeps one exponentially decaying count per limit: every
	// Limit.Resolution the count is divided by Limit.Decay.
	AR1
	// FixedWindow counts costs per window of Policy.Window, aligned to the
	// epoch or opened by a key's first request (Policy.Align).
	FixedWindow
	// TokenBucket starts a key with Policy.Burst tokens, refills it
	// continuously so that at most Policy.Max pass per Policy.Window, and
	// starts a fresh bucket a window after the key's state was created.
	TokenBucket
	// SlidingLog keeps one timestamp per unit of cost and admits at most
	// Policy.Max per rolling Policy.Interval, optionally no closer together
	// than Policy.MinInterval.
	SlidingLog
	// GCRA is the generic cell rate algorithm: Policy.Rate with a burst of
	// Policy.Burst, as in redis_rate and redis-cell.
	GCRA
)

var algorithmNames = [...]string{
	SlidingWindow: "sliding_window",
	AR1:           "ar1",
	FixedWindow:   "fixed_window",
	TokenBucket:   "token_bucket",
	SlidingLog:    "sliding_log",
	GCRA:          "gcra",
}

// Algorithms lists every valid Algorithm in SPEC.md order.
func Algorithms() []Algorithm {
	return []Algorithm{SlidingWindow, AR1, FixedWindow, TokenBucket, SlidingLog, GCRA}
}

// String returns the algorithm's name as written in configuration files
// ("sliding_window"), or "Algorithm(n)" for an invalid value.
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is one of the defined algorithms.
func (a Algorithm) Valid() bool { return a >= SlidingWindow && a <= GCRA }

// ParseAlgorithm returns the Algorithm named s ("sliding_window", "ar1",
// "fixed_window", "token_bucket", "sliding_log", "gcra"). An unknown name is
// an error wrapping ErrInvalidPolicy.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, &PolicyError{Field: "algorithm", Value: quote(s), Allowed: algorithmList}
}

const algorithmList = "one of sliding_window, ar1, fixed_window, token_bucket, sliding_log, gcra"

// MarshalText returns the algorithm's name; an invalid algorithm is an error.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, &PolicyError{Field: "algorithm", Value: a.String(), Allowed: algorithmList}
	}
	return []byte(a.String()), nil
}

// UnmarshalText parses an algorithm name as ParseAlgorithm does.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Align says where a FixedWindow policy's windows start. The zero value is
// AlignEpoch, SPEC.md's default.
type Align uint8

const (
	// AlignEpoch starts windows at multiples of the window length since the
	// Unix epoch, the same for every key.
	AlignEpoch Align = iota
	// AlignFirst opens a key's window at its first request; the window
	// closes a window length later and the next request opens a new one.
	AlignFirst
)

// String returns "epoch" or "first", or "Align(n)" for an invalid value.
func (a Align) String() string {
	switch a {
	case AlignEpoch:
		return "epoch"
	case AlignFirst:
		return "first"
	}
	return fmt.Sprintf("Align(%d)", uint8(a))
}

// MarshalText returns "epoch" or "first".
func (a Align) MarshalText() ([]byte, error) {
	if a > AlignFirst {
		return nil, &PolicyError{Field: "align", Value: a.String(), Allowed: "epoch or first"}
	}
	return []byte(a.String()), nil
}

// UnmarshalText parses "epoch" or "first".
func (a *Align) UnmarshalText(b []byte) error {
	switch string(b) {
	case "epoch":
		*a = AlignEpoch
	case "first":
		*a = AlignFirst
	default:
		return &PolicyError{Field: "align", Value: quote(string(b)), Allowed: "epoch or first"}
	}
	return nil
}

// Switch is a setting that is either left to its documented default or set
// on or off explicitly. Policy.CountDenied is one: its default depends on the
// algorithm.
type Switch uint8

const (
	// Default leaves the setting to its documented default.
	Default Switch = iota
	// On turns the setting on.
	On
	// Off turns the setting off.
	Off
)

// Bool returns the switch's value given the default def.
func (s Switch) Bool(def bool) bool {
	switch s {
	case On:
		return true
	case Off:
		return false
	}
	return def
}

// String returns "default", "on" or "off".
func (s Switch) String() string {
	switch s {
	case Default:
		return "default"
	case On:
		return "on"
	case Off:
		return "off"
	}
	return fmt.Sprintf("Switch(%d)", uint8(s))
}

// SwitchOf returns On for true and Off for false.
func SwitchOf(b bool) Switch {
	if b {
		return On
	}
	return Off
}
