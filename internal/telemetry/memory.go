package telemetry

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// MemoryStats is what the memory store reports of its bound (memstore's
// Stats, copied so that this package needs no store).
type MemoryStats struct {
	Entries   int    // entries held now
	Bound     int    // the most it holds; 0: unbounded
	Evictions uint64 // entries dropped to make room that held only usage
	Refused   uint64 // requests for a new key refused, the store being full
	Swept     uint64 // entries dropped that held nothing
}

// WatchMemoryStore exports stats, read at each scrape, as the
// floodgate_memstore_* metrics. Without it (a Redis store) they are
// absent.
func (m *Metrics) WatchMemoryStore(stats func() MemoryStats) { m.memory.source.Store(&stats) }

// memoryCollector reads the memory store's stats when scraped.
type memoryCollector struct {
	source                                    atomic.Pointer[func() MemoryStats]
	entries, bound, evictions, refused, swept *prometheus.Desc
}

func newMemoryCollector() *memoryCollector {
	return &memoryCollector{
		entries: prometheus.NewDesc("floodgate_memstore_entries",
			"Keys the memory store holds now (its empty entries not swept yet included).", nil, nil),
		bound: prometheus.NewDesc("floodgate_memstore_bound",
			"The most keys the memory store holds (store.max_keys, or the default from the memory the process may use); 0: unbounded.", nil, nil),
		evictions: prometheus.NewDesc("floodgate_memstore_evictions_total",
			"Entries the memory store dropped to make room that held only usage records (no limit).", nil, nil),
		refused: prometheus.NewDesc("floodgate_memstore_refused_total",
			"Requests for a new key the memory store refused, every entry of its shard still limiting; the failure mode decided them.", nil, nil),
		swept: prometheus.NewDesc("floodgate_memstore_swept_total",
			"Entries the memory store dropped that held nothing any more.", nil, nil),
	}
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.bound
	ch <- c.evictions
	ch <- c.refused
	ch <- c.swept
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.source.Load()
	if f == nil {
		return
	}
	s := (*f)()
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(c.bound, prometheus.GaugeValue, float64(s.Bound))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(s.Evictions))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused))
	ch <- prometheus.MustNewConstMetric(c.swept, prometheus.CounterValue, float64(s.Swept))
}
