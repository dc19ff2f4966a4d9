package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// KeyFunc returns the key a request is limited by: a client address, a
// user, an API token. An error, or an empty key, rejects the request with
// Config.KeyErrorStatus (400 by default): a request without a key never
// passes unlimited.
//
// Keys reach the store as given; hash them (or use a store option such as
// redisstore.WithHashedKeys) when they identify people. Errors should not
// contain the key or other request data: the middleware hands them to
// Config.OnDecision, which may log them.
type KeyFunc func(r *http.Request) (string, error)

// ErrKey is wrapped by the errors of the key functions of this package,
// and by the error the middleware reports (Result.Err) when a KeyFunc
// fails or returns an empty or overlong key, or one that is not valid
// UTF-8 (a header value with obs-text bytes, say).
var ErrKey = errors.New("httplimit: no usable rate limit key")

// keyError returns an error wrapping ErrKey that says what is wrong.
func keyError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrKey}, args...)...)
}

// Header returns a KeyFunc keying requests by the value of the header
// field name (the first, when there are several). A missing or empty
// field is an error wrapping ErrKey.
func Header(name string) KeyFunc {
	canon := http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := r.Header[canon]; len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", keyError("header %s is missing or empty", canon)
	}
}

// PathValue returns a KeyFunc keying requests by the path wildcard name of
// the http.ServeMux pattern that matched them (Request.PathValue): with
// the pattern "GET /users/{id}", PathValue("id"). The middleware must then
// wrap the handler registered for that pattern, not the ServeMux itself,
// so that the request has been matched. An empty value is an error
// wrapping ErrKey.
func PathValue(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.PathValue(name); v != "" {
			return v, nil
		}
		return "", keyError("path value %s is empty", strconv.Quote(name))
	}
}

// ForwardingHeader names the header field from which ClientIP reads the
// client's address, when a trusted proxy sent the request.
type ForwardingHeader uint8

const (
	// NoForwardingHeader reads no header: the client is the peer address.
	NoForwardingHeader ForwardingHeader = iota
	// Forwarded reads the for= parameters of the Forwarded field (RFC
	// 7239).
	Forwarded
	// XForwardedFor reads the comma-separated addresses of
	// X-Forwarded-For.
	XForwardedFor
	// XRealIP reads the single address of X-Real-IP.
	XRealIP
)

// String returns the header field's name, or "none".
func (f ForwardingHeader) String() string {
	switch f {
	case NoForwardingHeader:
		return "none"
	case Forwarded:
		return "Forwarded"
	case XForwardedFor:
		return "X-Forwarded-For"
	case XRealIP:
		return "X-Real-IP"
	}
	return "ForwardingHeader(" + strconv.Itoa(int(f)) + ")"
}

// IPConfig configures ClientIP. Its zero value keys requests by the peer
// address, whole for IPv4 and by /64 for IPv6, and reads no header.
type IPConfig struct {
	// TrustedProxies are the networks of the proxies in front of the
	// server. Header is read only from a peer inside one of them, and
	// the addresses it lists are walked from the right (the nearest hop)
	// skipping those inside them: the first address outside is the
	// client; when every address is trusted, the leftmost is. Leave it
	// empty when clients connect directly: forwarding headers are then
	// never read, whatever a client sends.
	TrustedProxies []netip.Prefix

	// Header is the field the trusted proxies set. Only one is read: a
	// proxy that sets X-Forwarded-For lets clients send any Forwarded
	// field, so reading both would let them choose their address.
	//
	// With Forwarded, a hop whose for= is "unknown", an obfuscated
	// identifier ("_hidden") or absent ends the walk: the client is the
	// nearest hop already walked (the proxy that could not name it).
	// X-Real-IP holds one address, taken as it is from a trusted peer.
	// Several X-Forwarded-For or Forwarded fields are read as one list, in
	// order. An entry that the walk reaches and cannot parse is an error
	// wrapping ErrKey. Addresses may carry a port (1.2.3.4:80,
	// [2001:db8::1]:4711), which is ignored.
	Header ForwardingHeader

	// IPv4Prefix is how many leading bits of an IPv4 address make the
	// key, 1 to 32; 0 means 32 (one key per address).
	IPv4Prefix int

	// IPv6Prefix is how many leading bits of an IPv6 address make the key,
	// 1 to 128; 0 means 64, one key per /64 network, since a single host
	// usually has a whole /64 to pick addresses from.
	IPv6Prefix int
}

// ClientIP returns a KeyFunc keying requests by their client's IP address
// as described by c, masked to its prefix: the key is the network in CIDR
// form, "203.0.113.7/32" or "2001:db8:1:2::/64". IPv4-mapped IPv6
// addresses (::ffff:203.0.113.7) are taken as the IPv4 address they map,
// zones are dropped. The KeyFunc returns an error wrapping ErrKey when the
// peer address (Request.RemoteAddr) or a forwarding entry it needs cannot
// be parsed. An invalid configuration is an error wrapping
// ErrInvalidConfig.
func ClientIP(c IPConfig) (KeyFunc, error) {
	k, err := newIPKey(c)
	if err != nil {
		return nil, err
	}
	return k.key, nil
}

// RemoteIP returns the KeyFunc of ClientIP(IPConfig{}): the peer address,
// whole for IPv4, by /64 for IPv6, with no forwarding header read.
func RemoteIP() KeyFunc {
	k, _ := newIPKey(IPConfig{})
	return k.key
}

type ipKey struct {
	trusted    []netip.Prefix
	header     ForwardingHeader
	v4Bits     int
	v6Bits     int
	headerName string // canonical
}

func newIPKey(c IPConfig) (*ipKey, error) {
	var errs []error
	bad := func(field, value, allowed string) {
		errs = append(errs, configError("IPConfig."+field, value, allowed))
	}
	k := &ipKey{header: c.Header, v4Bits: 32, v6Bits: 64}
	if c.IPv4Prefix != 0 {
		if c.IPv4Prefix < 1 || c.IPv4Prefix > 32 {
			bad("IPv4Prefix", strconv.Itoa(c.IPv4Prefix), "0 (meaning 32) or 1 to 32")
		}
		k.v4Bits = c.IPv4Prefix
	}
	if c.IPv6Prefix != 0 {
		if c.IPv6Prefix < 1 || c.IPv6Prefix > 128 {
			bad("IPv6Prefix", strconv.Itoa(c.IPv6Prefix), "0 (meaning 64) or 1 to 128")
		}
		k.v6Bits = c.IPv6Prefix
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			bad(fmt.Sprintf("TrustedProxies[%d]", i), p.String(), "a valid network, such as netip.MustParsePrefix(\"10.0.0.0/8\")")
			continue
		}
		// A 4in6 network (::ffff:10.0.0.0/104) holds IPv4 clients, which
		// the walk compares unmapped.
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		k.trusted = append(k.trusted, p.Masked())
	}
	switch c.Header {
	case NoForwardingHeader:
	case Forwarded, XForwardedFor, XRealIP:
		k.headerName = http.CanonicalHeaderKey(c.Header.String())
		if len(c.TrustedProxies) == 0 {
			bad("Header", c.Header.String(), "NoForwardingHeader when TrustedProxies is empty: the header would never be read")
		}
	default:
		bad("Header", c.Header.String(), "NoForwardingHeader, Forwarded, XForwardedFor or XRealIP")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *ipKey) isTrusted(a netip.Addr) bool {
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (k *ipKey) key(r *http.Request) (string, error) {
	a, err := k.client(r)
	if err != nil {
		return "", err
	}
	bits := k.v6Bits
	if a.Is4() {
		bits = k.v4Bits
	}
	p, err := a.Prefix(bits)
	if err != nil { // cannot happen: bits fit the address family
		return "", keyError("%v", err)
	}
	var buf [64]byte
	return string(p.AppendTo(buf[:0])), nil
}

// client returns the client's address, unmapped and without zone.
func (k *ipKey) client(r *http.Request) (netip.Addr, error) {
	peer, ok := parseHostPort(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, keyError("peer address (RemoteAddr) is not an IP address")
	}
	if k.header == NoForwardingHeader || !k.isTrusted(peer) {
		return peer, nil
	}
	values := r.Header[k.headerName]
	switch k.header {
	case XRealIP:
		if len(values) == 0 {
			return peer, nil
		}
		if len(values) > 1 {
			return netip.Addr{}, keyError("several X-Real-IP fields")
		}
		a, ok := parseHostPort(strings.TrimSpace(values[0]))
		if !ok {
			return netip.Addr{}, keyError("X-Real-IP is not an IP address")
		}
		return a, nil
	case XForwardedFor:
		return k.walkXFF(values, peer)
	default:
		return k.walkForwarded(values, peer)
	}
}

// walkXFF walks the X-Forwarded-For entries from the right, starting
// after the (trusted) peer cur.
func (k *ipKey) walkXFF(values []string, cur netip.Addr) (netip.Addr, error) {
	for vi := len(values) - 1; vi >= 0; vi-- {
		v := values[vi]
		for {
			i := strings.LastIndexByte(v, ',')
			a, ok := parseHostPort(strings.TrimSpace(v[i+1:]))
			if !ok {
				return netip.Addr{}, keyError("malformed X-Forwarded-For entry")
			}
			if !k.isTrusted(a) {
				return a, nil
			}
			cur = a
			if i < 0 {
				break
			}
			v = v[:i]
		}
	}
	return cur, nil
}

// walkForwarded walks the Forwarded elements from the right, starting
// after the (trusted) peer.
func (k *ipKey) walkForwarded(values []string, cur netip.Addr) (netip.Addr, error) {
	for vi := len(values) - 1; vi >= 0; vi-- {
		elems, ok := splitForwarded(values[vi])
		for ei := len(elems) - 1; ei >= 0; ei-- {
			if !ok && ei == len(elems)-1 {
				// The field ends inside a quoted string.
				return netip.Addr{}, keyError("malformed Forwarded element")
			}
			node, err := forwardedFor(elems[ei])
			if err != nil {
				return netip.Addr{}, err
			}
			if node == "" || strings.EqualFold(node, "unknown") || node[0] == '_' {
				return cur, nil // the hop could not or would not name its client
			}
			a, ok := parseNode(node)
			if !ok {
				return netip.Addr{}, keyError("malformed Forwarded for= node")
			}
			if !k.isTrusted(a) {
				return a, nil
			}
			cur = a
		}
	}
	return cur, nil
}

// splitForwarded splits one Forwarded field value into its elements, at
// the commas outside quoted strings. ok is false when the value ends
// inside a quoted string.
func splitForwarded(v string) (elems []string, ok bool) {
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			elems = append(elems, v[start:i])
			start = i + 1
		}
	}
	return append(elems, v[start:]), !quoted
}

// forwardedFor returns the value of the for= parameter of one Forwarded
// element (RFC 7239, section 4), unquoted, or "" when it has none. The
// element's syntax is checked: pairs token=value separated by semicolons,
// values tokens or quoted strings, each parameter once.
func forwardedFor(elem string) (string, error) {
	bad := keyError("malformed Forwarded element")
	elem = strings.TrimSpace(elem)
	if elem == "" {
		return "", bad
	}
	var node string
	var seen [4]string
	nseen := 0
	for elem != "" {
		eq := strings.IndexByte(elem, '=')
		if eq <= 0 || !isToken(elem[:eq]) {
			return "", bad
		}
		name := elem[:eq]
		rest := elem[eq+1:]
		var value string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(rest) && rest[i] != '"'; i++ {
				if rest[i] == '\\' && i+1 < len(rest) {
					i++
				}
				b.WriteByte(rest[i])
			}
			if i >= len(rest) {
				return "", bad
			}
			value, rest = b.String(), rest[i+1:]
		} else {
			end := strings.IndexByte(rest, ';')
			if end < 0 {
				end = len(rest)
			}
			value, rest = rest[:end], rest[end:]
			if !isToken(value) {
				return "", bad
			}
		}
		for _, s := range seen[:nseen] {
			if strings.EqualFold(s, name) {
				return "", bad
			}
		}
		if nseen < len(seen) {
			seen[nseen] = name
			nseen++
		}
		if strings.EqualFold(name, "for") {
			if value == "" {
				return "", bad
			}
			node = value
		}
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			break
		}
		if rest[0] != ';' {
			return "", bad
		}
		elem = strings.TrimLeft(rest[1:], " \t") // "for=x;" has an empty last pair
	}
	return node, nil
}

// parseNode parses a Forwarded node that is not "unknown" nor obfuscated:
// an IPv4 address or a bracketed IPv6 address, with an optional port (a
// number or an obfuscated "_port").
func parseNode(node string) (netip.Addr, bool) {
	host, port := node, ""
	if strings.HasPrefix(node, "[") {
		end := strings.IndexByte(node, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, port = node[1:end], node[end+1:]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Addr{}, false
		}
		if !validNodePort(port) {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	if i := strings.IndexByte(node, ':'); i >= 0 {
		host, port = node[:i], node[i:]
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() || !validNodePort(port) {
		return netip.Addr{}, false
	}
	return a, true
}

// validNodePort reports whether p is "" or ":" followed by a port number
// or an obfuscated port.
func validNodePort(p string) bool {
	if p == "" {
		return true
	}
	if p[0] != ':' || len(p) == 1 {
		return false
	}
	p = p[1:]
	if p[0] == '_' {
		return isToken(p)
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 0 && n <= 65535 && len(p) <= 5
}

// parseHostPort parses an IP address with or without a port, such as a
// RemoteAddr ("203.0.113.7:4711", "[2001:db8::1]:4711") or an
// X-Forwarded-For entry, and returns it unmapped and without zone.
func parseHostPort(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
