package algo

import (
	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// tokenBucket: SPEC.md "token_bucket" and rule 6. State: A the creation
// time, TLast the last refill and B = U, the tokens times the window in µs, so that the
// refill of (limit - burst) tokens per window is an exact integer
// (limit - burst) per µs. A key's state lives one window from its creation.
func tokenBucket(p *floodgate.Policy, s *State, now, n int64, peek bool, d *floodgate.Decision) {
	limit, burst, w := p.Max, p.Burst, us(p.Window)
	rate := limit - burst // U gained per µs
	full := burst * w     // fits: Validate bounds limit·w
	// Below floor the bucket cannot refill to one token before it expires,
	// so every U under it decides alike; clamping keeps U bounded when
	// count_denied records huge costs.
	floor := -rate * w

	created, u := now, full
	live := s.Expires != 0 && now < s.A+w
	if live {
		created = s.A
		u = min(full, s.B+(now-s.TLast)*rate) // now-TLast < w: no overflow
	}

	allowed := n <= burst && u >= n*w
	record := allowed || storekit.CountsDenied(p)
	after := u
	if record {
		if n > (u-floor)/w {
			after = floor
		} else {
			after = u - n*w
		}
	}
	var reset, retry int64
	if live || record {
		reset = created + w - now
	}
	if !allowed {
		switch {
		case n > burst:
			retry = -1
		case rate == 0:
			retry = reset
		default:
			need := n*w - after // ≤ limit·w
			retry = min((need+rate-1)/rate, reset)
		}
	}
	if record && !peek {
		s.TLast, s.Expires, s.A, s.B = now, created+w, created, after
	}
	decide(d, allowed, 0, limit, floorDiv(after, w), retry, reset)
}
