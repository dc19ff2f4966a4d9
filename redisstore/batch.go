package redisstore

import (
	"context"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// TakeBatch decides many requests in one pipelined round trip per node
// (see storekit.BatchStore). Requests whose script the node did not have
// (NOSCRIPT: not run) are sent again, those alone, with the script's
// source (EVAL, which also loads it), so that a SCRIPT FLUSH between the
// two round trips cannot fail them; a request whose outcome is unknown (a
// connection error mid-pipeline) gets an error and is never sent twice.
func (s *Store) TakeBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome) {
	if len(out) < len(reqs) {
		panic("redisstore: TakeBatch: out is shorter than reqs")
	}
	if s.closed.Load() {
		for i := range reqs {
			out[i] = storekit.Outcome{Err: floodgate.ErrClosed}
		}
		return
	}
	calls := make([]*call, 0, len(reqs))
	index := make([]int, 0, len(reqs))
	for i := range reqs {
		req := &reqs[i]
		if err := storekit.CheckRequest(req, s.maxKeyLen); err != nil {
			out[i] = storekit.Outcome{Err: err}
			continue
		}
		pr, err := s.prepare(req.Policy)
		if err != nil {
			out[i] = storekit.Outcome{Err: err}
			continue
		}
		calls = append(calls, &call{
			sha:  pr.script.sha,
			src:  pr.script.src,
			keys: s.keys(req.Policy, pr, req.Key),
			args: s.args(pr, req.N, req.Peek),
		})
		index = append(index, i)
	}
	if len(calls) == 0 {
		return
	}
	s.b.evalBatch(ctx, calls)

	// Send exactly the calls that did not run again, with the source.
	var retry []*call
	for _, c := range calls {
		if isNoScript(c.err) {
			c.source = true
			retry = append(retry, c)
		}
	}
	if len(retry) > 0 {
		s.b.evalBatch(ctx, retry)
	}
	for j, c := range calls {
		i := index[j]
		if c.err != nil {
			out[i] = storekit.Outcome{Err: classify(ctx, c.err)}
			continue
		}
		d, err := decode(c.reply)
		out[i] = storekit.Outcome{Decision: d, Err: err}
	}
}
