package redisstore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
)

// decisionCmd is the command of one decision (FCALL, FCALL_RO, EVALSHA or
// EVAL). go-redis sends a command again when its connection fails after
// the command was written (a cluster client does so even with MaxRetries
// -1, on the same node or on another); a decision may have run by then,
// and running it twice would count it twice. NoRetry forbids that. A MOVED
// or ASK redirection, which says the command did not run, is still
// followed.
type decisionCmd struct{ *redis.Cmd }

// NoRetry reports true: a decision is sent once.
func (decisionCmd) NoRetry() bool { return true }

// newDecisionCmd builds "name head len(keys) keys... args...", the form
// of FCALL and EVAL alike, with its first key at position 3 for cluster
// routing.
func newDecisionCmd(ctx context.Context, name, head string, keys []string, args []any) decisionCmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, head, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return decisionCmd{cmd}
}

// newKeyCmd builds "name key args...", a native command on one key, never
// sent twice: a counter's INCRBY or GET (SPEC.md, "Counters").
func newKeyCmd(ctx context.Context, name, key string, args ...any) decisionCmd {
	cmd := redis.NewCmd(ctx, append([]any{name, key}, args...)...)
	cmd.SetFirstKeyPos(1)
	return decisionCmd{cmd}
}

// Sharded reports whether the store is on a Redis Cluster, where a
// group's members must share a slot (storekit.Sharded): a
// *redis.ClusterClient's store without WithOneMaster.
func (s *Store) Sharded() bool { return s.sharded }

// Node names the Cluster master that decides key under p: its address, as
// the cluster's slot map has it now. It makes the Store a storekit.Router,
// so that a failure policy (package failure) judges each master on its
// own and a failing shard never degrades keys on healthy ones. Without a
// Cluster (WithOneMaster too), or when the slot map is not known, it
// returns "".
func (s *Store) Node(ctx context.Context, p *floodgate.Policy, key string) string {
	if !s.sharded || p == nil {
		return ""
	}
	if _, err := s.prepare(p); err != nil {
		return ""
	}
	// The keys' common head holds their hash tag: its slot is theirs.
	c, err := s.cluster.MasterForKey(ctx, s.keyHead(p.Name, p.HashTag, key))
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// reloadEvery is the least time between two reloads of a cluster's slot
// map that failed calls ask for.
const reloadEvery = 250 * time.Millisecond

// reloadHook reloads a cluster client's slot map when a call fails the way
// a master that went away makes it fail (a refused or broken connection,
// a timeout, CLUSTERDOWN, TRYAGAIN, READONLY: see topologyError), at most
// once every reloadEvery.
// go-redis reloads the map on MOVED and ASK, and every
// ClusterStateReloadInterval; without this hook, a master's death sends
// its slots to the dead address until then, while the replica that took
// over waits for traffic.
type reloadHook struct {
	cc   *redis.ClusterClient
	last *atomic.Int64 // ns of the last reload asked for
}

func (h reloadHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			h.failed(err)
		}
		return conn, err
	}
}

func (h reloadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			h.failed(err)
		}
		return err
	}
}

func (h reloadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Err() != nil && h.failed(c.Err()) {
				break
			}
		}
		return err
	}
}

// failed asks for a reload when err says the slot map may be stale, and
// reports whether it did.
func (h reloadHook) failed(err error) bool {
	if !topologyError(err) {
		return false
	}
	now := time.Now().UnixNano()
	last := h.last.Load()
	if now-last < int64(reloadEvery) || !h.last.CompareAndSwap(last, now) {
		return false
	}
	h.cc.ReloadState(context.Background()) // asynchronous
	return true
}

// topologyError reports whether err may come from a slot map that no
// longer matches the cluster: a failure to reach or hear from a node, or
// the cluster saying it is reconfiguring — the refusals the store sends
// again (refused; go-redis reloads the map on MOVED and ASK itself). A
// server's answer to the command (a script error, WRONGPASS) does not.
func topologyError(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, redis.Nil) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return refused(err, false)
	}
	return true // net errors, io.EOF, timeouts, a closed pool
}
