package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/internal/algo"
	"github.com/floodgatehq/floodgate/storekit"
)

// WithCounters keeps every fixed_window policy aligned to the epoch that
// counts denied requests and tracks no usage — the limit of an Envoy
// descriptor — as a Redis integer per window, changed by native commands
// (INCRBY and PEXPIRE for an add, GET for a peek) instead of a function
// call: envoyproxy/ratelimit's layout, which costs Redis about a quarter
// of a decision made in Lua (SPEC.md, "Counters"). TakeBatch sends the
// adds of a batch to one counter as one INCRBY of their sum. It needs
// WithClock: the window is chosen before Redis is asked.
//
// Decisions are SPEC.md's but for its rule 1: a counter keeps no time of
// its last add, so a request stamped earlier than one already counted is
// decided at its own time, in its own window. Such a policy takes adds,
// peeks, refunds and resets; a reservation, a settle, a partial grant or a
// group with it is refused with an error wrapping
// floodgate.ErrInvalidPolicy. Turning the option on or off moves the
// policies' counts: in that window, counting starts again from 0.
func WithCounters() Option {
	return func(s *Store) error {
		s.counters = true
		return nil
	}
}

// counterPart starts the last part of a counter's key, followed by the
// window's index since the epoch: "<prefix>:<policy>:{<key>}:c<index>".
const counterPart = "c"

// counts reports whether the store keeps p as counters (WithCounters).
func (s *Store) counts(p *floodgate.Policy) bool {
	return s.counters && p.Algorithm == floodgate.FixedWindow &&
		(p.Align == "" || p.Align == floodgate.AlignEpoch) && storekit.CountsDenied(p) && !p.Track
}

// counterKey returns the key of key's counter under p in the window that
// holds now (µs).
func (s *Store) counterKey(p *floodgate.Policy, key string, window, now int64) string {
	return s.keyHead(p.Name, p.HashTag, key) + counterPart + strconv.FormatInt(now/window, 10)
}

// counterNow returns the caller's clock in µs, or an error wrapping
// floodgate.ErrUnavailable when it is outside what decisions are exact
// for (the scripts' "clock" error).
func (s *Store) counterNow() (int64, error) {
	now := s.clock.Now().UnixMicro()
	if now < 0 || now > algo.MaxNow {
		return 0, fmt.Errorf("%w: redisstore: the clock (%d µs since the epoch) is outside 1970 to 2155", floodgate.ErrUnavailable, now)
	}
	return now, nil
}

// newCounterCall returns the call of an add (INCRBY and PEXPIRE) or a
// peek (GET) of req on its counter (SPEC.md, "Counters"), at now.
func (s *Store) newCounterCall(pr *prepared, req *floodgate.Request, now int64) *call {
	c := &call{kind: incr, keys: []string{s.counterKey(req.Policy, req.Key, pr.window, now)}, now: now, n: req.N}
	if req.Peek {
		c.kind = get
		return c
	}
	// The window's end, from now, in whole ms rounded up: the TTL counts
	// on the server's clock.
	ttl := max(pr.window-now%pr.window, s.minTTL)
	c.args = []any{time.Duration((ttl+999)/1000) * time.Millisecond}
	return c
}

// counterTTL returns the TTL an add's PEXPIRE gives its counter.
func counterTTL(c *call) time.Duration { return c.args[0].(time.Duration) }

// isOverflow reports whether err is INCRBY's refusal of a count past
// 2^63-1, which leaves the count as it was.
func isOverflow(err error) bool {
	return err != nil && strings.Contains(err.Error(), "would overflow")
}

// counterDecision returns the decision of c, an add or a peek of c.n at
// c.now on a counter, from its reply: the count after the add, or the
// count a peek read. It is the Go twin's own decision on the count before
// (a saturated count, past floodgate.MaxCost, decides as the twin's
// saturated one does).
func counterDecision(p *floodgate.Policy, c *call) (floodgate.Decision, error) {
	count, ok := c.reply.(int64)
	if !ok || count < 0 {
		return floodgate.Decision{}, malformed(c.reply)
	}
	if c.kind == incr {
		count -= c.n
	}
	return countDecision(p, min(max(count, 0), floodgate.MaxCost), c.n, c.now, true), nil
}

// countDecision returns what the Go twin decides for an add of n at now
// (peek: the decision without recording it) in the window that holds now
// on a count of before (0 ≤ before ≤ floodgate.MaxCost).
func countDecision(p *floodgate.Policy, before, n, now int64, peek bool) floodgate.Decision {
	w := int64(p.Window / time.Microsecond)
	st := algo.State{TLast: now}
	if before > 0 {
		st.A = now - now%w
		st.B, st.Expires = before, st.A+w
	}
	var d floodgate.Decision
	algo.Step(p, &st, now, n, peek, &d)
	return d
}

// settleCounter fills in c's reply from its command's: a missing counter
// (GET's nil) is a count of 0, GET's string a number, an INCRBY refused
// for overflow the saturated count, with no error.
func settleCounter(c *call) {
	switch {
	case c.kind == get && errors.Is(c.err, redis.Nil):
		c.reply, c.err = int64(0), nil
	case c.kind == get && c.err == nil:
		if s, ok := c.reply.(string); ok {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				c.reply = n
			}
		}
	case c.kind == incr && isOverflow(c.err):
		c.reply, c.err = floodgate.MaxCost+c.n, nil
	}
}

// refundCounter gives back req.N units to req's counter in the window of
// now and returns the decision of a peek of 1 after it, as a refund's is
// (SPEC.md, "Reserve, settle, refund").
func (s *Store) refundCounter(ctx context.Context, pr *prepared, req *floodgate.Request, until *time.Time) (floodgate.Decision, error) {
	now, err := s.counterNow()
	if err != nil {
		return floodgate.Decision{}, err
	}
	// counter.lua: a function of the library, or its script.
	c := &call{kind: fcall, name: library.refund, src: counterScript.src,
		keys: []string{s.counterKey(req.Policy, req.Key, pr.window, now)}, args: []any{req.N}}
	if s.scriptsOnly.Load() {
		c.kind, c.name = evalSha, counterScript.sha
	}
	if err := s.runCall(ctx, c, until); err != nil {
		return floodgate.Decision{}, err
	}
	count, ok := c.reply.(int64)
	if !ok || count < 0 {
		return floodgate.Decision{}, malformed(c.reply)
	}
	d := countDecision(req.Policy, min(count, floodgate.MaxCost), 1, now, true)
	if d.Allowed {
		d.Granted = 1 // what the peek's add would grant
	}
	return d, nil
}

// counterRefused returns the error of a budget request over a counter
// policy that a counter cannot take (see WithCounters), or nil.
func (s *Store) counterRefused(req *floodgate.Request) error {
	if !s.counters {
		return nil
	}
	what := ""
	switch {
	case req.Reserve != nil:
		what = "a reservation"
	case req.Settle != nil:
		what = "a settle"
	case req.AtMost:
		what = "a partial grant"
	case req.Group != nil:
		what = "a group"
	default:
		return nil
	}
	if req.Policy != nil && s.counts(req.Policy) {
		return counterError(req.Policy, what)
	}
	for i := range req.Group {
		if p := req.Group[i].Policy; p != nil && s.counts(p) {
			return fmt.Errorf("group member %d: %w", i+1, counterError(p, what))
		}
	}
	return nil
}

func counterError(p *floodgate.Policy, what string) error {
	return fmt.Errorf("%w: redisstore: policy %q is kept as a counter (redisstore.WithCounters; floodgate serve's store.counters), which takes adds, peeks, refunds and resets, not %s",
		floodgate.ErrInvalidPolicy, p.Name, what)
}
