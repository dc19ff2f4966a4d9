// Package service is floodgate's rate limit service, independent of any
// transport: it holds the configuration (named policies and Envoy rate
// limit domains), decides requests through a Store, applies the failure
// policy when the store fails, and reloads its configuration without
// dropping a request. The HTTP/JSON API (transport/httpapi) and Envoy's
// gRPC API (transport/envoyrls) are thin adapters over it.
//
// A Service is safe for concurrent use by multiple goroutines.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/storekit"
	"github.com/floodgatehq/floodgate/usage"
)

// Observer receives the service's events, for metrics. Its methods are
// called concurrently, on the request path, and must not block. Policy
// names come from the configuration (a bounded set); keys are never
// passed.
type Observer interface {
	// Decision reports one decided request: allowed or denied, whether the
	// policy runs in shadow mode (so a denial was not enforced), and
	// whether the failure policy decided it (degraded).
	Decision(policy string, allowed, shadow, degraded bool)
	// StoreCall reports one call to the store and its error, if any.
	StoreCall(op string, took time.Duration, err error)
	// OverLimitCacheHit reports a denial answered from the local cache.
	OverLimitCacheHit(policy string)
	// Reload reports a configuration reload and whether it was applied.
	Reload(ok bool)
}

type nopObserver struct{}

func (nopObserver) Decision(string, bool, bool, bool)      {}
func (nopObserver) StoreCall(string, time.Duration, error) {}
func (nopObserver) OverLimitCacheHit(string)               {}
func (nopObserver) Reload(bool)                            {}

// Options configures a Service.
type Options struct {
	// Store keeps limiter state. Required. The service does not close it.
	Store floodgate.Store
	// Fallback decides when the store fails and the failure mode is
	// "fallback": a memory store, typically. Required for that mode.
	Fallback floodgate.Store
	// Observer receives metrics events; nil means none.
	Observer Observer
	// Logger receives operational logs; nil means slog.Default(). Keys
	// are never logged.
	Logger *slog.Logger
	// Clock times the over-limit cache and the circuit breaker; nil means
	// the system clock. Give it the store's clock when the store has one
	// of its own (tests, replays).
	Clock storekit.Clock
}

// Service decides requests. Create it with New.
type Service struct {
	store    floodgate.Store // what decisions go through (maybe batched)
	raw      floodgate.Store // the store itself
	fallback floodgate.Store
	obs      Observer
	log      *slog.Logger
	clock    storekit.Clock

	// failLog and fallbackLog keep a failing store from writing a log
	// line per request.
	failLog, fallbackLog logThrottle

	state   atomic.Pointer[state]
	cache   *overLimitCache
	breaker breaker
}

// state is one compiled configuration; reloads swap it whole.
type state struct {
	cfg      *config.Config
	policies map[string]*floodgate.Policy // named policies
	names    []string                     // their names, sorted
	domains  map[string]*domain           // Envoy domains
	batch    *batcher                     // nil without batching
}

// New returns a Service for cfg (as config.Load returns it).
func New(cfg *config.Config, o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("service: New: no store")
	}
	if cfg.Failure.Mode == "fallback" && o.Fallback == nil {
		return nil, errors.New("service: New: failure mode fallback needs Options.Fallback")
	}
	s := &Service{store: o.Store, raw: o.Store, fallback: o.Fallback, obs: o.Observer, log: o.Logger, clock: o.Clock}
	if s.clock == nil {
		s.clock = storekit.SystemClock{}
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.cache = newOverLimitCache(100_000)
	st, err := s.compile(cfg)
	if err != nil {
		return nil, err
	}
	s.state.Store(st)
	return s, nil
}

// compile turns a configuration into the state decisions use.
func (s *Service) compile(cfg *config.Config) (*state, error) {
	st := &state{cfg: cfg, policies: map[string]*floodgate.Policy{}}
	for i := range cfg.Policies {
		p := cfg.Policies[i]
		p.Limits = append([]floodgate.Limit(nil), p.Limits...)
		st.policies[p.Name] = &p
		st.names = append(st.names, p.Name)
	}
	sort.Strings(st.names)
	var err error
	if st.domains, err = compileDomains(cfg); err != nil {
		return nil, err
	}
	if bs, ok := s.raw.(storekit.BatchStore); ok && cfg.Store.Batching {
		st.batch = newBatcher(bs, 256, 8, cfg.Store.Timeout)
	}
	return st, nil
}

// Reload replaces the configuration. Requests in flight finish under the
// old one; the next ones use the new. Keys keep their state when a policy
// keeps its name and shape (a new max keeps every count).
func (s *Service) Reload(cfg *config.Config) error {
	if cfg.Failure.Mode == "fallback" && s.fallback == nil {
		s.obs.Reload(false)
		return errors.New("service: Reload: failure mode fallback needs Options.Fallback")
	}
	st, err := s.compile(cfg)
	if err != nil {
		s.obs.Reload(false)
		return err
	}
	old := s.state.Swap(st)
	s.cache.clear()
	s.obs.Reload(true)
	s.log.Debug("configuration swapped", "policies", len(st.policies), "domains", len(st.domains), "previous_policies", len(old.policies))
	return nil
}

// Config returns the configuration in force.
func (s *Service) Config() *config.Config { return s.state.Load().cfg }

// Item is one request of Check or Peek: a cost for a key under a named
// policy.
type Item struct {
	Policy string
	Key    string
	Cost   int64 // 0 means 1
}

// ItemResult is the decision of one Item.
type ItemResult struct {
	Policy   *floodgate.Policy
	Decision floodgate.Decision
}

// Result is the outcome of Check or Peek: each item's decision and the
// overall verdict (every item allowed).
type Result struct {
	Allowed bool
	Items   []ItemResult
}

// RequestError is a request the service refuses: an unknown policy, an
// empty or oversized key, a bad cost, too many items. Transports answer
// it with a 4xx (or InvalidArgument) naming Field.
type RequestError struct {
	Code  string // machine-readable: unknown_policy, invalid_key, invalid_cost, too_many_items, no_items, unknown_domain, invalid_descriptor
	Field string // the field at fault, such as requests[2].policy
	Msg   string
}

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
// request (nothing is decided then); a failing store is not an error: the
// failure policy decides, and the decisions say Degraded.
func (s *Service) Check(ctx context.Context, items []Item) (Result, error) {
	return s.decideItems(ctx, items, false)
}

// Peek is Check without recording anything.
func (s *Service) Peek(ctx context.Context, items []Item) (Result, error) {
	return s.decideItems(ctx, items, true)
}

func (s *Service) decideItems(ctx context.Context, items []Item, peek bool) (Result, error) {
	st := s.state.Load()
	lim := st.cfg.Limits
	if len(items) == 0 {
		return Result{}, &RequestError{Code: "no_items", Msg: "no requests: give a policy and a key"}
	}
	if len(items) > lim.MaxBatch {
		return Result{}, &RequestError{Code: "too_many_items", Field: "requests",
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
			return Result{}, &RequestError{Code: "unknown_policy", Field: field("policy"),
				Msg: fmt.Sprintf("no policy named %q (GET /v1/policies lists them)", clip(it.Policy))}
		}
		if err := checkKey(it.Key, lim.MaxKeyBytes); err != nil {
			return Result{}, &RequestError{Code: "invalid_key", Field: field("key"), Msg: err.Error()}
		}
		n := it.Cost
		if n == 0 {
			n = 1
		}
		if n < 1 || n > floodgate.MaxCost {
			return Result{}, &RequestError{Code: "invalid_cost", Field: field("cost"),
				Msg: fmt.Sprintf("cost %d: want an integer from 1 to 2^53-1", it.Cost)}
		}
		reqs[i] = floodgate.Request{Policy: p, Key: it.Key, N: n, Peek: peek}
	}
	ds := s.decide(ctx, st, reqs)
	res := Result{Allowed: true, Items: make([]ItemResult, len(items))}
	for i, d := range ds {
		res.Items[i] = ItemResult{Policy: reqs[i].Policy, Decision: d}
		if !d.Allowed {
			res.Allowed = false
		}
		if !peek {
			s.obs.Decision(reqs[i].Policy.Name, d.Allowed, false, d.Degraded)
		}
	}
	return res, nil
}

// checkKey returns what is wrong with a key, without repeating it.
func checkKey(key string, max int) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case len(key) > max:
		return fmt.Errorf("key of %d bytes; at most %d (limits.max_key_bytes)", len(key), max)
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

// decide decides valid requests: from the over-limit cache where it is
// exact, else through the store (one pipeline for several), else by the
// failure policy.
func (s *Service) decide(ctx context.Context, st *state, reqs []floodgate.Request) []floodgate.Decision {
	out := make([]floodgate.Decision, len(reqs))
	var todo []int
	now := s.clock.Now()
	for i := range reqs {
		if d, ok := s.cache.get(reqs[i].Policy, reqs[i].Key, reqs[i].N, now); ok {
			s.obs.OverLimitCacheHit(reqs[i].Policy.Name)
			out[i] = d
			continue
		}
		todo = append(todo, i)
	}
	if len(todo) == 0 {
		return out
	}
	timeout := st.cfg.Store.Timeout
	if s.breaker.open(now) {
		for _, i := range todo {
			out[i] = s.degrade(ctx, st, reqs[i], errBreakerOpen)
		}
		return out
	}
	bs, batched := s.raw.(storekit.BatchStore)
	switch {
	case len(todo) > 1 && batched:
		sub := make([]floodgate.Request, len(todo))
		for j, i := range todo {
			sub[j] = reqs[i]
		}
		results := make([]storekit.BatchResult, len(sub))
		cctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		bs.TakeBatch(cctx, sub, results)
		cancel()
		took := time.Since(start)
		for j, i := range todo {
			out[i] = s.settle(ctx, st, reqs[i], results[j].Decision, results[j].Err, now, took)
		}
	default:
		for _, i := range todo {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			start := time.Now()
			var d floodgate.Decision
			var err error
			if st.batch != nil {
				d, err = st.batch.Take(cctx, reqs[i])
			} else {
				d, err = s.store.Take(cctx, reqs[i])
			}
			cancel()
			out[i] = s.settle(ctx, st, reqs[i], d, err, now, time.Since(start))
		}
	}
	return out
}

var errBreakerOpen = errors.New("service: store failing, not tried (circuit open)")

// settle takes a store's answer: it records the call, feeds the breaker and
// the over-limit cache, and applies the failure policy to an error. asked
// is the service's clock before the call: the store decided at or after
// it, so a window's end counted from asked is never later than the
// store's (counted from the answer, a slow call would let the cache deny
// past the window's end).
func (s *Service) settle(ctx context.Context, st *state, req floodgate.Request, d floodgate.Decision, err error, asked time.Time, took time.Duration) floodgate.Decision {
	op := "take"
	if req.Peek {
		op = "peek"
	}
	s.obs.StoreCall(op, took, err)
	if err != nil {
		s.breaker.failure(s.clock.Now())
		return s.degrade(ctx, st, req, err)
	}
	s.breaker.success()
	if !req.Peek && !d.Allowed && st.cfg.Store.OverLimitCache {
		s.cache.put(req.Policy, req.Key, d, asked)
	}
	return d
}

// degrade decides a request the store could not, by the failure policy.
func (s *Service) degrade(ctx context.Context, st *state, req floodgate.Request, cause error) floodgate.Decision {
	f := st.cfg.Failure
	if ok, held := s.failLog.allow(s.clock.Now()); ok {
		// One line a second at most: "suppressed" counts those held back.
		s.log.Warn("store failed; failure policy decides", "policy", req.Policy.Name, "mode", f.Mode, "error", cause, "suppressed", held)
	}
	switch f.Mode {
	case "closed":
		return floodgate.Decision{Allowed: false, Degraded: true, Limit: quota(req.Policy), RetryAfter: f.RetryAfter}
	case "fallback":
		cctx, cancel := context.WithTimeout(ctx, st.cfg.Store.Timeout)
		defer cancel()
		d, err := s.fallback.Take(cctx, req)
		if err == nil {
			d.Degraded = true
			return d
		}
		if ok, held := s.fallbackLog.allow(s.clock.Now()); ok {
			s.log.Error("fallback store failed too; failing open", "policy", req.Policy.Name, "error", err, "suppressed", held)
		}
	}
	return floodgate.Decision{Allowed: true, Degraded: true, Limit: quota(req.Policy)}
}

// quota is the first limit's quota of a policy, for decisions made
// without the store.
func quota(p *floodgate.Policy) int64 {
	q, _ := p.Quota(0)
	return q
}

// Reset forgets key's state under the named policy (an admin action).
func (s *Service) Reset(ctx context.Context, policy, key string) error {
	st := s.state.Load()
	p, ok := st.policies[policy]
	if !ok {
		return &RequestError{Code: "unknown_policy", Field: "policy", Msg: fmt.Sprintf("no policy named %q", clip(policy))}
	}
	if err := checkKey(key, st.cfg.Limits.MaxKeyBytes); err != nil {
		return &RequestError{Code: "invalid_key", Field: "key", Msg: err.Error()}
	}
	cctx, cancel := context.WithTimeout(ctx, st.cfg.Store.Timeout)
	defer cancel()
	start := time.Now()
	err := s.raw.Reset(cctx, p, key)
	s.obs.StoreCall("reset", time.Since(start), err)
	s.cache.drop(p, key)
	return err
}

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

// Pinger is implemented by stores that can check their backend is
// reachable (the Redis store); Ready uses it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Ready reports whether the service can decide: a configuration is loaded
// and the store answers.
func (s *Service) Ready(ctx context.Context) error {
	if s.state.Load() == nil {
		return errors.New("no configuration loaded")
	}
	if p, ok := s.raw.(Pinger); ok {
		cctx, cancel := context.WithTimeout(ctx, 10*s.state.Load().cfg.Store.Timeout)
		defer cancel()
		if err := p.Ping(cctx); err != nil {
			return fmt.Errorf("store unreachable: %w", err)
		}
	}
	return nil
}

// ReloadFailed records a reload refused before it reached the service (the
// configuration did not load), for metrics.
func (s *Service) ReloadFailed() { s.obs.Reload(false) }
