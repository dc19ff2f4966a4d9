package cli

import (
	"testing"

	"github.com/floodgatehq/floodgate/config"
)

// TestStoreSummary: the start-up line names the store, and for Redis the
// settings that change how it decides.
func TestStoreSummary(t *testing.T) {
	for _, c := range []struct {
		store config.Store
		want  string
	}{
		{config.Store{}, "memory"},
		{config.Store{Type: "memory", Clock: "service", Counters: true}, "memory"},
		{config.Store{Type: "redis", Clock: "redis"}, "redis"},
		{config.Store{Type: "redis-cluster", Clock: "service"}, "redis-cluster, clock service"},
		{config.Store{Type: "redis-sentinel", Clock: "service", Counters: true}, "redis-sentinel, clock service, counters"},
	} {
		if got := storeSummary(c.store); got != c.want {
			t.Errorf("storeSummary(%+v) = %q, want %q", c.store, got, c.want)
		}
	}
}
