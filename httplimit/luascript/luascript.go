// Package luascript limits requests with a Redis Lua script of your own,
// in the manner of PlugLimit: the script decides and also says which
// response header fields to set, in one atomic call.
//
// # The script's contract
//
// The script receives as KEYS what Config.Key (with Config.Prefix) or
// Config.Keys returns for the request, and as ARGV the Config.Opts. It
// returns a list:
//
//  1. "allow" or "deny";
//  2. a list of header values, in the order of Config.Headers: the value
//     at position i is sent as the field Headers[i]. A value may instead be
//     a pair {name, value}, which sends value as the field name in place of
//     Headers[i] (and may stand past the end of Headers);
//  3. anything after that, which is ignored.
//
// Values are strings (or integers, formatted in decimal). For example the
// built-in FixedWindow, with Opts {10, 60} (10 requests per 60 seconds),
// answers a first request with
//
//	{"allow", {"10", "60", "9"}}
//
// which sets x-ratelimit-limit: 10, x-ratelimit-reset: 60 and
// x-ratelimit-remaining: 9; a script answering
//
//	{"allow", {"10", {"x-acme-header", "60"}, "9"}}
//
// sets x-acme-header: 60 instead of x-ratelimit-reset.
//
// A denied request gets 429 Too Many Requests with an RFC 9457 problem
// (httplimit.DeniedHandler), or Config.Denied. A script that fails
// (a Lua error, redis.error_reply), returns anything else (a first element
// other than "allow" or "deny", a second that is not a list, a value that
// is neither a string, an integer nor a {name, value} pair of them, more
// plain values than header names, a name or value that cannot be sent),
// or does not answer within the failure policy's timeout, is a failure:
// the failure policy (package failure) decides, with its timeout, breaker
// and mode, exactly as for a store.
//
// Scripts run with EVALSHA; when Redis answers NOSCRIPT (after a restart
// or SCRIPT FLUSH) the source is sent once with EVAL, which loads it
// again. On a Redis Cluster, every key a script receives must hash to the
// same slot: give them a common hash tag ("{user-42}:minute",
// "{user-42}:hour").
package luascript

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/rlheader"
)

// FixedWindow is the built-in script, the fixed window limiter of the
// PlugLimit seed, and the one New uses when Config.Script is empty. KEYS[1]
// is the window's counter; ARGV[1] is the limit per window (an integer ≥
// 1) and ARGV[2] the window's length in seconds (an integer ≥ 1). A
// window opens with a key's first request and lasts ARGV[2] seconds; a
// denied request is not counted. The reply is {"allow"|"deny", {limit,
// reset, remaining}}, reset being the seconds left in the window, rounded
// up; its header names are FixedWindowHeaders. Start from it to write your
// own script.
const FixedWindow = `-- floodgate luascript: a fixed window (the PlugLimit seed's fixed_window).
-- KEYS[1]  the window's counter
-- ARGV[1]  limit: requests per window, an integer >= 1
-- ARGV[2]  window: its length in seconds, an integer >= 1
-- Returns {"allow"|"deny", {limit, reset, remaining}}, all strings: reset is
-- the number of seconds left in the window, rounded up.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
if not limit or limit < 1 or limit % 1 ~= 0 or limit > 9007199254740991 then
  return redis.error_reply('fixed_window: ARGV[1] (limit) must be an integer >= 1')
end
if not window or window < 1 or window % 1 ~= 0 or window > 3153600000 then
  return redis.error_reply('fixed_window: ARGV[2] (window, seconds) must be an integer from 1 to 3153600000')
end
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if not used then
  return redis.error_reply('fixed_window: KEYS[1] does not hold a counter')
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  -- No window open (-2), or a counter without expiry (-1): open one.
  used = 0
  ttl = window * 1000
end
local verdict = 'deny'
if used < limit then
  verdict = 'allow'
  used = used + 1
  if used == 1 then
    redis.call('SET', KEYS[1], used, 'PX', ttl)
  else
    redis.call('INCR', KEYS[1])
  end
end
return {verdict, {
  string.format('%d', limit),
  string.format('%d', math.ceil(ttl / 1000)),
  string.format('%d', limit - used),
}}
`

// FixedWindowHeaders returns the header names of FixedWindow's values:
// x-ratelimit-limit, x-ratelimit-reset, x-ratelimit-remaining. New uses
// them when Config.Script and Config.Headers are both empty.
func FixedWindowHeaders() []string {
	return []string{"x-ratelimit-limit", "x-ratelimit-reset", "x-ratelimit-remaining"}
}

// ErrMalformedReply is wrapped by the error a Result carries when a
// script's reply does not follow the contract (see the package
// documentation).
var ErrMalformedReply = errors.New("luascript: malformed script reply")

// Config configures New. Client, one of Key and Keys, and Opts for the
// built-in script are required; the other fields have sensible zero
// values, the same as httplimit.Config's.
type Config struct {
	// Client runs the script: a *redis.Client, *redis.ClusterClient or
	// *redis.Ring. Give it ContextTimeoutEnabled: true (so that
	// Failure.Timeout bounds each call) and MaxRetries: -1 (a script that
	// may have run is not run twice). The caller keeps ownership of it.
	Client redis.UniversalClient

	// Script is the Lua source; empty means FixedWindow.
	Script string

	// Headers are the names of the header fields whose values the script
	// returns, in order. Empty means FixedWindowHeaders when Script is
	// empty or FixedWindow, and no names (only {name, value} pairs) for
	// another script.
	Headers []string

	// Name names the limit in the hook's RuleDecision and in the
	// violated-policies of a 429 problem; empty leaves them out.
	Name string

	// Key returns the request's key; the script gets KEYS = {Prefix + key}.
	// Set Key or Keys, not both.
	Key httplimit.KeyFunc

	// Prefix is prepended to Key's key, to keep this limiter's Redis keys
	// apart from others ("api:"). It is not applied to Keys.
	Prefix string

	// Keys returns every key the script gets, for scripts that need
	// several: KEYS = Keys(r). An error, an empty list or an empty key
	// rejects the request as a key error.
	Keys func(r *http.Request) ([]string, error)

	// Opts are the script's ARGV: strings, integers, floats, booleans, as
	// go-redis sends them. FixedWindow needs {limit, window seconds}.
	Opts []any

	// Failure is the failure policy for script errors, malformed replies,
	// Redis errors and timeouts (see package failure); its zero value fails
	// open after 50ms. Its Fallback store is not used: in Fallback mode
	// the Fallback limiter below decides.
	Failure failure.Policy

	// Fallback decides when the script fails and Failure.Mode is
	// failure.Fallback (it is then required), keyed by the first of the
	// script's KEYS. Its decisions set the header fields of
	// rlheader.Default (RateLimit-Policy, RateLimit, Retry-After) instead of
	// the script's.
	Fallback *floodgate.Limiter

	// Denied answers denied requests; nil means httplimit.DeniedHandler.
	// The script's header fields are set before it runs, and
	// httplimit.Decisions(r.Context()) gives the decision.
	Denied http.Handler

	// KeyErrorStatus is the status of a request whose key cannot be
	// found: 400 (the zero value means 400) or 500.
	KeyErrorStatus int

	// Shadow runs the script and sets its header fields but never blocks.
	Shadow bool

	// OnDecision, when set, is called once per request with one
	// RuleDecision: Name, the decision (only Allowed and Degraded are
	// meaningful for a script's), and the error of a failed script or key
	// function. Keys are never passed to it.
	OnDecision func(r *http.Request, decisions []httplimit.RuleDecision)

	// Logger receives the failure policy's log lines; nil means
	// slog.Default().
	Logger *slog.Logger
}

type limiter struct {
	client     redis.UniversalClient
	script     *redis.Script
	headers    []string
	name       string
	key        httplimit.KeyFunc
	prefix     string
	keys       func(*http.Request) ([]string, error)
	opts       []any
	guard      *failure.Guard
	fallback   *floodgate.Limiter
	fbPolicy   *floodgate.Policy
	denied     http.Handler
	keyStatus  int
	shadow     bool
	onDecision func(*http.Request, []httplimit.RuleDecision)
}

// New returns a middleware that runs the script of c for every request
// (see the package documentation). It returns an error wrapping
// httplimit.ErrInvalidConfig, naming each field at fault, when c cannot
// be used. It does not contact Redis.
func New(c Config) (func(http.Handler) http.Handler, error) {
	l, err := newLimiter(c)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
	}, nil
}

func configError(field, value, allowed string) error {
	return fmt.Errorf("%w: luascript: %s = %s: %s", httplimit.ErrInvalidConfig, field, value, allowed)
}

func newLimiter(c Config) (*limiter, error) {
	var errs []error
	bad := func(field, value, allowed string) { errs = append(errs, configError(field, value, allowed)) }
	l := &limiter{
		client:     c.Client,
		headers:    c.Headers,
		name:       c.Name,
		key:        c.Key,
		prefix:     c.Prefix,
		keys:       c.Keys,
		opts:       c.Opts,
		fallback:   c.Fallback,
		denied:     c.Denied,
		keyStatus:  http.StatusBadRequest,
		shadow:     c.Shadow,
		onDecision: c.OnDecision,
	}
	if c.Client == nil {
		bad("Client", "nil", "a go-redis client")
	}
	src := c.Script
	builtin := src == "" || src == FixedWindow
	if src == "" {
		src = FixedWindow
	}
	if builtin {
		if len(l.headers) == 0 {
			l.headers = FixedWindowHeaders()
		}
		if len(c.Opts) != 2 || !positiveInt(c.Opts[0]) || !positiveInt(c.Opts[1]) {
			bad("Opts", fmt.Sprint(c.Opts), "{limit, window seconds}, two integers ≥ 1, for FixedWindow")
		}
	}
	l.script = redis.NewScript(src)
	for i, h := range l.headers {
		if !validName(h) {
			bad(fmt.Sprintf("Headers[%d]", i), strconv.Quote(h), "a header field name (an HTTP token)")
		}
	}
	if (c.Key == nil) == (c.Keys == nil) {
		bad("Key", map[bool]string{true: "nil", false: "set"}[c.Key == nil], "a KeyFunc, or Keys, but not both")
	}
	switch c.KeyErrorStatus {
	case 0, http.StatusBadRequest:
	case http.StatusInternalServerError:
		l.keyStatus = c.KeyErrorStatus
	default:
		bad("KeyErrorStatus", strconv.Itoa(c.KeyErrorStatus), "0 (meaning 400), 400 or 500")
	}
	if c.Failure.Mode == failure.Fallback && c.Fallback == nil {
		bad("Fallback", "nil", "a *floodgate.Limiter when Failure.Mode is failure.Fallback")
	}
	if c.Failure.Fallback != nil {
		bad("Failure.Fallback", "set", "nil: the Fallback limiter decides for a script")
	}
	if c.Fallback != nil {
		p := c.Fallback.Policy()
		l.fbPolicy = &p
	}
	fp := c.Failure
	if fp.Mode == failure.Fallback {
		// The guard's own check wants a store; the limiter stands in.
		fp.Fallback = fallbackStore{}
	}
	g, err := failure.NewGuard(fp, failure.WithLogger(c.Logger))
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: luascript: Failure: %w", httplimit.ErrInvalidConfig, err))
	}
	l.guard = g
	if l.denied == nil {
		l.denied = httplimit.DeniedHandler
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return l, nil
}

// positiveInt reports whether v is an integer ≥ 1, of a Go integer type or
// as decimal text.
func positiveInt(v any) bool {
	switch n := v.(type) {
	case int:
		return n >= 1
	case int32:
		return n >= 1
	case int64:
		return n >= 1
	case uint:
		return n >= 1
	case uint32:
		return n >= 1
	case uint64:
		return n >= 1
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return err == nil && i >= 1
	}
	return false
}

func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	res := httplimit.RuleDecision{Name: l.name}
	keys, err := l.requestKeys(r)
	if err != nil {
		res.Err = err
		l.hook(r, res)
		if l.shadow {
			next.ServeHTTP(w, r)
			return
		}
		httplimit.WriteProblem(w, httplimit.Problem{
			Title:  http.StatusText(l.keyStatus),
			Status: l.keyStatus,
			Detail: "The request carries no usable rate limit key.",
		})
		return
	}

	var fields [][2]string
	call := func(ctx context.Context) (floodgate.Decision, error) {
		allowed, f, err := l.run(ctx, keys)
		fields = f
		return floodgate.Decision{Allowed: allowed}, err
	}
	var fallback func(context.Context) (floodgate.Decision, error)
	if l.fallback != nil {
		fallback = func(ctx context.Context) (floodgate.Decision, error) { return l.fallback.Allow(ctx, keys[0]) }
	}
	d, cause, err := l.guard.Do(r.Context(), "take", "", call, fallback)
	h := w.Header()
	closed := false
	switch {
	case err != nil: // the request's context ended
		res.Err = err
		closed = true
	case !d.Degraded:
		res.Decision = d
		for _, f := range fields {
			h.Set(f[0], f[1])
		}
	default:
		res.Decision, res.Err = d, cause
		switch {
		case d.Limit != 0: // the fallback limiter's decision
			res.Policy, res.Err = l.fbPolicy, nil
			sel := rlheader.Default
			if l.shadow {
				sel &^= rlheader.RetryAfter
			}
			items := []rlheader.Item{{Policy: l.fbPolicy, Decision: d}}
			rlheader.Set(h, sel, time.Now(), rlheader.PolicyField(items), items)
		case !d.Allowed:
			closed = true
		}
	}
	l.hook(r, res)
	switch {
	case l.shadow:
	case !closed && !res.Decision.Allowed:
		l.denied.ServeHTTP(w, r.WithContext(httplimit.WithDecisions(r.Context(), []httplimit.RuleDecision{res})))
		return
	case closed:
		h.Set("Retry-After", rlheader.RetryAfterValue(max(d.RetryAfter, time.Second)))
		httplimit.WriteProblem(w, httplimit.Problem{
			Title:  http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable,
			Detail: "The rate limiter is unavailable: retry later.",
		})
		return
	}
	next.ServeHTTP(w, r)
}

func (l *limiter) hook(r *http.Request, res httplimit.RuleDecision) {
	if l.onDecision != nil {
		l.onDecision(r, []httplimit.RuleDecision{res})
	}
}

// fallbackStore stands in for the Fallback limiter in the guard's policy
// (which checks that Fallback mode has a fallback); the limiter decides.
type fallbackStore struct{ floodgate.Store }

// requestKeys returns the script's KEYS for r, or an error wrapping
// httplimit.ErrKey.
func (l *limiter) requestKeys(r *http.Request) ([]string, error) {
	if l.key != nil {
		k, err := l.key(r)
		if err != nil {
			return nil, wrapKeyError(err)
		}
		if k == "" {
			return nil, wrapKeyError(errors.New("the key function returned an empty key"))
		}
		return []string{l.prefix + k}, nil
	}
	keys, err := l.keys(r)
	if err != nil {
		return nil, wrapKeyError(err)
	}
	if len(keys) == 0 {
		return nil, wrapKeyError(errors.New("Keys returned no key"))
	}
	for i, k := range keys {
		if k == "" {
			return nil, wrapKeyError(fmt.Errorf("Keys returned an empty key at %d", i))
		}
	}
	return keys, nil
}

func wrapKeyError(err error) error {
	if errors.Is(err, httplimit.ErrKey) {
		return err
	}
	return fmt.Errorf("%w: %w", httplimit.ErrKey, err)
}

// run runs the script and decodes its reply. ctx carries the failure
// policy's timeout.
func (l *limiter) run(ctx context.Context, keys []string) (bool, [][2]string, error) {
	reply, err := l.script.Run(ctx, l.client, keys, l.opts...).Result()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			return false, nil, fmt.Errorf("%w: luascript: %w (%v)", floodgate.ErrUnavailable, ctxErr, err)
		}
		return false, nil, fmt.Errorf("%w: luascript: %w", floodgate.ErrUnavailable, err)
	}
	return parseReply(reply, l.headers)
}

// parseReply decodes a script's reply as the package documentation says:
// the verdict, then the header fields to set, in order.
func parseReply(reply any, names []string) (allowed bool, fields [][2]string, err error) {
	malformed := func(format string, args ...any) (bool, [][2]string, error) {
		return false, nil, fmt.Errorf("%w: "+format, append([]any{ErrMalformedReply}, args...)...)
	}
	list, ok := reply.([]any)
	if !ok || len(list) < 2 {
		return malformed("want a list {verdict, {values…}, …}, got %s", describe(reply))
	}
	switch v, _ := list[0].(string); v {
	case "allow":
		allowed = true
	case "deny":
	default:
		return malformed(`the first element is %s, want "allow" or "deny"`, describe(list[0]))
	}
	values, ok := list[1].([]any)
	if !ok {
		return malformed("the second element is %s, want a list of header values", describe(list[1]))
	}
	fields = make([][2]string, 0, len(values))
	for i, v := range values {
		var name, value string
		if pair, ok := v.([]any); ok {
			if len(pair) != 2 {
				return malformed("value %d is a list of %d elements, want a {name, value} pair", i+1, len(pair))
			}
			n, okn := scalar(pair[0])
			val, okv := scalar(pair[1])
			if !okn || !okv {
				return malformed("value %d is a pair of %s and %s, want strings", i+1, describe(pair[0]), describe(pair[1]))
			}
			name, value = n, val
		} else {
			val, ok := scalar(v)
			if !ok {
				return malformed("value %d is %s, want a string or a {name, value} pair", i+1, describe(v))
			}
			if i >= len(names) {
				return malformed("value %d has no header name: %d are configured", i+1, len(names))
			}
			name, value = names[i], val
		}
		if !validName(name) {
			return malformed("value %d: the header name is not an HTTP token", i+1)
		}
		if !validValue(value) {
			return malformed("value %d: the header value holds control characters", i+1)
		}
		fields = append(fields, [2]string{name, value})
	}
	return allowed, fields, nil
}

// scalar returns a reply element that can be a header name or value: a
// string, or an integer (Lua numbers reach Redis replies as integers).
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}

// describe names the type of a reply element for errors, without its
// content (which may hold keys).
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		if x == "allow" || x == "deny" {
			return strconv.Quote(x)
		}
		return "a string"
	case int64:
		return "an integer"
	case []any:
		return fmt.Sprintf("a list of %d", len(x))
	}
	return fmt.Sprintf("a %T", v)
}

// validName reports whether s is an HTTP field name (a token, RFC 9110
// section 5.6.2).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validValue reports whether s can be sent as a field value: no control
// character but horizontal tab.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
