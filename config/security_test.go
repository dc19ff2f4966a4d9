package config

import (
	"testing"
	"time"
)

func TestSecuritySettings(t *testing.T) {
	cfg, err := Parse(src("f.yaml", `
admin:
  token_file: /run/secrets/admin
  allow_loopback: true
clients:
  tokens_file: /etc/floodgate/clients
limits:
  max_connections: 100
  max_header_bytes: 8192
  read_header_timeout: 2s
  read_timeout: 5s
  write_timeout: 6s
  idle_timeout: 30s
  max_concurrent_streams: 16
  keepalive_min_time: 20s
listen:
  http: ":8443"
  http_tls: {cert: h.crt, key: h.key}
  grpc_tls: {cert: g.crt, key: g.key, client_ca: ca.crt}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admin != (Admin{TokenFile: "/run/secrets/admin", AllowLoopback: true}) {
		t.Errorf("admin: %+v", cfg.Admin)
	}
	if cfg.Clients.TokensFile != "/etc/floodgate/clients" || !cfg.ClientAuth() {
		t.Errorf("clients: %+v", cfg.Clients)
	}
	b := cfg.Bounds
	if b.MaxConnections != 100 || b.MaxHeaderBytes != 8192 || b.ReadHeaderTimeout != 2*time.Second || b.ReadTimeout != 5*time.Second ||
		b.WriteTimeout != 6*time.Second || b.IdleTimeout != 30*time.Second || b.MaxConcurrentStreams != 16 || b.KeepaliveMinTime != 20*time.Second {
		t.Errorf("limits: %+v", b)
	}
	want := Listen{HTTP: ":8443", GRPC: DefaultGRPC, HTTPTLS: TLS{Cert: "h.crt", Key: "h.key"}, GRPCTLS: TLS{Cert: "g.crt", Key: "g.key", ClientCA: "ca.crt"}}
	if cfg.Listen != want {
		t.Errorf("listen: %+v", cfg.Listen)
	}
	if cfg.Listen.HTTPTLS.String() != "tls" || cfg.Listen.GRPCTLS.String() != "mtls" || (TLS{}).String() != "off" {
		t.Errorf("TLS strings: %s %s", cfg.Listen.HTTPTLS, cfg.Listen.GRPCTLS)
	}

	// A client CA alone turns client authentication on; nothing, off.
	cfg, err = Parse(src("f.yaml", "listen:\n  http_tls: {cert: a, key: b, client_ca: c}\n"))
	if err != nil || !cfg.ClientAuth() {
		t.Errorf("client_ca: %v, ClientAuth %v", err, cfg != nil && cfg.ClientAuth())
	}
	cfg, _ = Parse(src("f.yaml", "policies: {a: \"gcra 1/1s\"}\n"))
	if cfg.ClientAuth() || cfg.Admin != (Admin{}) {
		t.Errorf("defaults: ClientAuth %v, admin %+v", cfg.ClientAuth(), cfg.Admin)
	}
	if cfg.Bounds.MaxConnections != DefaultMaxConnections || cfg.Bounds.ReadHeaderTimeout != DefaultReadHeaderTimeout ||
		cfg.Bounds.KeepaliveMinTime != DefaultKeepaliveMinTime || cfg.Bounds.MaxConcurrentStreams != DefaultMaxConcurrentStreams {
		t.Errorf("default limits: %+v", cfg.Bounds)
	}
}

// TestSecurityErrors: every bad value names its field, the value and what
// is allowed; a token's error never repeats the token.
func TestSecurityErrors(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"a short token", "admin:\n  token: abcde\n", []string{
			"f.yaml:2: admin.token: unusable token: 5 characters, want at least 16 (or no token)"}},
		{"a token with a space", "admin:\n  token: \"0123456789 abcdefgh\"\n", []string{
			"f.yaml:2: admin.token: unusable token: character 11 is not printable ASCII (spaces, control characters and non-ASCII are not allowed) (or no token)"}},
		{"token and token_file", "admin:\n  token: 0123456789abcdef\n  token_file: /x\n", []string{
			"f.yaml:3: admin.token_file: give admin.token or admin.token_file, not both"}},
		{"allow_loopback not a boolean", "admin:\n  allow_loopback: sometimes\n", []string{
			`f.yaml:2: admin.allow_loopback: want true or false, found "sometimes"`}},
		{"unknown clients field", "clients:\n  tokens: x\n", []string{
			"f.yaml:2: clients.tokens: unknown field; allowed here: tokens_file"}},
		{"limits out of range", `limits:
  max_connections: 0
  max_header_bytes: 100
  max_concurrent_streams: 2000000
  read_header_timeout: 1ms
  read_timeout: 2h
  idle_timeout: 25h
  keepalive_min_time: soon
  write_timeout: -1s
`, []string{
			`f.yaml:2: limits.max_connections: want an integer from 1 to 1000000, found "0"`,
			`f.yaml:3: limits.max_header_bytes: want an integer from 4096 to 16777216, found "100"`,
			`f.yaml:4: limits.max_concurrent_streams: want an integer from 1 to 1000000, found "2000000"`,
			`f.yaml:5: limits.read_header_timeout: want a duration of at least 100ms, found 1ms`,
			`f.yaml:6: limits.read_timeout: want a duration from 100ms to 1h0m0s, found 2h0m0s`,
			`f.yaml:7: limits.idle_timeout: want a duration from 1s to 24h0m0s, found 25h0m0s`,
			`f.yaml:8: limits.keepalive_min_time: want a duration such as "250ms" or "1m30s", found "soon"`,
			`f.yaml:9: limits.write_timeout: want a duration of at least 100ms, found -1s`,
		}},
		{"read_timeout below read_header_timeout", "limits:\n  read_header_timeout: 20s\n  read_timeout: 15s\n", []string{
			"f.yaml:3: limits.read_timeout: read_timeout 15s is shorter than read_header_timeout 20s: want read_timeout ≥ read_header_timeout"}},
		{"read_timeout below the default header timeout", "limits:\n  read_timeout: 5s\n", []string{
			"f.yaml:2: limits.read_timeout: read_timeout 5s is shorter than read_header_timeout 10s: want read_timeout ≥ read_header_timeout"}},
		{"tls without a key", "listen:\n  http_tls: {cert: a.crt}\n", []string{
			"f.yaml:2: listen.http_tls: cert and key go together: give both or neither"}},
		{"client_ca without tls", "listen:\n  grpc_tls:\n    client_ca: ca.crt\n", []string{
			"f.yaml:3: listen.grpc_tls.client_ca: client certificates need TLS: give cert and key too"}},
		{"both spellings of gRPC TLS", "listen:\n  tls_cert: a\n  tls_key: b\n  grpc_tls: {cert: c, key: d}\n", []string{
			"f.yaml:2: listen: tls_cert and tls_key are the older spelling of grpc_tls: give one of them"}},
		{"unknown TLS field", "listen:\n  http_tls: {cert: a, key: b, ca: c}\n", []string{
			"f.yaml:2: listen.http_tls.ca: unknown field; allowed here: cert, key, client_ca"}},
		{"listen address", "listen:\n  http: \"not an address\"\n  grpc: \"127.0.0.1:99999\"\n", []string{
			`f.yaml:2: listen.http: "not an address": want host:port, such as 127.0.0.1:8080 (missing port in address)`,
			`f.yaml:3: listen.grpc: "127.0.0.1:99999": want a port from 0 to 65535, found "99999"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := errorLines(t, src("f.yaml", c.text))
			if len(got) != len(c.want) {
				t.Fatalf("got %d errors:\n\t%s\nwant %d:\n\t%s", len(got), joinLines(got), len(c.want), joinLines(c.want))
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("error %d:\n\tgot  %s\n\twant %s", i, got[i], c.want[i])
				}
			}
		})
	}
}

func joinLines(s []string) string {
	out := ""
	for i, l := range s {
		if i > 0 {
			out += "\n\t"
		}
		out += l
	}
	return out
}
