// Package metrics records the metrics every image-toolkit controller serves
// beside controller-runtime's own: reconcile durations per kind, and the
// Ready condition and suspension of each object, so that alerts can name the
// object that is not ready.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Namespace prefixes every image-toolkit metric.
const Namespace = "imagetoolkit"

var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

// Recorder records the shared controller metrics of one controller.
type Recorder struct {
	duration *prometheus.HistogramVec
	ready    *ObjectGauge
	suspend  *ObjectGauge
	full     *ObjectGauge
}

// NewRecorder returns a Recorder whose metrics are named
// imagetoolkit_<subsystem>_..., e.g. subsystem "reflector".
func NewRecorder(subsystem string) *Recorder {
	return &Recorder{
		// Per kind, not per object: per-object histograms cost a dozen
		// series each, which a thousand objects turn into real memory.
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Subsystem: subsystem,
			Name:      "reconcile_duration_seconds",
			Help:      "Duration of reconciliations, by kind.",
			Buckets:   []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"kind"}),
		ready: NewObjectGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Subsystem: subsystem,
			Name:      "ready_condition",
			Help:      "The Ready condition of each object: one series, whose status label is the condition's, at 1.",
		}, "kind", "namespace", "name", "status"),
		suspend: NewObjectGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Subsystem: subsystem,
			Name:      "suspended",
			Help:      "1 while the object's spec.suspend is true; absent otherwise.",
		}, "kind", "namespace", "name"),
		// Only while it is so: a series per object for a rare state would
		// double the per-object series for nothing.
		full: NewObjectGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Subsystem: subsystem,
			Name:      "storage_full",
			Help:      "1 while the object's Ready condition is False with reason StorageFull (the controller's disk is full); absent otherwise.",
		}, "kind", "namespace", "name"),
	}
}

// MustRegister registers the metrics with reg.
func (r *Recorder) MustRegister(reg prometheus.Registerer) {
	reg.MustRegister(r.duration, r.ready, r.suspend, r.full)
}

// MustRegisterDefault registers the metrics with controller-runtime's
// registry, which the manager serves on /metrics.
func (r *Recorder) MustRegisterDefault() *Recorder {
	r.MustRegister(crmetrics.Registry)
	return r
}

// Object is what the per-object metrics need of an object.
type Object interface {
	GetNamespace() string
	GetName() string
	GetConditions() []metav1.Condition
}

// RecordDuration observes the time since start for a reconciliation of kind.
func (r *Recorder) RecordDuration(kind string, start time.Time) {
	r.duration.WithLabelValues(kind).Observe(time.Since(start).Seconds())
}

// RecordReady sets the Ready gauge of obj from its conditions; an object
// without a Ready condition counts as Unknown.
func (r *Recorder) RecordReady(kind string, obj Object) {
	status, reason := metav1.ConditionUnknown, ""
	for _, c := range obj.GetConditions() {
		if c.Type == "Ready" {
			status, reason = c.Status, c.Reason
		}
	}
	if status == metav1.ConditionFalse && reason == conditions.StorageFullReason {
		r.full.Set(1, kind, obj.GetNamespace(), obj.GetName())
	} else {
		r.full.Delete(kind, obj.GetNamespace(), obj.GetName())
	}
	// One series per object, its status's: the others, at 0, would
	// triple the series (at 10,000 ImageRepositories and 10,000
	// ImagePolicies, 60,000 series and a fifth of the reflector's heap)
	// for queries that sum or compare to 1 all the same.
	for _, s := range conditionStatuses {
		if s == status {
			r.ready.Set(1, kind, obj.GetNamespace(), obj.GetName(), string(s))
		} else {
			r.ready.Delete(kind, obj.GetNamespace(), obj.GetName(), string(s))
		}
	}
}

// RecordSuspend sets the suspension gauge of obj: 1 while suspended,
// absent otherwise.
func (r *Recorder) RecordSuspend(kind string, obj Object, suspended bool) {
	if suspended {
		r.suspend.Set(1, kind, obj.GetNamespace(), obj.GetName())
	} else {
		r.suspend.Delete(kind, obj.GetNamespace(), obj.GetName())
	}
}

// Forget drops the per-object series of a deleted object.
func (r *Recorder) Forget(kind, namespace, name string) {
	for _, s := range conditionStatuses {
		r.ready.Delete(kind, namespace, name, string(s))
	}
	r.suspend.Delete(kind, namespace, name)
	r.full.Delete(kind, namespace, name)
}
