package redisstore

import (
	"context"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// ScriptSHAs returns the SHA-1 of every script, for checks that scripts are
// loaded on every node.
func ScriptSHAs() []string {
	var out []string
	for _, a := range storekit.Algorithms() {
		out = append(out, scripts[a].sha)
	}
	return out
}

// TakeWith decides req as Take does, but with the script src (the prelude
// and an algorithm's file, as sent to EVAL) instead of the store's own: an
// earlier version of the store, for upgrade tests.
func TakeWith(ctx context.Context, s *Store, src string, req floodgate.Request) (floodgate.Decision, error) {
	if err := storekit.CheckRequest(&req, s.maxKeyLen); err != nil {
		return floodgate.Decision{}, err
	}
	pr, err := s.prepare(req.Policy)
	if err != nil {
		return floodgate.Decision{}, err
	}
	reply, err := s.b.eval(ctx, src, s.keys(req.Policy, pr, req.Key), s.args(pr, req.N, req.Peek))
	if err != nil {
		return floodgate.Decision{}, classify(ctx, err)
	}
	return decode(reply)
}
