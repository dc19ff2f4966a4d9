package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// TakeBatch decides many requests in one pipelined round trip per node
// (see storekit.BatchStore), in their order: a request sees what the
// requests before it in reqs did.
//
// On a server with functions, the decisions and peeks that share a
// cluster slot (all of them, on a server that is not a cluster) go in one
// FCALL of the library's batch function, batchMax at a time, which makes
// them one after another as their own calls would: what Redis spends on
// a call of its own (the command, the function's entry, the reply) is
// spent once, the decisions that read the server's clock share one
// TIME, read by the first of them (the batch runs at one instant), and
// the decisions of one key under fixed_window, gcra, token_bucket or ar1
// share its state: a hot key's is read with one GET a call, and, when a
// decision changed it, written with one SET after the call's last
// decision. With a
// client that reads from replicas, a batch of peeks alone stays a
// pipeline of FCALL_RO, which go-redis sends to the replicas; a batch
// that also adds goes to the masters whole, as go-redis sends any
// pipeline holding a write. On a server without functions each request
// is a script call of its own in the pipeline. The adds to one counter
// (WithCounters), up to a peek of it, are one INCRBY of their sum, each
// decided on the count before it, as if they had been sent one after
// another. A request that is a call of its own (a group, a reservation, a
// settle, a refund, a partial grant, a calendar window) is sent once the
// requests before it are decided, and those after it in another round
// trip, so that each sees the ones before it.
//
// Requests whose function or script the node did not have ("Function not
// found", NOSCRIPT: not run) are sent again, those alone, as EVAL of the
// script's source, so that a FUNCTION FLUSH or SCRIPT FLUSH between the
// two round trips cannot fail them, and the library is loaded again for
// the next calls; such a request is decided after the others of the
// batch (Preload spares the first batches of a store this). So are those
// a server refused before they ran for a reason that passes (see Take),
// such as a Cluster's TRYAGAIN during a slot's migration (a batch over
// keys not all on one side of it), each on its own, for up to a second in
// all for the batch. A request whose outcome is unknown (a
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
	var until time.Time // when sending refused calls again stops (tryAgain)
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
			// One call of its own (group.lua's reply is another
			// shape), after the requests before it.
			s.sendBatch(ctx, reqs, out, calls, preps, index, &until)
			calls, preps, index = calls[:0], preps[:0], index[:0]
			d, err := s.takeBudget(ctx, req, &until)
			out[i] = storekit.Outcome{Decision: d, Err: err}
			continue
		}
		pr, err := s.prepare(req.Policy)
		if err != nil {
			out[i] = storekit.Outcome{Err: err}
			continue
		}
		c, err := s.newCall(pr, req)
		if err != nil {
			out[i] = storekit.Outcome{Err: err}
			continue
		}
		calls = append(calls, c)
		preps = append(preps, pr)
		index = append(index, i)
	}
	s.sendBatch(ctx, reqs, out, calls, preps, index, &until)
}

// sendBatch makes calls, the calls of reqs[index[j]] prepared as preps[j],
// in one pipelined round trip (see TakeBatch), and sets their outcomes in
// out.
func (s *Store) sendBatch(ctx context.Context, reqs []floodgate.Request, out []storekit.Outcome, calls []*call, preps []*prepared, index []int, until *time.Time) {
	if len(calls) == 0 {
		return
	}
	sent := s.joinBatch(joinCounters(calls))
	s.b.runBatch(ctx, sent)
	splitBatch(sent)
	splitCounters(sent)

	s.again(ctx, calls, until) // exactly the calls that did not run
	for j, c := range calls {
		i := index[j]
		if c.err != nil {
			out[i] = storekit.Outcome{Err: classify(ctx, c.err)}
			continue
		}
		d, err := decodeCall(c, preps[j], reqs[i].Policy)
		if d.Allowed {
			d.Granted = reqs[i].N
		}
		out[i] = storekit.Outcome{Decision: d, Err: err}
	}
}

// batchMax is the most decisions one FCALL of the batch function makes.
// Redis serves no other client while a function runs, so a longer batch
// would hold them up longer than a pipeline of single calls does (about
// 5 µs of Redis time a decision: 64 are about a third of a millisecond).
const batchMax = 64

// joinBatch returns the commands that decide calls: the decisions (FCALL)
// that share a cluster slot, all of them on a server that is not a
// cluster, joined up to batchMax at a time into calls of the library's
// batch function (batch.lua), in their order; the others, and a decision
// alone in its slot, as they are.
func (s *Store) joinBatch(calls []*call) []*call {
	if s.replicaReads && allPeeks(calls) {
		return calls // to the replicas, which only a pipeline of reads goes to
	}
	out := make([]*call, 0, len(calls))
	var only *call         // the batch still taking calls, on a server that is not a cluster
	var open map[int]*call // on a cluster: by slot
	for _, c := range calls {
		if c.kind != fcall && c.kind != fcallRO || c.tag == "" || len(c.keys) == 0 {
			out = append(out, c)
			continue
		}
		slot, b := 0, only
		if s.sharded {
			if open == nil {
				open = make(map[int]*call)
			}
			slot = keySlot(c.keys[0])
			b = open[slot]
		}
		if b == nil || len(b.subs) == batchMax {
			b = &call{kind: fcall, name: library.batch}
			if s.sharded {
				open[slot] = b
			} else {
				only = b
			}
			out = append(out, b)
		}
		b.subs = append(b.subs, c)
	}
	for i, b := range out {
		if b.kind != fcall {
			continue // a counter's joined adds (joinCounters)
		}
		switch {
		case len(b.subs) == 1:
			out[i] = b.subs[0]
		case len(b.subs) > 1:
			nk := 0
			for _, c := range b.subs {
				nk += len(c.keys)
			}
			b.keys = make([]string, 0, nk)
			b.args = make([]any, 0, 4*len(b.subs))
			shared := sharedStates(b.subs)
			for _, c := range b.subs {
				b.keys = append(b.keys, c.keys...)
				n := len(c.keys)
				if shared[c.keys[0]] > 1 {
					n = -n // shares the batch's state cache (batch.lua)
				}
				b.args = append(b.args, c.tag, n, c.args[0], c.args[1])
			}
		}
	}
	return out
}

// sharedStates returns how many of calls have each state key, counting
// the decisions and peeks whose state is one string (call.oneString); nil
// when there are none. In a call of the batch function, those whose state
// another's is too are sent with their key count negated: they share a
// cache of their states for the call, so that a hot key's state is read
// once and written once a batch call rather than once a decision
// (batch.lua, common.lua's state_get). The others pay no more for it than
// a test (about 1% of Redis's instructions a decision).
func sharedStates(calls []*call) map[string]int {
	var m map[string]int
	for _, c := range calls {
		if !c.oneString {
			continue
		}
		if m == nil {
			m = make(map[string]int, len(calls))
		}
		m[c.keys[0]]++
	}
	return m
}

// allPeeks reports whether every call is a peek (FCALL_RO).
func allPeeks(calls []*call) bool {
	for _, c := range calls {
		if c.kind != fcallRO {
			return false
		}
	}
	return true
}

// errBatchReply is the error of every decision of a batch whose reply is
// not one reply per decision.
var errBatchReply = errors.New("malformed batch reply")

// splitBatch gives the decisions joined by joinBatch their replies, or
// their batch's error: a batch that did not run (its function missing)
// leaves each of its decisions not run, to be sent again on its own.
func splitBatch(sent []*call) {
	for _, b := range sent {
		if b.subs == nil || b.kind == incr {
			continue
		}
		r, ok := b.reply.([]any)
		for i, c := range b.subs {
			switch {
			case b.err != nil:
				c.err = b.err
			case !ok || len(r) != len(b.subs):
				c.err = errBatchReply
			default:
				if err, isErr := r[i].(error); isErr {
					c.err = err
				} else {
					c.reply = r[i]
				}
			}
		}
	}
}

// joinCounters returns calls with the adds to one counter (SPEC.md,
// "Counters") joined into one INCRBY of their sum, at the first one's
// place: Redis runs one command for them, and go-redis sends and reads
// one. The adds of a hot key, which arrive together, then cost Redis and
// the store about one command a batch. A sum stays within
// floodgate.MaxCost, and a peek of the counter ends its adds' join, so
// that each add's decision (splitCounters) is the one it would have had
// sent alone, in order, right after the adds before it.
func joinCounters(calls []*call) []*call {
	adds := 0
	for _, c := range calls {
		if c.kind == incr {
			adds++
		}
	}
	if adds < 2 {
		return calls
	}
	var out []*call         // nil while no add was joined: calls as they are
	var open map[string]int // a counter's add still taking others, by key: its index in out
	for i, c := range calls {
		switch c.kind {
		case get:
			delete(open, c.keys[0])
		case incr:
			if j, ok := open[c.keys[0]]; ok {
				m := calls[j] // out[j] is calls[j] until out is made
				if out != nil {
					m = out[j]
				}
				if m.n <= floodgate.MaxCost-c.n {
					if out == nil {
						out = append(make([]*call, 0, len(calls)), calls[:i]...)
					}
					out[j] = joinAdd(m, c)
					continue
				}
			}
			if open == nil {
				open = make(map[string]int)
			}
			at := i // its index in out, which is calls until out is made
			if out != nil {
				at = len(out)
			}
			open[c.keys[0]] = at
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return calls
	}
	return out
}

// joinAdd returns the joined add of m and c, adds to one counter: m
// itself when it is one already.
func joinAdd(m, c *call) *call {
	if m.subs == nil {
		m = &call{kind: incr, keys: m.keys, args: []any{m.args[0]}, now: m.now, n: m.n, subs: []*call{m}}
	}
	m.subs = append(m.subs, c)
	m.n += c.n
	// The TTL from the earliest add, and the time of the latest: the
	// counter outlives its window, and is taken as set (expiries) from the
	// latest.
	m.now = max(m.now, c.now)
	m.args[0] = max(counterTTL(m), counterTTL(c))
	return m
}

// splitCounters gives the adds joined by joinCounters their replies: each
// the count after its own add, as if made alone in order, or the joined
// add's error.
func splitCounters(sent []*call) {
	for _, m := range sent {
		if m.kind != incr || m.subs == nil {
			continue
		}
		after, ok := m.reply.(int64)
		after -= m.n
		for _, c := range m.subs {
			switch {
			case m.err != nil:
				c.err = m.err
			case !ok:
				c.reply = m.reply // malformed: counterDecision says so
			default:
				after += c.n
				c.reply = after
			}
		}
	}
}
