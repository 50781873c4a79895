package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

// Outcomes of an automation run, the values of runs_total's outcome label.
const (
	// OutcomePushed: the run's UpdateJob pushed a commit.
	OutcomePushed = "pushed"
	// OutcomeNoChange: the run's UpdateJob found the files up to date.
	OutcomeNoChange = "nochange"
	// OutcomeSkipped: nothing changed since the last run (the policies and
	// the branch head), so no UpdateJob was made.
	OutcomeSkipped = "skipped"
	// OutcomeFailed: the UpdateJob failed, or the branch head could not be
	// read.
	OutcomeFailed = "failed"
)

var outcomes = []string{OutcomePushed, OutcomeNoChange, OutcomeSkipped, OutcomeFailed}

// AutomationMetrics are the automation controller's domain metrics.
type AutomationMetrics struct {
	Runs *prometheus.CounterVec
	// PolicyToPush is the time from a policy's latestRef change
	// (ImagePolicy status.latestRefTime) to the push of the commit that
	// applies it, once per policy a pushed commit changes.
	PolicyToPush prometheus.Histogram
	// Holds counts holds made (HeldByPerson) and ended (HoldReleased,
	// HoldExpired, NewerImage), by reason.
	Holds *prometheus.CounterVec
}

// NewAutomationMetrics returns unregistered metrics.
func NewAutomationMetrics() *AutomationMetrics {
	m := &AutomationMetrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace,
			Subsystem: "automation",
			Name:      "runs_total",
			Help:      "Automation runs by outcome: pushed, nochange, skipped (nothing changed, no job made) or failed.",
		}, []string{"outcome"}),
		PolicyToPush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace,
			Subsystem: "automation",
			Name:      "policy_to_push_seconds",
			Help:      "Time from an ImagePolicy's latestRef change to the push of the commit applying it.",
			Buckets:   []float64{0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600},
		}),
		Holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace,
			Subsystem: "automation",
			Name:      "holds_total",
			Help:      "Holds of marked values a person set: made (HeldByPerson) and ended (HoldReleased, HoldExpired, NewerImage), by reason.",
		}, []string{"reason"}),
	}
	for _, r := range []string{imagev1.HeldByPersonReason, imagev1.HoldReleasedReason, imagev1.HoldExpiredReason, imagev1.NewerImageReason} {
		m.Holds.WithLabelValues(r)
	}
	// Every outcome is exported from the start, so rates work from zero.
	for _, o := range outcomes {
		m.Runs.WithLabelValues(o)
	}
	return m
}

// MustRegister registers the metrics with reg.
func (m *AutomationMetrics) MustRegister(reg prometheus.Registerer) *AutomationMetrics {
	reg.MustRegister(m.Runs, m.PolicyToPush, m.Holds)
	return m
}

// MustRegisterDefault registers the metrics with controller-runtime's
// registry, which the manager serves on /metrics.
func (m *AutomationMetrics) MustRegisterDefault() *AutomationMetrics {
	return m.MustRegister(crmetrics.Registry)
}

// tally holds what a reconciliation observed until its status is written:
// a run is counted once its outcome is recorded in the API, so that a
// reconciliation that loses a write conflict and runs again counts nothing
// twice.
type tally struct {
	outcomes  []string
	latencies []float64
	holds     []string
}

func (t *tally) outcome(o string) { t.outcomes = append(t.outcomes, o) }

func (t *tally) hold(reason string) { t.holds = append(t.holds, reason) }

func (t *tally) commit(m *AutomationMetrics) {
	if m == nil {
		return
	}
	for _, o := range t.outcomes {
		m.Runs.WithLabelValues(o).Inc()
	}
	for _, l := range t.latencies {
		m.PolicyToPush.Observe(l)
	}
	for _, r := range t.holds {
		m.Holds.WithLabelValues(r).Inc()
	}
}
