// Package certs serves TLS from certificate files that change under a
// running process (cert-manager, a Kubernetes Secret, certbot): a
// Reloader's tls.Config reads the certificate, its key and the CA bundle
// of client certificates again when the files change, checking at most
// once per CheckEvery, and keeps what it has when the new files do not
// load (a half-written pair, say).
//
// A Reloader is safe for concurrent use by multiple goroutines.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// CheckEvery is how often, at most, a Reloader looks at its files: a
// handshake that comes later than this after the last look stats them.
const CheckEvery = time.Second

// Files names a server's certificate chain and private key (PEM), and
// optionally a bundle of CA certificates (PEM): with one, clients must
// present a certificate that one of them signed (mutual TLS).
type Files struct {
	Cert, Key string
	ClientCA  string // "" means clients need no certificate
}

// ErrFiles is wrapped by the errors of files that do not make a TLS
// configuration.
var ErrFiles = errors.New("certs: unusable TLS files")

// Reloader keeps a tls.Config in step with its Files. Create it with New.
type Reloader struct {
	files      Files
	nextProtos []string
	log        *slog.Logger

	cur       atomic.Pointer[loaded]
	lastCheck atomic.Int64 // UnixNano of the last look at the files
	mu        sync.Mutex   // one reload at a time
	lastErr   string       // the last reload failure logged
}

// loaded is one generation of the files: what they held, and how they
// looked (so that a change is noticed).
type loaded struct {
	config *tls.Config
	stamp  []stamp
}

type stamp struct {
	mod  time.Time
	size int64
}

// New loads f and returns its Reloader. nextProtos are the ALPN protocols
// the server speaks ("h2" for gRPC; "h2", "http/1.1" for HTTP). log
// receives the reloads and their failures; nil means slog.Default(). The
// error, wrapping ErrFiles, names the file at fault.
func New(f Files, nextProtos []string, log *slog.Logger) (*Reloader, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("%w: a certificate and its key are both needed", ErrFiles)
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{files: f, nextProtos: nextProtos, log: log}
	l, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(l)
	r.lastCheck.Store(time.Now().UnixNano())
	return r, nil
}

// TLSConfig returns the server configuration to listen with: every
// handshake gets the configuration of the files as they are (reloaded
// when they changed). TLS 1.2 at least.
func (r *Reloader) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: r.nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current(time.Now()), nil
		},
	}
}

// MutualTLS reports whether clients must present a certificate.
func (r *Reloader) MutualTLS() bool { return r.files.ClientCA != "" }

// Reload reads the files now, whether or not they look changed, and puts
// them in force; on an error the configuration in force stays.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, err := r.load()
	if err != nil {
		return err
	}
	r.cur.Store(l)
	return nil
}

// current returns the configuration in force, first reloading the files
// if CheckEvery has passed since the last look and they changed.
func (r *Reloader) current(now time.Time) *tls.Config {
	last := r.lastCheck.Load()
	if now.UnixNano()-last < int64(CheckEvery) || !r.lastCheck.CompareAndSwap(last, now.UnixNano()) {
		return r.cur.Load().config
	}
	cur := r.cur.Load()
	if st, err := r.stamps(); err == nil && equalStamps(st, cur.stamp) {
		return cur.config
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l, err := r.load()
	if err != nil {
		if msg := err.Error(); msg != r.lastErr {
			r.lastErr = msg
			r.log.Warn("TLS files changed but do not load; the certificate in force stays", "cert", r.files.Cert, "error", err)
		}
		return r.cur.Load().config
	}
	r.lastErr = ""
	r.cur.Store(l)
	r.log.Info("TLS files reloaded", "cert", r.files.Cert, "not_after", l.config.Certificates[0].Leaf.NotAfter.UTC())
	return l.config
}

func (r *Reloader) paths() []string {
	p := []string{r.files.Cert, r.files.Key}
	if r.files.ClientCA != "" {
		p = append(p, r.files.ClientCA)
	}
	return p
}

// stamps stats the files (following symlinks, as a Kubernetes Secret
// volume swaps them).
func (r *Reloader) stamps() ([]stamp, error) {
	var out []stamp
	for _, p := range r.paths() {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out = append(out, stamp{st.ModTime(), st.Size()})
	}
	return out, nil
}

func equalStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}

// load reads the files into a server configuration.
func (r *Reloader) load() (*loaded, error) {
	st, err := r.stamps()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFiles, err)
	}
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %v", ErrFiles, r.files.Cert, r.files.Key, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrFiles, r.files.Cert, err)
		}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   r.nextProtos,
		Certificates: []tls.Certificate{cert},
	}
	if r.files.ClientCA != "" {
		data, err := os.ReadFile(r.files.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFiles, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("%w: %s: no PEM certificate in it", ErrFiles, r.files.ClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return &loaded{config: cfg, stamp: st}, nil
}
