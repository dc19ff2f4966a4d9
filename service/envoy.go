package service

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/storekit"
)

// The Envoy rate limit service (RLS v3) semantics, as envoyproxy/ratelimit
// answers them (docs/envoy-ratelimit-semantics.md): transport-neutral
// types, so that the gRPC and /json adapters share them.

// RLSRequest is a ShouldRateLimit request.
type RLSRequest struct {
	Domain      string
	Descriptors []RLSDescriptor
	HitsAddend  uint32 // 0 means 1
}

// RLSDescriptor is one descriptor of a request.
type RLSDescriptor struct {
	Entries []Entry
	// Limit, when set, overrides the configuration for this descriptor.
	Limit *RLSLimit
	// HitsAddend, when set (0 included: check only), replaces the
	// request's.
	HitsAddend *uint64
}

// Entry is a descriptor entry.
type Entry struct {
	Key, Value string
}

// RLSLimit is a limit as RLS states it.
type RLSLimit struct {
	Name            string
	RequestsPerUnit uint32
	Unit            string // lower case: second … year
}

// Code is an RLS response code.
type Code int

// The codes, numbered as in the RLS proto.
const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

// RLSStatus is the answer for one descriptor.
type RLSStatus struct {
	Code           Code
	CurrentLimit   *RLSLimit // nil: no limit applied
	LimitRemaining uint32
	// DurationUntilReset is set (HasReset) whenever CurrentLimit is.
	DurationUntilReset time.Duration
	HasReset           bool
}

// RLSResponse is a ShouldRateLimit answer.
type RLSResponse struct {
	OverallCode Code
	Statuses    []RLSStatus
	// Headers are the RateLimit fields of the binding descriptor, for
	// response_headers_to_add (when envoy.response_headers is on).
	Headers []Header
}

// Header is a response header to add.
type Header struct {
	Name, Value string
}

// unitSeconds are envoyproxy/ratelimit's window lengths: a month is 30
// days and a year 365, and windows are aligned to the Unix epoch (weeks
// start on Thursdays).
var unitSeconds = map[string]int64{
	"second": 1, "minute": 60, "hour": 3600, "day": 86400,
	"week": 604800, "month": 2592000, "year": 31536000,
}

// domain is a compiled Envoy domain: a tree of nodes.
type domain struct {
	name string
	root *node

	mu        sync.Mutex
	overrides map[string]*rule // limit overrides, by unit and requests per unit
}

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
	limit     RLSLimit
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
}

// compileDomains builds the matching trees and the policies of every rule.
func compileDomains(cfg *config.Config) (map[string]*domain, error) {
	out := make(map[string]*domain, len(cfg.Domains))
	names := map[string]string{}
	for _, p := range cfg.Policies {
		names[p.Name] = "the policies section"
	}
	for _, d := range cfg.Domains {
		dom := &domain{name: d.Name, root: &node{children: map[string]*node{}}, overrides: map[string]*rule{}}
		if err := compileNodes(cfg, dom.root, d.Name, d.Descriptors, names); err != nil {
			return nil, err
		}
		out[d.Name] = dom
	}
	return out, nil
}

func compileNodes(cfg *config.Config, parent *node, path string, ds []*config.Descriptor, names map[string]string) error {
	for _, d := range ds {
		n := &node{children: map[string]*node{}, composite: d.Key, value: d.Value, share: d.ShareThreshold}
		if d.Value != "" {
			n.composite += "_" + d.Value
		}
		full := path + "." + n.composite
		if rl := d.RateLimit; rl != nil {
			r := &rule{
				limit:     RLSLimit{Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit},
				unlimited: rl.Unlimited, shadow: d.ShadowMode, quota: d.QuotaMode, replaces: rl.Replaces, name: rl.Name,
			}
			switch {
			case rl.Unlimited:
			case rl.Policy != "":
				p, _ := cfg.Policy(rl.Policy)
				r.policy = &p
				r.limit = limitOf(&p, rl.Name)
			case rl.Spec != "":
				p, err := floodgate.ParsePolicy(policyName(full, names, d), rl.Spec)
				if err != nil {
					return fmt.Errorf("%s:%d: %w", d.File, rl.Line, err)
				}
				r.policy = &p
				r.limit = limitOf(&p, rl.Name)
			default:
				name := policyName(full, names, d)
				r.policy, r.check = fixedWindows(name, rl.RequestsPerUnit, rl.Unit)
				r.fixed = true
			}
			n.rule = r
		}
		parent.children[n.composite] = n
		if strings.Contains(n.composite, "*") {
			parent.wildcards = append(parent.wildcards, n)
		}
		if err := compileNodes(cfg, n, full, d.Descriptors, names); err != nil {
			return err
		}
	}
	return nil
}

// fixedWindows returns an envoy-format limit as floodgate policies: a
// fixed window of the unit, aligned to the epoch, recording denied hits
// (envoyproxy/ratelimit's INCRBY counts them); and its "check only" twin
// of max+1, which shares its state (same name and shape): a peek of 1
// under it passes exactly when the count has not passed the limit.
func fixedWindows(name string, rpu uint32, unit string) (*floodgate.Policy, *floodgate.Policy) {
	p := &floodgate.Policy{
		Name: name, Algorithm: floodgate.FixedWindow, Max: int64(rpu),
		Window: time.Duration(unitSeconds[unit]) * time.Second, CountDenied: new(true),
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
// quota, and the unit closest to its window.
func limitOf(p *floodgate.Policy, name string) RLSLimit {
	q, w := p.Quota(0)
	unit := "year"
	for _, u := range []string{"second", "minute", "hour", "day", "week", "month"} {
		next := map[string]string{"second": "minute", "minute": "hour", "hour": "day", "day": "week", "week": "month", "month": "year"}[u]
		if w < time.Duration(unitSeconds[next])*time.Second {
			unit = u
			break
		}
	}
	if name == "" {
		name = p.Name
	}
	return RLSLimit{Name: name, RequestsPerUnit: uint32(min(q, math.MaxUint32)), Unit: unit}
}

// match finds the rule for a descriptor's entries, as envoyproxy/ratelimit's
// GetLimit: at each level the exact key_value, else the first wildcard (in
// configuration order) that matches key_value, else the key alone; a rule
// applies only at the request's depth, and the walk never backtracks. It
// also returns, per entry, the value to count under (the wildcard pattern
// when the matching node shares its threshold, else the request's value).
func (d *domain) match(entries []Entry) (*rule, []string) {
	cur := d.root
	var found *rule
	values := make([]string, len(entries))
	for i, e := range entries {
		values[i] = e.Value
		fk := e.Key + "_" + e.Value
		next := cur.children[fk]
		if next == nil {
			for _, w := range cur.wildcards {
				if config.WildcardMatch(w.composite, fk) {
					next = w
					if w.share {
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

// override returns the rule of a request's limit override, one per unit
// and requests per unit of the domain.
func (d *domain) override(l *RLSLimit) *rule {
	k := l.Unit + "/" + strconv.FormatUint(uint64(l.RequestsPerUnit), 10)
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.overrides[k]; ok {
		return r
	}
	name := fmt.Sprintf("%s.override.%s.%d", d.name, l.Unit, l.RequestsPerUnit)
	if len(name) > storekit.MaxNameLen || !validPolicyName(name) {
		h := fnv.New32a()
		h.Write([]byte(d.name))
		name = fmt.Sprintf("envoy-%08x.override.%s.%d", h.Sum32(), l.Unit, l.RequestsPerUnit)
	}
	p, check := fixedWindows(name, l.RequestsPerUnit, l.Unit)
	r := &rule{limit: RLSLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}, policy: p, check: check, fixed: true}
	d.overrides[k] = r
	return r
}

func validPolicyName(n string) bool {
	p := floodgate.Policy{Name: n, Algorithm: floodgate.GCRA, Max: 1, Window: time.Second, Burst: 1}
	return p.Validate() == nil
}

// counterKey is a descriptor's key in the store: its entries, keys and
// values, with the separators escaped so that different entries never
// share a key.
func counterKey(entries []Entry, values []string) string {
	var b strings.Builder
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
		esc(values[i])
	}
	return b.String()
}

// ShouldRateLimit answers an RLS request as envoyproxy/ratelimit does:
// one status per descriptor, OVER_LIMIT overall when a descriptor that is
// neither shadowed nor in quota mode is over its limit (or every
// quota-mode one is). An unknown domain gives OK statuses. The error is a
// *RequestError for an empty domain or descriptor list, too many
// descriptors, a bad override or an oversized descriptor.
func (s *Service) ShouldRateLimit(ctx context.Context, req RLSRequest) (RLSResponse, error) {
	st := s.state.Load()
	if req.Domain == "" {
		return RLSResponse{}, &RequestError{Code: "invalid_request", Field: "domain", Msg: "rate limit domain must not be empty"}
	}
	if len(req.Descriptors) == 0 {
		return RLSResponse{}, &RequestError{Code: "invalid_request", Field: "descriptors", Msg: "rate limit descriptor list must not be empty"}
	}
	if len(req.Descriptors) > st.cfg.Limits.MaxDescriptors {
		return RLSResponse{}, &RequestError{Code: "too_many_items", Field: "descriptors",
			Msg: fmt.Sprintf("%d descriptors; at most %d (limits.max_descriptors)", len(req.Descriptors), st.cfg.Limits.MaxDescriptors)}
	}
	dom := st.domains[req.Domain]

	// Look every descriptor up, and gather the names other limits replace.
	rules := make([]*rule, len(req.Descriptors))
	values := make([][]string, len(req.Descriptors))
	replaced := map[string]bool{}
	for i, desc := range req.Descriptors {
		if dom == nil {
			continue
		}
		if l := desc.Limit; l != nil {
			if _, ok := unitSeconds[l.Unit]; !ok {
				return RLSResponse{}, &RequestError{Code: "invalid_descriptor", Field: fmt.Sprintf("descriptors[%d].limit.unit", i),
					Msg: fmt.Sprintf("unit %q: want one of %s", l.Unit, strings.Join(config.Units, ", "))}
			}
			rules[i] = dom.override(l)
			values[i] = entryValues(desc.Entries)
		} else {
			rules[i], values[i] = dom.match(desc.Entries)
		}
		if r := rules[i]; r != nil {
			for _, name := range r.replaces {
				replaced[name] = true
			}
		}
	}
	for i, r := range rules {
		if r != nil && r.name != "" && replaced[r.name] && !r.unlimited {
			rules[i] = nil
		}
	}

	// Decide the counted ones, in one pipeline.
	resp := RLSResponse{Statuses: make([]RLSStatus, len(req.Descriptors))}
	var reqs []floodgate.Request
	var at []int
	for i, r := range rules {
		switch {
		case r == nil:
			resp.Statuses[i] = RLSStatus{Code: CodeOK}
			continue
		case r.unlimited:
			resp.Statuses[i] = RLSStatus{Code: CodeOK, LimitRemaining: math.MaxUint32}
			continue
		}
		key := counterKey(req.Descriptors[i].Entries, values[i])
		if err := checkKey(key, st.cfg.Limits.MaxKeyBytes); err != nil {
			return RLSResponse{}, &RequestError{Code: "invalid_descriptor", Field: fmt.Sprintf("descriptors[%d]", i), Msg: "descriptor entries: " + err.Error()}
		}
		hits := uint64(max(1, req.HitsAddend))
		if h := req.Descriptors[i].HitsAddend; h != nil {
			hits = *h
		}
		fr := floodgate.Request{Policy: r.policy, Key: key, N: int64(min(hits, uint64(floodgate.MaxCost)))}
		if hits == 0 { // check only: has the count passed the limit?
			fr.N, fr.Peek = 1, true
			if r.check != nil {
				fr.Policy = r.check
			}
		}
		reqs = append(reqs, fr)
		at = append(at, i)
	}
	ds := s.decide(ctx, st, reqs)

	// Statuses and the overall code.
	anyOver, quotas, quotasOver := false, 0, 0
	var binding = -1
	minRemaining := uint32(math.MaxUint32)
	for j, i := range at {
		r := rules[i]
		if reqs[j].Peek && r.check != nil && ds[j].Allowed {
			// A check under the twin of max+1. A peek answers as the add
			// of 1 would (SPEC.md), so its remaining, (max+1)-count-1, is
			// already envoyproxy/ratelimit's max-count: only the limit is
			// the twin's (docs/envoy-ratelimit-semantics.md §4.2, X5).
			ds[j].Limit--
		}
		d := ds[j]
		limit := r.limit
		status := RLSStatus{
			Code: CodeOK, CurrentLimit: &limit, HasReset: true,
			LimitRemaining:     uint32(min(d.Remaining, math.MaxUint32)),
			DurationUntilReset: (d.ResetAfter + time.Second - 1).Truncate(time.Second),
		}
		if !r.fixed {
			status.CurrentLimit.RequestsPerUnit = uint32(min(d.Limit, math.MaxUint32))
		}
		if !d.Allowed {
			status.LimitRemaining = 0
			status.Code = CodeOverLimit
			if r.shadow && !r.quota {
				status.Code = CodeOK
			}
		}
		if !reqs[j].Peek {
			s.obs.Decision(r.policy.Name, d.Allowed, r.shadow, d.Degraded)
		}
		if r.quota {
			quotas++
			if !d.Allowed {
				quotasOver++
			}
		} else if status.Code == CodeOverLimit {
			anyOver = true
		}
		// The descriptor whose fields go into the headers: the least
		// remaining, and the last one over its limit above all.
		if status.Code == CodeOverLimit && !r.quota || status.LimitRemaining < minRemaining {
			binding, minRemaining = j, status.LimitRemaining
		}
		resp.Statuses[i] = status
	}
	resp.OverallCode = CodeOK
	if anyOver || quotas > 0 && quotasOver == quotas {
		resp.OverallCode = CodeOverLimit
	}
	if st.cfg.Envoy.ShadowMode && resp.OverallCode == CodeOverLimit {
		resp.OverallCode = CodeOK
	}
	if st.cfg.Envoy.ResponseHeaders && binding >= 0 {
		resp.Headers = rlsHeaders(rules[at[binding]].policy, ds[binding])
	}
	return resp, nil
}

func entryValues(es []Entry) []string {
	v := make([]string, len(es))
	for i, e := range es {
		v[i] = e.Value
	}
	return v
}
