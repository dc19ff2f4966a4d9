// Package service is floodgate's rate limit service, independent of any
// transport: it holds the configuration's named policies, decides requests
// through a Store under the failure policy (package failure), answers keys
// already over a fixed window's limit from a local cache, batches
// concurrent decisions into pipelined round trips, and reloads its
// configuration without dropping a request. The HTTP/JSON API
// (transport/httpapi) and Envoy's engine (package rls, served by
// transport/envoyrls) are built on it.
//
// A Service is safe for concurrent use by multiple goroutines.
package service

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Observer receives the service's events, for metrics. Its methods are
// called concurrently, on the request path, and must not block. Policy
// names come from the configuration (a bounded set); keys are never
// passed. The store calls and breaker changes come through
// failure.Observer, which an Observer may implement too (Options.Observer
// is given to the failure policy when it does).
type Observer interface {
	// Decision reports one decided request: allowed or denied, whether the
	// policy runs in shadow mode (so a denial was not enforced), and
	// whether the failure policy decided it (degraded).
	Decision(policy string, allowed, shadow, degraded bool)
	// OverLimitCacheHit reports a denial answered from the local cache.
	OverLimitCacheHit(policy string)
	// Reload reports a configuration reload and whether it was applied.
	Reload(ok bool)
	// UnknownPolicy reports a request naming a policy the configuration
	// does not have; UnknownDomain an Envoy request for a domain it does
	// not have. The names are the client's: they are not passed.
	UnknownPolicy()
	UnknownDomain()
	// FailureMode reports the failure mode in force (open, closed or
	// fallback), at start and after every reload.
	FailureMode(mode string)
}

type nopObserver struct{}

func (nopObserver) Decision(string, bool, bool, bool) {}
func (nopObserver) OverLimitCacheHit(string)          {}
func (nopObserver) Reload(bool)                       {}
func (nopObserver) UnknownPolicy()                    {}
func (nopObserver) UnknownDomain()                    {}
func (nopObserver) FailureMode(string)                {}

// Options configures a Service.
type Options struct {
	// Store keeps limiter state. Required. The service does not close it.
	Store floodgate.Store
	// Fallback decides when the store fails and the failure mode is
	// failure.Fallback: a memory store, typically. Required for that mode.
	Fallback floodgate.Store
	// Observer receives metrics events; nil means none. When it also
	// implements failure.Observer it receives the store calls and breaker
	// changes.
	Observer Observer
	// Logger receives operational logs; nil means slog.Default(). Keys
	// are never logged.
	Logger *slog.Logger
	// Clock times the over-limit cache and the circuit breakers; nil means
	// the system clock. Give it the store's clock when the store has one
	// of its own (tests, replays).
	Clock storekit.Clock
	// MaxInflight bounds the store calls in flight without batching when
	// the configuration's overload.max_inflight is 0: give the store's
	// connection pool size (the CLI gives the Redis pool's), since each
	// call holds a connection. 0 means no bound. With batching the bound
	// is DefaultBatchInflight instead, and MaxInflight, when above 0,
	// caps the batches in flight to a far store, each holding a
	// connection.
	MaxInflight int
}

// DefaultBatchInflight is the bound on decisions in flight at each store
// node when batching and the configuration gives none: a batch's
// decisions share one connection, so the pool's size does not bound them,
// and a round trip must be able to carry what arrives during one (at
// 20,000 decisions a second and 2 ms a round trip, 40). A full batch of
// 256 costs Redis about a millisecond (3 to 5 µs a decision), far below
// any store.timeout.
const DefaultBatchInflight = maxBatch

// Service decides requests. Create it with New.
type Service struct {
	raw      floodgate.Store // the store itself
	guarded  *failure.Store  // raw under the failure policy
	fallback floodgate.Store
	obs      Observer
	log      *slog.Logger
	clock    storekit.Clock
	budget   budgetState // reservation tokens: the key, those settled here (token.go)

	state atomic.Pointer[state]
	cache *overLimitCache

	interned *storekit.Interner // every policy compiled lately, by identity

	maxInflight int        // Options.MaxInflight
	queued      queueGauge // requests waiting for a store call
}

// state is one compiled configuration; reloads swap it whole.
type state struct {
	cfg      *config.Config
	policies map[string]*floodgate.Policy // named policies
	names    []string                     // their names, sorted
	bounds   *bounds                      // the bound on store calls, per node; nil for none
	bound    bound                        // what bounds were made for
}

// bound is the shape of a state's bound on store calls: a reload that
// keeps it keeps the batcher or gate, and with them the calls in flight
// and queued.
type bound struct {
	batching           bool
	maxInflight, queue int
	wait, storeTimeout time.Duration
}

// New returns a Service for cfg (as config.Load returns it).
func New(cfg *config.Config, o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("service: New: no store")
	}
	if cfg.Failure.Mode == failure.Fallback && o.Fallback == nil {
		return nil, errors.New("service: New: failure mode fallback needs Options.Fallback")
	}
	if o.MaxInflight < 0 {
		return nil, fmt.Errorf("service: New: Options.MaxInflight %d: want 0 (none) or more", o.MaxInflight)
	}
	s := &Service{raw: o.Store, fallback: o.Fallback, obs: o.Observer, log: o.Logger, clock: o.Clock, maxInflight: o.MaxInflight}
	if s.clock == nil {
		s.clock = storekit.SystemClock{}
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := s.budget.setKey(cfg); err != nil {
		return nil, fmt.Errorf("service: New: %w", err)
	}
	opts := []failure.Option{failure.WithLogger(s.log), failure.WithClock(s.clock), failure.WithSaturation(s.saturated)}
	if fo, ok := o.Observer.(failure.Observer); ok {
		opts = append(opts, failure.WithObserver(fo))
	}
	g, err := failure.Wrap(s.raw, cfg.FailurePolicy(o.Fallback), opts...)
	if err != nil {
		return nil, err
	}
	s.guarded = g
	s.cache = newOverLimitCache(100_000)
	s.interned = storekit.NewInterner(0)
	s.state.Store(s.compile(cfg, nil))
	s.obs.FailureMode(cfg.Failure.Mode.String())
	return s, nil
}

// compile turns a configuration into the state decisions use. A policy
// the service compiled lately (the same identity, storekit.ID: name and
// parameters) keeps its value, so that the stores' caches keyed by it keep
// serving across reloads; a changed policy is a new value.
func (s *Service) compile(cfg *config.Config, old *state) *state {
	st := &state{cfg: cfg, policies: map[string]*floodgate.Policy{}}
	for i := range cfg.Policies {
		p := s.interned.Intern(&cfg.Policies[i])
		st.policies[p.Name] = p
		st.names = append(st.names, p.Name)
	}
	sort.Strings(st.names)
	_, batchStore := s.raw.(storekit.BatchStore)
	st.bound = bound{batching: batchStore && cfg.Store.Batching, maxInflight: cfg.Overload.MaxInflight,
		queue: cfg.Overload.MaxQueue, wait: cfg.Overload.QueueWait, storeTimeout: cfg.Store.Timeout}
	if st.bound.maxInflight == 0 {
		st.bound.maxInflight = s.maxInflight
		if st.bound.batching {
			st.bound.maxInflight = DefaultBatchInflight
		}
	}
	queue, wait := st.bound.queue, st.bound.wait
	if queue <= 0 {
		queue = config.DefaultMaxQueue
	}
	if wait <= 0 {
		wait = config.DefaultQueueWait
	}
	maxInflight := st.bound.maxInflight
	switch {
	case old != nil && old.bound == st.bound:
		st.bounds = old.bounds
	case st.bound.batching:
		c := batchConfig{maxBatch: maxBatch, maxInflight: maxInflight, pool: s.maxInflight,
			maxQueue: queue, wait: wait, gauge: &s.queued, log: s.log}
		st.bounds = &bounds{newBound: func(node string) *nodeBound {
			return &nodeBound{batch: newBatcher(s.guarded, node, c)}
		}}
	case maxInflight > 0:
		st.bounds = &bounds{newBound: func(string) *nodeBound { return &nodeBound{gate: newGate(maxInflight, queue, wait, &s.queued)} }}
	}
	return st
}

// maxBatch is the most requests of one pipelined batch.
const maxBatch = 256

// MaxInflight returns the bound on decisions in flight at each store node
// under the configuration in force (0: none) and whether they travel in
// batches.
func (s *Service) MaxInflight() (n int, batching bool) {
	b := s.state.Load().bound
	return b.maxInflight, b.batching
}

// Link is what the service knows of the way to one store node, from the
// batches it sent there (store.batching).
type Link struct {
	// Node is the node's address (a Redis Cluster master's), or "" for a
	// store on one node.
	Node string
	// Far reports whether a decision that finds a batch in flight to the
	// node starts another at once (up to 8, within overload.max_inflight and
	// the pool), because RoundTrip reached 0.25 ms and has not fallen below
	// 0.15 ms since. False (near): one batch in flight, the next carrying
	// whatever arrives meanwhile. Every store starts near.
	Far bool
	// RoundTrip is the round trip Far was last judged on: the quickest of a
	// batch of at most 2 decisions that the store answered, in the 10 s
	// window it ended in and the one before. It is timed in the service's
	// process, so it holds the client's and the host's time as well as the
	// network's and Redis's: a saturated host makes it longer. 0 until a
	// batch told (the first batch of a node does not: it dials).
	RoundTrip time.Duration
	// Batches is the number of batches in flight to the node now, or about
	// to leave.
	Batches int
}

// Links returns the way to each store node that decisions went to lately
// (see bounds: a node is forgotten a minute after the last), sorted by
// node, under the configuration in force; nil when it does not batch
// (store.batching off, or a store that takes no batches). Reading it
// forgets the nodes idle for a minute (see bounds), batching or not. It is safe for
// concurrent use, and cheap enough for every scrape of the metrics.
func (s *Service) Links() []Link {
	st := s.state.Load()
	if st.bounds == nil {
		return nil
	}
	st.bounds.sweep(st.bounds.clock()) // gates too: a scrape forgets idle nodes
	if !st.bound.batching {
		return nil
	}
	var out []Link
	st.bounds.each(func(nb *nodeBound) { out = append(out, nb.batch.state()) })
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Queued returns how many requests wait for a store call (a gauge).
func (s *Service) Queued() int64 { return s.queued.n.Load() }

// Reload replaces the configuration. Requests in flight finish under the
// old one; the next ones use the new. Keys keep their state when a policy
// keeps its name and shape (a new max keeps every count), and a policy
// that did not change keeps its identity, so that stores reuse what they
// prepared for it. The failure policy's breakers keep their state.
func (s *Service) Reload(cfg *config.Config) error {
	if cfg.Failure.Mode == failure.Fallback && s.fallback == nil {
		s.obs.Reload(false)
		return errors.New("service: Reload: failure mode fallback needs Options.Fallback")
	}
	key, err := tokenKey(cfg)
	if err != nil {
		s.obs.Reload(false)
		return fmt.Errorf("service: Reload: %w", err)
	}
	if err := s.guarded.Guard().SetPolicy(cfg.FailurePolicy(s.fallback)); err != nil {
		s.obs.Reload(false)
		return err
	}
	old := s.state.Load()
	st := s.compile(cfg, old)
	s.state.Store(st)
	s.cache.clear()
	s.budget.key.Store(&key)
	s.obs.Reload(true)
	s.obs.FailureMode(cfg.Failure.Mode.String())
	s.log.Debug("configuration swapped", "policies", len(st.policies), "domains", len(cfg.Domains), "previous_policies", len(old.policies))
	return nil
}

// Config returns the configuration in force.
func (s *Service) Config() *config.Config { return s.state.Load().cfg }

// Failure returns the failure policy in force and the state of its
// breakers, one per store node seen.
func (s *Service) Failure() (failure.Policy, []failure.BreakerState) {
	g := s.guarded.Guard()
	return g.Policy(), g.Breakers()
}

// Item is one request of Check or Peek: a cost for a key under a named
// policy.
type Item struct {
	Policy string
	Key    string
	Cost   int64 // 0 means 1
	// AtMost asks for a partial grant (CheckAtMost, CheckGroup): as many
	// units as pass, at most Cost. Check and Peek ignore it.
	AtMost bool
}

// ItemDecision is the decision of one Item, with the policy that made it.
type ItemDecision struct {
	Policy   *floodgate.Policy
	Decision floodgate.Decision
}

// Verdict is the outcome of Check or Peek: each item's decision and the
// overall verdict (every item allowed).
type Verdict struct {
	Allowed bool
	Items   []ItemDecision
}

// RequestError is a request the service refuses: an unknown policy, an
// empty or oversized key, a bad cost, too many items. Transports answer
// it with a 4xx (or InvalidArgument) naming Field.
type RequestError struct {
	Code  string // machine-readable: unknown_policy, invalid_key, invalid_cost, too_many_items, no_items, unknown_domain, invalid_descriptor
	Field string // the field at fault, such as requests[2].policy
	Msg   string
	// Err is the store's error behind it, if any (errors.Is sees
	// storekit.ErrCrossSlot through it).
	Err error
}

// Unwrap returns the store's error behind e, if any.
func (e *RequestError) Unwrap() error { return e.Err }

func (e *RequestError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// NotFound reports whether the error names something that does not exist
// (a 404 rather than a 400).
func (e *RequestError) NotFound() bool {
	return e.Code == "unknown_policy" || e.Code == "unknown_domain"
}

// Check decides every item (an add of its cost), in one pipelined round
// trip when the store allows. The error is a *RequestError for a bad
// request (nothing is decided then), or one wrapping ErrOverloaded when
// the store calls were at their bound and the items could not be sent in
// time (overload mode backpressure: nothing was counted), or ctx's error
// when the caller left before the store answered (nothing is counted for
// the observer then); a failing store is not an error: the failure policy
// decides, and the decisions say Degraded.
func (s *Service) Check(ctx context.Context, items []Item) (Verdict, error) {
	return s.decideItems(ctx, items, false)
}

// Peek is Check without recording anything.
func (s *Service) Peek(ctx context.Context, items []Item) (Verdict, error) {
	return s.decideItems(ctx, items, true)
}

func (s *Service) decideItems(ctx context.Context, items []Item, peek bool) (Verdict, error) {
	st := s.state.Load()
	lim := st.cfg.Bounds
	if len(items) == 0 {
		return Verdict{}, &RequestError{Code: "no_items", Msg: "no requests: give a policy and a key"}
	}
	if len(items) > lim.MaxBatch {
		return Verdict{}, &RequestError{Code: "too_many_items", Field: "requests",
			Msg: fmt.Sprintf("%d requests in one batch; at most %d (limits.max_batch)", len(items), lim.MaxBatch)}
	}
	reqs := make([]floodgate.Request, len(items))
	for i, it := range items {
		field := func(f string) string {
			if len(items) == 1 {
				return f
			}
			return fmt.Sprintf("requests[%d].%s", i, f)
		}
		p, ok := st.policies[it.Policy]
		if !ok {
			s.obs.UnknownPolicy()
			return Verdict{}, &RequestError{Code: "unknown_policy", Field: field("policy"),
				Msg: fmt.Sprintf("no policy named %q (GET /v1/policies lists them)", clip(it.Policy))}
		}
		if err := CheckKey(it.Key, lim.MaxKeyBytes); err != nil {
			return Verdict{}, &RequestError{Code: "invalid_key", Field: field("key"), Msg: err.Error()}
		}
		n := it.Cost
		if n == 0 {
			n = 1
		}
		if n < 1 || n > floodgate.MaxCost {
			return Verdict{}, &RequestError{Code: "invalid_cost", Field: field("cost"),
				Msg: fmt.Sprintf("cost %d: want an integer from 1 to 2^53-1", it.Cost)}
		}
		reqs[i] = floodgate.Request{Policy: p, Key: it.Key, N: n, Peek: peek}
	}
	ds, err := s.decide(ctx, st, reqs)
	if err != nil {
		return Verdict{}, err
	}
	res := Verdict{Allowed: true, Items: make([]ItemDecision, len(items))}
	for i, d := range ds {
		res.Items[i] = ItemDecision{Policy: reqs[i].Policy, Decision: d}
		if !d.Allowed {
			res.Allowed = false
		}
		if !peek {
			s.obs.Decision(reqs[i].Policy.Name, d.Allowed, false, d.Degraded)
		}
	}
	return res, nil
}

// CheckKey returns what is wrong with a key, without repeating it: empty,
// longer than max bytes (limits.max_key_bytes), or not valid UTF-8 (as
// floodgate.Limiter refuses it: JSON and protobuf strings cannot carry
// other bytes, so no surface of the service accepts them).
func CheckKey(key string, max int) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case len(key) > max:
		return fmt.Errorf("key of %d bytes; at most %d (limits.max_key_bytes)", len(key), max)
	case !utf8.ValidString(key):
		return errors.New("key is not valid UTF-8")
	}
	return nil
}

// clip shortens user input quoted in errors.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Decide decides valid requests — whose policies are the service's, or
// compiled from its configuration (package rls) — as Check does: from the
// over-limit cache where it is exact, else through the store (one pipeline
// for several), else by the failure policy. It does not count the
// decisions: call Count for each one made for a client. The error wraps
// ErrOverloaded when the requests could not be sent to the store in time
// (overload mode backpressure; none was decided), or is ctx's when the
// caller left before the store answered (while they waited to be sent,
// none was decided; once sent, the store may have counted them).
func (s *Service) Decide(ctx context.Context, reqs []floodgate.Request) ([]floodgate.Decision, error) {
	return s.decide(ctx, s.state.Load(), reqs)
}

// CountUnknownDomain reports an Envoy request for a domain the
// configuration does not have, to the observer.
func (s *Service) CountUnknownDomain() { s.obs.UnknownDomain() }

// Count reports a decision to the observer (metrics), under label: a
// policy's name, or a name standing for a bounded family of policies.
func (s *Service) Count(label string, d floodgate.Decision, shadow bool) {
	s.obs.Decision(label, d.Allowed, shadow, d.Degraded)
}

// tracer starts the service's spans (a no-op unless tracing is on).
var tracer = otel.Tracer("github.com/floodgatehq/floodgate/service")

// decide decides valid requests: from the over-limit cache where it is
// exact, else through the guarded store (one pipeline for several), within
// the bound on store calls. Each store call is a span, with the policy,
// algorithm and verdict of each decision as attributes (a batch's as
// events); never a key.
func (s *Service) decide(ctx context.Context, st *state, reqs []floodgate.Request) ([]floodgate.Decision, error) {
	out := make([]floodgate.Decision, len(reqs))
	var todo []int
	now := s.clock.Now()
	for i := range reqs {
		if d, ok := s.cache.get(reqs[i].Policy, reqs[i].Key, reqs[i].N, now); ok && !reqs[i].Refund {
			s.obs.OverLimitCacheHit(reqs[i].Policy.Name)
			out[i] = d
			continue
		}
		todo = append(todo, i)
	}
	switch {
	case len(todo) == 0:
		return out, nil
	case len(todo) > 1:
		ctx, span := tracer.Start(ctx, "floodgate.store.batch", trace.WithAttributes(attribute.Int("floodgate.requests", len(todo))))
		sub := make([]floodgate.Request, len(todo))
		for j, i := range todo {
			sub[j] = reqs[i]
		}
		results := make([]storekit.Outcome, len(sub))
		if err := s.takeBatch(ctx, st, sub, results); err != nil {
			span.End()
			if errors.Is(err, ErrOverloaded) && st.cfg.Overload.Mode == config.OverloadFailurePolicy {
				for _, i := range todo {
					out[i] = s.guarded.Refused(ctx, reqs[i], err)
				}
				return out, nil
			}
			return nil, err
		}
		for j, i := range todo {
			if err := results[j].Err; errors.Is(err, ErrOverloaded) {
				if st.cfg.Overload.Mode != config.OverloadFailurePolicy {
					span.End()
					return nil, err
				}
				out[i] = s.guarded.Refused(ctx, reqs[i], err)
				continue
			}
			if left(ctx, results[j].Err) {
				span.End()
				return nil, ctx.Err()
			}
			out[i] = s.settle(st, &reqs[i], results[j].Decision, results[j].Err, now)
			if span.IsRecording() {
				span.AddEvent("decision", trace.WithAttributes(decisionAttrs(&reqs[i], out[i])...))
			}
		}
		span.End()
	default:
		i := todo[0]
		ctx, span := tracer.Start(ctx, "floodgate.store")
		d, err, qerr := s.take(ctx, st, reqs[i])
		if qerr != nil {
			span.End()
			if !errors.Is(qerr, ErrOverloaded) || st.cfg.Overload.Mode != config.OverloadFailurePolicy {
				return nil, qerr
			}
			out[i] = s.guarded.Refused(ctx, reqs[i], qerr)
			return out, nil
		}
		if left(ctx, err) {
			span.End()
			return nil, ctx.Err()
		}
		out[i] = s.settle(st, &reqs[i], d, err, now)
		if span.IsRecording() {
			span.SetAttributes(decisionAttrs(&reqs[i], out[i])...)
		}
		span.End()
	}
	return out, nil
}

// left reports whether err, a guarded store's error for a call made with
// ctx, says that the caller left (ctx ended) before the store answered.
// Nobody waits for that decision: it is answered with ctx's error, never
// as a degraded decision, which would count a store failure that did not
// happen.
func left(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// take decides one request through the guarded store, within the bound on
// store calls. qerr is set, and the request was not sent, when it could
// not be sent in time (wrapping ErrOverloaded; counted for the observer)
// or the caller left while it waited (ctx's error); err is the guarded
// store's.
func (s *Service) take(ctx context.Context, st *state, req floodgate.Request) (d floodgate.Decision, err, qerr error) {
	if st.bounds == nil {
		d, err = s.guarded.Take(ctx, req)
	} else if nb := st.bounds.of(s.nodeOf(ctx, &req)); nb.batch != nil {
		o, qerr := nb.batch.doOne(ctx, req)
		if qerr != nil {
			s.overloaded(st, qerr, 1)
			return floodgate.Decision{}, nil, qerr
		}
		d, err = o.Decision, o.Err
	} else {
		if qerr := nb.gate.acquire(ctx, 1); qerr != nil {
			s.overloaded(st, qerr, 1)
			return floodgate.Decision{}, nil, qerr
		}
		d, err = s.guarded.Take(ctx, req)
		nb.gate.release()
	}
	if qerr := shed(err); qerr != nil {
		s.overloaded(st, qerr, 1)
		return floodgate.Decision{}, nil, qerr
	}
	return d, err, nil
}

// takeBatch is take for several requests, sent together (together per
// store node, each node's share under its own bound); its error is take's
// qerr when all of them went to one node. Otherwise, and for an outcome
// whose store call was cut under saturation, an outcome's error wraps
// ErrOverloaded (counted for the observer) when its node's bound refused
// it.
func (s *Service) takeBatch(ctx context.Context, st *state, reqs []floodgate.Request, out []storekit.Outcome) error {
	if st.bounds == nil {
		s.guarded.TakeBatch(ctx, reqs, out)
	} else if nbs, idx := s.byNode(ctx, st, reqs); idx == nil {
		if err := s.takeBatchAt(ctx, st, nbs[0], reqs, out); err != nil {
			return err
		}
	} else {
		var wg sync.WaitGroup
		for k, nb := range nbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sub := make([]floodgate.Request, len(idx[k]))
				subOut := make([]storekit.Outcome, len(idx[k]))
				for j, i := range idx[k] {
					sub[j] = reqs[i]
				}
				if err := s.takeBatchAt(ctx, st, nb, sub, subOut); err != nil {
					for j := range subOut {
						subOut[j] = storekit.Outcome{Err: err}
					}
				}
				for j, i := range idx[k] {
					out[i] = subOut[j]
				}
			}()
		}
		wg.Wait()
	}
	for i := range out {
		if qerr := shed(out[i].Err); qerr != nil {
			s.overloaded(st, qerr, 1)
			out[i].Err = qerr
		}
	}
	return nil
}

// takeBatchAt is takeBatch for requests that all go to the node of nb.
func (s *Service) takeBatchAt(ctx context.Context, st *state, nb *nodeBound, reqs []floodgate.Request, out []storekit.Outcome) error {
	if nb.batch != nil {
		if err := nb.batch.do(ctx, reqs, out); err != nil {
			s.overloaded(st, err, len(reqs))
			return err
		}
		return nil
	}
	if err := nb.gate.acquire(ctx, len(reqs)); err != nil {
		s.overloaded(st, err, len(reqs))
		return err
	}
	s.guarded.TakeBatch(ctx, reqs, out)
	nb.gate.release()
	return nil
}

// overloaded reports n requests refused by the bound, when err says so.
func (s *Service) overloaded(st *state, err error, n int) {
	if !errors.Is(err, ErrOverloaded) {
		return
	}
	if o, ok := s.obs.(OverloadObserver); ok {
		o.Overloaded(overloadReason(err), st.cfg.Overload.Mode.String(), n)
	}
}

// decisionAttrs are a decision's trace attributes: its policy, algorithm,
// verdict and whether the failure policy made it. Never the key.
func decisionAttrs(req *floodgate.Request, d floodgate.Decision) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("floodgate.policy", req.Policy.Name),
		attribute.String("floodgate.algorithm", string(req.Policy.Algorithm)),
		attribute.Int64("floodgate.cost", req.N),
		attribute.Bool("floodgate.peek", req.Peek),
		attribute.Bool("floodgate.allowed", d.Allowed),
		attribute.Bool("floodgate.degraded", d.Degraded),
	}
}

// settle takes a decision: it feeds the over-limit cache with a store's
// exhausting denial, and drops the entry of a key a refund went to. Any
// other error the guarded store returns (the store was closed) is answered
// as the failure policy answers; a caller that left is not settled (see
// left). asked
// is the service's clock before the call: the store decided at or after
// it, so a window's end counted from asked is never later than the
// store's (counted from the answer, a slow call would let the cache deny
// past the window's end).
func (s *Service) settle(st *state, req *floodgate.Request, d floodgate.Decision, err error, asked time.Time) floodgate.Decision {
	if req.Refund { // a refund may give the window room again
		s.cache.drop(req.Policy, req.Key)
	}
	if err != nil {
		return floodgate.Decision{Allowed: true, Degraded: true}
	}
	if !req.Peek && !req.Refund && !d.Allowed && !d.Degraded && st.cfg.Store.OverLimitCache {
		s.cache.put(req.Policy, req.Key, d, asked)
	}
	return d
}

// Reset forgets key's state under the named policy (an admin action).
func (s *Service) Reset(ctx context.Context, policy, key string) error {
	st := s.state.Load()
	p, ok := st.policies[policy]
	if !ok {
		return &RequestError{Code: "unknown_policy", Field: "policy", Msg: fmt.Sprintf("no policy named %q", clip(policy))}
	}
	if err := CheckKey(key, st.cfg.Bounds.MaxKeyBytes); err != nil {
		return &RequestError{Code: "invalid_key", Field: "key", Msg: err.Error()}
	}
	err := s.guarded.Reset(ctx, p, key)
	s.cache.drop(p, key)
	return err
}

// Intern returns the service's value of policy p's identity (see
// storekit.Interner), for engines that compile policies of the
// configuration (package rls), so that every policy decided through the
// service keeps its identity across reloads.
func (s *Service) Intern(p *floodgate.Policy) *floodgate.Policy { return s.interned.Intern(p) }

// Policies returns the named policies in name order.
func (s *Service) Policies() []*floodgate.Policy {
	st := s.state.Load()
	out := make([]*floodgate.Policy, len(st.names))
	for i, n := range st.names {
		out[i] = st.policies[n]
	}
	return out
}

// ErrNoUsage is returned by TopKeys when the store keeps no usage.
var ErrNoUsage = errors.New("service: the store does not track usage")

// TopKeys lists a tracked policy's keys (an admin action).
func (s *Service) TopKeys(ctx context.Context, policy string, by usage.Order, limit int) ([]usage.Record, error) {
	st := s.state.Load()
	p, ok := st.policies[policy]
	if !ok {
		return nil, &RequestError{Code: "unknown_policy", Field: "policy", Msg: fmt.Sprintf("no policy named %q", clip(policy))}
	}
	if !p.Track {
		return nil, &RequestError{Code: "not_tracked", Field: "policy", Msg: fmt.Sprintf("policy %q does not track usage (track: true)", p.Name)}
	}
	lister, ok := s.raw.(usage.Lister)
	if !ok {
		return nil, ErrNoUsage
	}
	return lister.TopKeys(ctx, p.Name, by, limit)
}

// Ready reports whether the service can decide: a configuration is loaded
// and the store answers (storekit.Pinger: for Redis, one that is not a
// Cluster's, that it also takes writes, which a replica does not).
func (s *Service) Ready(ctx context.Context) error {
	if s.state.Load() == nil {
		return errors.New("no configuration loaded")
	}
	if p, ok := s.raw.(storekit.Pinger); ok {
		cctx, cancel := context.WithTimeout(ctx, 10*s.state.Load().cfg.Store.Timeout)
		defer cancel()
		if err := p.Ping(cctx); err != nil {
			return fmt.Errorf("the store cannot decide: %w", err)
		}
	}
	return nil
}

// ReloadFailed records a reload refused before it reached the service (the
// configuration did not load), for metrics.
func (s *Service) ReloadFailed() { s.obs.Reload(false) }

// keySalt makes KeyDigest's digests this process's own.
var keySalt = func() []byte {
	b := make([]byte, 16)
	rand.Read(b)
	return b
}()

// KeyDigest returns a short digest of key, for access logs and traces that
// must tell requests of one key apart without holding the key: 12 hex
// digits of an HMAC-SHA-256 under a salt drawn at start, so that a digest
// cannot be matched to a key by hashing guesses, and digests of two runs
// of the process differ.
func KeyDigest(key string) string {
	m := hmac.New(sha256.New, keySalt)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)[:6])
}
