package httpapi

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/floodgatehq/floodgate/internal/auth"
)

// admin guards an admin endpoint (/v1/reset, /v1/keys, /v1/stats and its history). In
// order: a cross-origin browser request is refused (403 cross_origin);
// with an admin token configured, the request must carry it (401
// unauthorized); without one, it passes only under admin.allow_loopback,
// from a loopback peer naming a loopback host (else 403
// admin_disabled). The admin settings are the service's configuration in
// force, so that a reload changes them.
func (a *api) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if crossOrigin(r) {
			a.refused("admin", "cross_origin")
			writeError(w, http.StatusForbidden, "cross_origin", "", "admin endpoints refuse cross-origin browser requests")
			return
		}
		adm := a.svc.Config().Admin
		if adm.Token == "" {
			if !adm.AllowLoopback || !loopbackPeer(r) || !loopbackHost(r.Host) {
				a.refused("admin", "disabled")
				msg := "no admin token is configured: set admin.token, admin.token_file or FLOODGATE_ADMIN_TOKEN"
				if adm.AllowLoopback {
					msg = "without an admin token, admin endpoints answer only loopback requests to a loopback host (admin.allow_loopback)"
				}
				writeError(w, http.StatusForbidden, "admin_disabled", "", msg)
				return
			}
			h(w, r)
			return
		}
		token, ok := auth.Bearer(r.Header.Get("Authorization"))
		if !ok || !auth.NewToken(adm.Token).Equal(token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate admin"`)
			msg, reason := "admin endpoint: send Authorization: Bearer <admin token>", "missing"
			if ok {
				msg, reason = "admin endpoint: wrong token", "invalid"
			}
			a.refused("admin", reason)
			writeError(w, http.StatusUnauthorized, "unauthorized", "", msg)
			return
		}
		h(w, r)
	}
}

// client guards a decision endpoint when client authentication is on (a
// tokens file, or client certificates on the listener): the request must
// carry the bearer token of a client of the tokens file (or the admin
// token), or come over a connection whose client certificate was verified.
// A token presented is checked even over such a connection: a wrong one
// is refused. Each request passed is counted under its client's name.
func (a *api) client(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		certified := r.TLS != nil && len(r.TLS.VerifiedChains) > 0
		tokens := a.o.Clients.Enabled()
		if !tokens && !certified {
			h(w, r) // client authentication is off
			return
		}
		name := auth.ClientMTLS
		field := r.Header.Get("Authorization")
		token, ok := auth.Bearer(field)
		switch {
		case ok && tokens:
			var known bool
			if name, known = a.o.Clients.Lookup(token); !known {
				if adm := a.svc.Config().Admin.Token; adm != "" && auth.NewToken(adm).Equal(token) {
					name, known = auth.ClientAdmin, true
				}
			}
			if !known {
				a.unauthorized(w, "invalid", "wrong token")
				return
			}
		case !certified:
			msg := "send Authorization: Bearer <client token>"
			if field != "" {
				msg = "send Authorization: Bearer <client token> (another scheme was given)"
			}
			a.unauthorized(w, "missing", msg)
			return
		}
		if a.o.Auth != nil {
			a.o.Auth.ClientRequest("http", name)
		}
		h(w, r)
	}
}

func (a *api) unauthorized(w http.ResponseWriter, reason, msg string) {
	a.refused("client", reason)
	w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", "", msg)
}

func (a *api) refused(surface, reason string) {
	if a.o.Auth != nil {
		a.o.Auth.AuthRefused("http", surface, reason)
	}
}

// crossOrigin reports whether r is a browser's request from another
// origin: Sec-Fetch-Site says so, or, from a browser that does not send
// it, Origin names another host than the request's. Requests of programs
// (curl, the CLI, Envoy, a proxy) carry neither and pass. Unlike
// http.CrossOriginProtection, it judges GET and HEAD too: admin listings
// are not for other origins either.
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "":
	case "same-origin", "none":
		return false
	default:
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host != r.Host
}

// loopbackPeer reports whether r came from a loopback address.
func loopbackPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// loopbackHost reports whether a Host field names the loopback
// interface: localhost, 127.0.0.0/8 or ::1, with or without a port. A
// page of a foreign site whose name resolves to 127.0.0.1 (DNS
// rebinding) sends its own name, and fails.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// jsonKey is a key in a request body. It refuses what JSON decoding
// would otherwise turn into U+FFFD silently (invalid UTF-8 bytes, escapes
// of lone surrogates), so that two different byte strings never reach the
// store as one key.
type jsonKey string

// errKey is a key field that is not a valid string: code invalid_field
// for another JSON type, invalid_key for a string that is not Unicode.
type errKey struct{ code, msg string }

func (e *errKey) Error() string { return e.msg }

func (k *jsonKey) UnmarshalJSON(raw []byte) error {
	if string(raw) == "null" {
		*k = ""
		return nil
	}
	if len(raw) == 0 || raw[0] != '"' {
		kind := "number"
		switch {
		case len(raw) == 0:
		case raw[0] == 't' || raw[0] == 'f':
			kind = "bool"
		case raw[0] == '{':
			kind = "object"
		case raw[0] == '[':
			kind = "array"
		}
		return &errKey{"invalid_field", "want a string, found a JSON " + kind}
	}
	if !utf8.Valid(raw) || !validEscapes(raw) {
		return &errKey{"invalid_key", "not valid UTF-8: a key is a string of Unicode characters"}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return &errKey{"invalid_field", "want a string"}
	}
	*k = jsonKey(s)
	return nil
}

// validEscapes reports whether the \u escapes of a JSON string (quotes
// included, already valid JSON) encode Unicode: every surrogate escape is
// a high one followed by a low one.
func validEscapes(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue // \" \\ \/ \b \f \n \r \t
		}
		c, ok := hex4(raw, i+1)
		if !ok {
			return false
		}
		i += 4
		switch {
		case 0xDC00 <= c && c <= 0xDFFF:
			return false // a low surrogate alone
		case 0xD800 <= c && c <= 0xDBFF:
			if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return false
			}
			lo, ok := hex4(raw, i+3)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(n), err == nil
}
