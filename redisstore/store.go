// Package redisstore is the floodgate.Store for Redis: standalone, Sentinel
// or Cluster, through the caller's go-redis v9 client. Several processes
// sharing one Redis share their limits, and every decision is exactly what
// SPEC.md says, as in process memory.
//
// # How a decision is made
//
// Each decision is one Lua script call (EVALSHA, with one reload on
// NOSCRIPT), the Lua twin of floodgate's Go algorithm, reading the server's
// clock (TIME) and writing the key's state in one atomic step. All keys of
// one (policy, key) share one hash tag:
//
//	<prefix>:{<policy>:<key>}:<part>
//
// so each decision touches a single Redis Cluster slot. Every key written
// carries a TTL of the state's own horizon (rounded up to the millisecond).
// Scripts are loaded on every node by Preload and reloaded on NOSCRIPT.
//
// # Retries
//
// A script call that may have run is never sent again by the store: it
// would count twice. Give New a client built with MaxRetries: -1 (go-redis
// retries commands on network errors by default), so that the client does
// not do it either, and with ContextTimeoutEnabled: true, so that a
// context's deadline bounds a call to a server that stopped answering
// (without it go-redis waits for its own ReadTimeout).
//
// A Store is safe for concurrent use by multiple goroutines.
package redisstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
)

// DefaultPrefix starts every key the store writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "fg"

// Store is a floodgate.Store on Redis. Create it with New.
type Store struct {
	b         backend
	prefix    string
	clock     storekit.Clock // nil: the server's TIME
	maxKeyLen int
	hashKey   []byte // nil: keys as given
	minTTL    int64  // µs

	prepared *storekit.Cache[*prepared] // by policy, bounded
	closed   atomic.Bool
}

// Option configures a Store.
type Option func(*Store) error

// WithPrefix sets the prefix of every key: 1 to 64 bytes of A-Z a-z 0-9 and
// _ . - / : (no braces, which would break the hash tag, and no glob
// characters, which usage listing matches keys with). The default is
// DefaultPrefix.
func WithPrefix(p string) Option {
	return func(s *Store) error {
		if p == "" || len(p) > 64 || !validPrefix(p) {
			return fmt.Errorf("redisstore: WithPrefix(%q): must be 1 to 64 bytes of A-Z a-z 0-9 _ . - / :", p)
		}
		s.prefix = p
		return nil
	}
}

func validPrefix(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_', c == '.', c == '-', c == '/', c == ':':
		default:
			return false
		}
	}
	return true
}

// WithClock makes every decision use c's time instead of the server's
// TIME: for conformance replays and tests. Keys still expire on the
// server's clock, so a clock that runs behind real time sees state expire
// early; pair it with WithMinTTL.
func WithClock(c storekit.Clock) Option {
	return func(s *Store) error {
		if c == nil {
			return errors.New("redisstore: WithClock: nil clock")
		}
		s.clock = c
		return nil
	}
}

// WithMinTTL makes every key written live at least d (≥ 0), whatever its
// state's horizon: for replays with WithClock, whose time jumps while the
// server's does not. Decisions do not depend on it.
func WithMinTTL(d time.Duration) Option {
	return func(s *Store) error {
		if d < 0 {
			return fmt.Errorf("redisstore: WithMinTTL(%s): must be ≥ 0", d)
		}
		s.minTTL = int64(d / time.Microsecond)
		return nil
	}
}

// WithMaxKeyLen sets the longest key accepted, in bytes (n ≥ 1); the
// default is storekit.DefaultMaxKeyLen. Longer keys get an error wrapping
// floodgate.ErrInvalidKey.
func WithMaxKeyLen(n int) Option {
	return func(s *Store) error {
		if n < 1 {
			return fmt.Errorf("redisstore: WithMaxKeyLen(%d): must be ≥ 1", n)
		}
		s.maxKeyLen = n
		return nil
	}
}

// WithHashedKeys stores an HMAC-SHA-256 of each key under secret (22
// characters of base64url, 132 bits) instead of the key itself, so that no
// user identifier (an IP address, an e-mail) is kept at rest, and every key
// has the same length. The secret must be at least 16 bytes and must stay
// the same for the state to be found again. Usage listings then show the
// hashes.
func WithHashedKeys(secret []byte) Option {
	return func(s *Store) error {
		if len(secret) < 16 {
			return fmt.Errorf("redisstore: WithHashedKeys: secret of %d bytes, want at least 16", len(secret))
		}
		s.hashKey = append([]byte(nil), secret...)
		return nil
	}
}

// New returns a Store deciding through client, which may be a
// *redis.Client (standalone, or Sentinel via redis.NewFailoverClient) or a
// *redis.ClusterClient. The caller keeps ownership of the client: Close
// does not close it. New does not contact Redis; call Preload to load the
// scripts ahead of the first decision.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New: nil client")
	}
	s := &Store{b: goRedis{c: client}, prefix: DefaultPrefix, maxKeyLen: storekit.DefaultMaxKeyLen}
	s.prepared = storekit.NewCache(0, s.derive)
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Preload loads every script on every node, so that pipelined batches find
// them. Decisions load a missing script themselves (on NOSCRIPT), so
// Preload is an optimisation and a readiness check.
func (s *Store) Preload(ctx context.Context) error {
	for _, a := range storekit.Algorithms() {
		if err := s.b.loadScript(ctx, scripts[a].src); err != nil {
			return unavailable("loading scripts", err)
		}
	}
	return nil
}

// Ping checks that Redis answers the server's TIME: a readiness check. On
// a cluster it asks one node, so a single master down does not make every
// replica of a service unready at once (decisions for that master's slots
// fail on their own). The error wraps floodgate.ErrUnavailable, or is
// floodgate.ErrClosed after Close.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return floodgate.ErrClosed
	}
	if _, err := s.b.time(ctx); err != nil {
		return classify(ctx, err)
	}
	return nil
}

// prepared is what a validated policy needs for every call: its script, the
// key parts and the script's parameters, built once.
type prepared struct {
	script *script
	parts  []string // after "}:": the state keys
	params []any    // ARGV[8…]
	common [5]any   // ARGV[4…7] minus the clock: count_denied, track, retention
}

func (s *Store) prepare(p *floodgate.Policy) (*prepared, error) {
	e, err := s.prepared.Get(p)
	if err != nil {
		return nil, err
	}
	return e.Value, nil
}

// derive builds what a valid policy needs for every call (the prepared
// cache calls it once per policy).
func (s *Store) derive(p *floodgate.Policy) (*prepared, error) {
	sc, err := scriptFor(p.Algorithm)
	if err != nil {
		return nil, err
	}
	us := func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Microsecond), 10) }
	num := func(n int64) string { return strconv.FormatInt(n, 10) }
	flt := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	pr := &prepared{script: sc}
	switch p.Algorithm {
	case floodgate.FixedWindow:
		pr.parts = []string{"fw"}
		align := string(floodgate.AlignEpoch)
		if p.Align == floodgate.AlignFirst {
			align = string(floodgate.AlignFirst)
		}
		pr.params = []any{num(p.Max), us(p.Window), align}
	case floodgate.GCRA:
		pr.parts = []string{"gc"}
		pr.params = []any{num(p.Max), us(p.Window), num(p.Burst)}
	case floodgate.TokenBucket:
		pr.parts = []string{"tb"}
		pr.params = []any{num(p.Max), us(p.Window), num(p.Burst)}
	case floodgate.AR1:
		pr.parts = []string{"ar"}
		for _, l := range p.Limits {
			pr.params = append(pr.params, flt(l.Max), flt(l.Decay), us(l.Resolution))
		}
	case floodgate.SlidingWindow:
		pr.parts = []string{"sw"}
		for i, l := range p.Limits {
			pr.parts = append(pr.parts, "sw"+strconv.Itoa(i+1))
			pr.params = append(pr.params, num(int64(l.Max)), us(l.Window), us(l.Resolution))
		}
	case floodgate.SlidingLog:
		pr.parts = []string{"sl", "sl1"}
		pr.params = []any{num(p.Max), us(p.Window), us(p.MinInterval)}
	}
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	pr.common = [5]any{flag(storekit.CountsDenied(p)), flag(p.Track), us(p.Retention), strconv.FormatInt(s.minTTL, 10)}
	return pr, nil
}

// storedKey returns the key as stored: the key itself, or its HMAC.
func (s *Store) storedKey(key string) string {
	if s.hashKey == nil {
		return key
	}
	m := hmac.New(sha256.New, s.hashKey)
	m.Write([]byte(key))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))[:22]
}

// keys returns the keys of one decision: usage first, then the state keys.
func (s *Store) keys(p *floodgate.Policy, pr *prepared, key string) []string {
	tag := s.prefix + ":{" + p.Name + ":" + s.storedKey(key) + "}:"
	ks := make([]string, 0, 1+len(pr.parts))
	ks = append(ks, tag+"u")
	for _, part := range pr.parts {
		ks = append(ks, tag+part)
	}
	return ks
}

// args returns ARGV for one decision.
func (s *Store) args(pr *prepared, n int64, peek bool) []any {
	now := ""
	if s.clock != nil {
		now = strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
	}
	p := "0"
	if peek {
		p = "1"
	}
	a := make([]any, 0, 7+len(pr.params))
	a = append(a, now, strconv.FormatInt(n, 10), p, pr.common[0], pr.common[1], pr.common[2], pr.common[3])
	return append(a, pr.params...)
}

// Take decides req (see floodgate.Store) with one script call. The
// context's deadline bounds the call; an error wraps
// floodgate.ErrUnavailable (and the context's error when that is the
// cause) when Redis cannot be reached, is down, or replies oddly.
func (s *Store) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	if err := storekit.CheckRequest(&req, s.maxKeyLen); err != nil {
		return floodgate.Decision{}, err
	}
	pr, err := s.prepare(req.Policy)
	if err != nil {
		return floodgate.Decision{}, err
	}
	keys := s.keys(req.Policy, pr, req.Key)
	args := s.args(pr, req.N, req.Peek)
	reply, err := s.b.evalSha(ctx, pr.script.sha, keys, args)
	if isNoScript(err) {
		// Not run: safe to send again, with the source this time.
		reply, err = s.b.eval(ctx, pr.script.src, keys, args)
	}
	if err != nil {
		return floodgate.Decision{}, classify(ctx, err)
	}
	return decode(reply)
}

// Reset deletes every key of key under policy p: its state and its usage.
func (s *Store) Reset(ctx context.Context, p *floodgate.Policy, key string) error {
	if s.closed.Load() {
		return floodgate.ErrClosed
	}
	if p == nil {
		return fmt.Errorf("%w: nil policy", floodgate.ErrInvalidPolicy)
	}
	if err := storekit.CheckKey(key, s.maxKeyLen); err != nil {
		return err
	}
	pr, err := s.prepare(p)
	if err != nil {
		return err
	}
	if err := s.b.del(ctx, s.keys(p, pr, key)...); err != nil {
		return classify(ctx, err)
	}
	return nil
}

// Close marks the store closed: operations after it return
// floodgate.ErrClosed. It does not close the client. Close is idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// decode reads a script's reply, {allowed, limit, remaining, retry_after,
// reset_after, binding}, checking every type rather than trusting it.
func decode(reply any) (floodgate.Decision, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 6 {
		return floodgate.Decision{}, malformed(reply)
	}
	var n [6]int64
	for i, v := range vals {
		x, ok := v.(int64)
		if !ok {
			return floodgate.Decision{}, malformed(reply)
		}
		n[i] = x
	}
	if n[0] != 0 && n[0] != 1 || n[3] < -1 || n[4] < 0 || n[2] < 0 || n[5] < 0 || n[5] >= storekit.MaxLimits {
		return floodgate.Decision{}, malformed(reply)
	}
	d := floodgate.Decision{
		Allowed:    n[0] == 1,
		Limit:      n[1],
		Remaining:  n[2],
		RetryAfter: time.Duration(n[3]) * time.Microsecond,
		ResetAfter: time.Duration(n[4]) * time.Microsecond,
		Binding:    int32(n[5]),
	}
	if n[3] == -1 {
		d.RetryAfter = floodgate.Never
	}
	return d, nil
}

func malformed(reply any) error {
	return fmt.Errorf("%w: redisstore: malformed script reply of type %T", floodgate.ErrUnavailable, reply)
}

// classify wraps a client error: every failure to decide is unavailability
// of the store (a denial is never an error), and the cause stays testable
// with errors.Is (a context's deadline, a go-redis error).
func classify(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w: redisstore: %w (%v)", floodgate.ErrUnavailable, ctxErr, err)
	}
	return fmt.Errorf("%w: redisstore: %w", floodgate.ErrUnavailable, err)
}

// unavailable wraps err with what was being done.
func unavailable(doing string, err error) error {
	return fmt.Errorf("%w: redisstore: %s: %v", floodgate.ErrUnavailable, doing, err)
}

// Interface guards.
var (
	_ floodgate.Store     = (*Store)(nil)
	_ storekit.BatchStore = (*Store)(nil)
	_ usage.Lister        = (*Store)(nil)
)
