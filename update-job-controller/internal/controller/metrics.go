package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// Job outcomes, the values of the outcome label.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeNoChange  = "nochange"
	OutcomeFailed    = "failed"
	// OutcomeRetried: the attempt failed and the job will be tried again.
	OutcomeRetried = "retried"
)

// JobMetrics are the update-job controller's domain metrics.
type JobMetrics struct {
	Jobs        *prometheus.CounterVec
	Duration    *prometheus.HistogramVec
	GitOps      *prometheus.HistogramVec
	PushRetries prometheus.Counter
	CacheBytes  prometheus.Gauge
	Running     prometheus.Gauge
	// ForgeRequests counts pull request API calls, by forge and HTTP
	// status (0: no response).
	ForgeRequests *prometheus.CounterVec
}

// NewJobMetrics creates the collectors; register them with MustRegister.
func NewJobMetrics() *JobMetrics {
	const ns, sub = "imagetoolkit", "updatejob"
	return &JobMetrics{
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "jobs_total",
			Help: "Job attempts by outcome: succeeded, nochange, failed (for good) or retried.",
		}, []string{"outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "job_duration_seconds",
			Help:    "Duration of a job attempt, from claim to outcome, by outcome.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, []string{"outcome"}),
		GitOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "git_operation_duration_seconds",
			Help:    "Duration of git network operations: clone (first fetch of a mirror), fetch and push.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
		}, []string{"operation"}),
		PushRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "push_retries_total",
			Help: "Pushes retried from a new head after a non-fast-forward rejection.",
		}),
		CacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "cache_bytes",
			Help: "Bytes held by the git mirror cache.",
		}),
		Running: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "running_jobs",
			Help: "Jobs this replica is running now.",
		}),
		ForgeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "forge_requests_total",
			Help: "Pull request API calls to forges, by provider and HTTP status code (0: no response).",
		}, []string{"provider", "code"}),
	}
}

// MustRegister registers the collectors.
func (m *JobMetrics) MustRegister(reg prometheus.Registerer) *JobMetrics {
	reg.MustRegister(m.Jobs, m.Duration, m.GitOps, m.PushRetries, m.CacheBytes, m.Running, m.ForgeRequests)
	// Series that exist from the start make rate() and alerts work before
	// the first job of each outcome.
	for _, o := range []string{OutcomeSucceeded, OutcomeNoChange, OutcomeFailed, OutcomeRetried} {
		m.Jobs.WithLabelValues(o)
	}
	return m
}

// CachePruner removes mirrors unused for MaxAge and reports the cache size.
// Every replica runs it for its own cache directory.
type CachePruner struct {
	Cache    *mirror.Cache
	MaxAge   time.Duration
	Interval time.Duration
	Metrics  *JobMetrics
}

// Start runs until ctx ends.
func (p *CachePruner) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("cache")
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		if err := p.Cache.Prune(p.MaxAge); err != nil {
			log.Error(err, "pruning the git cache")
		}
		if n, err := p.Cache.Size(); err == nil {
			p.Metrics.CacheBytes.Set(float64(n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: each replica owns its cache.
func (p *CachePruner) NeedLeaderElection() bool { return false }
