package delayproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// TestRoundTripTakesTwiceTheDelay echoes through the proxy: a round trip
// takes at least twice the delay (a lower bound that no machine's speed
// can break), the bytes arrive whole and in order, and Close ends it all.
func TestRoundTripTakesTwiceTheDelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n])
				}
			}()
		}
	}()
	const delay = 20 * time.Millisecond
	p, err := Start(ln.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for i, line := range []string{"one\n", "two\n", "three\n"} {
		start := time.Now()
		if _, err := c.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if got != line {
			t.Fatalf("round trip %d: got %q, want %q", i, got, line)
		}
		if el := time.Since(start); el < 2*delay {
			t.Errorf("round trip %d took %s, want at least %s", i, el, 2*delay)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Error("the connection through the proxy is still open after Close")
	}
	if _, err := Start(ln.Addr().String(), 0); err == nil {
		t.Error("Start with a delay of 0: no error")
	}
}
