package config

import (
	"strings"
	"testing"
)

// TestEnvoyAtomicDomains: envoy.atomic_domains names loaded domains, from
// domain files given before or after floodgate's own file; an unknown
// name is an error naming the field and the value; a non-list is one.
func TestEnvoyAtomicDomains(t *testing.T) {
	own := Source{Name: "floodgate.yaml", Data: []byte("envoy: {atomic_domains: [edge]}\n")}
	edge := Source{Name: "edge.yaml", Data: []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	for _, srcs := range [][]Source{{own, edge}, {edge, own}} {
		cfg, err := Parse(srcs...)
		if err != nil || !cfg.Envoy.Atomic("edge") || cfg.Envoy.Atomic("api") {
			t.Fatalf("%s first: %v, %v", srcs[0].Name, cfg, err)
		}
	}
	cfg, err := Parse(edge)
	if err != nil || len(cfg.Envoy.AtomicDomains) != 0 || cfg.Envoy.Atomic("edge") {
		t.Fatalf("default: %v, %v; want none", cfg, err)
	}
	_, err = Parse(Source{Name: "floodgate.yaml", Data: []byte("envoy: {atomic_domains: [edge, api]}\n")}, edge)
	if err == nil || !strings.Contains(err.Error(), "envoy.atomic_domains[1]") || !strings.Contains(err.Error(), `"api"`) ||
		strings.Contains(err.Error(), `"edge"`) || !strings.Contains(err.Error(), "floodgate.yaml:1") {
		t.Fatalf("unknown domain: %v; want an error naming envoy.atomic_domains[1] and \"api\" at floodgate.yaml:1", err)
	}
	_, err = Parse(Source{Name: "floodgate.yaml", Data: []byte("envoy: {atomic_domains: edge}\n")}, edge)
	if err == nil || !strings.Contains(err.Error(), "envoy.atomic_domains") {
		t.Fatalf("not a list: %v; want an error naming envoy.atomic_domains", err)
	}
	_, err = Parse(Source{Name: "floodgate.yaml", Data: []byte("store: {type: redis-cluster, addrs: [\"127.0.0.1:7000\"]}\nenvoy: {atomic_domains: [edge]}\n")}, edge)
	if err == nil || !strings.Contains(err.Error(), "envoy.atomic_domains") || !strings.Contains(err.Error(), "slot") {
		t.Fatalf("on a cluster: %v; want an error naming envoy.atomic_domains and slots", err)
	}
}
