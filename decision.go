package floodgate

import (
	"math"
	"time"
)

// Never is the RetryAfter of a denied decision whose cost exceeds what the
// policy can ever admit at once (SPEC.md's retry_after of -1): waiting would
// not help. It is the largest Duration, so code that sleeps RetryAfter
// sleeps "forever" rather than spinning.
const Never time.Duration = math.MaxInt64

// Decision is the answer to one request: whether it passes, and the numbers
// a client needs to behave (SPEC.md, "The decision"). Durations are exact
// whole microseconds; HTTP headers round them up to seconds.
//
// For example, with a fixed window of 10 per minute and 6 already used in
// the current window, AllowN(ctx, key, 1) is allowed with Limit 10,
// Remaining 3, RetryAfter 0, and ResetAfter the time left in the window.
type Decision struct {
	// Allowed reports whether the request passes.
	Allowed bool

	// Degraded is set when the store failed and a failure policy (fail-open,
	// fail-closed or a fallback limiter) made this decision instead.
	Degraded bool

	// Binding is the index in Policy.Limits of the binding limit for
	// SlidingWindow and AR1 policies; 0 for the other algorithms. For a
	// group it indexes the members' limits flattened in member order
	// (member 0's limits first, one for each policy of the other
	// algorithms): the binding member's own binding limit. (It is an int32
	// so that Binding and Allowed share a word.)
	Binding int32

	// Limit is the max (quota) of the binding limit: the one that denied,
	// else the one with the least Remaining. It is Policy.Max, or
	// Limits[i].Max for SlidingWindow and AR1 (rounded down when an AR1 max
	// is fractional): the quota Policy.Quota(int(Binding)) reports.
	Limit int64

	// Remaining is how many more requests of cost 1 would pass right now,
	// after this call: with 10 per minute and this the 7th request, 3. It is
	// never negative; with several limits it is the least of them.
	Remaining int64

	// RetryAfter is 0 when Allowed. When denied it is the smallest wait after
	// which the same request would pass if no other request arrived
	// meanwhile, or Never when the cost exceeds what the policy can ever
	// admit at once.
	RetryAfter time.Duration

	// ResetAfter is the time until this key's state is back to empty (a
	// fresh key's answer), or 0 when the key has no state. For a group,
	// the longest of its members'.
	ResetAfter time.Duration

	// Granted is how many units the request was granted: N when an add or
	// a reservation is allowed, the grant of an AtMost request (1 to N), 0
	// when denied. A peek reports what the add would be granted; a settle
	// or refund what a peek of 1 gets after it (1 or 0). Stores that do not
	// implement storekit.BudgetStore leave it 0.
	Granted int64
}
