package controller

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

var (
	env *testenv.Env
	// verifyMetrics are the policy reconciler's verification metrics.
	verifyMetrics = NewVerifyMetrics()
	// storeDir is the manager's --storage-path.
	storeDir string
	// promotionMetrics are the main manager's.
	promotionMetrics *PromotionMetrics
	// mainPolicies is the main manager's ImagePolicy reconciler.
	mainPolicies *ImagePolicyReconciler
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reflector-store-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	storeDir = dir
	// Objects labelled shard=second belong to managers a test starts itself.
	notSecond, _ := labels.Parse("shard!=second")
	testenv.MainWith(m, &env, func(o *ctrl.Options) {
		o.Cache.DefaultLabelSelector = notSecond
	}, func(mgr ctrl.Manager) error {
		return setupReconcilers(mgr, storeDir)
	}, testenv.ReflectorChart, testenv.AutomationChart) // promotions read ImageUpdateAutomations
}

// setupReconcilers wires the reconcilers as main does, on a store directory.
func setupReconcilers(mgr ctrl.Manager, dir string) error {
	st, err := store.Open(dir)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	rec := metrics.NewRecorder("reflector")
	rec.MustRegister(reg)
	regMetrics, scanMetrics := registry.NewMetrics(), NewScanMetrics()
	reg.MustRegister(append(regMetrics.Collectors(), scanMetrics.Collectors()...)...)
	regClient := registry.New(100, 100, regMetrics)
	// As main does with --object-level-workload-identity.
	cloud, err := cloudauth.Setup(mgr.GetConfig(), mgr.GetScheme(), true, "reflector", reg)
	if err != nil {
		return err
	}
	ev := events.New(events.NewWriter(mgr.GetClient(), mgr.GetScheme(), "image-reflector-controller"))
	if err := (&ImageRepositoryReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: ev,
		Metrics: rec, ScanMetrics: scanMetrics, Registry: regClient, Store: st, Cloud: cloud}).SetupWithManager(mgr, ctrlOptions()); err != nil {
		return err
	}
	if err := NewImageWebhookReconciler(mgr.GetClient(), mgr.GetAPIReader(), rec).SetupWithManager(mgr, ctrlOptions()); err != nil {
		return err
	}
	if healthReceiver == "" {
		// The main manager's: HealthWebhooks and their receiver, as main
		// serves them beside ImageWebhooks.
		if err := setupHealthReceiver(mgr, rec); err != nil {
			return err
		}
	}
	pm := NewPromotionMetrics()
	reg.MustRegister(pm.Collectors()...)
	if promotionMetrics == nil {
		// The main manager's, set up first; the managers tests start
		// themselves count their own.
		promotionMetrics = pm
	}
	// A verdict that did not verify is checked again after 2 s, not
	// 10 minutes: the tests sign tags after a policy saw them unsigned.
	pr := &ImagePolicyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: ev,
		Metrics: rec, Registry: regClient, Store: st, Cloud: cloud, PromotionMetrics: pm,
		VerifyMetrics: verifyMetrics, VerifyRetry: 2 * time.Second}
	if mainPolicies == nil {
		mainPolicies = pr
	}
	return pr.SetupWithManager(context.Background(), mgr, ctrlOptions())
}

// namespace is a fresh namespace whose image objects go with it at the
// test's end, as the namespace controller envtest lacks would delete them
// in a cluster: a later test that measures idleness then meets no earlier
// test's scans on their intervals, minimum-age timers or verification
// retries (CI: "1 ImagePolicy reconciles in 10s of idleness").
func namespace(t testing.TB) string {
	t.Helper()
	ns := env.Namespace(t)
	t.Cleanup(func() {
		for _, kind := range []client.Object{&imagev1.ImagePolicy{}, &imagev1.ImageRepository{}, &imagev1.ImageWebhook{}} {
			if err := env.Client.DeleteAllOf(context.Background(), kind, client.InNamespace(ns)); err != nil {
				t.Logf("emptying namespace %s: %v", ns, err)
			}
		}
	})
	return ns
}
