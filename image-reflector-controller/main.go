// Command image-reflector-controller scans image registries
// (ImageRepository) and picks the latest image of each ImagePolicy.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/controller"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/app"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

const name = "image-reflector-controller"

func main() {
	var (
		storagePath   string
		registryQPS   float64
		registryBurst int
	)
	scheme := runtime.NewScheme()
	utilruntimeMust(clientgoscheme.AddToScheme(scheme))
	utilruntimeMust(imagev1.AddToScheme(scheme))

	os.Exit(app.Main(app.Config{
		Name:             name,
		MetricsSubsystem: "reflector",
		LeaderElect:      true,
		Scheme:           scheme,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&storagePath, "storage-path", app.DataDir(name, "/data"), "Directory of the tag database (the chart mounts /data).")
			fs.Float64Var(&registryQPS, "registry-qps", 10, "Requests per second allowed to each registry host.")
			fs.IntVar(&registryBurst, "registry-burst", 20, "Request burst allowed to each registry host.")
		},
		Setup: func(ctx context.Context, mgr ctrl.Manager, opts app.Options) error {
			st, err := store.Open(storagePath)
			if err != nil {
				return fmt.Errorf("opening --storage-path: %w", err)
			}
			rec := metrics.NewRecorder("reflector").MustRegisterDefault()
			regMetrics := registry.NewMetrics()
			scanMetrics := controller.NewScanMetrics()
			crmetrics.Registry.MustRegister(append(regMetrics.Collectors(), scanMetrics.Collectors()...)...)
			reg := registry.New(registryQPS, registryBurst, regMetrics)
			ev := opts.Events
			if err := (&controller.ImageRepositoryReconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: ev, Metrics: rec,
				ScanMetrics: scanMetrics, Registry: reg, Store: st,
			}).SetupWithManager(mgr, opts.ControllerOptions()); err != nil {
				return err
			}
			return (&controller.ImagePolicyReconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: ev, Metrics: rec,
				Registry: reg, Store: st,
			}).SetupWithManager(ctx, mgr, opts.ControllerOptions())
		},
	}, os.Args[1:], os.Stdout, os.Stderr))
}

func utilruntimeMust(err error) {
	if err != nil {
		panic(err) // static scheme registration
	}
}
