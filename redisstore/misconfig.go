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
// cluster node (MOVED), WithOneMaster with a client over several masters,
// an address that cannot be dialed as written, and a TLS certificate that
// does not verify. Connection refused, timeouts, a server still loading
// its data, are not: they may pass.
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
	if errors.Is(err, errNotOneMaster) {
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

// WritesRefused returns the code of the error reply in err, from a store
// of this package (Ping, Preload, a decision), when it is one by which a
// Redis that answers refuses every write, for a state that may pass:
//
//   - "READONLY": the server is a replica (the address names a replica; a
//     failover may promote it, else the store should name its master, or
//     the Sentinels);
//   - "OOM": its used memory is above its maxmemory, and its
//     maxmemory-policy evicts no key to make room (keys expiring, or more
//     memory, end it);
//   - "MISCONF": it cannot save its RDB snapshot, and
//     stop-writes-on-bgsave-error is on (a save that succeeds ends it);
//   - "NOREPLICAS": it has fewer good replicas than its
//     min-replicas-to-write;
//   - "LOADING": it is loading its dataset into memory (after a restart),
//     and refuses reads as well until it is done.
//
// It returns "" for any other error, and for nil. Meanwhile no decision
// can be made: each fails with that error.
func WritesRefused(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	for _, r := range writeRefusals {
		if strings.Contains(msg, r.reply) {
			return r.code
		}
	}
	return ""
}

// writeRefusals are the replies WritesRefused knows, by the text that
// begins each.
var writeRefusals = []struct{ code, reply string }{
	{"READONLY", "READONLY "},
	{"OOM", "OOM command not allowed"},
	{"MISCONF", "MISCONF "},
	{"NOREPLICAS", "NOREPLICAS "},
	{"LOADING", "LOADING "},
}

// ReadOnlyReplica reports whether err is a replica's refusal of a write
// (WritesRefused is "READONLY").
func ReadOnlyReplica(err error) bool {
	return WritesRefused(err) == "READONLY"
}

// AuthRefused returns the error reply by which a server refused the
// credentials given, or their lack, in err from a store of this package
// or its go-redis client: NOAUTH (it wants a password), WRONGPASS (it
// refuses the user or password), or an AUTH sent to a server without a
// password; "" for any other error, and for nil. sentinels reports
// whether the refusal came from the Redis Sentinels that a failover client
// asks for the master (the master's own refusal then reports false). Such
// an error holds one line per sentinel, in the order they answered; the
// first refusal among them is returned, whatever failed before it.
func AuthRefused(err error) (reply string, sentinels bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	sentinels = strings.Contains(msg, "all sentinels specified in configuration are unreachable")
	for _, line := range strings.Split(msg, "\n") {
		for _, r := range authRefusals {
			if i := strings.Index(line, r); i >= 0 {
				return line[i:], sentinels
			}
		}
	}
	return "", false
}

// authRefusals begin the replies AuthRefused returns.
var authRefusals = []string{"NOAUTH", "WRONGPASS", "ERR AUTH", "ERR Client sent AUTH"}

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
