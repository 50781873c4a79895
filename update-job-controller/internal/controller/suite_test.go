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
		rec := metrics.NewRecorder("updatejob")
		rec.MustRegister(prometheus.NewRegistry())
		return (&UpdateJobReconciler{
			Client:  mgr.GetClient(),
			Events:  events.New(mgr.GetEventRecorder("update-job-controller")),
			Metrics: rec,
		}).SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: 2})
	}, testenv.UpdateJobChart)
}
