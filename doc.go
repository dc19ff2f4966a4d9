// Package floodgate is a rate limiter: it decides, atomically and exactly,
// whether a key (a user, an IP address, a token) may do something now, and
// tells a denied caller how long to wait.
//
// The same decision comes out of every store — process memory (memstore),
// one Redis, a Redis Cluster — to the microsecond, as SPEC.md defines it.
// Six algorithms are available: a bucketed sliding window with several
// limits per policy, an exponentially decaying AR(1) counter, a fixed window,
// a token bucket with burst, an exact rolling log with a minimum gap, and
// GCRA. docs/algorithms.md explains the math of each.
//
// # Quick start
//
//	store, err := memstore.New()
//	if err != nil { ... }
//	defer store.Close()
//	lim, err := floodgate.NewLimiter(store, floodgate.Policy{
//		Name:      "api",
//		Algorithm: floodgate.GCRA,
//		Max:       10, // per Window: 10 evenly spaced per second
//		Window:    time.Second,
//		Burst:     20,
//	})
//	if err != nil { ... }
//	d, err := lim.Allow(ctx, userID)
//	if err != nil { ... } // the store failed; a denial is not an error
//	if !d.Allowed {
//		// come back in d.RetryAfter
//	}
//
// Policies can also be written as text, for configuration files:
//
//	p, err := floodgate.ParsePolicy("login", "sliding_window 1/5s resolution 1s, 5/1h resolution 10m")
//
// # Budgets
//
// A Limiter over several policies decides each call on all of them in one
// atomic step, spending on all or none; AllowAtMost grants what is left up
// to n; Reserve and Settle take an estimate first and give back what went
// unused; Refund gives units back; a FixedWindow policy with Align
// "calendar" counts per calendar day, ISO week or month in a time zone
// (SPEC.md, "Atomic groups" and after):
//
//	perMinute, _ := floodgate.ParsePolicy("tpm", "token_bucket 1000/1m burst 1000")
//	perMonth, _ := floodgate.ParsePolicy("tpmo", "fixed_window 100000/1month align calendar tz Europe/Paris")
//	lim, err := floodgate.NewLimiter(store, perMinute, perMonth)
//	r, err := lim.Reserve(ctx, tenant, 800) // r.Decision says whether it passed
//	// ... the work used 300 units
//	d, err := lim.Settle(ctx, r, 300)       // 500 back to both policies
//
// These need a store that implements storekit.BudgetStore (memstore and
// redisstore do);
// with any other the Limiter returns an error wrapping errors.ErrUnsupported.
// docs/budgets.md has the details.
//
// # Concepts
//
// A Policy names an algorithm and its parameters. A Store keeps the state of
// each (policy, key) and decides requests: Take adds a cost (or peeks at what
// adding it would give), Reset forgets a key. A Decision says whether the
// request passes and carries the numbers clients need: the binding limit,
// what remains, when to retry, when the key's state empties. A Limiter ties a
// policy to a store and adds Wait.
//
// Costs are whole units from 1 to MaxCost. Time is whole microseconds,
// read from the store's clock (the server's clock for Redis), never from the
// caller, so that every process sharing a store agrees.
//
// # Errors
//
// A denial is a Decision, never an error. Errors wrap the sentinels of this
// package (ErrInvalidPolicy, ErrInvalidKey, ErrInvalidCost, ErrClosed,
// ErrUnavailable, ErrNeverAllowed, ErrWouldExceedDeadline, ErrSettled), so callers test
// them with errors.Is; they never contain the key being limited.
//
// Every exported function and method of this package is safe for concurrent
// use, unless its documentation says otherwise.
package floodgate
