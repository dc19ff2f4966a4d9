package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/httplimit"
)

// keyCase is one request handed to a key function: the peer address,
// header fields (a field may repeat), and the key or error wanted.
type keyCase struct {
	name    string
	peer    string
	headers [][2]string
	want    string // "" when an error is wanted
}

func (c keyCase) request() *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = c.peer
	for _, h := range c.headers {
		r.Header.Add(h[0], h[1])
	}
	return r
}

func runKeyCases(t *testing.T, kf httplimit.KeyFunc, cases []keyCase) {
	t.Helper()
	for _, c := range cases {
		got, err := kf(c.request())
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: key %q, want an error", c.name, got)
		case c.want == "" && !errors.Is(err, httplimit.ErrKey):
			t.Errorf("%s: error %v does not wrap ErrKey", c.name, err)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%s: key %q, %v; want %q", c.name, got, err, c.want)
		}
		if err != nil && c.peer != "" && strings.Contains(err.Error(), strings.Split(c.peer, ":")[0]) {
			t.Errorf("%s: error %q contains the address", c.name, err)
		}
	}
}

func mustClientIP(t *testing.T, c httplimit.IPConfig) httplimit.KeyFunc {
	t.Helper()
	kf, err := httplimit.ClientIP(c)
	if err != nil {
		t.Fatal(err)
	}
	return kf
}

// proxies are the trusted networks of the tests: one IPv4 network and
// one IPv6 network.
var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}

func TestRemoteIP(t *testing.T) {
	runKeyCases(t, httplimit.RemoteIP(), []keyCase{
		{name: "ipv4", peer: "203.0.113.7:4711", want: "203.0.113.7/32"},
		{name: "ipv4 without port", peer: "203.0.113.7", want: "203.0.113.7/32"},
		{name: "ipv6 by /64", peer: "[2001:db8:1:2:3:4:5:6]:80", want: "2001:db8:1:2::/64"},
		{name: "ipv6 without port", peer: "2001:db8:1:2::9", want: "2001:db8:1:2::/64"},
		{name: "ipv4-mapped", peer: "[::ffff:203.0.113.7]:80", want: "203.0.113.7/32"},
		{name: "zone dropped", peer: "[fe80::1%eth0]:80", want: "fe80::/64"},
		{name: "spoofed headers ignored", peer: "203.0.113.7:1", want: "203.0.113.7/32", headers: [][2]string{
			{"X-Forwarded-For", "1.2.3.4"}, {"Forwarded", "for=1.2.3.4"}, {"X-Real-IP", "1.2.3.4"}}},
		{name: "not an address", peer: "pipe"},
		{name: "empty", peer: ""},
		{name: "host name", peer: "localhost:80"},
	})
}

func TestClientIPPrefixes(t *testing.T) {
	runKeyCases(t, mustClientIP(t, httplimit.IPConfig{IPv4Prefix: 24, IPv6Prefix: 48}), []keyCase{
		{name: "ipv4 /24", peer: "203.0.113.7:1", want: "203.0.113.0/24"},
		{name: "ipv6 /48", peer: "[2001:db8:1:2::1]:1", want: "2001:db8:1::/48"},
		{name: "mapped ipv4 /24", peer: "[::ffff:203.0.113.7]:1", want: "203.0.113.0/24"},
	})
	runKeyCases(t, mustClientIP(t, httplimit.IPConfig{IPv6Prefix: 128}), []keyCase{
		{name: "ipv6 /128", peer: "[2001:db8:1:2::1]:1", want: "2001:db8:1:2::1/128"},
	})
}

func TestClientIPXForwardedFor(t *testing.T) {
	xff := func(v ...string) [][2]string {
		var h [][2]string
		for _, s := range v {
			h = append(h, [2]string{"X-Forwarded-For", s})
		}
		return h
	}
	runKeyCases(t, mustClientIP(t, httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.XForwardedFor}), []keyCase{
		{name: "spoofed from an untrusted peer", peer: "203.0.113.9:1", headers: xff("198.51.100.1"), want: "203.0.113.9/32"},
		{name: "spoofed chain from an untrusted peer", peer: "203.0.113.9:1", headers: xff("10.0.0.7, 198.51.100.1"), want: "203.0.113.9/32"},
		{name: "one trusted proxy", peer: "10.0.0.1:1", headers: xff("198.51.100.1"), want: "198.51.100.1/32"},
		{name: "chain right to left", peer: "10.0.0.1:1", headers: xff("1.2.3.4, 198.51.100.1, 10.0.0.2"), want: "198.51.100.1/32"},
		{name: "several fields in order", peer: "10.0.0.1:1", headers: xff("1.2.3.4", "198.51.100.1, 10.0.0.3"), want: "198.51.100.1/32"},
		{name: "all trusted: leftmost", peer: "10.0.0.1:1", headers: xff("10.0.0.5, 10.0.0.2"), want: "10.0.0.5/32"},
		{name: "trusted peer, no field", peer: "10.0.0.1:1", want: "10.0.0.1/32"},
		{name: "ipv6 proxy", peer: "[2001:db8:ffff::1]:443", headers: xff("198.51.100.1"), want: "198.51.100.1/32"},
		{name: "ipv6 client with port", peer: "10.0.0.1:1", headers: xff("[2001:db8:5:6::1]:80"), want: "2001:db8:5:6::/64"},
		{name: "ipv4 client with port", peer: "10.0.0.1:1", headers: xff("198.51.100.1:5555"), want: "198.51.100.1/32"},
		{name: "mapped client", peer: "10.0.0.1:1", headers: xff("::ffff:198.51.100.1"), want: "198.51.100.1/32"},
		{name: "mapped trusted proxy", peer: "[::ffff:10.0.0.1]:1", headers: xff("198.51.100.1"), want: "198.51.100.1/32"},
		{name: "garbage left of the client is never read", peer: "10.0.0.1:1", headers: xff("bogus, 198.51.100.1"), want: "198.51.100.1/32"},
		{name: "malformed entry reached", peer: "10.0.0.1:1", headers: xff("198.51.100.1, bogus")},
		{name: "empty entry reached", peer: "10.0.0.1:1", headers: xff("198.51.100.1,")},
		{name: "unknown is malformed here", peer: "10.0.0.1:1", headers: xff("unknown")},
		{name: "other fields ignored", peer: "10.0.0.1:1", headers: [][2]string{{"Forwarded", "for=1.2.3.4"}, {"X-Real-IP", "1.2.3.4"}}, want: "10.0.0.1/32"},
	})
}

func TestClientIPForwarded(t *testing.T) {
	fwd := func(v ...string) [][2]string {
		var h [][2]string
		for _, s := range v {
			h = append(h, [2]string{"Forwarded", s})
		}
		return h
	}
	runKeyCases(t, mustClientIP(t, httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}), []keyCase{
		{name: "spoofed from an untrusted peer", peer: "203.0.113.9:1", headers: fwd("for=198.51.100.1"), want: "203.0.113.9/32"},
		{name: "one trusted proxy", peer: "10.0.0.1:1", headers: fwd("for=198.51.100.1;proto=https;by=10.0.0.1"), want: "198.51.100.1/32"},
		{name: "quoted ipv6 with port", peer: "10.0.0.1:1", headers: fwd(`for="[2001:db8:cafe::17]:4711"`), want: "2001:db8:cafe::/64"},
		{name: "quoted ipv4 with obfuscated port", peer: "10.0.0.1:1", headers: fwd(`for="198.51.100.1:_p1"`), want: "198.51.100.1/32"},
		{name: "chain right to left", peer: "10.0.0.1:1", headers: fwd("for=1.2.3.4, for=198.51.100.1;by=10.0.0.2, for=10.0.0.2"), want: "198.51.100.1/32"},
		{name: "several fields in order", peer: "10.0.0.1:1", headers: fwd("for=1.2.3.4", "for=198.51.100.1, for=10.0.0.3"), want: "198.51.100.1/32"},
		{name: "all trusted: leftmost", peer: "10.0.0.1:1", headers: fwd(`for=10.0.0.9, for="[2001:db8:ffff::2]"`), want: "10.0.0.9/32"},
		{name: "parameter names are case-insensitive", peer: "10.0.0.1:1", headers: fwd("For=198.51.100.1"), want: "198.51.100.1/32"},
		{name: "unknown stops the walk at the peer", peer: "10.0.0.1:1", headers: fwd("for=1.2.3.4, for=unknown"), want: "10.0.0.1/32"},
		{name: "obfuscated stops the walk at the last hop", peer: "10.0.0.1:1", headers: fwd("for=1.2.3.4, for=_hidden, for=10.0.0.2"), want: "10.0.0.2/32"},
		{name: "no for= stops the walk", peer: "10.0.0.1:1", headers: fwd("for=1.2.3.4, proto=http"), want: "10.0.0.1/32"},
		{name: "comma inside a quoted string", peer: "10.0.0.1:1", headers: fwd(`for=198.51.100.1;ext="a,b"`), want: "198.51.100.1/32"},
		{name: "trailing semicolon", peer: "10.0.0.1:1", headers: fwd("for=198.51.100.1;"), want: "198.51.100.1/32"},
		{name: "garbage left of the client is never read", peer: "10.0.0.1:1", headers: fwd("!!, for=198.51.100.1"), want: "198.51.100.1/32"},
		{name: "unquoted ipv6", peer: "10.0.0.1:1", headers: fwd("for=[2001:db8::1]")},
		{name: "ipv6 without brackets", peer: "10.0.0.1:1", headers: fwd(`for="2001:db8::1"`)},
		{name: "bad port", peer: "10.0.0.1:1", headers: fwd(`for="198.51.100.1:99999"`)},
		{name: "duplicate for", peer: "10.0.0.1:1", headers: fwd("for=198.51.100.1;for=1.2.3.4")},
		{name: "unterminated quote", peer: "10.0.0.1:1", headers: fwd(`for="198.51.100.1`)},
		{name: "not a pair", peer: "10.0.0.1:1", headers: fwd("198.51.100.1")},
		{name: "empty for", peer: "10.0.0.1:1", headers: fwd(`for=""`)},
		{name: "host name", peer: "10.0.0.1:1", headers: fwd("for=example.com")},
		{name: "other fields ignored", peer: "10.0.0.1:1", headers: [][2]string{{"X-Forwarded-For", "1.2.3.4"}}, want: "10.0.0.1/32"},
	})
}

func TestClientIPXRealIP(t *testing.T) {
	real := func(v ...string) [][2]string {
		var h [][2]string
		for _, s := range v {
			h = append(h, [2]string{"X-Real-IP", s})
		}
		return h
	}
	runKeyCases(t, mustClientIP(t, httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.XRealIP}), []keyCase{
		{name: "spoofed from an untrusted peer", peer: "203.0.113.9:1", headers: real("198.51.100.1"), want: "203.0.113.9/32"},
		{name: "trusted peer", peer: "10.0.0.1:1", headers: real("198.51.100.1"), want: "198.51.100.1/32"},
		{name: "trusted peer, ipv6", peer: "10.0.0.1:1", headers: real("2001:db8:7::1"), want: "2001:db8:7::/64"},
		{name: "trusted peer, no field", peer: "10.0.0.1:1", want: "10.0.0.1/32"},
		{name: "malformed", peer: "10.0.0.1:1", headers: real("198.51.100")},
		{name: "several fields", peer: "10.0.0.1:1", headers: real("198.51.100.1", "198.51.100.2")},
	})
}

func TestClientIPConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  httplimit.IPConfig
		want []string
	}{
		{httplimit.IPConfig{IPv4Prefix: 33}, []string{"IPConfig.IPv4Prefix = 33"}},
		{httplimit.IPConfig{IPv6Prefix: -1}, []string{"IPConfig.IPv6Prefix = -1"}},
		{httplimit.IPConfig{Header: httplimit.XForwardedFor}, []string{"IPConfig.Header = X-Forwarded-For", "TrustedProxies is empty"}},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: 9}, []string{"IPConfig.Header = ForwardingHeader(9)"}},
		{httplimit.IPConfig{TrustedProxies: []netip.Prefix{{}}}, []string{"IPConfig.TrustedProxies[0] = invalid Prefix"}},
		{httplimit.IPConfig{IPv4Prefix: 40, IPv6Prefix: 200}, []string{"IPv4Prefix = 40", "IPv6Prefix = 200"}},
	} {
		_, err := httplimit.ClientIP(c.cfg)
		if !errors.Is(err, httplimit.ErrInvalidConfig) {
			t.Errorf("ClientIP(%+v) = %v, want ErrInvalidConfig", c.cfg, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ClientIP(%+v) = %q, want it to contain %q", c.cfg, err, w)
			}
		}
	}
	// A 4in6 trusted network holds the IPv4 addresses it maps.
	kf := mustClientIP(t, httplimit.IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, Header: httplimit.XRealIP})
	runKeyCases(t, kf, []keyCase{{name: "4in6 network", peer: "10.1.2.3:1", headers: [][2]string{{"X-Real-IP", "198.51.100.1"}}, want: "198.51.100.1/32"}})
}

func TestHeaderKey(t *testing.T) {
	runKeyCases(t, httplimit.Header("x-api-key"), []keyCase{
		{name: "present", headers: [][2]string{{"X-Api-Key", "k1"}}, want: "k1"},
		{name: "first of several", headers: [][2]string{{"X-Api-Key", "k1"}, {"X-Api-Key", "k2"}}, want: "k1"},
		{name: "missing"},
		{name: "empty", headers: [][2]string{{"X-Api-Key", ""}}},
	})
}

func TestPathValueKey(t *testing.T) {
	kf := httplimit.PathValue("id")
	var got string
	var gotErr error
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) { got, gotErr = kf(r) })
	mux.HandleFunc("GET /other", func(w http.ResponseWriter, r *http.Request) { got, gotErr = kf(r) })
	for _, c := range []struct {
		path, want string
	}{
		{"/users/42", "42"},
		{"/users/a%2Fb", "a/b"},
		{"/other", ""},
	} {
		got, gotErr = "", nil
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", c.path, nil))
		if c.want == "" {
			if !errors.Is(gotErr, httplimit.ErrKey) {
				t.Errorf("%s: key %q, %v; want ErrKey", c.path, got, gotErr)
			}
		} else if got != c.want || gotErr != nil {
			t.Errorf("%s: key %q, %v; want %q", c.path, got, gotErr, c.want)
		}
	}
}

func TestForwardingHeaderString(t *testing.T) {
	for f, want := range map[httplimit.ForwardingHeader]string{
		httplimit.NoForwardingHeader: "none",
		httplimit.Forwarded:          "Forwarded",
		httplimit.XForwardedFor:      "X-Forwarded-For",
		httplimit.XRealIP:            "X-Real-IP",
	} {
		if got := f.String(); got != want {
			t.Errorf("String() = %s, want %s", got, want)
		}
	}
}
