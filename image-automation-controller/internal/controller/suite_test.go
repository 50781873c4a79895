package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, func(mgr ctrl.Manager) error {
		rec := metrics.NewRecorder("automation")
		rec.MustRegister(prometheus.NewRegistry())
		return (&ImageUpdateAutomationReconciler{
			Client:               mgr.GetClient(),
			Events:               events.New(mgr.GetEventRecorder("image-automation-controller")),
			Metrics:              rec,
			NoCrossNamespaceRefs: true,
		}).SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: 2})
	}, testenv.AutomationChart, testenv.ReflectorChart, testenv.UpdateJobChart)
}
