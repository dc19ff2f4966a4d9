package redisstore

import (
	"context"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// TakeBatch decides many requests in one pipelined round trip per node
// (see storekit.BatchStore). Requests whose function or script the node
// did not have ("Function not found", NOSCRIPT: not run) are sent again,
// those alone, as EVAL of the script's source, so that a FUNCTION FLUSH or
// SCRIPT FLUSH between the two round trips cannot fail them, and the
// library is loaded again for the next calls; a request whose outcome is
// unknown (a connection error mid-pipeline) gets an error and is never
// sent twice.
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
	preps := make([]*prepared, 0, len(reqs))
	index := make([]int, 0, len(reqs))
	for i := range reqs {
		req := &reqs[i]
		if err := storekit.CheckRequest(req, s.maxKeyLen); err != nil {
			out[i] = storekit.Outcome{Err: err}
			continue
		}
		if budgetOp(req) {
			// One call of its own: group.lua's reply is another shape.
			d, err := s.takeBudget(ctx, req)
			out[i] = storekit.Outcome{Decision: d, Err: err}
			continue
		}
		pr, err := s.prepare(req.Policy)
		if err != nil {
			out[i] = storekit.Outcome{Err: err}
			continue
		}
		calls = append(calls, s.newCall(pr, req))
		preps = append(preps, pr)
		index = append(index, i)
	}
	if len(calls) == 0 {
		return
	}
	s.b.runBatch(ctx, calls)

	// Send exactly the calls that did not run again.
	var again []*call
	for _, c := range calls {
		if notRun(c.err) {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		s.resend(ctx, again)
	}
	for j, c := range calls {
		i := index[j]
		if c.err != nil {
			out[i] = storekit.Outcome{Err: classify(ctx, c.err)}
			continue
		}
		d, err := decode(c.reply, preps[j])
		if d.Allowed {
			d.Granted = reqs[i].N
		}
		out[i] = storekit.Outcome{Decision: d, Err: err}
	}
}
