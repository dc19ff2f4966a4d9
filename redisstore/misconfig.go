package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
)

// Misconfigured reports whether err, from a store of this package (Ping,
// Preload, a decision), comes from a configuration that no retry can
// mend: a wrong password or user (WRONGPASS, NOAUTH, an AUTH the server
// does not expect), an ACL that forbids the commands the store needs
// (NOPERM), a database number the server does not have, a command the
// server does not know (a proxy or an old server), a cluster client
// pointed at a server without cluster mode or a plain client pointed at a
// cluster node (MOVED), an address that cannot be dialed as written, and a
// TLS certificate that does not verify. Connection refused, timeouts, a
// server still loading its data, are not: they may pass.
func Misconfigured(err error) bool {
	if err == nil {
		return false
	}
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	var cie x509.CertificateInvalidError
	if errors.As(err, &cve) || errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie) {
		return true
	}
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return true // "missing port in address", "invalid port"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return true // a host name that does not exist
	}
	msg := err.Error()
	for _, s := range misconfigured {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// ReadOnlyReplica reports whether err, from a store of this package (Ping,
// Preload, a decision), is a replica's refusal of a write (READONLY): the
// address the store dials names a replica. That passes if the replica is
// promoted (a failover behind a name that moved), and not otherwise: a
// plain client pointed at a replica should point at its master, or at the
// Sentinels.
func ReadOnlyReplica(err error) bool {
	return err != nil && strings.Contains(err.Error(), "READONLY ")
}

// OutOfMemory reports whether err, from a store of this package (Ping,
// Preload, a decision), is a full server's refusal of a write (OOM): its
// used memory is above its maxmemory, and its maxmemory-policy evicts no
// key to make room (noeviction, or no key the policy may evict). That
// passes once keys expire or the server is given more memory, not
// otherwise; meanwhile every decision that writes fails.
func OutOfMemory(err error) bool {
	return err != nil && strings.Contains(err.Error(), "OOM command not allowed")
}

// misconfigured are the reply prefixes (and client messages) of errors no
// retry can mend.
var misconfigured = []string{
	"WRONGPASS",
	"NOAUTH",
	"NOPERM",
	"ERR AUTH <password> called without any password configured",
	"ERR Client sent AUTH, but no password is set",
	"invalid DB index",
	"DB index is out of range",
	"ERR unknown command",
	"ERR This instance has cluster support disabled",
	"MOVED ",
	"invalid port",
	"missing port in address",
	"tls: first record does not look like a TLS handshake",
	"certificate signed by unknown authority",
	"x509: ",
	"tls: certificate required", // the server asks for a client certificate
	"tls: bad certificate",      // and refuses the one given
	"tls: unknown certificate authority",
}
