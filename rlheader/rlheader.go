// Package rlheader writes the rate limit header fields of a response from
// floodgate decisions: the IETF draft's RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-10), the widely deployed
// X-RateLimit-Limit, -Remaining and -Reset, and Retry-After. The net/http
// middleware (httplimit), the service's HTTP API and its Envoy answers all
// write them through it, so every transport answers alike.
//
// Every value is a valid Structured Field (RFC 9651), and seconds are
// rounded up: a client that waits Retry-After (or t) seconds is not refused
// again by the policy that refused it.
//
// Every exported function of this package is safe for concurrent use.
package rlheader

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate"
)

// Fields selects the rate limit header fields a response carries. Values
// combine with |. The zero value means Default; None alone selects none.
type Fields uint8

const (
	// IETF selects the fields of draft-ietf-httpapi-ratelimit-headers-10:
	// RateLimit-Policy (every policy of the route) and RateLimit (the
	// binding one).
	IETF Fields = 1 << iota

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

	// None selects no field at all. It cannot be combined with the others.
	None
)

// Default is what the zero Fields selects: the IETF fields and
// Retry-After.
const Default = IETF | RetryAfter

// all is every bit that has a meaning.
const all = IETF | XRateLimit | XRateLimitResetUnix | RetryAfter | None

// Resolve returns f, or Default when f is zero, and the empty set for
// None: the fields a response gets.
func (f Fields) Resolve() Fields {
	switch f {
	case 0:
		return Default
	case None:
		return 0
	}
	return f
}

// Check returns what is wrong with f as a configuration value ("only IETF,
// …"), or "" when f is usable.
func (f Fields) Check() string {
	switch {
	case f&^all != 0:
		return "only IETF, XRateLimit, XRateLimitResetUnix, RetryAfter and None"
	case f&None != 0 && f != None:
		return "None alone, or a combination of the others"
	case f&XRateLimitResetUnix != 0 && f&XRateLimit == 0:
		return "XRateLimitResetUnix together with XRateLimit"
	}
	return ""
}

// String returns the set as "IETF|RetryAfter".
func (f Fields) String() string {
	h := f
	if h == 0 {
		return "0"
	}
	var parts []string
	for _, b := range []struct {
		bit  Fields
		name string
	}{{IETF, "IETF"}, {XRateLimit, "XRateLimit"}, {XRateLimitResetUnix, "XRateLimitResetUnix"}, {RetryAfter, "RetryAfter"}, {None, "None"}} {
		if h&b.bit != 0 {
			parts = append(parts, b.name)
			h &^= b.bit
		}
	}
	if h != 0 {
		parts = append(parts, "Fields(0x"+strconv.FormatUint(uint64(h), 16)+")")
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

// Spelling returns the spelling of a field's name that its specification
// uses, for transports other than net/http: "RateLimit-Policy" for Go's
// canonical "Ratelimit-Policy" (names are case-insensitive; people read
// them). Other names are returned as they are.
func Spelling(canonical string) string {
	switch canonical {
	case headerRateLimit:
		return "RateLimit"
	case headerRateLimitPolicy:
		return "RateLimit-Policy"
	case headerXLimit:
		return "X-RateLimit-Limit"
	case headerXRemaining:
		return "X-RateLimit-Remaining"
	case headerXReset:
		return "X-RateLimit-Reset"
	}
	return canonical
}

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
// the name ItemName returns. q and w are the limit's quota and window as
// Policy.Quota reports them (an ar1 limit's window is its resolution).
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

// Item is what one policy decided for a response.
type Item struct {
	// Policy is the policy that decided; it names the item and gives its
	// RateLimit-Policy entry. It must not be modified. Other deciders
	// (such as a custom Redis script) leave it nil and set Name.
	Policy *floodgate.Policy

	// Name names the item when Policy is nil, in RateLimit.
	Name string

	// Decision is the decision.
	Decision floodgate.Decision

	// Unknown says the item carries no numbers worth reporting (its key
	// could not be found, or its store failed and nothing else decided):
	// it is listed in RateLimit-Policy but never reported in RateLimit or
	// the X-RateLimit fields. A Degraded decision with Limit 0, as a
	// failure policy that fails open or closed makes it (package failure),
	// is unknown too: a limiter that did not decide must not claim a
	// remaining quota, nor a wait its quota does not impose.
	Unknown bool
}

// known reports whether the item's numbers describe a real decision.
func (it *Item) known() bool {
	d := &it.Decision
	return !it.Unknown && !(d.Degraded && d.Limit == 0)
}

// Binding returns the index in items of the binding item, the one a
// response reports in RateLimit, X-RateLimit-* and Retry-After, or -1 when
// no item carries numbers (see Item.Unknown):
//
//   - if any known item is denied, the denied one with the longest
//     RetryAfter (floodgate.Never is the longest): the client must wait
//     that long before every denying policy admits the request;
//   - else the one with the least Remaining, the policy closest to
//     denying.
//
// Ties go to the first in items (route order).
func Binding(items []Item) int {
	best := -1
	for i := range items {
		r := &items[i]
		if !r.known() {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &items[best]
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

// PolicyField returns the value of the RateLimit-Policy field of items:
// the entries (PolicyItems) of the policy of every item that has one, in
// order, each policy once; "" when there are none. A middleware whose
// policies are fixed computes it once and passes it to Set.
func PolicyField(items []Item) string {
	var b []byte
	for i := range items {
		p := items[i].Policy
		if p == nil || seenPolicy(items[:i], p) {
			continue
		}
		for _, it := range PolicyItems(p) {
			if len(b) > 0 {
				b = append(b, ", "...)
			}
			b = appendPolicyItem(b, it)
		}
	}
	return string(b)
}

// Set sets on h the fields selected by sel (the zero value selects
// Default) for the items of one response, and returns the index of the
// binding item (see Binding), or -1.
//
//   - RateLimit-Policy is policy, the value of PolicyField(items) (or of
//     the route's whole set of policies); "" leaves the field out.
//   - RateLimit carries the binding item's entry (FormatRateLimit), named
//     ItemName(policy, Decision.Binding) or, for an item without a
//     policy, Item.Name. For a sliding window of several limits, t is at
//     most the binding limit's window: its quota is whole again by then,
//     even while a longer limit still holds state.
//   - X-RateLimit-Limit, -Remaining and -Reset carry the binding
//     decision's Limit, Remaining and the t of its RateLimit entry (its
//     ResetAfter when waiting cannot help), as seconds from now or, with
//     XRateLimitResetUnix, as the Unix time now plus those seconds.
//   - Retry-After is set when the binding item is denied and waiting can
//     help: its RetryAfter in seconds, rounded up, so that a client that
//     waits exactly that long is not refused again by that policy.
//
// Fields not selected, or without a value, are left as they are. now is
// only read for XRateLimitResetUnix.
func Set(h http.Header, sel Fields, now time.Time, policy string, items []Item) int {
	sel = sel.Resolve()
	if sel&IETF == 0 {
		policy = ""
	}
	bi := Binding(items)
	if sel != 0 {
		setFields(h, sel, now, policy, items, bi)
	}
	return bi
}

func seenPolicy(items []Item, p *floodgate.Policy) bool {
	for i := range items {
		if items[i].Policy == p {
			return true
		}
	}
	return false
}

// itemName is the item's RateLimit entry name.
func (it *Item) itemName() string {
	if it.Policy != nil {
		return ItemName(it.Policy, int(it.Decision.Binding))
	}
	return it.Name
}

// setFields sets the fields selected by sel (not zero): RateLimit-Policy
// to policy unless it is empty, and the others for the binding item bi
// (none when bi < 0). The values of all fields share one allocation.
func setFields(h http.Header, sel Fields, now time.Time, policy string, items []Item, bi int) {
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
		r := &items[bi]
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

// RetryAfterValue formats d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func RetryAfterValue(d time.Duration) string {
	return strconv.FormatInt(max(ceilSeconds(d), 1), 10)
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
