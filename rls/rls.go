// Package rls is Envoy's rate limit service engine
// (envoy.service.ratelimit.v3), transport-neutral: it matches a
// ShouldRateLimit request's descriptors to the rules of the configuration's
// domains, has the service decide them, and summarises the decisions into
// the answer envoyproxy/ratelimit gives (docs/envoy-ratelimit-semantics.md).
// The gRPC and /json adapters (transport/envoyrls) share it.
//
// An answer is made in three steps, each testable alone: Table.Match finds
// each descriptor's rule and the store requests to make (Plan); the
// service decides them (Engine does it through service.Service.Decide);
// Plan.Summarise turns the decisions into statuses, the overall code and
// the response headers.
//
// An Engine is safe for concurrent use by multiple goroutines.
package rls

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
)

// Request is a ShouldRateLimit request.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	HitsAddend  uint32 // 0 means 1
}

// Descriptor is one descriptor of a request.
type Descriptor struct {
	Entries []Entry
	// Limit, when set, overrides the configuration for this descriptor.
	Limit *Limit
	// HitsAddend, when set (0 included: check only), replaces the
	// request's.
	HitsAddend *uint64
	// NegativeHits (the proto's is_negative_hits) makes the descriptor's
	// hits a refund to its counter: SPEC.md's refund of that many, answered
	// OK without a limit check (envoyproxy/ratelimit decrements its
	// counter, floored at 0). Hits 0 refunds nothing.
	NegativeHits bool
}

// Entry is a descriptor entry.
type Entry struct {
	Key, Value string
}

// Limit is a limit as RLS states it.
type Limit struct {
	Name            string
	RequestsPerUnit uint32
	Unit            config.Unit
}

// Code is an RLS response code.
type Code int

// The codes, numbered as in the RLS proto.
const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

// Status is the answer for one descriptor.
type Status struct {
	Code           Code
	CurrentLimit   *Limit // nil: no limit applied
	LimitRemaining uint32
	// DurationUntilReset is set (HasReset) whenever CurrentLimit is.
	DurationUntilReset time.Duration
	HasReset           bool
}

// Response is a ShouldRateLimit answer.
type Response struct {
	OverallCode Code
	Statuses    []Status
	// Headers are the RateLimit fields of the binding descriptor, for
	// response_headers_to_add (when envoy.response_headers is on).
	Headers []Header
}

// Header is a response header to add.
type Header struct {
	Name, Value string
}

// Engine answers ShouldRateLimit requests through a service, under the
// Envoy domains of the configuration in force. Create it with New; reload
// it with Reload when the service reloads.
type Engine struct {
	svc   *service.Service
	table atomic.Pointer[Table]
}

// New returns an Engine answering through svc under cfg's domains (cfg is
// the configuration svc was created with). An error is a domain that
// cannot be compiled, naming its file and line.
func New(svc *service.Service, cfg *config.Config) (*Engine, error) {
	e := &Engine{svc: svc}
	t, err := e.Compile(cfg)
	if err != nil {
		return nil, err
	}
	e.table.Store(t)
	return e, nil
}

// Compile compiles cfg's domains without applying them: a reload compiles
// first (refusing the whole configuration if it fails), then swaps. Every
// policy of the table is interned by the service (Service.Intern), so that
// a rule that did not change keeps its identity across reloads.
func (e *Engine) Compile(cfg *config.Config) (*Table, error) {
	return compile(cfg, e.svc.Intern, e.svc.Budgets(), e.svc.Groups())
}

// Swap puts t, compiled from the configuration the service now has, in
// force. Requests in flight finish under the old table.
func (e *Engine) Swap(t *Table) { e.table.Store(t) }

// Service returns the service the engine decides through.
func (e *Engine) Service() *service.Service { return e.svc }

// Table returns the table in force.
func (e *Engine) Table() *Table { return e.table.Load() }

// ShouldRateLimit answers an RLS request as envoyproxy/ratelimit does:
// one status per descriptor, OVER_LIMIT overall when a descriptor that is
// neither shadowed nor in quota mode is over its limit (or every
// quota-mode one is). An unknown domain gives OK statuses. The error is a
// *service.RequestError for an empty domain or descriptor list, too many
// descriptors, a bad override, an oversized descriptor, or negative hits
// on a store that takes no refunds; one wrapping service.ErrOverloaded
// when the service refused the decisions under its overload bound (none
// was made); the context's when the caller left while they waited to be
// sent. A descriptor with negative hits is a refund to its counter,
// answered OK (SPEC.md, "Envoy's rate limit service").
func (e *Engine) ShouldRateLimit(ctx context.Context, req Request) (Response, error) {
	t := e.table.Load()
	plan, err := t.Match(req)
	if err != nil {
		return Response{}, err
	}
	if t.domains[req.Domain] == nil {
		e.svc.CountUnknownDomain()
	}
	ds, err := e.decide(ctx, plan)
	if err != nil {
		return Response{}, err
	}
	for j := range ds {
		if !plan.Requests[j].Peek && !plan.Requests[j].Refund {
			e.svc.Count(plan.rules[j].label, ds[j], plan.rules[j].shadow)
		}
	}
	return plan.Summarise(ds), nil
}

// decide decides plan's requests: in one batch, or, in an atomic domain,
// the members of the plan's group as one group (Service.DecideGroup) and
// the others in one batch. A member's decision is the group's for the
// binding member; for the others it is the group's verdict, remaining and
// reset under their own limit (Plan.Summarise answers them OK).
func (e *Engine) decide(ctx context.Context, plan *Plan) ([]floodgate.Decision, error) {
	if len(plan.group) < 2 {
		return e.svc.Decide(ctx, plan.Requests)
	}
	ds := make([]floodgate.Decision, len(plan.Requests))
	members := make([]floodgate.Request, len(plan.group))
	inGroup := make([]bool, len(plan.Requests))
	for m, j := range plan.group {
		members[m] = plan.Requests[j]
		inGroup[j] = true
	}
	var rest []floodgate.Request
	var restAt []int
	for j := range plan.Requests {
		if !inGroup[j] {
			rest = append(rest, plan.Requests[j])
			restAt = append(restAt, j)
		}
	}
	v, err := e.svc.DecideGroup(ctx, members)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		rds, err := e.svc.Decide(ctx, rest)
		if err != nil {
			return nil, err
		}
		for k, j := range restAt {
			ds[j] = rds[k]
		}
	}
	g := v.Decision
	for m, j := range plan.group {
		if m == v.Member {
			ds[j] = g
			continue
		}
		q, _ := members[m].Policy.Quota(0)
		if g.Degraded && g.Limit == 0 {
			q = 0
		}
		ds[j] = floodgate.Decision{Allowed: g.Allowed, Limit: q, Remaining: g.Remaining, ResetAfter: g.ResetAfter, Degraded: g.Degraded}
	}
	plan.binding = plan.group[v.Member]
	return ds, nil
}

// Table is the compiled Envoy domains of one configuration.
type Table struct {
	domains         map[string]*domain
	maxDescriptors  int
	maxKeyBytes     int
	shadowMode      bool // envoy.shadow_mode: OK overall, whatever the statuses
	responseHeaders bool // envoy.response_headers
	budgets         bool // the store takes refunds (negative hits)
	calendarMonth   bool // envoy.calendar_month: the month unit is the UTC calendar month
}

// domain is a compiled Envoy domain: a tree of nodes, and the rules of the
// limit overrides requests carried lately.
type domain struct {
	name string
	root *node

	calendarMonth bool // envoy.calendar_month, for the overrides' windows
	// atomic (envoy.atomic_domains): a request's enforced descriptors are
	// one group, and envoy-format limits do not count denied hits.
	atomic bool

	mu        sync.Mutex
	overrides map[overrideKey]*rule // at most maxOverrides, then forgotten at once

	// taken are the policy names of the configuration (named policies and
	// rules), which an override's own must not be: read-only once
	// compiled.
	taken map[string]string
}

// overrideKey identifies an override rule: the counters' policy name it
// shares (a configured rule's, or the domain's for the unit), its unit and
// its requests per unit.
type overrideKey struct {
	name string
	unit config.Unit
	rpu  uint32
}

// maxOverrides bounds the override rules a domain keeps: each distinct
// (counters, unit, requests per unit) a request carries makes one, and
// clients choose them, so they are forgotten (all at once) past this many.
// A rule made again has the same policy (name and parameters), hence the
// same counters in the store.
const maxOverrides = 256

// node is one level of a domain's tree, as envoyproxy/ratelimit's
// rateLimitDescriptor: children by composite key ("key" or "key_value"),
// the wildcard children in configuration order, and the node's rule.
type node struct {
	children  map[string]*node
	wildcards []*node
	composite string // the node's own "key" or "key_value"
	value     string // its configured value (for share_threshold)
	share     bool
	rule      *rule
}

// rule is a node's rate limit.
type rule struct {
	path      string // domain.key_value.key…
	limit     Limit
	unlimited bool
	shadow    bool
	quota     bool
	replaces  []string
	// name is the configured rate_limit.name, the only name replaces
	// refer to: not limit.Name, which for a floodgate policy without a
	// name is the policy's (docs/envoy-ratelimit-semantics.md §4.7).
	name   string
	policy *floodgate.Policy // what decides (nil when unlimited)
	check  *floodgate.Policy // a fixed window's "check only" twin: max+1, same state
	fixed  bool              // an envoy-format fixed window (vs a floodgate policy)
	label  string            // what metrics call it: the rule's policy's name, or "<domain>.override"
	// policyField is the RateLimit-Policy field of policy, made once
	// (the response headers carry it).
	policyField string
}

// compile builds the matching trees and the policies of every rule,
// interned by intern.
//
// groups is why the store cannot decide groups of any keys (nil when it
// can: Service.Groups); envoy.atomic_domains is refused then.
func compile(cfg *config.Config, intern func(*floodgate.Policy) *floodgate.Policy, budgets bool, groups error) (*Table, error) {
	if len(cfg.Envoy.AtomicDomains) > 0 && groups != nil {
		if errors.Is(groups, storekit.ErrCrossSlot) {
			return nil, fmt.Errorf("envoy.atomic_domains %v: each descriptor's counter is its own key, on its own Redis Cluster slot, and an atomic group is decided in one slot: "+
				"use a store on one node (memory, redis, redis-sentinel) or remove envoy.atomic_domains (%w)", cfg.Envoy.AtomicDomains, groups)
		}
		return nil, fmt.Errorf("envoy.atomic_domains %v: the store does not decide atomic groups; use one that does (memory, redis) or remove envoy.atomic_domains (%w)", cfg.Envoy.AtomicDomains, groups)
	}
	if cfg.Envoy.CalendarMonth && !budgets {
		return nil, fmt.Errorf("envoy.calendar_month (USE_CALENDAR_MONTH_RATE_LIMIT): the store does not decide calendar windows; use one that does (memory) or turn it off")
	}
	t := &Table{
		budgets:         budgets,
		calendarMonth:   cfg.Envoy.CalendarMonth,
		domains:         make(map[string]*domain, len(cfg.Domains)),
		maxDescriptors:  cfg.Bounds.MaxDescriptors,
		maxKeyBytes:     cfg.Bounds.MaxKeyBytes,
		shadowMode:      cfg.Envoy.ShadowMode,
		responseHeaders: cfg.Envoy.ResponseHeaders,
	}
	names := map[string]string{}
	for _, p := range cfg.Policies {
		names[p.Name] = "the policies section"
	}
	for _, d := range cfg.Domains {
		dom := &domain{name: d.Name, root: &node{children: map[string]*node{}}, overrides: map[overrideKey]*rule{}, calendarMonth: cfg.Envoy.CalendarMonth,
			atomic: cfg.Envoy.Atomic(d.Name)}
		if err := compileNodes(cfg, dom.root, d.Name, d.Descriptors, names, intern, dom.atomic); err != nil {
			return nil, err
		}
		t.domains[d.Name] = dom
	}
	for _, dom := range t.domains {
		dom.taken = names
	}
	return t, nil
}

func compileNodes(cfg *config.Config, parent *node, path string, ds []*config.Descriptor, names map[string]string, intern func(*floodgate.Policy) *floodgate.Policy, atomic bool) error {
	for _, d := range ds {
		n := &node{children: map[string]*node{}, composite: d.Key, value: d.Value, share: d.ShareThreshold}
		if d.Value != "" {
			n.composite += "_" + d.Value
		}
		full := path + "." + n.composite
		if rl := d.RateLimit; rl != nil {
			r := &rule{
				path:      full,
				limit:     Limit{Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit},
				unlimited: rl.Unlimited, shadow: d.ShadowMode, quota: d.QuotaMode, replaces: rl.Replaces, name: rl.Name,
			}
			switch {
			case rl.Unlimited:
			case rl.Policy != "":
				// The named policy's parameters under the rule's own name:
				// an Envoy rule's counters are its own, so that no other
				// surface (/v1/check, /v1/reset of the named policy) can
				// spend or reset them. The limit keeps the policy's name.
				p, _ := cfg.Policy(rl.Policy)
				r.limit = limitOf(&p, rl.Name)
				p.Name = policyName(full, names, d)
				p.Limits = slices.Clone(p.Limits)
				r.policy = &p
			case rl.Spec != "":
				p, err := floodgate.ParsePolicy(policyName(full, names, d), rl.Spec)
				if err != nil {
					return fmt.Errorf("%s:%d: %w", d.File, rl.Line, err)
				}
				r.policy = &p
				r.limit = limitOf(&p, rl.Name)
			default:
				name := policyName(full, names, d)
				r.policy, r.check = fixedWindows(name, rl.RequestsPerUnit, rl.Unit, cfg.Envoy.CalendarMonth, !atomic)
				r.fixed = true
			}
			if r.policy != nil {
				r.policy = intern(r.policy)
				r.label = r.policy.Name
				r.policyField = policyField(r.policy)
			}
			if r.check != nil {
				r.check = intern(r.check)
			}
			n.rule = r
		}
		parent.children[n.composite] = n
		if strings.Contains(n.composite, "*") {
			parent.wildcards = append(parent.wildcards, n)
		}
		if err := compileNodes(cfg, n, full, d.Descriptors, names, intern, atomic); err != nil {
			return err
		}
	}
	return nil
}

// fixedWindows returns an envoy-format limit as floodgate policies: a
// fixed window of the unit, aligned to the epoch, recording denied hits
// (envoyproxy/ratelimit's INCRBY counts them); and its "check only" twin
// of max+1, which shares its state (same name and shape): a peek of 1
// under it passes exactly when the count has not passed the limit. With
// calendarMonth, a month is the UTC calendar month (SPEC.md, "Envoy's
// rate limit service"): align calendar, period month. Without
// countDenied (an atomic domain's), a denied hit counts nothing, so that a
// denied group spends nothing on any member.
func fixedWindows(name string, rpu uint32, unit config.Unit, calendarMonth, countDenied bool) (*floodgate.Policy, *floodgate.Policy) {
	p := &floodgate.Policy{
		Name: name, Algorithm: floodgate.FixedWindow, Max: int64(rpu),
		Window: unit.Duration(), CountDenied: new(countDenied),
	}
	if calendarMonth && unit == config.Month {
		p.Window, p.Align, p.Period = 0, "calendar", "month"
	}
	check := *p
	check.Max++
	return p, &check
}

// policyName derives a rule's policy name from its path in the tree
// (domain.key_value.key…, as envoyproxy/ratelimit names its stats),
// replacing characters a policy name cannot hold and adding a hash when it
// had to change or shorten anything, so that names stay distinct.
func policyName(full string, taken map[string]string, d *config.Descriptor) string {
	var b strings.Builder
	changed := false
	for _, c := range []byte(full) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '-', c == '/':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
			changed = true
		}
	}
	name := b.String()
	if changed || len(name) > storekit.MaxNameLen-9 {
		h := fnv.New32a()
		h.Write([]byte(full))
		name = fmt.Sprintf("%s-%08x", name[:min(len(name), storekit.MaxNameLen-9)], h.Sum32())
	}
	for i := 2; taken[name] != ""; i++ { // a clash with a named policy
		name = fmt.Sprintf("%s-%d", name[:min(len(name), storekit.MaxNameLen-4)], i)
	}
	taken[name] = fmt.Sprintf("%s:%d", d.File, d.Line)
	return name
}

// limitOf states a floodgate policy as an RLS limit: its first limit's
// quota, and the unit whose window holds it (the largest unit not longer
// than the policy's window; a year for anything longer).
func limitOf(p *floodgate.Policy, name string) Limit {
	q, w := p.Quota(0)
	unit := config.Year
	for i, u := range config.Units[:len(config.Units)-1] {
		if w < config.Units[i+1].Duration() {
			unit = u
			break
		}
	}
	if name == "" {
		name = p.Name
	}
	return Limit{Name: name, RequestsPerUnit: uint32(min(q, math.MaxUint32)), Unit: unit}
}

// match finds the rule for a descriptor's entries, as envoyproxy/ratelimit's
// GetLimit: at each level the exact key_value, else the first wildcard (in
// configuration order) that matches key_value, else the key alone; a rule
// applies only at the request's depth, and the walk never backtracks. It
// also returns, per entry, the value to count under (the wildcard pattern
// when the matching node shares its threshold, else the request's value),
// or nil when every one is the request's.
func (d *domain) match(entries []Entry) (*rule, []string) {
	cur := d.root
	var found *rule
	var values []string // nil until a wildcard's pattern replaces a value
	for i, e := range entries {
		fk := e.Key + "_" + e.Value
		next := cur.children[fk]
		if next == nil {
			for _, w := range cur.wildcards {
				if config.WildcardMatch(w.composite, fk) {
					next = w
					if w.share {
						if values == nil {
							values = entryValues(entries)
						}
						values[i] = w.value
					}
					break
				}
			}
		}
		if next == nil {
			next = cur.children[e.Key]
		}
		if next != nil && next.rule != nil && i == len(entries)-1 {
			found = next.rule
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		cur = next
	}
	return found, values
}

// override returns the rule of a request's limit override: a fixed window
// of its unit and requests per unit on the counter envoyproxy/ratelimit
// would use, which it keys by domain, entries and unit, never by the
// limit. So where the entries' configured rule is an envoy-format limit of
// the same unit, the override decides on that rule's counters (its policy
// name; the key is the entries'), each request against its own requests
// per unit; elsewhere on the domain's counters for the unit
// ("<domain>.override.<unit>"), which every override of that unit and
// entries shares. Metrics count it under the domain's "<domain>.override",
// never under a name of the client's choosing.
func (d *domain) override(l *Limit, entries []Entry) *rule {
	name, label := d.overrideNames(l.Unit)
	if r, _ := d.match(entries); r != nil && r.fixed && r.limit.Unit == l.Unit {
		name = r.policy.Name
	}
	k := overrideKey{name, l.Unit, l.RequestsPerUnit}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.overrides[k]; ok {
		return r
	}
	p, check := fixedWindows(name, l.RequestsPerUnit, l.Unit, d.calendarMonth, !d.atomic)
	r := &rule{limit: Limit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}, policy: p, check: check, fixed: true, label: label, policyField: policyField(p)}
	if len(d.overrides) >= maxOverrides {
		clear(d.overrides)
	}
	d.overrides[k] = r
	return r
}

// overrideNames returns the policy name of the domain's override counters
// of unit u, "<domain>.override.<unit>" (another name when that one is
// taken by the configuration, or the domain's name cannot be in a policy
// name), and the metrics label of its overrides.
func (d *domain) overrideNames(u config.Unit) (name, label string) {
	name = fmt.Sprintf("%s.override.%s", d.name, u)
	label = d.name + ".override"
	if len(name) > storekit.MaxNameLen || !validPolicyName(name) {
		h := fnv.New32a()
		h.Write([]byte(d.name))
		name = fmt.Sprintf("envoy-%08x.override.%s", h.Sum32(), u)
		label = fmt.Sprintf("envoy-%08x.override", h.Sum32())
	}
	base := name[:min(len(name), storekit.MaxNameLen-8)]
	for i := 2; d.taken[name] != ""; i++ { // a configured policy of that name: never share its counters
		name = fmt.Sprintf("%s-%d", base, i)
	}
	return name, label
}

func validPolicyName(n string) bool {
	p := floodgate.Policy{Name: n, Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1}
	return p.Validate() == nil
}

// counterKey is a descriptor's key in the store: its entries, keys and
// values, with the separators escaped so that different entries never
// share a key. values are the values to count under, one per entry (nil:
// the entries' own).
func counterKey(entries []Entry, values []string) string {
	var b strings.Builder
	n := 0
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	b.Grow(n) // exact unless a value is a pattern or has separators
	esc := func(s string) {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c == '\\' || c == '=' || c == '/' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		}
	}
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('/')
		}
		esc(e.Key)
		b.WriteByte('=')
		if values != nil {
			esc(values[i])
		} else {
			esc(e.Value)
		}
	}
	return b.String()
}

func entryValues(es []Entry) []string {
	v := make([]string, len(es))
	for i, e := range es {
		v[i] = e.Value
	}
	return v
}
