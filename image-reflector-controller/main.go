// Command image-reflector-controller scans image registries
// (ImageRepository) and picks the latest image of each ImagePolicy.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/controller"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/healthhook"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/webhook"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/app"
	"toolkit.dev/image-toolkit/pkg/runtime/healthwatch"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

const name = "image-reflector-controller"

func main() {
	// The reflector keeps tens of thousands of small objects (the cached
	// ImageRepositories and ImagePolicies, their series): with Go's
	// default, a collection when the heap doubles, a cold start of many
	// thousands of each peaked at more than twice the live heap.
	// Collecting at half again trades a little of the reflector's CPU for
	// that memory (docs/performance.md). GOGC still overrides it.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	var r reflector
	os.Exit(app.Main(app.Config{
		Name:             name,
		MetricsSubsystem: "reflector",
		LeaderElect:      true,
		// A reconcile mostly waits: on the registry, the store's fsync and
		// one status write. At controller-runtime's default of 4, a cold
		// start of thousands of repositories was bound by those waits,
		// with the reflector's CPU mostly idle.
		Concurrent: 16,
		Scheme:     app.NewScheme(clientgoscheme.AddToScheme, imagev1.AddToScheme),
		Flags:      r.bindFlags,
		Setup:      r.setup,
	}, os.Args[1:], os.Stdout, os.Stderr))
}

// reflector is the controller's own flags, and what it sets up with them.
type reflector struct {
	storagePath   string
	registryQPS   float64
	registryBurst int
	webhookAddr   string
	objectLevelWI bool
	verifyRetry   time.Duration
	remote        healthwatch.RemoteOptions
}

func (r *reflector) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&r.storagePath, "storage-path", app.DataDir(name, "/data"), "Directory of the tag database (the chart mounts /data).")
	// Ceilings, not rates: the rate starts at 100 a second (the fixed
	// ceiling before, below which no host has seen anything new),
	// doubles each second while requests queue until a host first
	// refuses, and slows down by itself when a registry answers 429 or
	// 503, sends Retry-After or announces a nearly used quota. 500 a
	// second is half of Artifact Registry's default per-project quota
	// (60,000 a minute) and above Docker Hub's per-address abuse limit
	// ("thousands a minute"), which answers 429 and so is found; a
	// ceiling of 100 made a cold start of 10,000 repositories on one
	// registry take at least 100 s.
	fs.Float64Var(&r.registryQPS, "registry-qps", 500, "The most requests per second to each registry host. The rate starts at 100 (or the ceiling, if lower), doubles each second while requests wait for it until the host first refuses, drops when the host answers 429 or 503, sends Retry-After or announces a nearly used quota, and climbs back while requests wait and the host keeps up.")
	fs.IntVar(&r.registryBurst, "registry-burst", 100, "The most requests sent at once to each registry host, at the --registry-qps ceiling; the burst shrinks with the rate.")
	fs.StringVar(&r.webhookAddr, "webhook-bind-address", ":9292", "Address the ImageWebhook receiver serves on; empty disables it.")
	fs.BoolVar(&r.objectLevelWI, cloudauth.FlagObjectLevelWorkloadIdentity, false, cloudauth.FlagUsage)
	r.remote.BindFlags(fs)
	fs.DurationVar(&r.verifyRetry, "verify-retry", controller.DefaultVerifyRetry, "How long a policy trusts a verdict that an image's signature did not verify before checking it again (spec.verify); verified digests are never verified again.")
}

// setup opens the tag store and adds the ImageRepository and ImagePolicy
// reconcilers, which share it and the registry client, and the webhook
// receiver.
func (r *reflector) setup(ctx context.Context, mgr ctrl.Manager, opts app.Options) error {
	if r.registryQPS <= 0 || r.registryBurst < 1 {
		return fmt.Errorf("--registry-qps and --registry-burst must be positive")
	}
	st, err := openStore(r.storagePath)
	if err != nil {
		return err
	}
	rec := metrics.NewRecorder("reflector").MustRegisterDefault()
	regMetrics := registry.NewMetrics()
	scanMetrics, promotionMetrics := controller.NewScanMetrics(), controller.NewPromotionMetrics()
	verifyMetrics := controller.NewVerifyMetrics()
	crmetrics.Registry.MustRegister(append(append(append(regMetrics.Collectors(), scanMetrics.Collectors()...),
		promotionMetrics.Collectors()...), verifyMetrics.Collectors()...)...)
	reg := registry.New(r.registryQPS, r.registryBurst, regMetrics)
	cloud, err := cloudauth.Setup(mgr.GetConfig(), mgr.GetScheme(), r.objectLevelWI, "reflector", crmetrics.Registry)
	if err != nil {
		return err
	}
	repos := &controller.ImageRepositoryReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: opts.Events, Metrics: rec,
		ScanMetrics: scanMetrics, Registry: reg, Store: st, Cloud: cloud,
	}
	if r.webhookAddr != "" {
		if err := setupWebhooks(ctx, mgr, opts, rec, repos, r.webhookAddr); err != nil {
			return err
		}
	}
	if err := repos.SetupWithManager(mgr, opts.ControllerOptions()); err != nil {
		return err
	}
	return (&controller.ImagePolicyReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: opts.Events, Metrics: rec,
		Registry: reg, Store: st, Cloud: cloud, PromotionMetrics: promotionMetrics,
		VerifyMetrics: verifyMetrics, VerifyRetry: r.verifyRetry, Shard: opts.Shard(), HealthRemote: r.remote,
	}).SetupWithManager(ctx, mgr, opts.ControllerOptions())
}

// openStore opens the tag database, logging the damaged files it removed.
func openStore(path string) (*store.Store, error) {
	st, err := store.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening --storage-path: %w", err)
	}
	if damaged := st.Removed(); len(damaged) > 0 {
		ctrl.Log.WithName("store").Info("removed damaged tag files; their repositories are scanned again",
			"files", damaged)
	}
	return st, nil
}

// setupWebhooks adds the ImageWebhook and HealthWebhook reconcilers and
// the receiver serving both, and tells the receiver when a scan it
// requested starts.
func setupWebhooks(ctx context.Context, mgr ctrl.Manager, opts app.Options, rec *metrics.Recorder,
	repos *controller.ImageRepositoryReconciler, addr string) error {
	byPath, err := webhook.SetupIndexes(ctx, mgr)
	if err != nil {
		return err
	}
	if err := controller.NewImageWebhookReconciler(mgr.GetClient(), mgr.GetAPIReader(), rec).SetupWithManager(mgr, opts.ControllerOptions()); err != nil {
		return err
	}
	if err := healthhook.SetupIndex(ctx, mgr); err != nil {
		return err
	}
	if err := controller.NewHealthWebhookReconciler(mgr.GetClient(), mgr.GetAPIReader(), rec).SetupWithManager(mgr, opts.ControllerOptions()); err != nil {
		return err
	}
	m := webhook.NewMetrics()
	crmetrics.Registry.MustRegister(m.Collectors()...)
	srv := webhook.New(mgr.GetClient(), byPath, mgr.GetAPIReader(), m, webhook.Options{
		Addr: addr, Log: ctrl.Log.WithName("webhook"),
		Kinds: []receiver.Kind{healthhook.New(mgr.GetClient(), mgr.GetAPIReader())},
	})
	repos.RequestHandled = srv.ScanStarted
	if err := mgr.AddReadyzCheck("webhook-receiver", srv.Listening); err != nil {
		return err
	}
	return mgr.Add(srv)
}
