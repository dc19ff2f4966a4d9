package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// backend is what the store needs from a Redis client: a small seam, so an
// adapter for another client (rueidis, say) is one file. Every method
// returns the client's errors unchanged; the store classifies them.
type backend interface {
	// run sends one call and returns its reply.
	run(ctx context.Context, c *call) (any, error)
	// runBatch sends calls in one round trip per node, filling each
	// call's reply and err.
	runBatch(ctx context.Context, calls []*call)
	// loadLibrary loads a function library on every master (replicas
	// receive it from their master); a library of the same name already
	// loaded counts as loaded.
	loadLibrary(ctx context.Context, src string) error
	// loadScript loads src on every master (and replica) of the client.
	loadScript(ctx context.Context, src string) error
	// del deletes keys, which share one hash slot.
	del(ctx context.Context, keys ...string) error
	// touch sends a write that changes nothing, SETRANGE key 0 "": it does
	// not make a missing key and leaves a string as it is, but a replica
	// refuses it (READONLY), and so does a server refusing writes (OOM,
	// MISCONF, NOREPLICAS).
	touch(ctx context.Context, key string) error
	// time returns the server's clock in µs (of one master).
	time(ctx context.Context) (int64, error)
	// scan calls fn with batches of the keys matching pattern, on every
	// master. Masters are scanned concurrently, but fn is called by one
	// goroutine at a time, so it may update state without locking.
	scan(ctx context.Context, pattern string, fn func(ctx context.Context, keys []string) error) error
	// hmget reads fields of many hashes in one round trip per node; a
	// missing hash gives a nil row.
	hmget(ctx context.Context, keys []string, fields ...string) ([][]any, error)
	// hgetall reads whole hashes in one round trip per node; a missing
	// hash gives an empty map.
	hgetall(ctx context.Context, keys []string) ([]map[string]string, error)
	// masters returns the addresses of the masters, sorted: a cluster's,
	// or the one server of a client that is not a cluster.
	masters(ctx context.Context) ([]string, error)
	// scanNode runs one SCAN cursor MATCH pattern COUNT count on the
	// master at addr, and returns its keys and next cursor; errNodeGone
	// when no master has that address any more.
	scanNode(ctx context.Context, addr string, cursor uint64, pattern string, count int64) ([]string, uint64, error)
	// snapshotAdd adds members with their scores to the sorted set zkey
	// and their records to the hash hkey (zkey and hkey share a slot), and
	// makes both expire ttl later, in one round trip.
	snapshotAdd(ctx context.Context, zkey, hkey string, scores []float64, members, records []string, ttl time.Duration) error
	// snapshotRange returns the members of ranks start to stop of zkey and
	// their records in hkey (nil for a missing one), and makes both expire
	// ttl later.
	snapshotRange(ctx context.Context, zkey, hkey string, start, stop int64, ttl time.Duration) ([]string, []any, error)
}

// snapshotChunk is the most members of one command writing a listing's
// snapshot.
const snapshotChunk = 500

// errNodeGone is scanNode's error for a master that is no longer one.
var errNodeGone = errors.New("redisstore: the master scanned is no longer a master")

// callKind is how a call reaches its Lua.
type callKind uint8

const (
	// fcall calls a function of the library (FCALL).
	fcall callKind = iota
	// fcallRO calls a no-writes function (FCALL_RO), which a client
	// configured to read from replicas may send to one.
	fcallRO
	// evalSha calls a loaded script by its SHA-1 (EVALSHA).
	evalSha
	// eval sends a script's source (EVAL), which also loads it: what a call
	// that found neither its function nor its script is sent again as.
	eval
	// incr adds n to a counter (SPEC.md, "Counters"): INCRBY keys[0] n,
	// then PEXPIRE keys[0] args[0] (a time.Duration), pipelined, unless
	// the backend's expiries say the TTL is set (then PEXPIRE follows
	// only if the reply shows a new counter); its reply is INCRBY's.
	incr
	// get reads a counter for a peek (GET keys[0]).
	get
)

// call is one decision's command: FCALL name, EVALSHA name or EVAL src.
type call struct {
	kind  callKind
	name  string // the function's name, or the script's SHA-1
	src   string // the script's source, for a call sent again with eval
	keys  []string
	args  []any
	tag   string // the algorithm's tag, for a decision batch.lua may join
	reply any
	err   error

	// now and n are a counter's time (µs) and cost (incr, get).
	now, n int64

	// oneString: the decision's state is one string, which batch.lua's
	// state cache serves (prepared.oneString).
	oneString bool

	// subs, when set, are the calls this one makes: in one FCALL of the
	// library's batch function (joinBatch), whose reply is theirs, in
	// order; or in one INCRBY of the sum of their adds to one counter
	// (joinCounters), whose reply is the count after the last of them.
	subs []*call
}

// goRedis adapts a go-redis v9 UniversalClient: a *redis.Client (also what
// NewFailoverClient returns for Sentinel) or a *redis.ClusterClient.
type goRedis struct {
	c redis.UniversalClient
	// ttls remember the counters whose TTL was set (nil: none, every add
	// sends PEXPIRE).
	ttls *expiries
}

func (g goRedis) run(ctx context.Context, c *call) (any, error) {
	if c.kind == incr && g.ttls.due(c.keys[0], c.now) {
		g.pipeline(ctx, []*call{c}, true) // INCRBY and PEXPIRE in one round trip
		return c.reply, c.err
	}
	cmd := g.cmd(ctx, c)
	_ = g.c.Process(ctx, cmd)
	switch c.kind {
	case get:
		c.reply, c.err = cmd.Result()
		settleCounter(c)
		return c.reply, c.err
	case incr:
		c.reply, c.err = cmd.Result()
		settleCounter(c)
		if isNew(c) {
			g.expire(ctx, []*call{c})
		}
		return c.reply, c.err
	}
	return cmd.Result()
}

// isNew reports whether c, a counter's add that ran, made the counter (its
// reply is its own n): a counter the store's expiries took for one whose
// TTL it set was deleted since (a reset, an eviction, a flush).
func isNew(c *call) bool {
	r, ok := c.reply.(int64)
	return c.err == nil && ok && r == c.n
}

// expire sends the TTL of the counters calls added to, in one round trip,
// and records those set in g.ttls.
func (g goRedis) expire(ctx context.Context, calls []*call) {
	pipe := g.c.Pipeline()
	cmds := make([]*redis.BoolCmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.PExpire(ctx, c.keys[0], counterTTL(c))
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range calls {
		if cmds[i].Val() {
			g.ttls.set(c.keys[0], c.now)
		}
	}
}

// cmd returns c's command, never sent twice (decisionCmd).
func (g goRedis) cmd(ctx context.Context, c *call) decisionCmd {
	switch c.kind {
	case fcall:
		return newDecisionCmd(ctx, "fcall", c.name, c.keys, c.args)
	case fcallRO:
		return newDecisionCmd(ctx, "fcall_ro", c.name, c.keys, c.args)
	case evalSha:
		return newDecisionCmd(ctx, "evalsha", c.name, c.keys, c.args)
	case incr:
		return newKeyCmd(ctx, "incrby", c.keys[0], c.n)
	case get:
		return newKeyCmd(ctx, "get", c.keys[0])
	default:
		return newDecisionCmd(ctx, "eval", c.src, c.keys, c.args)
	}
}

func (g goRedis) runBatch(ctx context.Context, calls []*call) {
	g.pipeline(ctx, calls, false)
}

// pipeline is runBatch; due says that the TTL of every counter added to
// in calls is due (run asked g.ttls already), so that it is not asked
// again.
func (g goRedis) pipeline(ctx context.Context, calls []*call, due bool) {
	pipe := g.c.Pipeline()
	cmds := make([]decisionCmd, len(calls))
	var expires []*redis.BoolCmd // each counter add's PEXPIRE, by call
	for i, c := range calls {
		cmds[i] = g.cmd(ctx, c)
		_ = pipe.Process(ctx, cmds[i])
		if c.kind == incr && (due || g.ttls.due(c.keys[0], c.now)) {
			if expires == nil {
				expires = make([]*redis.BoolCmd, len(calls))
			}
			expires[i] = pipe.PExpire(ctx, c.keys[0], counterTTL(c))
		}
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	// Counters added to whose PEXPIRE failed, or that are new while the
	// store took their TTL for set.
	var again []*call
	for i, c := range calls {
		c.reply, c.err = cmds[i].Result()
		if c.kind == incr || c.kind == get {
			settleCounter(c)
		}
		if c.kind == incr && c.err == nil {
			switch {
			case expires == nil || expires[i] == nil:
				if isNew(c) {
					again = append(again, c)
				}
			case expires[i].Err() != nil:
				again = append(again, c)
			case expires[i].Val():
				g.ttls.set(c.keys[0], c.now)
			}
		}
		if c.reply != nil && (errors.Is(c.err, context.DeadlineExceeded) || errors.Is(c.err, context.Canceled)) {
			// The reply arrived: the call ran. A cluster client waits
			// before it follows another call's MOVED or ASK, and when ctx
			// ends meanwhile it sets ctx's error on every call of the
			// pipeline that has none, the answered ones included.
			c.err = nil
		}
	}
	if len(again) > 0 {
		// The count is right; its TTL is sent (once more: PEXPIRE is
		// idempotent), so that the counter does not outlive its window.
		g.expire(ctx, again)
	}
}

func (g goRedis) loadLibrary(ctx context.Context, src string) error {
	load := func(ctx context.Context, c *redis.Client) error {
		err := c.FunctionLoad(ctx, src).Err()
		if isLibraryExists(err) {
			return nil
		}
		return err
	}
	if cc, ok := g.c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := load(ctx, c); err != nil {
				// Which master (one of them may be full, say), after
				// the reply, which the callers read from its start.
				return fmt.Errorf("%w (master %s)", err, c.Options().Addr)
			}
			return nil
		})
	}
	if c, ok := g.c.(*redis.Client); ok {
		return load(ctx, c)
	}
	err := g.c.FunctionLoad(ctx, src).Err()
	if isLibraryExists(err) {
		return nil
	}
	return err
}

func (g goRedis) loadScript(ctx context.Context, src string) error {
	// ClusterClient.ScriptLoad loads on every node.
	return g.c.ScriptLoad(ctx, src).Err()
}

func (g goRedis) del(ctx context.Context, keys ...string) error {
	return g.c.Del(ctx, keys...).Err()
}

func (g goRedis) touch(ctx context.Context, key string) error {
	return g.c.SetRange(ctx, key, 0, "").Err()
}

func (g goRedis) time(ctx context.Context) (int64, error) {
	t, err := g.c.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	return t.UnixMicro(), nil
}

func (g goRedis) scan(ctx context.Context, pattern string, fn func(context.Context, []string) error) error {
	var mu sync.Mutex // ForEachMaster runs each in a goroutine per master
	call := func(ctx context.Context, batch []string) error {
		mu.Lock()
		defer mu.Unlock()
		return fn(ctx, batch)
	}
	each := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		batch := make([]string, 0, 1000)
		for it.Next(ctx) {
			batch = append(batch, it.Val())
			if len(batch) == cap(batch) {
				if err := call(ctx, batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			return call(ctx, batch)
		}
		return nil
	}
	switch c := g.c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, each)
	case *redis.Client:
		return each(ctx, c)
	}
	return errors.New("redisstore: usage listing needs a *redis.Client or *redis.ClusterClient")
}

func (g goRedis) hmget(ctx context.Context, keys []string, fields ...string) ([][]any, error) {
	pipe := g.c.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HMGet(ctx, k, fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	rows := make([][]any, len(keys))
	for i, c := range cmds {
		rows[i] = c.Val()
	}
	return rows, nil
}

func (g goRedis) hgetall(ctx context.Context, keys []string) ([]map[string]string, error) {
	pipe := g.c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]map[string]string, len(keys))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// nodes returns the masters' clients by address.
func (g goRedis) nodes(ctx context.Context) (map[string]*redis.Client, error) {
	switch c := g.c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		m := map[string]*redis.Client{}
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			m[n.Options().Addr] = n
			mu.Unlock()
			return nil
		})
		return m, err
	case *redis.Client:
		return map[string]*redis.Client{c.Options().Addr: c}, nil
	}
	return nil, errors.New("redisstore: paged listing needs a *redis.Client or *redis.ClusterClient")
}

func (g goRedis) masters(ctx context.Context) ([]string, error) {
	m, err := g.nodes(ctx)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, 0, len(m))
	for a := range m {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	return addrs, nil
}

func (g goRedis) scanNode(ctx context.Context, addr string, cursor uint64, pattern string, count int64) ([]string, uint64, error) {
	m, err := g.nodes(ctx)
	if err != nil {
		return nil, 0, err
	}
	n := m[addr]
	if n == nil {
		return nil, 0, errNodeGone
	}
	return n.Scan(ctx, cursor, pattern, count).Result()
}

func (g goRedis) snapshotAdd(ctx context.Context, zkey, hkey string, scores []float64, members, records []string, ttl time.Duration) error {
	// Commands of at most snapshotChunk members, so that none holds the
	// server for long (a ZADD of 5,000 members takes about 20 ms).
	pipe := g.c.Pipeline()
	for lo := 0; lo < len(members); lo += snapshotChunk {
		hi := min(lo+snapshotChunk, len(members))
		zs := make([]redis.Z, 0, hi-lo)
		hv := make([]any, 0, 2*(hi-lo))
		for i := lo; i < hi; i++ {
			zs = append(zs, redis.Z{Score: scores[i], Member: members[i]})
			hv = append(hv, members[i], records[i])
		}
		pipe.ZAdd(ctx, zkey, zs...)
		pipe.HSet(ctx, hkey, hv...)
	}
	pipe.PExpire(ctx, zkey, ttl)
	pipe.PExpire(ctx, hkey, ttl)
	_, err := pipe.Exec(ctx)
	return err
}

func (g goRedis) snapshotRange(ctx context.Context, zkey, hkey string, start, stop int64, ttl time.Duration) ([]string, []any, error) {
	pipe := g.c.Pipeline()
	rng := pipe.ZRange(ctx, zkey, start, stop)
	pipe.PExpire(ctx, zkey, ttl)
	pipe.PExpire(ctx, hkey, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, err
	}
	members := rng.Val()
	if len(members) == 0 {
		return nil, nil, nil
	}
	recs, err := g.c.HMGet(ctx, hkey, members...).Result()
	if err != nil {
		return nil, nil, err
	}
	return members, recs, nil
}

// Errors that mean a call did not run, so that sending it again cannot
// count anything twice.

// isNoScript reports whether err is Redis's NOSCRIPT: EVALSHA of a script
// the node does not hold.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// isFunctionNotFound reports whether err is FCALL's answer for a function
// the node does not hold (after FUNCTION FLUSH, or a restart of a server
// without persistence).
func isFunctionNotFound(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR Function not found")
}

// refusals start the replies with which a server refuses a call before
// running it, for a reason that passes: a Cluster's slot moving (TRYAGAIN),
// no master serving the slot (CLUSTERDOWN, during a failover), a server
// loading its data (LOADING), a replica that lost its master (MASTERDOWN),
// or a write sent to a replica (READONLY: a master a failover demoted,
// until the client learns of it — go-redis then dials again, which a
// Sentinel client sends to the new master; a replica writes nothing a
// client sends it).
var refusals = [...]string{"TRYAGAIN ", "CLUSTERDOWN ", "LOADING ", "MASTERDOWN ", "READONLY "}

// redirections are the refusals that pass only for a Cluster client:
// MOVED or ASK once go-redis stopped following them (after its
// MaxRedirects), which it follows again once it has read the slot map. To
// a plain client they say it was pointed at a Cluster node
// (Misconfigured), which no retry mends.
var redirections = [...]string{"MOVED ", "ASK "}

// refused reports whether err is a server's refusal of a call before it
// ran, for a reason that passes (refusals; redirections too for a cluster
// client), which the store may send again without counting it twice.
func refused(err error, cluster bool) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range refusals {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	if cluster {
		for _, p := range redirections {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}

// isUnknownCommand reports whether err is a server's answer to a command
// it does not know: FCALL before Redis 7.0, or behind a proxy that does
// not pass it. Either way the command did not run.
func isUnknownCommand(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR unknown command")
}

// isCommandDenied reports whether err is an ACL's refusal of FCALL,
// FCALL_RO or FUNCTION LOAD themselves, which Redis checks before the
// command runs (an ACL that allows scripts but not functions makes the
// store use scripts). A refusal of a command a function calls names that
// command, and the function may have written before it: that one is not
// matched, and its call never sent again.
func isCommandDenied(err error) bool {
	if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'fcall_ro'") || strings.Contains(msg, "'function|load'")
}

// isLibraryExists reports whether err is FUNCTION LOAD's answer for a
// library name already loaded: the same name is the same source here.
func isLibraryExists(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already exists")
}
