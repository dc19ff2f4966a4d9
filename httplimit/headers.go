package httplimit

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate"
)

// Headers selects the rate limit header fields a response carries. Values
// combine with |. The zero value means DefaultHeaders; NoHeaders alone
// selects none.
type Headers uint8

const (
	// IETF selects the fields of draft-ietf-httpapi-ratelimit-headers-10:
	// RateLimit-Policy (every policy of the route) and RateLimit (the
	// binding one).
	IETF Headers = 1 << iota

	// XRateLimit selects the widely deployed X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset of the binding policy,
	// the reset in seconds from now.
	XRateLimit

	// XRateLimitResetUnix makes X-RateLimit-Reset a Unix time in seconds
	// instead of a number of seconds from now. It needs XRateLimit.
	XRateLimitResetUnix

	// RetryAfter selects Retry-After, in seconds, on denied responses
	// (never on a denial that waiting cannot cure, see floodgate.Never).
	RetryAfter

	// NoHeaders selects no header at all. It cannot be combined with the
	// others.
	NoHeaders
)

// DefaultHeaders is what the zero Headers selects: the IETF fields and
// Retry-After.
const DefaultHeaders = IETF | RetryAfter

// allHeaders is every bit that has a meaning.
const allHeaders = IETF | XRateLimit | XRateLimitResetUnix | RetryAfter | NoHeaders

// orDefault returns h, or DefaultHeaders when h is zero, and an empty set
// for NoHeaders.
func (h Headers) orDefault() Headers {
	switch h {
	case 0:
		return DefaultHeaders
	case NoHeaders:
		return 0
	}
	return h
}

// check returns what is wrong with h as a configuration value, or "".
func (h Headers) check() string {
	switch {
	case h&^allHeaders != 0:
		return "only IETF, XRateLimit, XRateLimitResetUnix, RetryAfter and NoHeaders"
	case h&NoHeaders != 0 && h != NoHeaders:
		return "NoHeaders alone, or a combination of the others"
	case h&XRateLimitResetUnix != 0 && h&XRateLimit == 0:
		return "XRateLimitResetUnix together with XRateLimit"
	}
	return ""
}

// String returns the set as "IETF|RetryAfter".
func (h Headers) String() string {
	if h == 0 {
		return "0"
	}
	var parts []string
	for _, f := range []struct {
		bit  Headers
		name string
	}{{IETF, "IETF"}, {XRateLimit, "XRateLimit"}, {XRateLimitResetUnix, "XRateLimitResetUnix"}, {RetryAfter, "RetryAfter"}, {NoHeaders, "NoHeaders"}} {
		if h&f.bit != 0 {
			parts = append(parts, f.name)
			h &^= f.bit
		}
	}
	if h != 0 {
		parts = append(parts, "Headers(0x"+strconv.FormatUint(uint64(h), 16)+")")
	}
	return strings.Join(parts, "|")
}

// Header field names, in their canonical form (http.CanonicalHeaderKey):
// the map keys of http.Header.
const (
	headerRateLimitPolicy = "Ratelimit-Policy"
	headerRateLimit       = "Ratelimit"
	headerXLimit          = "X-Ratelimit-Limit"
	headerXRemaining      = "X-Ratelimit-Remaining"
	headerXReset          = "X-Ratelimit-Reset"
	headerRetryAfter      = "Retry-After"
)

// maxSFInteger is the largest Integer a Structured Field may carry (RFC
// 9651, section 3.3.1): fifteen nines. Larger counts are reported as it.
const maxSFInteger = 999_999_999_999_999

// PolicyItem is one quota policy item of the RateLimit-Policy field
// (draft-ietf-httpapi-ratelimit-headers-10, section 3.1): a name, a quota
// and a window.
type PolicyItem struct {
	// Name identifies the item; RateLimit items of the same policy carry
	// the same name.
	Name string
	// Quota is the q parameter: the quota of the limit, in requests.
	Quota int64
	// Window is the w parameter: the window of the limit in whole
	// seconds, rounded up, at least 1.
	Window int64
}

// PolicyItems returns the RateLimit-Policy items of p, one per limit. A
// policy with one limit gives one item named after the policy; a
// sliding_window or ar1 policy with several limits gives one item per
// limit, named "<policy>/<i>" with i its index in p.Limits (0, 1, …),
// the name ItemName returns.
//
// The quota q and window w of each algorithm are:
//
//	sliding_window  q = the limit's max              w = its window
//	ar1             q = the limit's max, rounded down w = its resolution
//	fixed_window    q = max                          w = window
//	token_bucket    q = limit (Policy.Max)           w = window
//	sliding_log     q = max                          w = interval
//	gcra            q = the rate's count             w = the rate's period
//
// Windows are rounded up to whole seconds (a 250ms window is w=1), and
// quotas above 999,999,999,999,999, the largest Structured Field Integer,
// are reported as that number. An invalid policy gives nil.
func PolicyItems(p *floodgate.Policy) []PolicyItem {
	if p == nil {
		return nil
	}
	n := max(1, len(p.Limits))
	items := make([]PolicyItem, n)
	for i := range items {
		q, w := p.Quota(i)
		items[i] = PolicyItem{Name: ItemName(p, i), Quota: clampInt(q), Window: windowSeconds(w)}
	}
	return items
}

// ItemName returns the name of the RateLimit-Policy and RateLimit items
// of limit i of p: the policy's name when p has a single limit, else
// "<policy>/<i>". For a Decision d of p, ItemName(p, int(d.Binding)) names
// the binding limit.
func ItemName(p *floodgate.Policy, i int) string {
	if len(p.Limits) <= 1 {
		return p.Name
	}
	return p.Name + "/" + strconv.Itoa(i)
}

// FormatPolicy formats items as the value of a RateLimit-Policy field, a
// Structured Field List: `"burst";q=100;w=60, "daily";q=1000;w=86400`.
// Names are serialized as Strings (quotes and backslashes escaped; bytes
// outside printable ASCII, which a String cannot hold, become '?'). An
// empty list gives "" (the field must then be left out).
func FormatPolicy(items []PolicyItem) string {
	var b []byte
	for i, it := range items {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPolicyItem(b, it)
	}
	return string(b)
}

func appendPolicyItem(b []byte, it PolicyItem) []byte {
	b = appendSFString(b, it.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, clampInt(it.Quota), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, clampInt(max(it.Window, 1)), 10)
}

// FormatRateLimit formats the service limit item of decision d, named
// name, as the value of a RateLimit field: `"api";r=42;t=17`.
//
// r is d.Remaining. t is the number of seconds, rounded up, until more
// quota is available to this client: when d is allowed, d.ResetAfter
// (t=0 when the key holds no state); when d is denied, d.RetryAfter, so
// that t and Retry-After name the same moment (the draft's section 6 wants
// Retry-After no earlier than t). A denial with RetryAfter ==
// floodgate.Never has no t: waiting cannot make that request pass.
func FormatRateLimit(name string, d floodgate.Decision) string {
	var buf [96]byte
	return string(appendRateLimit(buf[:0], name, d))
}

func appendRateLimit(b []byte, name string, d floodgate.Decision) []byte {
	b = appendSFString(b, name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, clampInt(d.Remaining), 10)
	if t, ok := resetSeconds(d); ok {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	return b
}

// itemDecision returns d as it concerns its binding limit alone. A
// sliding window's ResetAfter is when its whole state is empty, the
// longest of its windows; the binding limit's own quota is whole again
// within that limit's window, so an allowed decision's ResetAfter is
// capped at it.
func itemDecision(p *floodgate.Policy, d floodgate.Decision) floodgate.Decision {
	if p != nil && d.Allowed && p.Algorithm == floodgate.SlidingWindow && int(d.Binding) < len(p.Limits) {
		d.ResetAfter = min(d.ResetAfter, p.Limits[d.Binding].Window)
	}
	return d
}

// resetSeconds is the t of d's RateLimit item (see FormatRateLimit), and
// false when there is none.
func resetSeconds(d floodgate.Decision) (int64, bool) {
	if d.Allowed {
		return ceilSeconds(d.ResetAfter), true
	}
	if d.RetryAfter == floodgate.Never {
		return 0, false
	}
	return ceilSeconds(d.RetryAfter), true
}

// Binding returns the index in results of the binding result, the one a
// response reports in RateLimit, X-RateLimit-* and Retry-After, or -1 when
// no result carries numbers (see Result.Known):
//
//   - if any known result is denied, the denied one with the longest
//     RetryAfter (floodgate.Never is the longest): the client must wait
//     that long before every denying policy admits the request;
//   - else the one with the least Remaining, the policy closest to
//     denying.
//
// Ties go to the first in results (route order).
func Binding(results []Result) int {
	best := -1
	for i := range results {
		r := &results[i]
		if !r.Known() {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &results[best]
		switch {
		case !r.Decision.Allowed && b.Decision.Allowed:
			best = i
		case !r.Decision.Allowed && !b.Decision.Allowed:
			if r.Decision.RetryAfter > b.Decision.RetryAfter {
				best = i
			}
		case r.Decision.Allowed && b.Decision.Allowed:
			if r.Decision.Remaining < b.Decision.Remaining {
				best = i
			}
		}
	}
	return best
}

// SetHeaders sets on h the header fields selected by sel (the zero value
// selects DefaultHeaders) for the results of one request, and returns the
// index of the binding result (see Binding), or -1.
//
//   - RateLimit-Policy lists the items (PolicyItems) of the policy of
//     every result that has one, in order, each policy once.
//   - RateLimit carries the binding result's item (FormatRateLimit),
//     named ItemName(policy, Decision.Binding) or, for results without a
//     policy, Result.Name. For a sliding window of several limits, t is
//     at most the binding limit's window: its quota is whole again by
//     then, even while a longer limit still holds state.
//   - X-RateLimit-Limit, -Remaining and -Reset carry the binding
//     decision's Limit, Remaining and the t of its RateLimit item (its
//     ResetAfter when waiting cannot help), as seconds from now or, with
//     XRateLimitResetUnix, as the Unix time now plus those seconds.
//   - Retry-After is set when the binding result is denied and waiting
//     can help: its RetryAfter in seconds, rounded up, so that a client
//     that waits exactly that long is not refused again by that policy.
//
// Fields not selected, or without a value, are left as they are. now is
// only read for XRateLimitResetUnix. Every value is a valid Structured
// Field List (RFC 9651). The rate limit service uses SetHeaders to answer
// exactly as the middleware does.
func SetHeaders(h http.Header, sel Headers, now time.Time, results []Result) int {
	sel = sel.orDefault()
	var policy string
	if sel&IETF != 0 {
		var b []byte
		for i := range results {
			p := results[i].Policy
			if p == nil || seenPolicy(results[:i], p) {
				continue
			}
			for _, it := range PolicyItems(p) {
				if len(b) > 0 {
					b = append(b, ", "...)
				}
				b = appendPolicyItem(b, it)
			}
		}
		policy = string(b)
	}
	bi := Binding(results)
	setFields(h, sel, now, policy, results, bi)
	return bi
}

func seenPolicy(results []Result, p *floodgate.Policy) bool {
	for i := range results {
		if results[i].Policy == p {
			return true
		}
	}
	return false
}

// setFields sets the fields selected by sel (not zero): RateLimit-Policy
// to policy unless it is empty, and the others for the binding result bi
// (none when bi < 0). The values of all fields share one allocation.
func setFields(h http.Header, sel Headers, now time.Time, policy string, results []Result, bi int) {
	var names, values [6]string
	n := 0
	add := func(name, value string) {
		names[n], values[n] = name, value
		n++
	}
	if policy != "" {
		add(headerRateLimitPolicy, policy)
	}
	if bi >= 0 {
		r := &results[bi]
		d := itemDecision(r.Policy, r.Decision)
		if sel&IETF != 0 {
			var buf [96]byte
			add(headerRateLimit, string(appendRateLimit(buf[:0], r.itemName(), d)))
		}
		if sel&XRateLimit != 0 {
			reset, ok := resetSeconds(d)
			if !ok {
				reset = ceilSeconds(d.ResetAfter)
			}
			if sel&XRateLimitResetUnix != 0 {
				reset += now.Unix()
			}
			add(headerXLimit, strconv.FormatInt(clampInt(d.Limit), 10))
			add(headerXRemaining, strconv.FormatInt(clampInt(d.Remaining), 10))
			add(headerXReset, strconv.FormatInt(clampInt(reset), 10))
		}
		if sel&RetryAfter != 0 && !d.Allowed && d.RetryAfter != floodgate.Never {
			add(headerRetryAfter, strconv.FormatInt(ceilSeconds(d.RetryAfter), 10))
		}
	}
	if n == 0 {
		return
	}
	// One backing array; each field gets a slice whose capacity is its
	// length, so that a later Add copies instead of writing into another
	// field's value.
	all := make([]string, n)
	copy(all, values[:n])
	for i := range n {
		h[names[i]] = all[i : i+1 : i+1]
	}
}

// ceilSeconds rounds d up to whole seconds; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// windowSeconds is a w parameter: d rounded up to seconds, at least 1.
func windowSeconds(d time.Duration) int64 { return clampInt(max(ceilSeconds(d), 1)) }

// floatQuota is an AR(1) or sliding window max as a q: rounded down,
// within 0 to the largest Structured Field Integer.
func floatQuota(m float64) int64 {
	switch {
	case !(m >= 0): // NaN too
		return 0
	case m >= maxSFInteger:
		return maxSFInteger
	}
	return int64(math.Floor(m))
}

// clampInt bounds n to the Integers a Structured Field holds, 0 and up.
func clampInt(n int64) int64 { return min(max(n, 0), maxSFInteger) }

// appendSFString appends s as a Structured Field String (RFC 9651, section
// 3.3.3): quoted, with \ and " escaped; bytes a String cannot hold (outside
// 0x20 to 0x7E) become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
