package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// MaxClients bounds the entries of a tokens file: each name is a label
// value of floodgate_client_requests_total.
const MaxClients = 10_000

// MaxClientName bounds a client's name, in bytes.
const MaxClientName = 64

// Reserved client names: the labels of the credentials that are not a
// named token.
const (
	ClientAdmin = "admin" // the admin token, presented to a decision API
	ClientMTLS  = "mtls"  // a verified client certificate without a token
)

// ErrClientsFile is wrapped by the errors of a tokens file that cannot be
// used.
var ErrClientsFile = errors.New("auth: invalid tokens file")

// ParseClients reads a tokens file: one client per line, its name, spaces
// or tabs, and its token; blank lines and lines starting with # are
// skipped. A name is 1 to MaxClientName letters, digits, '_', '.' or '-',
// other than the reserved "admin" and "mtls"; a token passes CheckToken.
// Names and tokens are unique; at most MaxClients lines. The result maps
// each token's SHA-256 digest to its name. The error names the line at
// fault, never its token, and wraps ErrClientsFile.
func ParseClients(data []byte) (map[[sha256.Size]byte]string, error) {
	out := map[[sha256.Size]byte]string{}
	names := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxTokenLen+MaxClientName+64)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%w: line %d: want NAME TOKEN, found %d fields", ErrClientsFile, line, len(fields))
		}
		name, tok := fields[0], fields[1]
		if err := checkClientName(name); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrClientsFile, line, err)
		}
		if err := CheckToken(tok); err != nil {
			return nil, fmt.Errorf("%w: line %d: client %s: token: %s", ErrClientsFile, line, name, strings.TrimPrefix(err.Error(), ErrWeakToken.Error()+": "))
		}
		if first, dup := names[name]; dup {
			return nil, fmt.Errorf("%w: line %d: client %s is on line %d already", ErrClientsFile, line, name, first)
		}
		d := sha256.Sum256([]byte(tok))
		if other, dup := out[d]; dup {
			return nil, fmt.Errorf("%w: line %d: client %s has the token of client %s", ErrClientsFile, line, name, other)
		}
		if len(out) == MaxClients {
			return nil, fmt.Errorf("%w: line %d: more than %d clients", ErrClientsFile, line, MaxClients)
		}
		names[name] = line
		out[d] = name
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %v", ErrClientsFile, line+1, err)
	}
	return out, nil
}

func checkClientName(name string) error {
	if len(name) > MaxClientName {
		return fmt.Errorf("name of %d bytes; want at most %d", len(name), MaxClientName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("name %q: want letters, digits, '_', '.' and '-' only", clip(name))
		}
	}
	if name == ClientAdmin || name == ClientMTLS {
		return fmt.Errorf("name %q is reserved (it labels the admin token or a client certificate)", name)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// Clients are the named bearer tokens of the decision APIs, read from a
// tokens file (ParseClients). The zero value has no file: client
// authentication is off. Load names the file, Refresh re-reads it when
// its contents changed; a file that cannot be used is refused and the
// tokens in force stay.
type Clients struct {
	mu    sync.Mutex // serializes Load and Refresh
	path  string
	stamp [sha256.Size]byte // digest of the file's contents in force

	set atomic.Pointer[map[[sha256.Size]byte]string] // nil: off
}

// Load reads the tokens file at path and puts its tokens in force; an
// empty path turns client authentication off. On an error (the file
// cannot be read or parsed, or holds no client) the tokens in force stay
// and the path is not changed.
func (c *Clients) Load(path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if path == "" {
		c.path, c.stamp = "", [sha256.Size]byte{}
		c.set.Store(nil)
		return nil
	}
	return c.readLocked(path)
}

// Refresh re-reads the file Load named when its contents changed, and
// reports whether it put new tokens in force. With no file it does
// nothing.
func (c *Clients) Refresh() (changed bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == "" {
		return false, nil
	}
	data, err := os.ReadFile(c.path)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrClientsFile, err)
	}
	if sha256.Sum256(data) == c.stamp {
		return false, nil
	}
	if err := c.readLocked(c.path); err != nil {
		return false, err
	}
	return true, nil
}

func (c *Clients) readLocked(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrClientsFile, err)
	}
	set, err := ParseClients(data)
	if err != nil {
		return err
	}
	if len(set) == 0 {
		return fmt.Errorf("%w: no client in %s (remove the setting to turn client authentication off)", ErrClientsFile, path)
	}
	c.path, c.stamp = path, sha256.Sum256(data)
	c.set.Store(&set)
	return nil
}

// Enabled reports whether a tokens file is in force.
func (c *Clients) Enabled() bool { return c != nil && c.set.Load() != nil }

// Lookup returns the name of the client whose token is presented, or
// false. The presented token is hashed before the look-up, so that its
// time tells nothing of the tokens in force.
func (c *Clients) Lookup(presented string) (name string, ok bool) {
	if c == nil {
		return "", false
	}
	set := c.set.Load()
	if set == nil {
		return "", false
	}
	name, ok = (*set)[sha256.Sum256([]byte(presented))]
	return name, ok
}

// Names returns the names of the clients in force, sorted.
func (c *Clients) Names() []string {
	if c == nil {
		return nil
	}
	set := c.set.Load()
	if set == nil {
		return nil
	}
	out := make([]string, 0, len(*set))
	for _, n := range *set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Path returns the tokens file in force, or "".
func (c *Clients) Path() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.path
}
