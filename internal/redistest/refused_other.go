//go:build !unix

package redistest

import (
	"net"
	"testing"
)

// RefusedAddr returns a loopback address that refuses connections: on
// this system, the port of a listener closed at once, which another
// listener may take later.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: RefusedAddr: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
