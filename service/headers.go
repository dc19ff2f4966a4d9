package service

import (
	"net/http"
	"sort"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/httplimit"
)

// rlsHeaders returns the RateLimit and RateLimit-Policy fields of one
// decision, as the middleware would set them.
func rlsHeaders(p *floodgate.Policy, d floodgate.Decision) []Header {
	h := http.Header{}
	httplimit.SetHeaders(h, httplimit.IETF, time.Time{}, []httplimit.Result{{Policy: p, Decision: d}})
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []Header
	for _, k := range names {
		for _, v := range h[k] {
			out = append(out, Header{Name: HeaderName(k), Value: v})
		}
	}
	return out
}

// HeaderName returns the spelling of a header field's name that its
// specification uses: "RateLimit-Policy" rather than Go's canonical
// "Ratelimit-Policy" (field names are case-insensitive; people read them).
func HeaderName(k string) string {
	switch k {
	case "Ratelimit":
		return "RateLimit"
	case "Ratelimit-Policy":
		return "RateLimit-Policy"
	case "X-Ratelimit-Limit":
		return "X-RateLimit-Limit"
	case "X-Ratelimit-Remaining":
		return "X-RateLimit-Remaining"
	case "X-Ratelimit-Reset":
		return "X-RateLimit-Reset"
	}
	return k
}

// HeaderResults returns a Check result's items as the middleware's
// results, for httplimit.SetHeaders. A decision the failure policy made
// by letting the request through carries no numbers worth reporting.
func HeaderResults(items []ItemResult) []httplimit.Result {
	out := make([]httplimit.Result, len(items))
	for i, it := range items {
		out[i] = httplimit.Result{Policy: it.Policy, Decision: it.Decision}
		if it.Decision.Degraded && it.Decision.Allowed {
			out[i].Err = errDegraded
		}
	}
	return out
}

var errDegraded = floodgate.ErrUnavailable

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

// DomainInfo describes an Envoy domain.
type DomainInfo struct {
	Name  string
	Rules []RuleInfo
}

// Domains lists the Envoy domains and their rules, in name order.
func (s *Service) Domains() []DomainInfo {
	st := s.state.Load()
	var out []DomainInfo
	for _, d := range st.domains {
		di := DomainInfo{Name: d.name}
		var walk func(n *node, path string)
		walk = func(n *node, path string) {
			keys := make([]string, 0, len(n.children))
			for k := range n.children {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				c := n.children[k]
				p := path + "." + k
				if r := c.rule; r != nil {
					ri := RuleInfo{Path: p, Name: r.limit.Name, Unlimited: r.unlimited, Shadow: r.shadow, Quota: r.quota, Replaces: r.replaces}
					if r.policy != nil {
						ri.Policy, ri.Text = r.policy.Name, r.policy.String()
					}
					di.Rules = append(di.Rules, ri)
				}
				walk(c, p)
			}
		}
		walk(d.root, d.name)
		out = append(out, di)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
