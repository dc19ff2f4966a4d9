// Package shipcheck holds the tests of what floodgate ships beside its
// code: the release artifacts (make release, make image), the Kubernetes
// manifests, the Helm chart, the Envoy example, the Grafana dashboard and
// the Prometheus alerts. scripts/ship-check.sh (make ship-check) runs them
// after building the artifacts, with SHIP_DIST naming their directory and
// SHIP_REQUIRE=1 so that a missing artifact fails rather than skips.
package shipcheck
