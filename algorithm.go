package floodgate

// Algorithm names one of the rate limiting algorithms of SPEC.md, as
// configuration files write it ("gcra"). The zero value is invalid, so a
// Policy that forgets to choose one fails Validate.
type Algorithm string

// The algorithms. docs/algorithms.md explains the math of each.
const (
	// SlidingWindow counts costs in buckets of Limit.Resolution and admits a
	// request while the buckets younger than Limit.Window hold at most
	// Limit.Max. A policy may combine several limits (all must admit).
	SlidingWindow Algorithm = "sliding_window"
	// AR1 keeps one exponentially decaying count per limit: every
	// Limit.Resolution the count is divided by Limit.Decay.
	AR1 Algorithm = "ar1"
	// FixedWindow counts costs per window of Policy.Window, aligned to the
	// epoch or opened by a key's first request (Policy.Align).
	FixedWindow Algorithm = "fixed_window"
	// TokenBucket starts a key with Policy.Burst tokens, refills it
	// continuously so that at most Policy.Max pass per Policy.Window, and
	// starts a fresh bucket a window after the key's state was created.
	TokenBucket Algorithm = "token_bucket"
	// SlidingLog keeps one timestamp per unit of cost and admits at most
	// Policy.Max per rolling Policy.Window, optionally no closer together
	// than Policy.MinInterval.
	SlidingLog Algorithm = "sliding_log"
	// GCRA is the generic cell rate algorithm: Policy.Max evenly spaced
	// per Policy.Window with a burst of Policy.Burst, as in redis_rate and
	// redis-cell.
	GCRA Algorithm = "gcra"
)

// algorithms lists every valid Algorithm in SPEC.md order.
var algorithms = [...]Algorithm{SlidingWindow, AR1, FixedWindow, TokenBucket, SlidingLog, GCRA}

// valid reports whether a is one of the defined algorithms.
func (a Algorithm) valid() bool {
	for _, x := range algorithms {
		if a == x {
			return true
		}
	}
	return false
}

const algorithmList = "one of sliding_window, ar1, fixed_window, token_bucket, sliding_log, gcra"

// Align says where a FixedWindow policy's windows start, as configuration
// files write it. The zero value means AlignEpoch, SPEC.md's default.
type Align string

const (
	// AlignEpoch starts windows at multiples of the window length since the
	// Unix epoch, the same for every key.
	AlignEpoch Align = "epoch"
	// AlignFirst opens a key's window at its first request; the window
	// closes a window length later and the next request opens a new one.
	AlignFirst Align = "first"
)

// first reports whether a opens windows at a key's first request.
func (a Align) first() bool { return a == AlignFirst }
