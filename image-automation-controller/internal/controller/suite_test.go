package controller

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testenv"
)

var (
	env *testenv.Env
	// automationMetrics are the suite manager's domain metrics.
	automationMetrics *AutomationMetrics
)

const (
	// historyLimit is the suite's --job-history-limit.
	historyLimit = 2
	// shardLabel keeps objects labelled restart away from the suite's
	// manager, for the test that runs (and restarts) its own.
	shardLabel = "sharding.toolkit.dev/key"
)

func TestMain(m *testing.M) {
	notRestart, err := labels.Parse(shardLabel + "!=restart")
	if err != nil {
		panic(err)
	}
	testenv.MainWith(m, &env, func(o *ctrl.Options) {
		o.Cache.DefaultLabelSelector = notRestart
	}, func(mgr ctrl.Manager) error {
		// Flux's GitRepository kind, before the reconciler looks for it.
		if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
			Paths: []string{"testdata/crds"}, ErrorIfPathMissing: true,
		}); err != nil {
			return err
		}
		r := newReconciler(mgr)
		automationMetrics = r.Automation
		return r.SetupWithManager(context.Background(), mgr, controller.Options{MaxConcurrentReconciles: 2})
	}, testenv.AutomationChart, testenv.ReflectorChart, testenv.UpdateJobChart)
}

// newReconciler is the reconciler as main.go wires it, with metrics in a
// registry of its own.
func newReconciler(mgr ctrl.Manager) *ImageUpdateAutomationReconciler {
	reg := prometheus.NewRegistry()
	rec := metrics.NewRecorder("automation")
	rec.MustRegister(reg)
	return &ImageUpdateAutomationReconciler{
		Client:               mgr.GetClient(),
		APIReader:            mgr.GetAPIReader(),
		Events:               events.New(mgr.GetEventRecorder("image-automation-controller")),
		Metrics:              rec,
		Automation:           NewAutomationMetrics().MustRegister(reg),
		NoCrossNamespaceRefs: true,
		JobHistoryLimit:      historyLimit,
	}
}
