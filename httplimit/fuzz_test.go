package httplimit_test

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/floodgatehq/floodgate/httplimit"
)

// FuzzClientIP drives the parsing of forwarding headers (X-Forwarded-For,
// Forwarded, X-Real-IP) with any peer address and any field values. It
// never panics; an error wraps ErrKey; a key is a network of the
// configured prefix length; a peer outside the trusted proxies is keyed by
// its own address whatever the fields say, and so is every peer when no
// field is configured.
func FuzzClientIP(f *testing.F) {
	for _, s := range []struct {
		peer, value string
		header      uint8
	}{
		{"10.0.0.1:443", "203.0.113.7, 10.0.0.2", 2},
		{"10.0.0.1:443", "203.0.113.7:4711,[2001:db8::1]:80", 2},
		{"10.0.0.1:443", `for=203.0.113.7;proto=https, for="[2001:db8::1]:4711"`, 1},
		{"10.0.0.1:443", `for=unknown, for=_hidden, For="10.1.2.3"`, 1},
		{"10.0.0.1:443", `for="[::ffff:203.0.113.7]";by=x;host="a,b"`, 1},
		{"10.0.0.1:443", "2001:db8:1:2::9", 3},
		{"[2001:db8::5]:443", "fe80::1%eth0, 192.0.2.1", 2},
		{"203.0.113.9:1", "10.0.0.7", 2},
		{"not an address", "", 0},
		{"10.0.0.1:443", `for="\"quoted\\"", for=`, 1},
		{"10.0.0.1:443", ",,, ,", 2},
	} {
		f.Add(s.peer, s.value, s.header)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	fields := map[httplimit.ForwardingHeader]string{httplimit.Forwarded: "Forwarded", httplimit.XForwardedFor: "X-Forwarded-For", httplimit.XRealIP: "X-Real-IP"}
	f.Fuzz(func(t *testing.T, peer, value string, header uint8) {
		h := httplimit.ForwardingHeader(header % 4)
		key, err := httplimit.ClientIP(httplimit.IPConfig{TrustedProxies: trusted, Header: h})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		for _, name := range fields {
			r.Header.Add(name, value) // every field: only the configured one may count
		}
		k, err := key(r)
		own, ownErr := httplimit.RemoteIP()(r)
		if err != nil {
			if !errors.Is(err, httplimit.ErrKey) {
				t.Fatalf("error %v does not wrap ErrKey", err)
			}
			return
		}
		p, perr := netip.ParsePrefix(k)
		if perr != nil || !p.IsValid() || p.Masked() != p || (p.Addr().Is4() && p.Bits() != 32) || (p.Addr().Is6() && p.Bits() != 64) {
			t.Fatalf("key %q is not a masked /32 or /64 network", k)
		}
		ap, apErr := netip.ParseAddrPort(peer)
		if h == httplimit.NoForwardingHeader || apErr == nil && !trusted[0].Contains(ap.Addr().Unmap()) && !trusted[1].Contains(ap.Addr().Unmap()) {
			if ownErr != nil || k != own {
				t.Fatalf("peer %q (not a trusted proxy, or no field configured) keyed %q, its own key is %q (%v)", peer, k, own, ownErr)
			}
		}
	})
}
