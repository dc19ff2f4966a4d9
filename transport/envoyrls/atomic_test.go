package envoyrls_test

// envoy.atomic_domains over gRPC and /json: a request's enforced
// descriptors are one atomic group, spent on all or none.

import (
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/config"
)

// atomicRules is in envoyproxy/ratelimit's configuration format, loaded
// unchanged for both domains.
const atomicRules = `descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func TestAtomicDomains(t *testing.T) {
	l2m, l1m := L(2, minute), L(1, minute)
	sources := []string{"domain: edge\n" + atomicRules, "domain: plain\n" + atomicRules, "envoy:\n  atomic_domains: [edge]\n"}
	runScenarios(t, []scenario{{name: "atomic", sources: sources, domain: "edge", steps: []step{
		{note: "both spent; the other member reports the group's remaining", descs: ds(desc("user", "u"), desc("path", "p")), want: sts(ok(0, l2m), ok(0, l1m))},
		{note: "path over: user not spent, answered OK", descs: ds(desc("user", "u"), desc("path", "p")), times: 3, want: sts(ok(0, l2m), over(l1m))},
		{note: "user alone: 1 of 2 spent before", descs: ds(desc("user", "u")), want: sts(ok(0, l2m))},
		{note: "shadow s at its limit", descs: ds(desc("shadow", "s")), want: sts(ok(0, l1m))},
		{note: "an over shadow denies no member", descs: ds(desc("user", "v"), desc("path", "v"), desc("shadow", "s")),
			want: sts(ok(0, l2m), ok(0, l1m), shadowed(l1m)), overall: codeOK},
		{note: "the group was spent", descs: ds(desc("user", "v"), desc("path", "v")), want: sts(ok(0, l2m), over(l1m))},
		{note: "path w spent", descs: ds(desc("path", "w")), want: sts(ok(0, l1m))},
		{note: "the request's hits_addend for the group", hits: 2, descs: ds(desc("user", "w"), desc("path", "w")), want: sts(ok(0, l2m), over(l1m))},
		{note: "nothing spent on user w", descs: ds(desc("user", "w")), want: sts(ok(1, l2m))},
		{note: "plain: both spent", domain: "plain", descs: ds(desc("user", "u"), desc("path", "p")), want: sts(ok(1, l2m), ok(0, l1m))},
		{note: "plain: path over, user spent all the same", domain: "plain", descs: ds(desc("user", "u"), desc("path", "p")), want: sts(ok(0, l2m), over(l1m))},
		{note: "plain: user over", domain: "plain", descs: ds(desc("user", "u")), want: sts(over(l2m))},
		{note: "the next minute: edge's user fresh", advance: 60e9, descs: ds(desc("user", "u"), desc("path", "p")), want: sts(ok(0, l2m), ok(0, l1m))},
	}}})
}

// TestAtomicDomainsUnknown: a name that is no loaded domain refuses the
// configuration, naming the field and the name.
func TestAtomicDomainsUnknown(t *testing.T) {
	_, err := config.Parse(sourcesOf(t, "domain: edge\n"+atomicRules, "envoy:\n  atomic_domains: [edge, egde]\n")...)
	if err == nil || !strings.Contains(err.Error(), "envoy.atomic_domains[1]") || !strings.Contains(err.Error(), `"egde"`) {
		t.Fatalf("%v; want an error naming envoy.atomic_domains[1] and \"egde\"", err)
	}
}
