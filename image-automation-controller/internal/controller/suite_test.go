package controller

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"toolkit.dev/image-toolkit/image-automation-controller/internal/webhook"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

var (
	env *testenv.Env
	// hooksURL is where the suite's GitWebhook receiver serves.
	hooksURL    string
	hookMetrics *receiver.Metrics
	// automationMetrics are the suite manager's domain metrics.
	automationMetrics *AutomationMetrics
)

const (
	// historyLimit is the suite's --job-history-limit.
	historyLimit = 2
	// shardLabel keeps objects labelled restart or clocked away from the
	// suite's manager, for the tests that run (and restart) their own, or
	// run one with a test clock.
	shardLabel = "sharding.toolkit.dev/key"
)

func TestMain(m *testing.M) {
	notRestart, err := labels.Parse(shardLabel + " notin (restart,clocked)")
	if err != nil {
		panic(err)
	}
	testenv.MainWith(m, &env, func(o *ctrl.Options) {
		o.Cache.DefaultLabelSelector = notRestart
	}, func(mgr ctrl.Manager) error {
		// Flux's GitRepository kind and Argo CD's Application (the copy
		// of pkg/gitsource's tests), before the reconciler looks for them.
		if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
			Paths: []string{"testdata/crds", "../../../pkg/gitsource/testdata/crds/argoproj.io_applications.yaml"}, ErrorIfPathMissing: true,
		}); err != nil {
			return err
		}
		r := newReconciler(mgr)
		automationMetrics = r.Automation
		if err := setupWebhooks(mgr, r); err != nil {
			return err
		}
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
		Events:               events.New(events.NewWriter(mgr.GetClient(), mgr.GetScheme(), "image-automation-controller")),
		Metrics:              rec,
		Automation:           NewAutomationMetrics().MustRegister(reg),
		NoCrossNamespaceRefs: true,
		JobHistoryLimit:      historyLimit,
	}
}

// setupWebhooks adds the GitWebhook reconciler and receiver as main.go
// does, serving on a free loopback port.
func setupWebhooks(mgr ctrl.Manager, r *ImageUpdateAutomationReconciler) error {
	if err := webhook.SetupIndexes(context.Background(), mgr); err != nil {
		return err
	}
	if err := NewGitWebhookReconciler(mgr.GetClient(), mgr.GetAPIReader(), r.Metrics).SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: 2}); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hooksURL = "http://" + l.Addr().String()
	hookMetrics = webhook.NewMetrics()
	hooks := webhook.New(mgr.GetClient(), mgr.GetAPIReader(), hookMetrics, webhook.Options{
		Log: ctrl.Log.WithName("webhook"), Source: gitsource.Options{NoCrossNamespaceRefs: r.NoCrossNamespaceRefs},
		CallsFlush: 200 * time.Millisecond, PushedByJob: r.PushedByJob,
	})
	r.RequestHandled = hooks.RunStarted
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return hooks.Serve(ctx, l) }))
}
