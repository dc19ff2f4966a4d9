package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// backend is what the store needs from a Redis client: a small seam, so an
// adapter for another client (rueidis, say) is one file. Every method
// returns the client's errors unchanged; the store classifies them.
type backend interface {
	// evalSha runs a loaded script.
	evalSha(ctx context.Context, sha string, keys []string, args []any) (any, error)
	// eval sends a script's source (it also loads it on that node).
	eval(ctx context.Context, src string, keys []string, args []any) (any, error)
	// loadScript loads src on every master (and replica) of the client.
	loadScript(ctx context.Context, src string) error
	// evalBatch runs calls in one round trip per node, filling each
	// call's reply and err: by SHA, or by source for a call with source
	// set.
	evalBatch(ctx context.Context, calls []*call)
	// del deletes keys, which share one hash slot.
	del(ctx context.Context, keys ...string) error
	// time returns the server's clock in µs (of one master).
	time(ctx context.Context) (int64, error)
	// scan calls fn with batches of the keys matching pattern, on every
	// master. Masters are scanned concurrently, but fn is called by one
	// goroutine at a time, so it may update state without locking.
	scan(ctx context.Context, pattern string, fn func(ctx context.Context, keys []string) error) error
	// hmget reads fields of many hashes in one round trip per node; a
	// missing hash gives a nil row.
	hmget(ctx context.Context, keys []string, fields ...string) ([][]any, error)
}

// call is one script call of a batch.
type call struct {
	sha    string
	src    string
	source bool // send src (EVAL) rather than sha (EVALSHA)
	keys   []string
	args   []any
	reply  any
	err    error
}

// goRedis adapts a go-redis v9 UniversalClient: a *redis.Client (also what
// NewFailoverClient returns for Sentinel) or a *redis.ClusterClient.
type goRedis struct {
	c redis.UniversalClient
}

func (g goRedis) evalSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	return g.c.EvalSha(ctx, sha, keys, args...).Result()
}

func (g goRedis) eval(ctx context.Context, src string, keys []string, args []any) (any, error) {
	return g.c.Eval(ctx, src, keys, args...).Result()
}

func (g goRedis) loadScript(ctx context.Context, src string) error {
	// ClusterClient.ScriptLoad loads on every node.
	return g.c.ScriptLoad(ctx, src).Err()
}

func (g goRedis) evalBatch(ctx context.Context, calls []*call) {
	pipe := g.c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if c.source {
			cmds[i] = pipe.Eval(ctx, c.src, c.keys, c.args...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	for i, c := range calls {
		c.reply, c.err = cmds[i].Result()
	}
}

func (g goRedis) del(ctx context.Context, keys ...string) error {
	return g.c.Del(ctx, keys...).Err()
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

// isNoScript reports whether err is Redis's NOSCRIPT: the script did not
// run, so sending it again cannot count anything twice.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
