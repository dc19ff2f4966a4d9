package config

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgatehq/floodgate"
)

// Domain is an Envoy rate limit domain in the format of
// envoyproxy/ratelimit: a tree of descriptors, some with a rate limit.
type Domain struct {
	Name        string
	Descriptors []*Descriptor
	File        string
	Line        int
}

// Descriptor is one node of a domain's tree: it matches a descriptor entry
// whose key is Key and whose value is Value (any value when Value is
// empty; any value starting with the prefix when Value ends with "*").
type Descriptor struct {
	Key, Value string
	RateLimit  *RateLimit // nil: no limit at this depth
	// ShadowMode reports over-limit requests as OK (still counted).
	ShadowMode bool
	// QuotaMode makes the descriptor count toward the request's verdict
	// only when every quota-mode descriptor of the request is over.
	QuotaMode bool
	// ShareThreshold makes every value matching a wildcard share one
	// counter (the pattern's), instead of one per value.
	ShareThreshold bool
	// DetailedMetric and ValueToMetric shape metric names in
	// envoyproxy/ratelimit; floodgate accepts and ignores them (its
	// metrics have no per-value labels).
	DetailedMetric bool
	ValueToMetric  bool
	Descriptors    []*Descriptor
	File           string
	Line           int
}

// RateLimit is a descriptor's limit: requests per unit (a fixed window
// aligned to the unit, as envoyproxy/ratelimit counts), unlimited, or —
// floodgate's extension — a floodgate policy, named or written inline.
type RateLimit struct {
	Unit            Unit // NoUnit for an unlimited one or a floodgate policy
	RequestsPerUnit uint32
	Unlimited       bool
	Name            string
	Replaces        []string

	// Policy names a policy of the configuration's policies section.
	Policy string
	// Spec is a policy in its text form, such as "gcra 100/1s burst 10".
	Spec string

	Line int

	policyPath string // the policy field's path and line, for errors
	policyLine int
}

// Unit is a rate limit unit of Envoy's rate limit service, numbered as
// RateLimitResponse.RateLimit.Unit is in the RLS v3 proto (SECOND = 1 …
// YEAR = 6, then WEEK = 7, which came later), so that a transport converts
// it with a plain conversion. The zero value, NoUnit, is the proto's
// UNKNOWN. Units lists them from the shortest.
type Unit uint8

// The units, with envoyproxy/ratelimit's lengths (see Duration).
const (
	NoUnit Unit = iota
	Second
	Minute
	Hour
	Day
	Month
	Year
	Week
)

// Units are the units from the shortest to the longest.
var Units = []Unit{Second, Minute, Hour, Day, Week, Month, Year}

var unitNames = [...]string{"", "second", "minute", "hour", "day", "month", "year", "week"}

// unitSeconds are envoyproxy/ratelimit's window lengths: a month is 30
// days and a year 365, windows aligned to the Unix epoch (weeks start on
// Thursdays).
var unitSeconds = [...]int64{0, 1, 60, 3600, 86400, 2592000, 31536000, 604800}

// Valid reports whether u is one of the units (not NoUnit).
func (u Unit) Valid() bool { return u >= Second && u <= Week }

// String returns the unit's name in lower case ("second"), "" for NoUnit.
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// Duration returns the unit's window as envoyproxy/ratelimit counts it: a
// month is 30 days and a year 365 days; 0 for NoUnit.
func (u Unit) Duration() time.Duration {
	if int(u) < len(unitSeconds) {
		return time.Duration(unitSeconds[u]) * time.Second
	}
	return 0
}

// ParseUnit parses a unit's name in any case ("second", "MINUTE"), as
// envoyproxy/ratelimit accepts it; the error lists the units.
func ParseUnit(s string) (Unit, error) {
	l := strings.ToLower(s)
	names := make([]string, len(Units))
	for i, u := range Units {
		if unitNames[u] == l {
			return u, nil
		}
		names[i] = unitNames[u]
	}
	return NoUnit, fmt.Errorf("invalid rate limit unit %q: want one of %s (any case)", s, strings.Join(names, ", "))
}

// isEnvoyDomain reports whether a file's top level has a domain key.
func isEnvoyDomain(root *yaml.Node) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "domain" {
			return true
		}
	}
	return false
}

func (r *reader) envoyDomain(root *yaml.Node) *Domain {
	fs := r.fields(root, "", "domain", "descriptors")
	d := &Domain{File: r.file, Line: root.Line}
	if f, ok := fs["domain"]; ok {
		d.Name, _ = r.str(f.value, "domain")
	}
	if d.Name == "" {
		r.errorf(root, "domain", "a domain file needs a non-empty domain")
		return nil
	}
	if f, ok := fs["descriptors"]; ok {
		d.Descriptors = r.descriptors(f.value, "descriptors")
	}
	return d
}

var descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
	"detailed_metric", "value_to_metric", "share_threshold", "metadata"}

func (r *reader) descriptors(n *yaml.Node, path string) []*Descriptor {
	if resolve(n).Tag == "!!null" {
		return nil
	}
	items, ok := r.sequence(n, path)
	if !ok {
		return nil
	}
	var out []*Descriptor
	seen := map[string]int{}
	for i, item := range items {
		p := path + "[" + strconv.Itoa(i) + "]"
		fs := r.fields(item, p, descriptorFields...)
		if fs == nil {
			continue
		}
		d := &Descriptor{File: r.file, Line: resolve(item).Line}
		if f, ok := fs["key"]; ok {
			d.Key, _ = r.str(f.value, p+".key")
		}
		if d.Key == "" {
			r.errorf(item, p+".key", "a descriptor needs a non-empty key")
		}
		if f, ok := fs["value"]; ok {
			d.Value, _ = r.str(f.value, p+".value")
		}
		composite := d.Key
		if d.Value != "" {
			composite += "_" + d.Value
		}
		if first, dup := seen[composite]; dup {
			r.errorf(item, p, "duplicate descriptor composite key %q (first at line %d)", composite, first)
		} else {
			seen[composite] = d.Line
		}
		for _, b := range []struct {
			key string
			dst *bool
		}{{"shadow_mode", &d.ShadowMode}, {"quota_mode", &d.QuotaMode}, {"share_threshold", &d.ShareThreshold},
			{"detailed_metric", &d.DetailedMetric}, {"value_to_metric", &d.ValueToMetric}} {
			if f, ok := fs[b.key]; ok {
				*b.dst, _ = r.envoyBool(f.value, p+"."+b.key)
			}
		}
		if d.ShareThreshold && !strings.Contains(composite, "*") {
			r.errorf(fs["share_threshold"].value, p+".share_threshold", "share_threshold can only be used with wildcard values (containing '*'), but found key %q", composite)
		}
		if f, ok := fs["metadata"]; ok {
			if m := resolve(f.value); m.Kind != yaml.MappingNode && m.Tag != "!!null" {
				r.errorf(m, p+".metadata", "want a mapping, found %s", describe(m))
			}
		}
		if f, ok := fs["rate_limit"]; ok && resolve(f.value).Tag != "!!null" {
			d.RateLimit = r.rateLimit(f.value, p+".rate_limit")
		}
		if f, ok := fs["descriptors"]; ok {
			d.Descriptors = r.descriptors(f.value, p+".descriptors")
		}
		out = append(out, d)
	}
	return out
}

func (r *reader) rateLimit(n *yaml.Node, path string) *RateLimit {
	fs := r.fields(n, path, "unit", "requests_per_unit", "unlimited", "name", "replaces", "policy", "floodgate")
	if fs == nil {
		return nil
	}
	rl := &RateLimit{Line: resolve(n).Line}
	unit := ""
	if f, ok := fs["unit"]; ok {
		unit, _ = r.str(f.value, path+".unit")
	}
	if f, ok := fs["requests_per_unit"]; ok {
		v, _ := r.integer(f.value, path+".requests_per_unit", 0, math.MaxUint32)
		rl.RequestsPerUnit = uint32(v)
	}
	if f, ok := fs["unlimited"]; ok {
		rl.Unlimited, _ = r.envoyBool(f.value, path+".unlimited")
	}
	if f, ok := fs["name"]; ok {
		rl.Name, _ = r.str(f.value, path+".name")
	}
	if f, ok := fs["replaces"]; ok {
		items, _ := r.sequence(f.value, path+".replaces")
		for i, item := range items {
			ip := path + ".replaces[" + strconv.Itoa(i) + "]"
			rf := r.fields(item, ip, "name")
			name := ""
			if v, ok := rf["name"]; ok {
				name, _ = r.str(v.value, ip+".name")
			}
			switch {
			case name == "":
				r.errorf(item, ip+".name", "a replaces entry needs the name of the rate limit it replaces")
			case name == rl.Name:
				r.errorf(item, ip+".name", "a rate limit cannot replace itself (%q)", name)
			}
			rl.Replaces = append(rl.Replaces, name)
		}
	}
	if f, ok := fs["policy"]; ok {
		rl.Policy, _ = r.str(f.value, path+".policy")
		rl.policyPath, rl.policyLine = path+".policy", resolve(f.value).Line
	}
	if f, ok := fs["floodgate"]; ok {
		rl.Spec, _ = r.str(f.value, path+".floodgate")
		if rl.Spec != "" {
			if _, err := floodgate.ParsePolicy("p", rl.Spec); err != nil {
				r.policyErrors(f.value, path+".floodgate", err)
			}
		}
	}
	extension := rl.Policy != "" || rl.Spec != ""
	switch {
	case rl.Policy != "" && rl.Spec != "":
		r.errorf(n, path, "give policy (a named policy) or floodgate (a policy's text form), not both")
	case extension && (unit != "" || rl.RequestsPerUnit != 0 || rl.Unlimited):
		r.errorf(n, path, "a floodgate policy replaces unit, requests_per_unit and unlimited: give one or the other")
	case rl.Unlimited && unit != "":
		r.errorf(fs["unit"].value, path+".unit", "should not specify rate limit unit when unlimited")
	case !extension && !rl.Unlimited:
		u, err := ParseUnit(unit)
		if err != nil {
			at := n
			if f, ok := fs["unit"]; ok {
				at = f.value
			}
			r.errorf(at, path+".unit", "%v", err)
		}
		rl.Unit = u
	}
	return rl
}

// envoyBool reads a boolean of a domain file as envoyproxy/ratelimit's
// yaml.v2 does, YAML 1.1's spellings included (yes, on, True, …), so that
// every file it loads loads here (docs/envoy-ratelimit-semantics.md §1.2).
// floodgate's own format takes only true and false.
func (r *reader) envoyBool(n *yaml.Node, path string) (bool, bool) {
	if m := resolve(n); m != nil && m.Kind == yaml.ScalarNode {
		switch m.Value {
		case "y", "Y", "yes", "Yes", "YES", "True", "TRUE", "on", "On", "ON":
			return true, true
		case "n", "N", "no", "No", "NO", "False", "FALSE", "off", "Off", "OFF":
			return false, true
		}
	}
	return r.boolean(n, path)
}

// checkDomains reports duplicate domains (or merges them when
// envoy.merge_domains is set, as MERGE_DOMAIN_CONFIG does) and policy
// references that name no policy.
func checkDomains(c *collector, cfg *Config) {
	seen := map[string]*Domain{}
	var kept []*Domain
	for _, d := range cfg.Domains {
		var walk func(ds []*Descriptor)
		walk = func(ds []*Descriptor) {
			for _, x := range ds {
				if x.RateLimit != nil && x.RateLimit.Policy != "" {
					if _, ok := cfg.Policy(x.RateLimit.Policy); !ok {
						c.add(x.File, x.RateLimit.policyLine, x.RateLimit.policyPath, "no policy named %q in the policies section", x.RateLimit.Policy)
					}
				}
				walk(x.Descriptors)
			}
		}
		walk(d.Descriptors) // every file's, merged or not
		if first, dup := seen[d.Name]; dup {
			if !cfg.Envoy.MergeDomains {
				c.add(d.File, d.Line, "domain", "duplicate domain %q (also in %s:%d; envoy.merge_domains: true merges them)", d.Name, first.File, first.Line)
				continue
			}
			keys := map[string]int{}
			for _, x := range first.Descriptors {
				keys[composite(x)] = x.Line
			}
			for _, x := range d.Descriptors {
				if line, dup := keys[composite(x)]; dup {
					c.add(x.File, x.Line, "descriptors", "duplicate descriptor composite key %q (also in %s:%d)", composite(x), first.File, line)
					continue
				}
				first.Descriptors = append(first.Descriptors, x)
			}
			continue
		}
		seen[d.Name] = d
		kept = append(kept, d)
	}
	cfg.Domains = kept
	if len(cfg.Envoy.AtomicDomains) > 0 && cfg.Store.Type == "redis-cluster" {
		// package rls refuses it too, on the store itself (flags may
		// choose the store after the files).
		c.add(c.atomicFile, c.atomicLine, "envoy.atomic_domains",
			"not with store.type redis-cluster: each descriptor's counter is its own key, on its own slot, and an atomic group is decided in one slot; use redis, redis-sentinel or memory, or remove envoy.atomic_domains")
	}
	// Every domain file is read before this check, whatever their order.
	for i, name := range cfg.Envoy.AtomicDomains {
		if seen[name] == nil {
			names := make([]string, 0, len(kept))
			for _, d := range kept {
				names = append(names, d.Name)
			}
			sort.Strings(names)
			c.add(c.atomicFile, c.atomicLine, fmt.Sprintf("envoy.atomic_domains[%d]", i),
				"no Envoy domain named %q: want one of the loaded domains (%s)", name, strings.Join(names, ", "))
		}
	}
}

func composite(d *Descriptor) string {
	if d.Value == "" {
		return d.Key
	}
	return d.Key + "_" + d.Value
}

// WildcardMatch reports whether s, a descriptor's "key_value", matches
// pattern, a rule's composite with wildcards: each * stands for any run of
// characters, the empty one included. It is the service's matching, for
// the tools that must predict it.
func WildcardMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return strings.HasSuffix(s, last)
}
