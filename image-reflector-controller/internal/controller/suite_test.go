package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, func(mgr ctrl.Manager) error {
		rec := metrics.NewRecorder("reflector")
		rec.MustRegister(prometheus.NewRegistry())
		ev := events.New(mgr.GetEventRecorder("image-reflector-controller"))
		if err := (&ImageRepositoryReconciler{Client: mgr.GetClient(), Events: ev, Metrics: rec}).
			SetupWithManager(mgr, ctrlOptions()); err != nil {
			return err
		}
		return (&ImagePolicyReconciler{Client: mgr.GetClient(), Events: ev, Metrics: rec}).
			SetupWithManager(mgr, ctrlOptions())
	}, testenv.ReflectorChart)
}
