// Package connlimit caps the connections a listener holds open, so that
// clients that open connections and send nothing cannot take every file
// descriptor of the process.
//
// At the cap, a new connection takes the place of the one that has been
// idle longest among those it looks at (the one whose last byte read or
// written, or whose accept, is oldest, if at least MinIdle ago); when none
// is idle enough it is closed at once. This differs from
// golang.org/x/net/netutil.LimitListener, which stops accepting at the
// cap: there, a flood of idle connections locks every new client out until
// the server's timeouts close them, while here a client that speaks still
// gets in, and the idle ones make room — even when the flood re-opens its
// connections as fast as they are closed, since a newcomer that sends its
// request at once is always fresher than they are.
//
// A Listener is safe for concurrent use by multiple goroutines.
package connlimit

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// scan is how many connections, from a random one on, an Accept at the
// cap looks at for the idlest: bounded, so that a flood costs each accept
// a fixed amount of work.
const scan = 64

// Options configures a Listener.
type Options struct {
	// MinIdle is how long a connection must have been silent (nothing read
	// or written since this long) to be closed for a newcomer at the cap.
	// The zero value evicts the idlest connection, however recent: a grace
	// above zero protects young connections, but lets a flood that re-opens
	// its connections faster than that lock newcomers out.
	MinIdle time.Duration
}

// Listener wraps a net.Listener, holding at most a fixed number of its
// connections open. Create it with New.
type Listener struct {
	net.Listener
	max     int
	minIdle time.Duration

	mu    sync.Mutex
	conns []*conn // open connections, in no order; guarded by mu

	evicted, refused atomic.Uint64
}

// New returns l capped at max open connections (max ≥ 1).
func New(l net.Listener, max int, o Options) *Listener {
	if max < 1 {
		max = 1
	}
	return &Listener{Listener: l, max: max, minIdle: o.MinIdle}
}

// Accept waits for the next connection. At the cap it closes the idlest
// connection it finds to make room, or, finding none idle, closes the
// newcomer and waits for another. It returns the wrapped listener's
// errors.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		nc := &conn{Conn: c, l: l}
		nc.active.Store(now.UnixNano())
		l.mu.Lock()
		var victim *conn
		if len(l.conns) >= l.max {
			if victim = l.idlestLocked(now); victim == nil {
				l.mu.Unlock()
				l.refused.Add(1)
				c.Close()
				continue
			}
			l.removeLocked(victim)
		}
		nc.idx = len(l.conns)
		l.conns = append(l.conns, nc)
		l.mu.Unlock()
		if victim != nil {
			l.evicted.Add(1)
			victim.Conn.Close()
		}
		return nc, nil
	}
}

// idlestLocked returns the connection silent longest, at least minIdle,
// among up to scan of them from a random one on; nil if none is.
func (l *Listener) idlestLocked(now time.Time) *conn {
	n := len(l.conns)
	if n == 0 {
		return nil
	}
	limit := now.Add(-l.minIdle).UnixNano()
	start := rand.IntN(n)
	var best *conn
	var bestAt int64
	for i := 0; i < min(n, scan); i++ {
		c := l.conns[(start+i)%n]
		if at := c.active.Load(); at <= limit && (best == nil || at < bestAt) {
			best, bestAt = c, at
		}
	}
	return best
}

// removeLocked takes c out of the open set (swapping the last one into
// its place).
func (l *Listener) removeLocked(c *conn) {
	if c.idx < 0 {
		return
	}
	last := len(l.conns) - 1
	l.conns[c.idx] = l.conns[last]
	l.conns[c.idx].idx = c.idx
	l.conns[last] = nil
	l.conns = l.conns[:last]
	c.idx = -1
}

// Open returns the number of connections open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Max returns the cap.
func (l *Listener) Max() int { return l.max }

// Evicted returns how many idle connections were closed to make room.
func (l *Listener) Evicted() uint64 { return l.evicted.Load() }

// Refused returns how many new connections were closed at the cap for
// want of an idle one to replace.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// conn is an accepted connection that records when it last moved bytes.
type conn struct {
	net.Conn
	l      *Listener
	idx    int          // position in l.conns; -1 once removed; guarded by l.mu
	active atomic.Int64 // UnixNano of the accept or of the last read or write of a byte
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.active.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.active.Store(time.Now().UnixNano())
	}
	return n, err
}

// Close closes the connection and frees its place.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
