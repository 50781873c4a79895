// Command image-reflector-controller scans image registries
// (ImageRepository) and picks the latest image of each ImagePolicy.
package main

import (
	"context"
	"errors"
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
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/webhook"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/app"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

const name = "image-reflector-controller"

func main() {
	var (
		storagePath   string
		registryQPS   float64
		registryBurst int
		webhookAddr   string
		objectLevelWI bool
		defaultsErr   error
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
			// Ceilings, not rates: the limiter slows down by itself when a
			// registry answers 429 or 503, sends Retry-After or announces a
			// nearly used quota. 100 a second is a tenth of Artifact
			// Registry's default per-project quota (60,000 a minute) and
			// above Docker Hub's per-address abuse limit ("thousands a
			// minute"), which answers 429 and so is found; the fixed 10 it
			// replaces cost 200 s on a cold start of 1,000 repositories.
			fs.Float64Var(&registryQPS, "registry-qps", 100, "The most requests per second to each registry host. The rate starts there, drops when the host answers 429 or 503, sends Retry-After or announces a nearly used quota, and climbs back while the host keeps up.")
			fs.IntVar(&registryBurst, "registry-burst", 100, "The most requests sent at once to each registry host, at the --registry-qps ceiling; the burst shrinks with the rate.")
			fs.StringVar(&webhookAddr, "webhook-bind-address", ":9292", "Address the ImageWebhook receiver serves on; empty disables it.")
			fs.BoolVar(&objectLevelWI, cloudauth.FlagObjectLevelWorkloadIdentity, false, cloudauth.FlagUsage)
			// The shared API client defaults (50 a second, 300 at once)
			// are too low for this controller: a scan writes an
			// ImageRepository's metadata and status and its policies'
			// status, and client-go's limit applies per kind, so 1,000
			// repositories took at least 34 s to record even from an
			// instant registry (tests/bench). The API server protects
			// itself with API Priority and Fairness; steady state is far
			// below this, which only shapes cold starts and resyncs.
			defaultsErr = errors.Join(setDefault(fs, "kube-api-qps", "200"), setDefault(fs, "kube-api-burst", "400"))
		},
		Setup: func(ctx context.Context, mgr ctrl.Manager, opts app.Options) error {
			if defaultsErr != nil {
				return defaultsErr
			}
			if registryQPS <= 0 || registryBurst < 1 {
				return fmt.Errorf("--registry-qps and --registry-burst must be positive")
			}
			st, err := store.Open(storagePath)
			if err != nil {
				return fmt.Errorf("opening --storage-path: %w", err)
			}
			if damaged := st.Removed(); len(damaged) > 0 {
				ctrl.Log.WithName("store").Info("removed damaged tag files; their repositories are scanned again",
					"files", damaged)
			}
			rec := metrics.NewRecorder("reflector").MustRegisterDefault()
			regMetrics := registry.NewMetrics()
			scanMetrics := controller.NewScanMetrics()
			crmetrics.Registry.MustRegister(append(regMetrics.Collectors(), scanMetrics.Collectors()...)...)
			reg := registry.New(registryQPS, registryBurst, regMetrics)
			cloud, err := cloudauth.Setup(mgr.GetConfig(), mgr.GetScheme(), objectLevelWI, "reflector", crmetrics.Registry)
			if err != nil {
				return err
			}
			ev := opts.Events
			repos := &controller.ImageRepositoryReconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: ev, Metrics: rec,
				ScanMetrics: scanMetrics, Registry: reg, Store: st, Cloud: cloud,
			}
			if webhookAddr != "" {
				if err := setupWebhooks(ctx, mgr, opts, rec, repos, webhookAddr); err != nil {
					return err
				}
			}
			if err := repos.SetupWithManager(mgr, opts.ControllerOptions()); err != nil {
				return err
			}
			return (&controller.ImagePolicyReconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: ev, Metrics: rec,
				Registry: reg, Store: st, Cloud: cloud,
			}).SetupWithManager(ctx, mgr, opts.ControllerOptions())
		},
	}, os.Args[1:], os.Stdout, os.Stderr))
}

// setupWebhooks adds the ImageWebhook reconciler and the receiver, and
// tells the receiver when a scan it requested starts.
func setupWebhooks(ctx context.Context, mgr ctrl.Manager, opts app.Options, rec *metrics.Recorder,
	repos *controller.ImageRepositoryReconciler, addr string) error {
	if err := webhook.SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	if err := controller.NewImageWebhookReconciler(mgr.GetClient(), mgr.GetAPIReader(), rec).SetupWithManager(mgr, opts.ControllerOptions()); err != nil {
		return err
	}
	m := webhook.NewMetrics()
	crmetrics.Registry.MustRegister(m.Collectors()...)
	srv := webhook.New(mgr.GetClient(), mgr.GetAPIReader(), m, webhook.Options{
		Addr: addr, Log: ctrl.Log.WithName("webhook"),
	})
	repos.RequestHandled = srv.ScanStarted
	return mgr.Add(srv)
}

// setDefault changes the default of a flag app registers for every
// controller, for this one, --help included.
func setDefault(fs *flag.FlagSet, name, value string) error {
	f := fs.Lookup(name)
	if f == nil {
		return fmt.Errorf("no flag --%s to default to %s", name, value)
	}
	if err := f.Value.Set(value); err != nil {
		return fmt.Errorf("defaulting --%s: %w", name, err)
	}
	f.DefValue = value
	return nil
}

func utilruntimeMust(err error) {
	if err != nil {
		panic(err) // static scheme registration
	}
}
