package config

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgatehq/floodgate/internal/auth"
)

// CheckToken reports what makes tok unusable as the admin token, or nil:
// the one validation of every source of a token (the admin section, a
// token file, the environment, a client's flag). The error never holds
// the token; it wraps auth.ErrWeakToken.
func CheckToken(tok string) error { return auth.CheckToken(tok) }

// admin reads the admin section.
func (r *reader) admin(n *yaml.Node, a *Admin) {
	af := r.section(n, "admin")
	if v, ok := af["token"]; ok {
		if s, ok := r.str(v.value, "admin.token"); ok {
			if err := CheckToken(s); s != "" && err != nil {
				r.errorf(v.value, "admin.token", "%s (or no token)", tokenProblem(err))
			}
			a.Token = s
		}
	}
	if v, ok := af["token_file"]; ok {
		a.TokenFile, _ = r.str(v.value, "admin.token_file")
		if a.Token != "" && a.TokenFile != "" {
			r.errorf(v.value, "admin.token_file", "give admin.token or admin.token_file, not both")
		}
	}
	if v, ok := af["allow_loopback"]; ok {
		a.AllowLoopback, _ = r.boolean(v.value, "admin.allow_loopback")
	}
}

// tokenProblem is a token error without its package prefix: "unusable
// token: 5 characters; want at least 16".
func tokenProblem(err error) string { return strings.TrimPrefix(err.Error(), "auth: ") }

// clients reads the clients section.
func (r *reader) clients(n *yaml.Node, c *Clients) {
	cf := r.section(n, "clients")
	if v, ok := cf["tokens_file"]; ok {
		c.TokensFile, _ = r.str(v.value, "clients.tokens_file")
	}
}

// limits reads the limits section: bounds on requests and connections,
// each within a range (an error names the field, the value and the
// range).
func (r *reader) limits(n *yaml.Node, b *RequestBounds) {
	lf := r.section(n, "limits")
	ints := []struct {
		key      string
		min, max int64
		set      func(int64)
	}{
		{"max_body_bytes", 1024, 1 << 30, func(v int64) { b.MaxBodyBytes = v }},
		{"max_batch", 1, 100_000, func(v int64) { b.MaxBatch = int(v) }},
		{"max_key_bytes", 1, 1 << 20, func(v int64) { b.MaxKeyBytes = int(v) }},
		{"max_descriptors", 1, 10_000, func(v int64) { b.MaxDescriptors = int(v) }},
		{"max_connections", 1, 1_000_000, func(v int64) { b.MaxConnections = int(v) }},
		{"max_header_bytes", 4 << 10, 16 << 20, func(v int64) { b.MaxHeaderBytes = int(v) }},
		{"max_concurrent_streams", 1, 1_000_000, func(v int64) { b.MaxConcurrentStreams = int(v) }},
	}
	for _, x := range ints {
		if v, ok := lf[x.key]; ok {
			if n, ok := r.integer(v.value, "limits."+x.key, x.min, x.max); ok {
				x.set(n)
			}
		}
	}
	durations := []struct {
		key      string
		min, max time.Duration
		dst      *time.Duration
	}{
		{"read_header_timeout", 100 * time.Millisecond, 10 * time.Minute, &b.ReadHeaderTimeout},
		{"read_timeout", 100 * time.Millisecond, time.Hour, &b.ReadTimeout},
		{"write_timeout", 100 * time.Millisecond, time.Hour, &b.WriteTimeout},
		{"idle_timeout", time.Second, 24 * time.Hour, &b.IdleTimeout},
		{"keepalive_min_time", time.Second, time.Hour, &b.KeepaliveMinTime},
	}
	for _, x := range durations {
		v, ok := lf[x.key]
		if !ok {
			continue
		}
		d, ok := r.duration(v.value, "limits."+x.key, x.min)
		if !ok {
			continue
		}
		if d > x.max {
			r.errorf(v.value, "limits."+x.key, "want a duration from %s to %s, found %s", x.min, x.max, d)
			continue
		}
		*x.dst = d
	}
	// The header is part of the request: a read timeout shorter than the
	// header's would cut the header's wait short without saying so.
	hdr, read := b.ReadHeaderTimeout, b.ReadTimeout
	if hdr == 0 {
		hdr = DefaultReadHeaderTimeout
	}
	if read == 0 {
		read = DefaultReadTimeout
	}
	if hdr > read {
		at := n
		if v, ok := lf["read_timeout"]; ok {
			at = v.value
		} else if v, ok := lf["read_header_timeout"]; ok {
			at = v.value
		}
		r.errorf(at, "limits.read_timeout", "read_timeout %s is shorter than read_header_timeout %s: want read_timeout ≥ read_header_timeout", read, hdr)
	}
}

// listen reads the listen section: the addresses, and each listener's TLS.
func (r *reader) listen(n *yaml.Node, l *Listen) {
	lf := r.section(n, "listen")
	get := func(k string) string {
		if v, ok := lf[k]; ok {
			s, _ := r.str(v.value, "listen."+k)
			return s
		}
		return ""
	}
	l.HTTP, l.GRPC = get("http"), get("grpc")
	for _, k := range []string{"http", "grpc"} {
		if v, ok := lf[k]; ok && get(k) != "" {
			if err := CheckAddr(get(k), true); err != nil {
				r.errorf(v.value, "listen."+k, "%v", err)
			}
		}
	}
	if v, ok := lf["http_tls"]; ok {
		l.HTTPTLS = r.tls(v.value, "listen.http_tls")
	}
	if v, ok := lf["grpc_tls"]; ok {
		l.GRPCTLS = r.tls(v.value, "listen.grpc_tls")
	}
	cert, key := get("tls_cert"), get("tls_key")
	if cert != "" || key != "" {
		if _, ok := lf["grpc_tls"]; ok {
			r.errorf(n, "listen", "tls_cert and tls_key are the older spelling of grpc_tls: give one of them")
		} else if (cert == "") != (key == "") {
			r.errorf(n, "listen", "tls_cert and tls_key go together: give both or neither")
		} else {
			l.GRPCTLS = TLS{Cert: cert, Key: key}
		}
	}
}

// tls reads one listener's TLS: cert and key together, client_ca only
// with them.
func (r *reader) tls(n *yaml.Node, path string) TLS {
	tf := r.section(n, path)
	get := func(k string) string {
		if v, ok := tf[k]; ok {
			s, _ := r.str(v.value, path+"."+k)
			return s
		}
		return ""
	}
	t := TLS{Cert: get("cert"), Key: get("key"), ClientCA: get("client_ca")}
	if (t.Cert == "") != (t.Key == "") {
		r.errorf(n, path, "cert and key go together: give both or neither")
	}
	if t.ClientCA != "" && t.Cert == "" {
		r.errorf(n, path+".client_ca", "client certificates need TLS: give cert and key too")
	}
	return t
}

// ClientAuth reports whether the decision APIs authenticate their
// clients: a tokens file, or client certificates on a listener.
func (c *Config) ClientAuth() bool {
	return c.Clients.TokensFile != "" || c.Listen.HTTPTLS.ClientCA != "" || c.Listen.GRPCTLS.ClientCA != ""
}

// String describes t for logs: "off", "tls" or "mtls".
func (t TLS) String() string {
	switch {
	case t.ClientCA != "":
		return "mtls"
	case t.Cert != "":
		return "tls"
	}
	return "off"
}
