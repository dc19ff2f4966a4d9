package cli

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/internal/certs"
	"github.com/floodgatehq/floodgate/internal/connlimit"
)

// ALPN protocols of each listener.
var (
	httpProtos = []string{"h2", "http/1.1"}
	grpcProtos = []string{"h2"}
)

// newHTTPServer returns the HTTP server of h under cfg's bounds: header,
// read, write and idle timeouts, and the header's size. With tlsr it
// serves HTTPS (ServeTLS with empty file names: the certificate comes
// from tlsr, reloaded when its files change).
func newHTTPServer(cfg *config.Config, h http.Handler, tlsr *certs.Reloader, log *slog.Logger) *http.Server {
	b := cfg.Bounds
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: b.ReadHeaderTimeout,
		ReadTimeout:       b.ReadTimeout,
		WriteTimeout:      b.WriteTimeout,
		IdleTimeout:       b.IdleTimeout,
		MaxHeaderBytes:    b.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if tlsr != nil {
		srv.TLSConfig = tlsr.TLSConfig()
	}
	return srv
}

// grpcOptions returns the gRPC server's options under cfg's bounds: the
// message size, the metadata size (MAX_HEADER_LIST_SIZE), the streams per
// connection, the handshake's deadline, the idle timeout, and keepalive
// enforcement (clients pinging more often than keepalive_min_time are
// disconnected; pings without calls are allowed, as Envoy may send them).
// With tlsr it serves over TLS, with client certificates when tlsr's files
// name a client CA.
func grpcOptions(cfg *config.Config, tlsr *certs.Reloader) []grpc.ServerOption {
	b := cfg.Bounds
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(b.MaxBodyBytes)),
		grpc.MaxHeaderListSize(uint32(b.MaxHeaderBytes)),
		grpc.MaxConcurrentStreams(uint32(b.MaxConcurrentStreams)),
		grpc.ConnectionTimeout(b.ReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: b.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: b.KeepaliveMinTime, PermitWithoutStream: true}),
	}
	if tlsr != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsr.TLSConfig())))
	}
	return opts
}

// listenerTLS loads a listener's TLS files, or returns nil when it has
// none.
func listenerTLS(t config.TLS, protos []string, log *slog.Logger) (*certs.Reloader, error) {
	if !t.On() {
		return nil, nil
	}
	return certs.New(certs.Files{Cert: t.Cert, Key: t.Key, ClientCA: t.ClientCA}, protos, log)
}

// listen opens a listener on addr, capped at cfg's max_connections.
func listen(addr string, cfg *config.Config) (*connlimit.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return connlimit.New(ln, cfg.Bounds.MaxConnections, connlimit.Options{}), nil
}

// loopback reports whether a listener's address is on the loopback
// interface only.
func loopback(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// exposureWarnings are the warnings serve logs at start about what its
// listeners expose: a listener beyond loopback whose decision API takes
// anyone (no tokens file, no client certificates), or speaks in clear; an
// admin surface open to loopback callers.
func exposureWarnings(cfg *config.Config, httpAddr, grpcAddr net.Addr) []string {
	var out []string
	for _, l := range []struct {
		name string
		addr net.Addr
		tls  config.TLS
	}{{"HTTP", httpAddr, cfg.Listen.HTTPTLS}, {"gRPC", grpcAddr, cfg.Listen.GRPCTLS}} {
		if loopback(l.addr) {
			continue
		}
		if cfg.Clients.TokensFile == "" && l.tls.ClientCA == "" {
			out = append(out, fmt.Sprintf("the %s listener (%s) is reachable beyond loopback with no client authentication: anyone who reaches it can spend any key's quota (set clients.tokens_file, or a client_ca on the listener; docs/operations.md, Security)", l.name, l.addr))
		}
		if !l.tls.On() {
			out = append(out, fmt.Sprintf("the %s listener (%s) is reachable beyond loopback without TLS: tokens and keys travel in clear (listen.%s_tls)", l.name, l.addr, map[string]string{"HTTP": "http", "gRPC": "grpc"}[l.name]))
		}
	}
	if cfg.Admin.Token == "" && cfg.Admin.AllowLoopback {
		out = append(out, "admin.allow_loopback is on without an admin token: every process of this host, and every client of a proxy on it, can reset keys and list them")
	}
	return out
}

// fdWarning says when the connection caps of both listeners, with a
// margin for the store's connections, exceed the process's limit on open
// files: the caps would then not keep accept from failing.
func fdWarning(cfg *config.Config) string {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return ""
	}
	const margin = 256 // the store's connections, files, the debug listener
	need := uint64(2*cfg.Bounds.MaxConnections + margin)
	if need <= lim.Cur {
		return ""
	}
	return fmt.Sprintf("limits.max_connections (%d per listener) needs %d open files with a margin for the store; the process may open %d (raise LimitNOFILE or ulimit -n, or lower limits.max_connections)",
		cfg.Bounds.MaxConnections, need, lim.Cur)
}
