package metrics

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// ObjectGauge is a gauge with a series per object, kept as a map from label
// values to value and made into series when scraped.
//
// A GaugeVec keeps each series' label pairs, hash and gauge, several times
// what a map entry here costs (BenchmarkPerObjectSeriesMemory measures
// both). At tens of thousands of objects the reflector's per-object series
// (each object's Ready, each repository's stored tags) were a large part
// of its heap, for values read once a scrape. A scrape
// builds each series anew, as a GaugeVec's scrape builds each series'
// protobuf anyway.
type ObjectGauge struct {
	desc   *prometheus.Desc
	labels int
	mu     sync.RWMutex
	values map[labelValues]float64
}

// labelValues are a series' label values, in the order of the gauge's
// labels; unused ones are empty.
type labelValues [4]string

// NewObjectGauge returns an unregistered gauge with the given labels, at
// most four.
func NewObjectGauge(opts prometheus.GaugeOpts, labels ...string) *ObjectGauge {
	if len(labels) > len(labelValues{}) {
		panic(fmt.Sprintf("metrics: %s has %d labels, an ObjectGauge takes at most %d", opts.Name, len(labels), len(labelValues{})))
	}
	return &ObjectGauge{
		desc:   prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name), opts.Help, labels, opts.ConstLabels),
		labels: len(labels),
		values: map[labelValues]float64{},
	}
}

// key checks values against the labels, as a GaugeVec's WithLabelValues
// does: a wrong count is a programming error.
func (g *ObjectGauge) key(values []string) labelValues {
	if len(values) != g.labels {
		panic(fmt.Sprintf("metrics: %s: %d label values for %d labels", g.desc, len(values), g.labels))
	}
	var k labelValues
	copy(k[:], values)
	return k
}

// Set sets the series of the label values to v.
func (g *ObjectGauge) Set(v float64, values ...string) {
	k := g.key(values)
	g.mu.Lock()
	g.values[k] = v
	g.mu.Unlock()
}

// Delete drops the series of the label values, if there is one.
func (g *ObjectGauge) Delete(values ...string) {
	k := g.key(values)
	g.mu.Lock()
	delete(g.values, k)
	g.mu.Unlock()
}

// Value is the series' value, and whether it exists.
func (g *ObjectGauge) Value(values ...string) (float64, bool) {
	k := g.key(values)
	g.mu.RLock()
	defer g.mu.RUnlock()
	v, ok := g.values[k]
	return v, ok
}

// Describe implements prometheus.Collector.
func (g *ObjectGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector. Writers wait for the scrape,
// which takes milliseconds at 30,000 series, rather than the scrape copying
// the map.
func (g *ObjectGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for k, v := range g.values {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, k[:g.labels]...)
	}
}
