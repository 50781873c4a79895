package metrics

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var objectOpts = prometheus.GaugeOpts{Namespace: "imagetoolkit", Subsystem: "test", Name: "ready", Help: "Ready per object."}

// An ObjectGauge scrapes as a GaugeVec with the same sets and deletes
// does, series for series, and refuses a wrong number of label values as
// a GaugeVec does.
func TestObjectGaugeScrapesAsAGaugeVec(t *testing.T) {
	g := NewObjectGauge(objectOpts, "kind", "namespace", "name")
	vec := prometheus.NewGaugeVec(objectOpts, []string{"kind", "namespace", "name"})
	for i := range 5 {
		name := fmt.Sprintf("app-%d", i)
		g.Set(float64(i), "ImagePolicy", "apps", name)
		vec.WithLabelValues("ImagePolicy", "apps", name).Set(float64(i))
	}
	g.Set(7, "ImagePolicy", "apps", "app-1")
	vec.WithLabelValues("ImagePolicy", "apps", "app-1").Set(7)
	g.Delete("ImagePolicy", "apps", "app-2")
	vec.DeleteLabelValues("ImagePolicy", "apps", "app-2")
	g.Delete("ImagePolicy", "apps", "never-set")

	var want strings.Builder
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(vec)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		fmt.Fprintf(&want, "# HELP %s %s\n# TYPE %s gauge\n", f.GetName(), f.GetHelp(), f.GetName())
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Fprintf(&want, "%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue())
		}
	}
	if err := testutil.CollectAndCompare(g, strings.NewReader(want.String())); err != nil {
		t.Error(err)
	}
	if v, ok := g.Value("ImagePolicy", "apps", "app-1"); v != 7 || !ok {
		t.Errorf("app-1 = %v (%v), want 7", v, ok)
	}
	if _, ok := g.Value("ImagePolicy", "apps", "app-2"); ok {
		t.Error("app-2's series outlived its Delete")
	}
	defer func() {
		if recover() == nil {
			t.Error("two label values for three labels were taken")
		}
	}()
	g.Set(1, "ImagePolicy", "apps")
}

// BenchmarkPerObjectSeriesMemory reports the heap a per-object series
// keeps, in an ObjectGauge and in a GaugeVec, at 20,000 objects (10,000
// ImageRepositories and 10,000 ImagePolicies):
//
//	go test -run '^$' -bench BenchmarkPerObjectSeriesMemory -benchtime 1x ./runtime/metrics/
func BenchmarkPerObjectSeriesMemory(b *testing.B) {
	const n = 20000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("app-%05d", i)
	}
	measure := func(b *testing.B, fill func() any) {
		for range b.N {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			kept := fill()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(kept)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/series")
		}
	}
	b.Run("ObjectGauge", func(b *testing.B) {
		measure(b, func() any {
			g := NewObjectGauge(objectOpts, "kind", "namespace", "name", "status")
			for _, name := range names {
				g.Set(1, "ImagePolicy", "apps", name, "True")
			}
			return g
		})
	})
	b.Run("GaugeVec", func(b *testing.B) {
		measure(b, func() any {
			vec := prometheus.NewGaugeVec(objectOpts, []string{"kind", "namespace", "name", "status"})
			for _, name := range names {
				vec.WithLabelValues("ImagePolicy", "apps", name, "True").Set(1)
			}
			return vec
		})
	})
}
