package rls

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/rlheader"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/storekit"
)

// Plan is a request matched to its rules: the store requests to decide,
// and what Summarise needs to answer. Create it with Table.Match.
type Plan struct {
	// Requests are the store requests of the counted descriptors, in
	// descriptor order: decide them in one batch and pass the decisions
	// to Summarise. A check-only descriptor (hits 0) is a peek.
	Requests []floodgate.Request

	statuses []Status // one per descriptor; those of at are filled by Summarise
	rules    []*rule  // the rule of each request
	at       []int    // the descriptor of each request
	neg      []bool   // each request's descriptor has negative hits
	headers  bool     // envoy.response_headers
	shadowOK bool     // envoy.shadow_mode

	// group are the requests decided as one atomic group (an atomic
	// domain's, two or more), and binding the group's binding request,
	// set when it is decided: the other members are answered OK.
	group   []int
	binding int

	// one holds the parts of a plan of one descriptor, the common
	// request, so that the plan is one allocation.
	one struct {
		status [1]Status
		req    [1]floodgate.Request
		rule   [1]*rule
		at     [1]int
		neg    [1]bool
		limit  [1]Limit
	}
	limits []Limit // the CurrentLimit of each request's status (Summarise)
}

// Match finds every descriptor's rule in req's domain (an override's own
// fixed window for a descriptor with a limit), drops the rules another
// matched rule replaces, and plans a store request for each counted
// descriptor. The error is a *service.RequestError naming the field: an
// empty domain or descriptor list, too many descriptors, a bad override
// unit, entries longer than a key may be, negative hits on a store that
// takes no refunds. A descriptor with negative hits plans a refund
// (floodgate.Request.Refund) of its hits, under the check-only twin of an
// envoy-format limit so that its answer reads as envoyproxy/ratelimit's.
func (t *Table) Match(req Request) (*Plan, error) {
	if req.Domain == "" {
		return nil, &service.RequestError{Code: "invalid_request", Field: "domain", Msg: "rate limit domain must not be empty"}
	}
	if len(req.Descriptors) == 0 {
		return nil, &service.RequestError{Code: "invalid_request", Field: "descriptors", Msg: "rate limit descriptor list must not be empty"}
	}
	if len(req.Descriptors) > t.maxDescriptors {
		return nil, &service.RequestError{Code: "too_many_items", Field: "descriptors",
			Msg: fmt.Sprintf("%d descriptors; at most %d (limits.max_descriptors)", len(req.Descriptors), t.maxDescriptors)}
	}
	dom := t.domains[req.Domain]

	// Look every descriptor up, and gather the names other limits replace.
	rules := make([]*rule, len(req.Descriptors))
	values := make([][]string, len(req.Descriptors))
	replaced := map[string]bool{}
	for i, desc := range req.Descriptors {
		if dom == nil {
			continue
		}
		if l := desc.Limit; l != nil {
			if !l.Unit.Valid() {
				return nil, &service.RequestError{Code: "invalid_descriptor", Field: fmt.Sprintf("descriptors[%d].limit.unit", i),
					Msg: fmt.Sprintf("unit %s: want one of second, minute, hour, day, week, month, year", l.Unit)}
			}
			rules[i] = dom.override(l, desc.Entries)
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

	p := &Plan{headers: t.responseHeaders, shadowOK: t.shadowMode}
	if len(req.Descriptors) == 1 {
		p.statuses = p.one.status[:]
	} else {
		p.statuses = make([]Status, len(req.Descriptors))
	}
	for i, r := range rules {
		switch {
		case r == nil:
			p.statuses[i] = Status{Code: CodeOK}
			continue
		case r.unlimited:
			p.statuses[i] = Status{Code: CodeOK, LimitRemaining: math.MaxUint32}
			continue
		}
		key := counterKey(req.Descriptors[i].Entries, values[i])
		if err := service.CheckKey(key, t.maxKeyBytes); err != nil {
			return nil, &service.RequestError{Code: "invalid_descriptor", Field: fmt.Sprintf("descriptors[%d]", i), Msg: "descriptor entries: " + err.Error()}
		}
		hits := uint64(max(1, req.HitsAddend))
		if h := req.Descriptors[i].HitsAddend; h != nil {
			hits = *h
		}
		neg := req.Descriptors[i].NegativeHits
		if neg && !t.budgets {
			return nil, &service.RequestError{Code: "unsupported", Field: fmt.Sprintf("descriptors[%d].is_negative_hits", i),
				Msg: "negative hits: the store does not take refunds (a store with budgets, such as memory, does)"}
		}
		fr := floodgate.Request{Policy: r.policy, Key: key, N: int64(min(hits, uint64(floodgate.MaxCost))), Refund: neg}
		if hits == 0 { // check only: has the count passed the limit?
			fr.N, fr.Peek, fr.Refund = 1, true, false
		}
		if (fr.Peek || fr.Refund) && r.check != nil {
			// The twin of max+1: its peek of 1 (a refund's answer is one)
			// passes exactly when the count has not passed the limit.
			fr.Policy = r.check
		}
		if p.Requests == nil {
			p.allocRequests(len(req.Descriptors) - i)
		}
		p.Requests = append(p.Requests, fr)
		p.rules = append(p.rules, r)
		p.at = append(p.at, i)
		p.neg = append(p.neg, neg)
	}
	if dom != nil && dom.atomic {
		if err := p.atomicGroup(max(1, uint64(req.HitsAddend))); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// allocRequests makes room for n requests, in the plan itself for one.
func (p *Plan) allocRequests(n int) {
	if n == 1 {
		p.Requests, p.rules, p.at, p.neg = p.one.req[:0], p.one.rule[:0], p.one.at[:0], p.one.neg[:0]
		return
	}
	p.Requests, p.rules, p.at, p.neg = make([]floodgate.Request, 0, n), make([]*rule, 0, n), make([]int, 0, n), make([]bool, 0, n)
}

// atomicGroup picks the requests of an atomic domain's request that are
// decided as one group: those that spend (not a check of hits 0, not
// negative hits) and are enforced (neither shadowed nor in quota mode,
// which never make the answer OVER_LIMIT alone), with the request's hits
// (a descriptor's own different hits_addend is decided on its own, as is
// a descriptor repeating a member's counter). More than
// storekit.MaxMembers of them is a *service.RequestError.
func (p *Plan) atomicGroup(hits uint64) error {
	n := int64(min(hits, uint64(floodgate.MaxCost)))
	var group []int
	for j, r := range p.rules {
		q := &p.Requests[j]
		if q.Peek || q.Refund || r.shadow || r.quota || q.N != n || slices.ContainsFunc(group, func(k int) bool {
			return p.Requests[k].Policy.Name == q.Policy.Name && p.Requests[k].Key == q.Key
		}) {
			continue
		}
		group = append(group, j)
	}
	if len(group) > storekit.MaxMembers {
		return &service.RequestError{Code: "too_many_items", Field: "descriptors",
			Msg: fmt.Sprintf("%d descriptors to decide as one atomic group (envoy.atomic_domains); at most %d", len(group), storekit.MaxMembers)}
	}
	if len(group) > 1 {
		p.group = group
	}
	return nil
}

// Summarise answers the request from the decisions of p.Requests (in
// order): each counted descriptor's status, the overall code
// (OVER_LIMIT when a descriptor neither shadowed nor in quota mode is over
// its limit, or every quota-mode one is; OK under envoy.shadow_mode), and
// with envoy.response_headers the RateLimit fields of the binding
// descriptor.
func (p *Plan) Summarise(ds []floodgate.Decision) Response {
	resp := Response{Statuses: p.statuses}
	if len(p.at) == 1 {
		p.limits = p.one.limit[:]
	} else if len(p.limits) < len(p.at) {
		p.limits = make([]Limit, len(p.at))
	}
	anyOver, quotas, quotasOver := false, 0, 0
	binding := -1
	minRemaining := uint32(math.MaxUint32)
	for j, i := range p.at {
		r := p.rules[j]
		d := ds[j]
		if (p.Requests[j].Peek || p.Requests[j].Refund) && r.check != nil && d.Allowed {
			// A check under the twin of max+1. A peek answers as the add
			// of 1 would (SPEC.md), so its remaining, (max+1)-count-1, is
			// already envoyproxy/ratelimit's max-count: only the limit is
			// the twin's (docs/envoy-ratelimit-semantics.md §4.2, X5).
			d.Limit--
		}
		p.limits[j] = r.limit
		status := Status{
			Code: CodeOK, CurrentLimit: &p.limits[j], HasReset: true,
			LimitRemaining:     uint32(min(d.Remaining, math.MaxUint32)),
			DurationUntilReset: (d.ResetAfter + time.Second - 1).Truncate(time.Second),
		}
		if !r.fixed {
			status.CurrentLimit.RequestsPerUnit = uint32(min(d.Limit, math.MaxUint32))
		}
		if d.Degraded && d.Limit == 0 {
			// The failure mode decided without a store (package failure):
			// no limit was applied and nothing is known to remain.
			status = Status{Code: CodeOK}
		}
		if p.neg[j] {
			// Negative hits: a refund, or a check of hits 0, answered OK
			// whatever the count, as envoyproxy/ratelimit does; no part
			// in the overall code or the headers.
			if !d.Allowed {
				status.LimitRemaining = 0
			}
			resp.Statuses[i] = status
			ds[j] = d
			continue
		}
		if len(p.group) > 1 && j != p.binding && slices.Contains(p.group, j) {
			// A member of an atomic group other than the binding one:
			// not over its own limit as far as the answer goes; its
			// remaining and reset are the group's.
			d.Allowed = true
		}
		if !d.Allowed {
			status.LimitRemaining = 0
			status.Code = CodeOverLimit
			if r.shadow && !r.quota {
				status.Code = CodeOK
			}
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
		ds[j] = d
	}
	resp.OverallCode = CodeOK
	if anyOver || quotas > 0 && quotasOver == quotas {
		resp.OverallCode = CodeOverLimit
	}
	if p.shadowOK && resp.OverallCode == CodeOverLimit {
		resp.OverallCode = CodeOK
	}
	if p.headers && binding >= 0 {
		resp.Headers = headers(p.rules[binding], ds[binding])
	}
	return resp
}

// headers returns the RateLimit and RateLimit-Policy fields of one
// decision of r, as the middleware would set them, spelled as their
// specification spells them, in the order of their canonical names.
func headers(r *rule, d floodgate.Decision) []Header {
	h := make(http.Header, 2)
	items := [1]rlheader.Item{{Policy: r.policy, Decision: d}}
	rlheader.Set(h, rlheader.IETF, time.Time{}, r.policyField, items[:])
	var buf [8]string
	names := buf[:0]
	n := 0
	for k, vs := range h {
		names = append(names, k)
		n += len(vs)
	}
	if n == 0 {
		return nil
	}
	slices.Sort(names)
	out := make([]Header, 0, n)
	for _, k := range names {
		for _, v := range h[k] {
			out = append(out, Header{Name: rlheader.Spelling(k), Value: v})
		}
	}
	return out
}

// policyField is the RateLimit-Policy field of p, as headers sets it.
func policyField(p *floodgate.Policy) string {
	return rlheader.PolicyField([]rlheader.Item{{Policy: p}})
}

// RuleInfo describes one rule of an Envoy domain, for listings.
type RuleInfo struct {
	Path      string // domain.key_value.key…
	Policy    string // the policy deciding it; empty when unlimited
	Text      string // that policy's text form
	Name      string // the rate limit's name, for replaces
	Unlimited bool
	Shadow    bool
	Quota     bool
	Replaces  []string
}

func (r *rule) info() RuleInfo {
	ri := RuleInfo{Path: r.path, Name: r.limit.Name, Unlimited: r.unlimited, Shadow: r.shadow, Quota: r.quota, Replaces: r.replaces}
	if r.policy != nil {
		ri.Policy, ri.Text = r.policy.Name, r.policy.String()
	}
	return ri
}

// DomainInfo describes an Envoy domain.
type DomainInfo struct {
	Name  string
	Rules []RuleInfo
}

// Domains lists the domains and their rules, in name order.
func (t *Table) Domains() []DomainInfo {
	var out []DomainInfo
	for _, d := range t.domains {
		di := DomainInfo{Name: d.name}
		var walk func(n *node)
		walk = func(n *node) {
			keys := make([]string, 0, len(n.children))
			for k := range n.children {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				c := n.children[k]
				if c.rule != nil {
					di.Rules = append(di.Rules, c.rule.info())
				}
				walk(c)
			}
		}
		walk(d.root)
		out = append(out, di)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Rule returns the rule a descriptor of entries meets in domain, as Match
// finds it (exact value, first wildcard, key alone), or false when none
// applies. A client that predicts what the service will decide (floodgate
// bench) asks the service this instead of walking the rules itself.
func (t *Table) Rule(domain string, entries []Entry) (RuleInfo, bool) {
	d := t.domains[domain]
	if d == nil || len(entries) == 0 {
		return RuleInfo{}, false
	}
	r, _ := d.match(entries)
	if r == nil {
		return RuleInfo{}, false
	}
	return r.info(), true
}
