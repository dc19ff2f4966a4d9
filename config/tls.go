package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// storeTLS reads store.tls.
func (r *reader) storeTLS(n *yaml.Node, t *StoreTLS) {
	fs := r.section(n, "store.tls")
	if v, ok := fs["enabled"]; ok {
		t.Enabled, _ = r.boolean(v.value, "store.tls.enabled")
	}
	str := func(k string) string {
		if v, ok := fs[k]; ok {
			s, _ := r.str(v.value, "store.tls."+k)
			return s
		}
		return ""
	}
	t.CAFile, t.CertFile, t.KeyFile, t.ServerName = str("ca_file"), str("cert_file"), str("key_file"), str("server_name")
	if (t.CertFile == "") != (t.KeyFile == "") {
		r.errorf(n, "store.tls", "cert_file and key_file go together: give both or neither")
		return
	}
	// The files must be usable now: a reload or a start with one that is
	// not is refused here, naming it.
	if t.CAFile != "" {
		if _, err := loadCA(t.CAFile); err != nil {
			r.errorf(fs["ca_file"].value, "store.tls.ca_file", "%v", err)
		}
	}
	if t.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			r.errorf(fs["cert_file"].value, "store.tls.cert_file", "with key_file: %v", err)
		}
	}
}

// loadCA reads a PEM bundle of certificates.
func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}

// Config returns the TLS configuration of t: TLS 1.2 or later, the
// servers verified against CAFile (or the system's roots), and the client
// certificate read from CertFile and KeyFile, again whenever either file
// changes. The error names the file that cannot be used.
func (t StoreTLS) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pool, err := loadCA(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("store.tls.ca_file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		kp := &keyPair{certFile: t.CertFile, keyFile: t.KeyFile}
		if _, err := kp.get(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	}
	return cfg, nil
}

// keyPair is a certificate and key read from files, and read again when
// either file's modification time or size changes. A pair that no longer
// loads keeps the last one that did.
type keyPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	stamp   [2]fileStamp
	current *tls.Certificate
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, errC := stampOf(k.certFile)
	key, errK := stampOf(k.keyFile)
	if err := errors.Join(errC, errK); err != nil {
		if k.current != nil {
			return k.current, nil
		}
		return nil, fmt.Errorf("store.tls.cert_file, key_file: %w", err)
	}
	if k.current != nil && k.stamp == [2]fileStamp{c, key} {
		return k.current, nil
	}
	pair, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.current != nil {
			return k.current, nil
		}
		return nil, fmt.Errorf("store.tls.cert_file %s, key_file %s: %w", k.certFile, k.keyFile, err)
	}
	k.current, k.stamp = &pair, [2]fileStamp{c, key}
	return k.current, nil
}
