//go:build unix

package redistest

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRefusedAddr: the address refuses a connection, and no listener can
// take its port while the test runs.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s: connected; want refused", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v; want connection refused", addr, err)
		}
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Errorf("listen on %s: taken; want the port kept", addr)
	}
}
