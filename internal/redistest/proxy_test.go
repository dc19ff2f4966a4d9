package redistest

import (
	"testing"
	"time"
)

func TestProxyStallsAndResumes(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	p := StartProxy(t, s.Addr)
	c, err := dial(p.Addr, "", "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if r, err := c.do("SET", "k", "1"); err != nil || r != "OK" {
		t.Fatalf("SET through the proxy: %v, %v", r, err)
	}

	p.Stall()
	c.timeout = 200 * time.Millisecond
	if r, err := c.do("INCR", "k"); err == nil {
		t.Fatalf("INCR through a stalled proxy answered %v", r)
	}
	// The command was held, not dropped: it runs once resumed, and its
	// reply comes before the next one's.
	p.Resume()
	c.timeout = 10 * time.Second
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	if r, err := readReply(c.r); err != nil || r != int64(2) {
		t.Fatalf("the held INCR's reply after Resume: %v, %v; want 2", r, err)
	}
	if r, err := c.do("GET", "k"); err != nil || r != "2" {
		t.Fatalf("GET after Resume: %v, %v; want 2", r, err)
	}

	// A connection dialed while stalled is served after Resume.
	p.Stall()
	done := make(chan any, 1)
	go func() {
		r, err := doWithin(10*time.Second, p.Addr, "", "", "GET", "k")
		if err != nil {
			r = err
		}
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("a new connection through a stalled proxy answered %v", r)
	case <-time.After(200 * time.Millisecond):
	}
	p.Resume()
	if r := <-done; r != "2" {
		t.Fatalf("GET on a connection made while stalled: %v; want 2", r)
	}
}
