package telemetry

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StoreLink is what the service knows of the way to one store node when
// it batches (service.Link, copied so that this package needs no
// service).
type StoreLink struct {
	Node      string        // the node's address; "" for a store on one node
	Far       bool          // batches leave without waiting for the one in flight
	RoundTrip time.Duration // the round trip Far was judged on; 0: none yet
	Batches   int           // batches in flight now
}

// WatchLinks exports links, read at each scrape, as the
// floodgate_store_far, floodgate_store_round_trip_seconds and
// floodgate_store_batches_in_flight gauges, one series per node. Without
// it, or while the service does not batch, they are absent.
func (m *Metrics) WatchLinks(links func() []StoreLink) { m.links.source.Store(&links) }

// linkCollector reads the service's links when scraped.
type linkCollector struct {
	source            atomic.Pointer[func() []StoreLink]
	far, rtt, batches *prometheus.Desc
}

func newLinkCollector() *linkCollector {
	node := []string{"node"}
	return &linkCollector{
		far: prometheus.NewDesc("floodgate_store_far",
			"Whether a store node is far (1): its quickest small batch lately took 0.25 ms or more (and not below 0.15 ms since), so that batches leave without waiting for the one in flight; 0: near, one batch in flight. Only with store.batching.", node, nil),
		rtt: prometheus.NewDesc("floodgate_store_round_trip_seconds",
			"The round trip to a store node that floodgate_store_far was judged on: the quickest batch of at most 2 decisions over 10 to 20 seconds of traffic, timed in floodgate's process; an idle node keeps the last. Absent until one told.", node, nil),
		batches: prometheus.NewDesc("floodgate_store_batches_in_flight",
			"Batches of decisions in flight to a store node now.", node, nil),
	}
}

func (c *linkCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.far
	ch <- c.rtt
	ch <- c.batches
}

func (c *linkCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.source.Load()
	if f == nil {
		return
	}
	for _, l := range (*f)() {
		node := nodeLabel(l.Node)
		far := 0.0
		if l.Far {
			far = 1
		}
		ch <- prometheus.MustNewConstMetric(c.far, prometheus.GaugeValue, far, node)
		if l.RoundTrip > 0 {
			ch <- prometheus.MustNewConstMetric(c.rtt, prometheus.GaugeValue, l.RoundTrip.Seconds(), node)
		}
		ch <- prometheus.MustNewConstMetric(c.batches, prometheus.GaugeValue, float64(l.Batches), node)
	}
}
