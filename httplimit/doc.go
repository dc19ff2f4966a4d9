// Package httplimit is floodgate's net/http middleware: it decides every
// request with one or several floodgate policies before the handler runs,
// answers 429 Too Many Requests with an RFC 9457 problem when one denies,
// and tells clients their quota in standard header fields.
//
//	store, err := memstore.New()
//	if err != nil { ... }
//	perIP, err := floodgate.NewLimiter(store, floodgate.Policy{
//		Name: "per-ip", Algorithm: floodgate.GCRA, Max: 10, Window: time.Second, Burst: 20,
//	})
//	if err != nil { ... }
//	limit, err := httplimit.New(httplimit.Config{
//		Rules: []httplimit.Rule{{Limiter: perIP, Key: httplimit.RemoteIP()}},
//	})
//	if err != nil { ... }
//	http.ListenAndServe(":8080", limit(mux))
//
// # Keys
//
// A KeyFunc tells whose quota a request uses. RemoteIP keys by the peer
// address (IPv6 by /64); ClientIP reads the client's address from
// Forwarded, X-Forwarded-For or X-Real-IP, but only when the peer is one of
// the trusted proxies it is given, walking the list from the right so that
// a client cannot choose its own address. Header and PathValue key by a
// header field or a ServeMux path wildcard, and any func(*http.Request)
// (string, error) will do. A key function that fails rejects the request
// with 400 (or 500): it never lets it pass unlimited.
//
// # Header fields
//
// By default responses carry the fields of the IETF draft
// (draft-ietf-httpapi-ratelimit-headers-10), RateLimit-Policy listing every
// policy of the route and RateLimit reporting the binding one, and denied
// responses carry Retry-After; the widely deployed X-RateLimit-Limit,
// -Remaining and -Reset can be added (Config.Headers). Seconds are always
// rounded up: a client that waits Retry-After seconds is not refused again
// by the policy that refused it. Package rlheader writes them, for this
// middleware and for other transports alike.
//
// # Several policies
//
// Rules are decided in order, each consuming from its policy, until one
// denies; the rest are only peeked. The response reports the binding rule
// (see Binding): the denying one with the longest wait, else the one with
// the least remaining. With Config.Atomic (and Config.Store, the rules'
// store) every rule is decided in one atomic step instead: a request
// denied by any rule spends nothing on the others. On a Redis Cluster the
// keys must share a slot for that (Policy.HashTag and one {tag} at the
// start of each key); where they do not, the rules are decided in turn.
//
// # Failures
//
// Wrap a rule's store with package failure (failure.Wrap) to choose what
// happens when it fails or is slow: a timeout per call (50ms by default), a
// circuit breaker per backend node, then fail open, fail closed (the
// middleware answers 503 with Retry-After) or ask a fallback store,
// typically a memstore. A store that is not wrapped and fails gets a 503.
// Config.OnDecision sees every decision, degraded or not. Config.Shadow
// decides and reports but never blocks.
//
// Custom Redis Lua scripts in the manner of PlugLimit are in the
// subpackage luascript.
//
// Every exported function of this package is safe for concurrent use, and
// so are the middleware and key functions it returns.
package httplimit
