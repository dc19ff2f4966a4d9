package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ioTimeout bounds dialing and each command of the package's own client:
// a hang's bound, far above what a loaded machine adds to a command.
const ioTimeout = 30 * time.Second

// Error is an error reply from Redis, such as "NOAUTH Authentication
// required." or "MOVED 12182 127.0.0.1:40001".
type Error string

// Error returns the reply's text without the leading "-".
func (e Error) Error() string { return string(e) }

// client is a minimal RESP2 client over one connection, enough for the
// administrative commands this package and its tests send. It is not safe
// for concurrent use.
type client struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration // for each command
}

// dial connects to addr and, when password is not empty, authenticates
// (as user, when that is not empty either). timeout bounds the dial and
// each command.
func dial(addr, user, password string, timeout time.Duration) (*client, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &client{conn: conn, r: bufio.NewReader(conn), timeout: timeout}
	if password != "" {
		args := []string{"AUTH", password}
		if user != "" {
			args = []string{"AUTH", user, password}
		}
		if _, err := c.do(args...); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *client) close() error { return c.conn.Close() }

// do sends one command and reads its reply; see Server.Do for the types.
func (c *client) do(args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("redistest: no command")
	}
	if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.conn.Write(b); err != nil {
		return nil, err
	}
	return readReply(c.r)
}

// do runs one command on a fresh connection to addr, within ioTimeout.
func do(addr, user, password string, args ...string) (any, error) {
	return doWithin(ioTimeout, addr, user, password, args...)
}

// doWithin is do with timeout for the dial and for each command.
func doWithin(timeout time.Duration, addr, user, password string, args ...string) (any, error) {
	c, err := dial(addr, user, password, timeout)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.do(args...)
}

// readReply reads one RESP2 reply. An error reply comes back as an Error;
// inside an array it is kept as an element instead.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("redistest: malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, Error(body)
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redistest: malformed integer reply %q", line)
		}
		return n, nil
	case '$', '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > 512<<20 {
			return nil, fmt.Errorf("redistest: malformed length in reply %q", line)
		}
		if n < 0 {
			return nil, nil // null bulk string or null array
		}
		if kind == '$' {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return nil, err
			}
			if string(buf[n:]) != "\r\n" {
				return nil, errors.New("redistest: bulk string without CRLF")
			}
			return string(buf[:n]), nil
		}
		items := make([]any, n)
		for i := range items {
			v, err := readReply(r)
			var re Error
			if errors.As(err, &re) {
				v, err = re, nil
			}
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		return items, nil
	}
	return nil, fmt.Errorf("redistest: unknown reply type %q", line)
}

// infoField returns the value of field in the text of an INFO or CLUSTER
// INFO reply, or "" when it is absent.
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}

// quote renders s as one double-quoted token of a redis.conf line.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
