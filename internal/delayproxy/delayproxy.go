// Package delayproxy puts a fixed delay between a client and a TCP server,
// so that a benchmark on one machine can measure what a remote server
// costs: every byte that crosses the proxy, in either direction, is
// written on one way delay after it was read, in order. A round trip
// through it therefore takes at least twice the delay more than without
// it, while several requests can be on their way at once, as on a real
// network link (and unlike a proxy that sleeps between requests).
//
// It imitates latency only: no bandwidth limit, loss or jitter beyond the
// Go scheduler's own. Its CPU is the benchmark process's, not the
// client's or the server's.
package delayproxy

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy listens on a free port of 127.0.0.1 and forwards every connection
// to its target with the delay. Create it with Start; Close stops it and
// every connection through it. A Proxy is safe for concurrent use.
type Proxy struct {
	Addr  string        // host:port to dial instead of the target
	Delay time.Duration // one way: a round trip gains twice this

	target string
	ln     net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start listens and forwards to target with delay each way. A delay of 0
// or less is an error: use the target itself then.
func Start(target string, delay time.Duration) (*Proxy, error) {
	if delay <= 0 {
		return nil, fmt.Errorf("delayproxy: delay %s: want more than 0", delay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delayproxy: %w", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), Delay: delay, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// track records c for Close, or reports false when the proxy is closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			c.Close()
			s.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			var both sync.WaitGroup
			both.Add(2)
			go func() { defer both.Done(); p.pipe(s, c) }()
			go func() { defer both.Done(); p.pipe(c, s) }()
			both.Wait()
			p.untrack(c, s)
		}()
	}
}

// chunk is what one read returned, and when it may be written.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each read written Delay after it was read, in
// order. It returns when either side fails, closing both so that the
// other direction ends too.
func (p *Proxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range q {
			if d := time.Until(ch.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(ch.b); err != nil {
				src.Close()
				for range q { // let the reader finish
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.Delay)}
		}
		if err != nil { // EOF, a reset or Close: the connection ends either way
			break
		}
	}
	close(q)
	<-done
	dst.Close()
}
