//go:build unix

package redistest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback address ("127.0.0.1:port") that refuses
// every connection until the test ends: a TCP socket bound to a free port
// and never listening. Unlike a listener's port closed at once, whose port
// a parallel test's server may take (and then answer, or hang), the bound
// socket keeps the port from every other listener and from the ports the
// system picks for outgoing connections.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("redistest: RefusedAddr: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("redistest: RefusedAddr: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("redistest: RefusedAddr: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("redistest: RefusedAddr: bound to a %T", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))
}
