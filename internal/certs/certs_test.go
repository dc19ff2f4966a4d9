package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/internal/certtest"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// serve accepts TLS connections under cfg until the test ends, echoing one
// byte per connection, and returns the address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err == nil {
					c.Write(b)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial makes a TLS connection and returns the server's certificate, or
// the handshake's (or the first read's) error.
func dial(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	// A minute: only a hang, never a handshake a loaded machine held up.
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Minute}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	// TLS 1.3 reports a refused client certificate at the first read.
	if _, err := c.Write([]byte{1}); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func TestReloader(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	first := ca.Server(t, "first")
	cert, key := first.Write(t, dir, "server")
	r, err := New(Files{Cert: cert, Key: key}, []string{"h2"}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if r.MutualTLS() {
		t.Error("MutualTLS without a client CA")
	}
	addr := serve(t, r.TLSConfig())
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", NextProtos: []string{"h2"}}
	got, err := dial(addr, client)
	if err != nil || got.Subject.CommonName != "first" {
		t.Fatalf("first handshake: %v %v", got, err)
	}

	// New files: served once CheckEvery has passed since the last look.
	second := ca.Server(t, "second")
	second.Write(t, dir, "server")
	now := time.Unix(0, r.lastCheck.Load()) // the last look, whenever the machine got there
	if c := r.current(now.Add(CheckEvery / 2)); c.Certificates[0].Leaf.Subject.CommonName != "first" {
		t.Error("reloaded before CheckEvery passed")
	}
	if c := r.current(now.Add(2 * CheckEvery)); c.Certificates[0].Leaf.Subject.CommonName != "second" {
		t.Errorf("after CheckEvery: serving %s, want second", c.Certificates[0].Leaf.Subject.CommonName)
	}
	if got, err := dial(addr, client); err != nil || got.Subject.CommonName != "second" {
		t.Errorf("handshake after the reload: %v %v", got, err)
	}

	// A half-written pair (the key of another certificate) is refused; the
	// certificate in force stays.
	third := ca.Server(t, "third")
	certtest.WriteFile(t, cert, third.CertPEM)
	if c := r.current(now.Add(4 * CheckEvery)); c.Certificates[0].Leaf.Subject.CommonName != "second" {
		t.Errorf("a mismatched pair: serving %s, want second", c.Certificates[0].Leaf.Subject.CommonName)
	}
	if err := r.Reload(); err == nil || !errors.Is(err, ErrFiles) {
		t.Errorf("Reload of a mismatched pair: %v", err)
	}
	certtest.WriteFile(t, key, third.KeyPEM)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := dial(addr, client); err != nil || got.Subject.CommonName != "third" {
		t.Errorf("handshake after Reload: %v %v", got, err)
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "s").Write(t, dir, "server")
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not PEM"), 0o600)
	for _, c := range []struct {
		f    Files
		want string
	}{
		{Files{Cert: cert}, "both needed"},
		{Files{Cert: filepath.Join(dir, "missing.crt"), Key: key}, "missing.crt"},
		{Files{Cert: junk, Key: key}, "junk.pem"},
		{Files{Cert: cert, Key: key, ClientCA: junk}, "junk.pem: no PEM certificate"},
		{Files{Cert: cert, Key: key, ClientCA: filepath.Join(dir, "nope.crt")}, "nope.crt"},
	} {
		if _, err := New(c.f, nil, quiet()); err == nil || !errors.Is(err, ErrFiles) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want %q", c.f, err, c.want)
		}
	}
}

// TestMutualTLS: with a client CA, a client without a certificate, or
// with one another CA signed, is refused; one the CA signed gets in.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	other := certtest.NewCA(t, "other CA")
	cert, key := ca.Server(t, "server").Write(t, dir, "server")
	r, err := New(Files{Cert: cert, Key: key, ClientCA: ca.WriteCA(t, dir, "clients")}, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if !r.MutualTLS() {
		t.Error("not MutualTLS with a client CA")
	}
	addr := serve(t, r.TLSConfig())
	cfg := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: certs}
	}
	if _, err := dial(addr, cfg()); err == nil {
		t.Error("a client without a certificate got in")
	}
	if _, err := dial(addr, cfg(other.Client(t, "mallory").TLS)); err == nil {
		t.Error("a client certificate of another CA got in")
	}
	if _, err := dial(addr, cfg(ca.Client(t, "alice").TLS)); err != nil {
		t.Errorf("a client certificate of the CA: %v", err)
	}
}
