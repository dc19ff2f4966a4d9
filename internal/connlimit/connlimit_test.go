package connlimit

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// server accepts on a capped listener until the test ends; each accepted
// connection is read until it fails, and sent to the returned channel.
func server(t *testing.T, max int, o Options) (*Listener, <-chan net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(raw, max, o)
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 1000)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return l, accepted
}

func dial(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closed reports whether the server closed c: a read ends with EOF (or a
// reset) before the hang detector's deadline.
func closed(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func waitAccepted(t *testing.T, accepted <-chan net.Conn, n int) []net.Conn {
	t.Helper()
	var out []net.Conn
	for len(out) < n {
		select {
		case c := <-accepted:
			out = append(out, c)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d connections accepted, want %d", len(out), n)
		}
	}
	return out
}

// TestEvictsIdle: at the cap, a newcomer takes the place of an idle
// connection, which the server closes; the count never passes the cap.
func TestEvictsIdle(t *testing.T) {
	const max = 5
	l, accepted := server(t, max, Options{MinIdle: 20 * time.Millisecond})
	var clients []net.Conn
	for i := 0; i < max; i++ {
		clients = append(clients, dial(t, l))
	}
	waitAccepted(t, accepted, max)
	time.Sleep(50 * time.Millisecond) // all idle for at least MinIdle
	newcomer := dial(t, l)
	waitAccepted(t, accepted, 1)
	if l.Open() != max || l.Evicted() != 1 || l.Refused() != 0 {
		t.Errorf("open %d, evicted %d, refused %d; want %d, 1, 0", l.Open(), l.Evicted(), l.Refused(), max)
	}
	// Every client reads at once: the first EOF (within a hang's bound)
	// gives the others' reads half a second more, so no read's deadline
	// races the close of the one evicted, and a second one closed with it
	// would still be seen.
	eof := make(chan bool, len(clients))
	for _, c := range clients {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		go func() {
			_, err := c.Read(make([]byte, 1))
			eof <- err == io.EOF
		}()
	}
	gone := 0
	for range clients {
		if <-eof {
			gone++
			for _, c := range clients {
				c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			}
		}
	}
	if gone != 1 {
		t.Errorf("%d of the idle connections were closed, want 1", gone)
	}
	if _, err := newcomer.Write([]byte("hello")); err != nil {
		t.Errorf("the newcomer cannot write: %v", err)
	}
}

// TestRefusesWhenBusy: at the cap with no connection idle long enough,
// the newcomer is closed and the others stay.
func TestRefusesWhenBusy(t *testing.T) {
	const max = 3
	l, accepted := server(t, max, Options{MinIdle: time.Hour})
	var clients []net.Conn
	for i := 0; i < max; i++ {
		clients = append(clients, dial(t, l))
	}
	waitAccepted(t, accepted, max)
	newcomer := dial(t, l)
	if !closed(newcomer) {
		t.Error("the newcomer was not closed")
	}
	if l.Open() != max || l.Evicted() != 0 || l.Refused() != 1 {
		t.Errorf("open %d, evicted %d, refused %d; want %d, 0, 1", l.Open(), l.Evicted(), l.Refused(), max)
	}
	for i, c := range clients {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Errorf("client %d: %v", i, err)
		}
	}
}

// TestActiveStays: a connection that moved bytes lately is never the one
// evicted, however long the others have been connected.
func TestActiveStays(t *testing.T) {
	const max = 4
	minIdle := 30 * time.Millisecond
	l, accepted := server(t, max, Options{MinIdle: minIdle})
	active := dial(t, l)
	waitAccepted(t, accepted, 1)
	for i := 0; i < max-1; i++ {
		dial(t, l)
	}
	waitAccepted(t, accepted, max-1)
	for round := 0; round < 5; round++ {
		time.Sleep(2 * minIdle)
		// The active client speaks, and the server reads it: wait until
		// the server's side has moved the byte.
		before := l.Evicted()
		mark := time.Now().UnixNano()
		if _, err := active.Write([]byte("ping")); err != nil {
			t.Fatalf("round %d: the active connection was closed: %v", round, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !movedSince(l, mark) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		dial(t, l)
		waitAccepted(t, accepted, 1)
		if l.Evicted() != before+1 || l.Open() != max {
			t.Fatalf("round %d: evicted %d, open %d", round, l.Evicted(), l.Open())
		}
	}
	active.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := active.Read(make([]byte, 1)); err == io.EOF {
		t.Error("the active connection was evicted")
	}
}

// movedSince reports whether some connection moved bytes at or after
// mark (UnixNano).
func movedSince(l *Listener, mark int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		if c.active.Load() >= mark {
			return true
		}
	}
	return false
}

func TestCloseFreesPlace(t *testing.T) {
	l, accepted := server(t, 2, Options{MinIdle: time.Hour})
	a := dial(t, l)
	dial(t, l)
	waitAccepted(t, accepted, 2)
	a.Close() // the server's reader sees EOF and closes its side
	deadline := time.Now().Add(30 * time.Second)
	for l.Open() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if l.Open() != 1 {
		t.Fatalf("open %d after a close, want 1", l.Open())
	}
	dial(t, l)
	waitAccepted(t, accepted, 1)
	if l.Refused() != 0 || l.Evicted() != 0 || l.Open() != 2 {
		t.Errorf("refused %d, evicted %d, open %d", l.Refused(), l.Evicted(), l.Open())
	}
}
