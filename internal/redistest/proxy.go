package redistest

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of a server that can stall: while stalled
// it accepts connections and reads nothing from them, and forwards nothing
// in either direction, as a Redis whose CPU is saturated or whose network
// path hangs; Resume lets everything held back through, in order. Nothing
// is dropped or altered. Start one with StartProxy; t.Cleanup closes it.
// Its methods are safe for concurrent use.
type Proxy struct {
	// Addr is the proxy's "127.0.0.1:<port>": dial it instead of the
	// server's.
	Addr string

	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled bool
	resume  chan struct{} // closed by Resume; replaced by Stall
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// StartProxy starts a proxy to target (a host:port, such as Server.Addr),
// forwarding.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target, resume: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.resume)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Stall stops forwarding: bytes in flight stay where they are (in the
// proxy's buffers or the kernel's) until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled {
		p.stalled = true
		p.resume = make(chan struct{})
	}
}

// Resume forwards again, everything held back first.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
}

// gate returns once the proxy forwards (at once when it is not stalled),
// or false when it was closed meanwhile.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	ch, closed := p.resume, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	<-ch
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if !p.gate() {
				c.Close()
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			if !p.track(s) {
				c.Close()
				return
			}
			p.wg.Add(2)
			go p.pipe(s, c)
			go p.pipe(c, s)
		}()
	}
}

// pipe copies from src to dst, waiting at every read while the proxy is
// stalled; it closes both ends when either does.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.untrack(dst)
		p.untrack(src)
	}()
	buf := make([]byte, 32<<10)
	for {
		if !p.gate() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			// Bytes read just before a stall are held until Resume.
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF included: the other side closes too
		}
	}
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
