// Package redisstore is the floodgate.Store for Redis: standalone, Sentinel
// or Cluster, through the caller's go-redis v9 client. Several processes
// sharing one Redis share their limits, and every decision is exactly what
// SPEC.md says, as in process memory.
//
// # How a decision is made
//
// Each decision is one call of a Redis function (FCALL; FCALL_RO for a
// peek), the Lua twin of floodgate's Go algorithm, reading the server's
// clock (TIME, unless WithClock gives the time) and writing the key's state
// in one atomic step. All keys of one key, under every policy, share one
// hash tag:
//
//	<prefix>:<policy>:{<key>}:<part>
//
// so each decision, and each group over one key, touches a single Redis
// Cluster slot; the key's "%", "{" and "}" are escaped inside the tag
// ("%25", "%7B", "%7D"), so that a key cannot end the tag early and steer
// itself to another slot. A policy with HashTag set hashes only a key's
// leading "{tag}" instead (SPEC.md, "Keys in Redis"). Every key written
// carries a TTL of the state's own horizon (rounded up to the millisecond).
//
// The functions form one library, loaded once per master by Preload (or
// by the first call that finds it missing); replicas receive it from
// their masters. Its name and its functions' names carry a digest of its
// source, so two versions of floodgate sharing one Redis do not replace
// each other's. A call that finds its function missing (after FUNCTION
// FLUSH, or a restart of a server without persistence) did not run: it is
// sent again as EVAL of the same Lua as a script, and the library is
// loaded again. On a server without functions (Redis before 7.0, a
// proxy that does not pass FCALL, or an ACL that refuses FCALL or
// FUNCTION but allows scripts) the store switches, once and for good,
// to the same Lua as scripts (EVALSHA, EVAL on NOSCRIPT); that path needs
// Redis 6.0 or later.
//
// # Budgets
//
// The store is a storekit.BudgetStore: a group of members, a partial
// grant, a reservation, a settle, a refund or a calendar window is one call
// of one more function of the library (group.lua; FCALL even for a peek),
// over every member's keys, which must share a slot on a Cluster (one key's
// policies always do; different keys with Policy.HashTag and one leading
// "{tag}"): a group over two slots is refused with an error wrapping
// storekit.ErrCrossSlot before anything is sent. A calendar window's bounds
// come from the caller's clock and time-zone data (storekit.CalendarBounds);
// the script picks the window of its own clock among them.
//
// # Reading from replicas
//
// A peek writes nothing, so it is an FCALL_RO of a function registered
// with the no-writes flag, which go-redis counts as a read-only command
// (COMMAND INFO flags it readonly). A client built to read from replicas
// (ClusterOptions.ReadOnly, with RouteRandomly or RouteByLatency if
// wanted; for Sentinel, FailoverOptions.ReplicaOnly or RouteRandomly with
// NewFailoverClusterClient, given to New with WithOneMaster) then sends
// peeks to replicas and adds to the masters. A replica lags its master: a
// peek served by one may see a count from a moment ago, so it can answer
// "allowed" where the master would deny, or report more remaining. Adds
// are never affected. On the script path peeks go to the masters. So does
// a TakeBatch that adds as well as peeks (go-redis sends a pipeline
// holding a write to the masters); one of peeks alone goes to the
// replicas.
//
// # Retries
//
// A decision that may have run is never sent again: it would count twice.
// Its command tells go-redis not to retry it (a cluster client would
// otherwise send it again after a broken connection), and the store does
// not either. The store sends again only a call that did not run: one
// whose function or script was missing, and one a server refused before
// running it, for a reason that passes (a slot moving, a failover; see
// Take). Give New a client built with MaxRetries: -1 as well (go-redis
// retries other commands on network errors by default), and with
// ContextTimeoutEnabled: true, so that a context's deadline bounds a call
// to a server that stopped answering (without it go-redis waits for its
// own ReadTimeout).
//
// # Cluster failover
//
// On a *redis.ClusterClient, New adds a hook that reads the slot map again
// when a call fails to reach a master (a refused or broken connection, a
// timeout, CLUSTERDOWN), at most every 250 ms: go-redis itself does so only
// on MOVED and every ClusterStateReloadInterval (60 s by default; floodgate
// serve uses 500 ms), so without the hook a dead master's slots would go to
// its address long after a replica took over. go-redis also sleeps its
// retry backoff (MinRetryBackoff, 8 ms by default) before it follows a
// MOVED or ASK inside a pipeline, so that while a slot moves each batch
// touching it waits that long: build the cluster client with
// MinRetryBackoff and MaxRetryBackoff -1 (no backoff; floodgate serve
// does) to follow a redirection at once. Node names the master of a
// key, which makes the Store a storekit.Router: wrapped by package failure,
// each master gets its own circuit breaker.
//
// A Store is safe for concurrent use by multiple goroutines.
package redisstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
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
	hashKey   []byte               // nil: keys as given
	minTTL    int64                // µs
	cluster   *redis.ClusterClient // the client, when it is one
	// sharded: the cluster client's slots are on several masters (a Redis
	// Cluster): a group's keys must share a slot, a batch is joined by
	// slot and Node names masters. False for WithOneMaster.
	sharded   bool
	oneMaster bool // WithOneMaster
	// replicaReads: the cluster client sends read-only commands to
	// replicas, so TakeBatch leaves a batch of peeks alone unjoined.
	replicaReads bool
	tryAgainFor  time.Duration // how long a call refused before it ran is sent again
	counters     bool          // WithCounters
	ttls         *expiries     // the counters whose TTL the store set (WithCounters)

	prepared    *storekit.Cache[*prepared] // by policy, bounded
	scriptsOnly atomic.Bool                // no functions (Redis < 7.0): EVALSHA
	reloading   sync.Mutex                 // held by the goroutine reloading the library
	closed      atomic.Bool
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

// WithClock makes every decision use c's time, sent with each call,
// instead of the server's TIME: for conformance replays and tests, or, with
// storekit.SystemClock, to spare every call its TIME read (about a fifth of
// a fixed_window decision's work in Redis; floodgate serve's store.clock:
// service) where every process deciding the same keys keeps its clock in
// step (NTP). A clock that goes back is taken as standing still, per key
// (SPEC.md, "Clock going backwards"). Keys still expire on the server's clock, so a
// clock that runs behind real time sees state expire early; pair such a
// clock with WithMinTTL.
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

// WithOneMaster tells New that its *redis.ClusterClient sends every slot
// to one master and that master's replicas, as the client go-redis's
// NewFailoverClusterClient builds for a Sentinel deployment whose peeks
// may go to replicas, and is not a Redis Cluster's. The store then
// decides as on one server: a group's keys may be on any slots, a
// TakeBatch joins decisions whatever their slots, Ping checks that the
// master takes writes, Sharded reports false and Node "". Given with a
// Redis Cluster's client, whose servers refuse a call over two slots
// (CROSSSLOT), it would make groups and joined batches fail: Preload
// refuses it when the slots are on several masters. With a client that
// is not a *redis.ClusterClient it changes nothing.
func WithOneMaster() Option {
	return func(s *Store) error {
		s.oneMaster = true
		return nil
	}
}

// errNotOneMaster is wrapped by Preload's error when WithOneMaster was
// given a client over several masters: a misconfiguration (Misconfigured).
var errNotOneMaster = errors.New("the slots are on several masters")

// New returns a Store deciding through client, which may be a
// *redis.Client (standalone, or Sentinel via redis.NewFailoverClient) or a
// *redis.ClusterClient: a Redis Cluster's, or one master's with its
// replicas with WithOneMaster (Sentinel via redis.NewFailoverClusterClient).
// The caller keeps ownership of the client: Close does not close it. New
// does not contact Redis; call Preload to load the scripts ahead of the
// first decision.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New: nil client")
	}
	s := &Store{b: goRedis{c: client}, prefix: DefaultPrefix, maxKeyLen: storekit.DefaultMaxKeyLen, tryAgainFor: tryAgainFor}
	s.prepared = storekit.NewCache(0, s.derive)
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.counters && s.clock == nil {
		return nil, errors.New("redisstore: WithCounters needs WithClock: a counter's window is chosen by the caller's clock")
	}
	if s.counters {
		s.ttls = newExpiries()
		s.b = goRedis{c: client, ttls: s.ttls}
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		s.cluster, s.sharded = cc, !s.oneMaster
		o := cc.Options()
		s.replicaReads = o.ReadOnly || o.RouteByLatency || o.RouteRandomly
		cc.AddHook(reloadHook{cc: cc, last: new(atomic.Int64)})
	}
	return s, nil
}

// Preload loads the function library on every master (Redis ≥ 7.0;
// replicas receive it from their masters), or, on a server without
// functions, every script on every node, so that pipelined batches find
// them. Decisions load what is missing themselves (on "Function not
// found" or NOSCRIPT, which mean the call did not run), so Preload is an
// optimisation and a readiness check. With WithOneMaster it also checks
// that the client's slots are on one master: over several (a Redis
// Cluster's client) it returns an error naming how many.
func (s *Store) Preload(ctx context.Context) error {
	if s.oneMaster && s.cluster != nil {
		ms, err := s.b.masters(ctx)
		if err != nil {
			return unavailable("reading the masters", err)
		}
		if len(ms) > 1 {
			return fmt.Errorf("redisstore: WithOneMaster, but the client's slots are on %d masters (a Redis Cluster's client, whose servers refuse a call over two slots): leave WithOneMaster out: %w", len(ms), errNotOneMaster)
		}
	}
	if !s.scriptsOnly.Load() {
		err := s.b.loadLibrary(ctx, library.src)
		if err == nil {
			return nil
		}
		if !noFunctions(err) {
			return unavailable("loading the function library", err)
		}
		s.scriptsOnly.Store(true) // a server before Redis 7.0, or an ACL without functions
	}
	for _, a := range storekit.Algorithms() {
		for _, sc := range scripts[a] {
			if err := s.b.loadScript(ctx, sc.src); err != nil {
				return unavailable("loading scripts", err)
			}
		}
	}
	for _, sc := range []*script{groupScript, counterScript} {
		if err := s.b.loadScript(ctx, sc.src); err != nil {
			return unavailable("loading scripts", err)
		}
	}
	return nil
}

// Ping checks that Redis answers the server's TIME: a readiness check. On
// a cluster it asks one node, so a single master down does not make every
// replica of a service unready at once (decisions for that master's slots
// fail on their own). A client that is not a cluster's also calls a
// function of the library that may write (a refund of 0 to <prefix>:ready,
// a key no decision uses, which it neither reads into a decision nor
// writes): a replica refuses it (READONLY, see ReadOnlyReplica), so a
// store pointed at a replica, or at a master a failover demoted, is not
// ready while every decision would fail. The library is loaded when
// missing. On servers without functions (the EVALSHA path), where a
// replica runs the scripts and refuses only their writes, it sends a write
// that changes nothing to that key instead (SETRANGE key 0 "", which makes
// no key), refused by a replica and by a server refusing writes (OOM,
// MISCONF, NOREPLICAS) as the function is; SETRANGE refused as an unknown
// or forbidden command (an ACL without it, a proxy) is ignored, since
// decisions do not need it, and any other error (a timeout, a broken
// connection) fails Ping. The error wraps
// floodgate.ErrUnavailable, or is floodgate.ErrClosed after Close.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return floodgate.ErrClosed
	}
	if _, err := s.b.time(ctx); err != nil {
		return classify(ctx, err)
	}
	if s.sharded {
		return nil
	}
	if s.scriptsOnly.Load() {
		if err := s.b.touch(ctx, s.prefix+readyKey); err != nil && !isUnknownCommand(err) && !isCommandDenied(err) {
			return classify(ctx, err)
		}
		return nil
	}
	c := &call{kind: fcall, name: library.refund, keys: []string{s.prefix + readyKey}, args: []any{0}}
	c.reply, c.err = s.b.run(ctx, c)
	if isFunctionNotFound(c.err) {
		// Not as EVAL, as a decision would be resent: a replica runs a
		// script that writes nothing.
		if err := s.b.loadLibrary(ctx, library.src); err != nil {
			return unavailable("loading the function library", err)
		}
		c.reply, c.err = s.b.run(ctx, c)
	}
	if c.err != nil && !noFunctions(c.err) { // no functions: the EVALSHA path
		return classify(ctx, c.err)
	}
	return nil
}

// readyKey follows the prefix in the key Ping's writable check names: no
// key of a decision, a listing or usage has it, since all have a "{".
const readyKey = ":ready"

// prepared is what a validated policy needs for every call, derived once
// by prepare: the Lua it runs, its key parts, its parameter string and
// the limit each binding index stands for.
type prepared struct {
	fns     [2]string  // the library's functions: decide, peek
	scripts [2]*script // the scripts of servers without functions
	parts   []string   // after "}:": the state keys
	track   bool       // the usage hash follows the state keys
	params  string     // args[1]: the parameters, the same for every call
	tag     string     // the algorithm's tag: params' first field
	peekTag string     // tag+"p": a peek's, for batch.lua
	limits  []int64    // Decision.Limit by binding index
	counter bool       // kept as counters (WithCounters)
	window  int64      // a counter's window, µs

	// oneString: the state is one string (fixed_window, gcra,
	// token_bucket, ar1), which batch.lua's state cache serves.
	oneString bool
}

// prepare returns what p needs for every call, validating p the first
// time (through the prepared cache, keyed by the policy's identity).
func (s *Store) prepare(p *floodgate.Policy) (*prepared, error) {
	e, err := s.prepared.Get(p)
	if err != nil {
		return nil, err
	}
	return e.Value, nil
}

// derive builds what a valid policy needs for every call: the one place
// where a policy's function names, scripts, key parts and parameters are
// derived (the prepared cache calls it once per policy).
func (s *Store) derive(p *floodgate.Policy) (*prepared, error) {
	fns, ok := library.fns[p.Algorithm]
	if !ok {
		return nil, fmt.Errorf("%w: no script for algorithm %s", floodgate.ErrInvalidPolicy, p.Algorithm)
	}
	us := func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Microsecond), 10) }
	num := func(n int64) string { return strconv.FormatInt(n, 10) }
	flt := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	pr := &prepared{fns: fns, scripts: scripts[p.Algorithm], track: p.Track}
	if s.counts(p) {
		pr.counter, pr.window = true, int64(p.Window/time.Microsecond)
	}
	// The common fields (common.lua), then the algorithm's (its file).
	pr.tag = tags[p.Algorithm]
	pr.peekTag = pr.tag + "p"
	switch p.Algorithm {
	case floodgate.FixedWindow, floodgate.GCRA, floodgate.TokenBucket, floodgate.AR1:
		pr.oneString = true
	}
	var params []string
	switch p.Algorithm {
	case floodgate.FixedWindow:
		pr.parts = []string{"fw"}
		align := string(floodgate.AlignEpoch)
		switch p.Align {
		case floodgate.AlignFirst:
			align = string(floodgate.AlignFirst)
		case calendar:
			align = string(calendar) // the window comes with each call
		}
		params = []string{num(p.Max), us(p.Window), align}
		pr.limits = []int64{p.Max}
	case floodgate.GCRA:
		pr.parts = []string{"gc"}
		params = []string{num(p.Max), us(p.Window), num(p.Burst)}
		pr.limits = []int64{p.Max}
	case floodgate.TokenBucket:
		pr.parts = []string{"tb"}
		params = []string{num(p.Max), us(p.Window), num(p.Burst)}
		pr.limits = []int64{p.Max}
	case floodgate.AR1:
		pr.parts = []string{"ar"}
		for _, l := range p.Limits {
			params = append(params, flt(l.Max), flt(l.Decay), us(l.Resolution))
			pr.limits = append(pr.limits, int64(l.Max))
		}
	case floodgate.SlidingWindow:
		pr.parts = []string{"sw"}
		for i, l := range p.Limits {
			pr.parts = append(pr.parts, "sw"+strconv.Itoa(i+1))
			params = append(params, num(int64(l.Max)), us(l.Window), us(l.Resolution))
			pr.limits = append(pr.limits, int64(l.Max))
		}
	case floodgate.SlidingLog:
		pr.parts = []string{"sl", "sl1"}
		params = []string{num(p.Max), us(p.Window), us(p.MinInterval)}
		pr.limits = []int64{p.Max}
	}
	track := flag(p.Track)
	if p.Track && p.SeriesResolution != 0 {
		track = "1:" + us(p.SeriesResolution) + ":" + us(p.SeriesRetention)
	}
	pr.params = strings.Join(append([]string{pr.tag, flag(storekit.CountsDenied(p)), track, us(p.Retention), num(s.minTTL)}, params...), " ")
	return pr, nil
}

// tagSafe escapes the braces of a key, and the escape character itself,
// so that the key cannot end the hash tag around it early: only the policy
// and the whole key choose a decision's cluster slot, and two keys never
// share a stored name.
func tagSafe(key string) string {
	if !strings.ContainsAny(key, "{}%") {
		return key
	}
	return tagEscaper.Replace(key)
}

var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// tagUnsafe undoes tagSafe, for keys read back from Redis (listings): a
// raw "}" in what lies between the tag's braces marks a key written by its
// leading tag ("<tag>}<rest>", see keyHead).
func tagUnsafe(key string) string {
	if tag, rest, ok := strings.Cut(key, "}"); ok {
		return "{" + tagUnsafe(tag) + "}" + tagUnsafe(rest)
	}
	if !strings.Contains(key, "%") {
		return key
	}
	return tagUnescaper.Replace(key)
}

var tagUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// keyHead returns what every Redis key of key under the policy named name
// begins with (SPEC.md, "Keys in Redis"): "<prefix>:<policy>:{<key>}:",
// the key escaped by tagSafe, so that one key's policies share a slot. With
// hashTag, a key that begins with "{tag}" is written
// "<prefix>:<policy>:{<tag>}<rest>}:", both escaped: only the tag chooses
// the slot, and the "}" that the escaped rest cannot contain keeps it apart
// from the key "<tag>" written whole.
func (s *Store) keyHead(name string, hashTag bool, key string) string {
	if hashTag {
		if tag, rest, ok := leadingTag(key); ok {
			st, sr := tag, rest
			if s.hashKey != nil {
				st, sr = s.storedKey("{"+tag+"}"), s.storedKey(key)
			}
			return s.prefix + ":" + name + ":{" + tagSafe(st) + "}" + tagSafe(sr) + "}:"
		}
	}
	return s.prefix + ":" + name + ":{" + tagSafe(s.storedKey(key)) + "}:"
}

// leadingTag splits a key that begins with "{tag}" (tag non-empty) into
// the tag and the rest.
func leadingTag(key string) (tag, rest string, ok bool) {
	if len(key) < 3 || key[0] != '{' {
		return "", "", false
	}
	end := strings.IndexByte(key[1:], '}')
	if end < 1 {
		return "", "", false
	}
	return key[1 : 1+end], key[2+end:], true
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

// keys returns the keys of one decision: the state keys, then the usage
// hash when usage is tracked (or all is set, for Reset).
func (s *Store) keys(p *floodgate.Policy, pr *prepared, key string, all bool) []string {
	tag := s.keyHead(p.Name, p.HashTag, key)
	ks := make([]string, 0, 1+len(pr.parts))
	for _, part := range pr.parts {
		ks = append(ks, tag+part)
	}
	if pr.track || all {
		ks = append(ks, tag+"u")
	}
	return ks
}

// newCall returns the call deciding req: the library's function, or the
// script on a server without functions; args[2] is the cost and the
// caller's clock as little-endian doubles (see common.lua).
func (s *Store) newCall(pr *prepared, req *floodgate.Request) (*call, error) {
	if pr.counter {
		now, err := s.counterNow()
		if err != nil {
			return nil, err
		}
		return s.newCounterCall(pr, req, now), nil
	}
	size := 8
	var now int64
	if s.clock != nil {
		size, now = 16, s.clock.Now().UnixMicro()
	}
	arg := make([]byte, size)
	binary.LittleEndian.PutUint64(arg, math.Float64bits(float64(req.N)))
	if size == 16 {
		binary.LittleEndian.PutUint64(arg[8:], math.Float64bits(float64(now)))
	}
	mode := 0
	if req.Peek {
		mode = 1
	}
	c := &call{keys: s.keys(req.Policy, pr, req.Key, false), args: []any{pr.params, arg}, tag: pr.tag, oneString: pr.oneString}
	if req.Peek {
		c.tag = pr.peekTag
	}
	if s.scriptsOnly.Load() {
		c.kind, c.name, c.src = evalSha, pr.scripts[mode].sha, pr.scripts[mode].src
	} else {
		c.kind, c.name, c.src = fcall, pr.fns[mode], pr.scripts[mode].src
		if req.Peek {
			c.kind = fcallRO
		}
	}
	return c, nil
}

// Take decides req (see floodgate.Store) with one function call (FCALL,
// or FCALL_RO for a peek), or one script call on a server without
// functions. A call that did not run is sent again: as EVAL when its
// function or script is missing, and, when a server refuses it for a
// reason that passes (a Cluster's TRYAGAIN while its slot moves, MOVED or
// ASK after a Cluster client's MaxRedirects, CLUSTERDOWN, LOADING,
// MASTERDOWN, READONLY), at once, then after 1, 2, 4… ms (at most 100 ms apart) for
// up to a second. The context's deadline bounds the call and those
// waits; an error wraps
// floodgate.ErrUnavailable (and the context's error when that is the
// cause) when Redis cannot be reached, is down, or replies oddly.
func (s *Store) Take(ctx context.Context, req floodgate.Request) (floodgate.Decision, error) {
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	if err := storekit.CheckRequest(&req, s.maxKeyLen); err != nil {
		return floodgate.Decision{}, err
	}
	if budgetOp(&req) {
		return s.takeBudget(ctx, &req, new(time.Time))
	}
	pr, err := s.prepare(req.Policy)
	if err != nil {
		return floodgate.Decision{}, err
	}
	c, err := s.newCall(pr, &req)
	if err != nil {
		return floodgate.Decision{}, err
	}
	if err := s.runCall(ctx, c, new(time.Time)); err != nil {
		return floodgate.Decision{}, err
	}
	d, err := decodeCall(c, pr, req.Policy)
	if d.Allowed {
		d.Granted = req.N
	}
	return d, err
}

// runCall sends c alone and, when it did not run, again (see again, until
// *until); it returns the call's error, classified, or nil with c.reply
// set.
func (s *Store) runCall(ctx context.Context, c *call, until *time.Time) error {
	c.reply, c.err = s.b.run(ctx, c)
	if c.err != nil {
		s.again(ctx, []*call{c}, until)
	}
	if c.err != nil {
		return classify(ctx, c.err)
	}
	return nil
}

// notRun reports whether err means that the call did not run and that
// resend can send it again: its function or script is missing, or the
// server does not know or allow the command.
func notRun(err error) bool {
	return isFunctionNotFound(err) || isNoScript(err) || noFunctions(err)
}

// noFunctions reports whether err means the server cannot run functions
// for this store: it does not know the command (before Redis 7.0, or a
// proxy), or its ACL refuses it.
func noFunctions(err error) bool {
	return isUnknownCommand(err) || isCommandDenied(err)
}

// again sends again the calls that did not run, so that none fails for a
// reason that says it can be sent again safely: those whose function or
// script was missing (resend), then those a server refused before they
// ran, for a reason that passes (tryAgain, until *until). The others keep
// their reply or error.
func (s *Store) again(ctx context.Context, calls []*call, until *time.Time) {
	s.resendMissing(ctx, calls)
	s.tryAgain(ctx, calls, until)
}

// resendMissing resends (see resend) those of calls whose function or
// script was missing, or whose command the server refused.
func (s *Store) resendMissing(ctx context.Context, calls []*call) {
	var missing []*call
	for _, c := range calls {
		if notRun(c.err) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		s.resend(ctx, missing)
	}
}

// tryAgainFor is how long a Store sends again the calls a server refuses
// before they run (its tryAgainFor, which tests may lengthen): a slot stuck
// in migration (a reshard that stopped half way), or a Cluster left without
// a master for a slot, must not hold a caller without a deadline for ever.
const tryAgainFor = time.Second

// tryAgain sends again, each as a call of its own, the calls a server
// refused before they ran, for a reason that passes (refused). Most come
// from a Cluster. While a slot moves, its masters refuse a call over
// several of its keys (TRYAGAIN) unless one of them holds them all: a
// batch of decisions on several keys, or a decision over several keys (a
// sliding window or log, a group, a tracked policy's state and usage)
// whose keys are some on each side, which is refused until the rest are
// moved, or are new, which is refused until the migration of the whole
// slot ends. Alone, most of a batch's decisions go through (a call over
// one key follows the ASK to the importing master). A call go-redis
// stopped redirecting (MOVED or ASK after its MaxRedirects, while slots
// move fast) goes through once its slot map is read again; one refused
// for want of a master (CLUSTERDOWN, READONLY, during a failover) once a
// replica takes over. So the calls are sent again at once, then after
// 1 ms, 2 ms, 4 ms… (at most 100 ms apart) while some are refused, until
// ctx ends or *until passes; a call refused then keeps its refusal. A
// zero *until is set to s.tryAgainFor after now; the calls of one
// TakeBatch share one. A call sent again may find that the master now
// serving its slot lacks the library (a new node), and is resent as
// EVAL.
func (s *Store) tryAgain(ctx context.Context, calls []*call, until *time.Time) {
	cluster := s.cluster != nil
	waiting := refusedCalls(calls, cluster)
	if len(waiting) == 0 {
		return
	}
	s.whileRefused(ctx, until, func() bool {
		if len(waiting) == 1 {
			waiting[0].reply, waiting[0].err = s.b.run(ctx, waiting[0])
		} else {
			s.b.runBatch(ctx, waiting)
		}
		s.resendMissing(ctx, waiting)
		waiting = refusedCalls(waiting, cluster)
		return len(waiting) > 0
	})
}

// refusedCalls returns those of calls a server refused (refused).
func refusedCalls(calls []*call, cluster bool) []*call {
	var out []*call
	for _, c := range calls {
		if refused(c.err, cluster) {
			out = append(out, c)
		}
	}
	return out
}

// whileRefused calls send, which reports whether a server refused what it
// sent before running it (refused), at once and then after 1 ms, 2 ms,
// 4 ms… (at most 100 ms apart) while it does, until ctx ends or *until
// passes. A zero *until is set to s.tryAgainFor after now.
func (s *Store) whileRefused(ctx context.Context, until *time.Time, send func() bool) {
	if until.IsZero() {
		*until = time.Now().Add(s.tryAgainFor)
	}
	for wait := time.Duration(0); ; wait = min(max(2*wait, time.Millisecond), 100*time.Millisecond) {
		if wait > 0 && (time.Now().Add(wait).After(*until) || !sleep(ctx, wait)) {
			return
		}
		if !send() {
			return
		}
	}
}

// sleep waits d, and reports false at once if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// resend sends calls that did not run again as EVAL of their script's
// source, which no FUNCTION FLUSH or SCRIPT FLUSH in between can make
// fail, and restores what they missed for the calls after them: the
// library on every master, or the script path on a server without
// functions. A call is sent again at most once: one that failed in any
// other way may have run.
func (s *Store) resend(ctx context.Context, calls []*call) {
	missing, unknown := false, false
	for _, c := range calls {
		missing = missing || isFunctionNotFound(c.err)
		unknown = unknown || (c.kind == fcall || c.kind == fcallRO) && noFunctions(c.err)
		c.kind = eval
	}
	if unknown {
		s.scriptsOnly.Store(true) // no functions here: scripts from now on
	}
	if len(calls) == 1 {
		calls[0].reply, calls[0].err = s.b.run(ctx, calls[0])
	} else {
		s.b.runBatch(ctx, calls)
	}
	if missing && !unknown && s.reloading.TryLock() {
		// One goroutine reloads; the others' calls went by EVAL meanwhile.
		// A failure here is the next call's to see.
		_ = s.b.loadLibrary(ctx, library.src)
		s.reloading.Unlock()
	}
}

// Reset deletes every key of key under policy p: its state and its usage.
// A DEL a server refuses before running it (a Cluster's slot moving, a
// failover: see Take) is sent again, within ctx, for up to a second.
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
	keys := s.keys(p, pr, key, true)
	if pr.counter {
		// The counters of now's window and the one before (SPEC.md,
		// "Counters"), and the state the key had without counters.
		now, err := s.counterNow()
		if err != nil {
			return err
		}
		keys = append(keys, s.counterKey(p, key, pr.window, now), s.counterKey(p, key, pr.window, now-pr.window))
		// The next add makes them again: it sends their TTL with it.
		defer s.ttls.forget(keys[len(keys)-2:]...)
	}
	err = s.b.del(ctx, keys...)
	if refused(err, s.cluster != nil) { // DEL did not run: a slot moving, a failover
		s.whileRefused(ctx, new(time.Time), func() bool {
			err = s.b.del(ctx, keys...)
			return refused(err, s.cluster != nil)
		})
	}
	if err != nil {
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

// decodeCall reads the reply of c, a decision of p: a counter's
// (counterDecision) or a function's (decode).
func decodeCall(c *call, pr *prepared, p *floodgate.Policy) (floodgate.Decision, error) {
	if c.kind == incr || c.kind == get {
		return counterDecision(p, c)
	}
	return decode(c.reply, pr)
}

// decode reads a reply (common.lua): one integer, code + 32 × (remaining
// + 2^16 × reset_after), for an allowed decision that fits, else {code,
// remaining, retry_after, reset_after}, with code = allowed + 2 × binding.
// It checks every type and range rather than trusting them; the limit is
// the binding limit's, from pr.
func decode(reply any, pr *prepared) (floodgate.Decision, error) {
	var n [4]int64
	switch r := reply.(type) {
	case int64:
		if r < 0 || r >= 1<<53 || r&1 == 0 {
			return floodgate.Decision{}, malformed(reply)
		}
		n = [4]int64{r & 31, r >> 5 & (1<<16 - 1), 0, r >> 21}
	case []any:
		if len(r) != 4 {
			return floodgate.Decision{}, malformed(reply)
		}
		for i, v := range r {
			x, ok := v.(int64)
			if !ok {
				return floodgate.Decision{}, malformed(reply)
			}
			n[i] = x
		}
	default:
		return floodgate.Decision{}, malformed(reply)
	}
	allowed, binding := n[0]&1 == 1, n[0]>>1
	if n[0] < 0 || binding >= int64(len(pr.limits)) || n[1] < 0 || n[2] < -1 || n[3] < 0 || allowed != (n[2] == 0) {
		return floodgate.Decision{}, malformed(reply)
	}
	d := floodgate.Decision{
		Allowed:    allowed,
		Limit:      pr.limits[binding],
		Remaining:  n[1],
		RetryAfter: time.Duration(n[2]) * time.Microsecond,
		ResetAfter: time.Duration(n[3]) * time.Microsecond,
		Binding:    int32(binding),
	}
	if n[2] == -1 {
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
