// Command update-job-controller runs UpdateJobs: check out a git repository,
// update image references, commit and push.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/app"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
	"toolkit.dev/image-toolkit/update-job-controller/forges"
	"toolkit.dev/image-toolkit/update-job-controller/internal/controller"
	"toolkit.dev/image-toolkit/update-job-controller/internal/transfer"
)

const name = "update-job-controller"

// flags are the controller's own command-line settings.
type flags struct {
	cacheDir         string
	cacheMaxAge      time.Duration
	jobLeaseDuration time.Duration
	objectLevelWI    bool
	transferAddress  string
	transferBind     string
	stepImage        string
	transferMax      int64
}

func (f *flags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cacheDir, "cache-dir", app.DataDir(name, "/cache"), "Directory of the git mirror cache (the chart mounts /cache).")
	fs.DurationVar(&f.cacheMaxAge, "cache-max-age", 24*time.Hour, "Remove mirrors unused for this long.")
	fs.DurationVar(&f.jobLeaseDuration, "job-lease-duration", time.Minute, "A Running job whose heartbeat is older than this is reclaimed.")
	fs.BoolVar(&f.objectLevelWI, cloudauth.FlagObjectLevelWorkloadIdentity, false, cloudauth.FlagUsage)
	fs.StringVar(&f.transferAddress, "transfer-address", "", "HOST:PORT at which container-mode jobs' Pods reach this replica, e.g. $(POD_IP):9444; container mode is refused when empty.")
	fs.StringVar(&f.transferBind, "transfer-bind-address", ":9444", "Address the transfer server of container-mode jobs listens on (with --transfer-address).")
	fs.StringVar(&f.stepImage, "step-image", "", "Image of the fetch and upload steps of container-mode jobs' Pods: this controller's image; container mode is refused when empty.")
	fs.Int64Var(&f.transferMax, "transfer-max-bytes", transfer.DefaultMaxBytes, "Largest checkout or result (tar bytes) a container-mode job moves.")
}

func main() {
	// The steps of a container-mode job's Pod run this binary from the
	// same image: one image to build, pull and trust.
	if len(os.Args) > 1 && os.Args[1] == "step" {
		os.Exit(transfer.RunStep(os.Args[2:], os.Stderr))
	}
	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(updatev1.AddToScheme(scheme))
	// ImageRepository: a verified image's tag is read again before the
	// commit with its repository's access.
	must(imagev1.AddToScheme(scheme))

	var f flags
	os.Exit(app.Main(app.Config{
		Name:             name,
		MetricsSubsystem: "updatejob",
		// Every replica runs jobs; claims, not a leader, keep them apart.
		LeaderElect: false,
		Scheme:      scheme,
		Flags:       f.register,
		VersionInfo: mirror.LibGit2Version,
		Setup: func(ctx context.Context, mgr ctrl.Manager, opts app.Options) error {
			return setup(mgr, opts, &f)
		},
	}, os.Args[1:], os.Stdout, os.Stderr))
}

// setup adds the controller's parts to the manager: the mirror cache and
// its pruner, cloud credentials, container mode, and the reconciler.
func setup(mgr ctrl.Manager, opts app.Options, f *flags) error {
	cache, err := mirror.NewCache(f.cacheDir)
	if err != nil {
		return err
	}
	// Git repositories with provider github or azure get their
	// credentials from it, through pkg/git.
	cloud, err := cloudauth.Setup(mgr.GetConfig(), mgr.GetScheme(), f.objectLevelWI, "updatejob", ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	cloudauth.RegisterGitProviders(cloud)
	// The engine opens pull requests on the forges registered in
	// pkg/forge: the built-in ones.
	forges.Register()
	workDir, err := freshWorkDir(f.cacheDir)
	if err != nil {
		return err
	}
	jobMetrics := controller.NewJobMetrics().MustRegister(ctrlmetrics.Registry)
	err = mgr.Add(&controller.CachePruner{
		Cache:    cache,
		MaxAge:   f.cacheMaxAge,
		Interval: min(max(f.cacheMaxAge/4, time.Minute), 10*time.Minute),
		Metrics:  jobMetrics,
	})
	if err != nil {
		return err
	}
	containers, err := containerMode(mgr, f)
	if err != nil {
		return err
	}
	return (&controller.UpdateJobReconciler{
		Containers:    containers,
		Cloud:         cloud,
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Events:        opts.Events,
		Metrics:       metrics.NewRecorder("updatejob").MustRegisterDefault(),
		JobMetrics:    jobMetrics,
		Cache:         cache,
		WorkDir:       workDir,
		Runner:        runnerName(),
		LeaseDuration: f.jobLeaseDuration,
	}).SetupWithManager(mgr, opts.ControllerOptions())
}

// freshWorkDir empties the directory of jobs' work trees: those a crash
// left are of no use to anyone.
func freshWorkDir(cacheDir string) (string, error) {
	workDir := filepath.Join(cacheDir, "work")
	if err := os.RemoveAll(workDir); err != nil {
		return "", err
	}
	return workDir, os.MkdirAll(workDir, 0o700)
}

// containerMode starts the transfer server container-mode jobs' Pods
// reach; nil, and container mode refused, without --transfer-address and
// --step-image.
func containerMode(mgr ctrl.Manager, f *flags) (*controller.Containers, error) {
	if (f.transferAddress == "") != (f.stepImage == "") {
		return nil, fmt.Errorf("container mode needs both --transfer-address and --step-image (got %q and %q)", f.transferAddress, f.stepImage)
	}
	if f.transferAddress == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(f.transferAddress)
	if err != nil {
		return nil, fmt.Errorf("--transfer-address %q: %w", f.transferAddress, err)
	}
	log := ctrl.Log.WithName("transfer")
	srv, err := transfer.NewServer(transfer.TokenReviewer{Client: mgr.GetClient()}, host, f.transferMax,
		func(msg string, kv ...any) { log.Info(msg, kv...) })
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", f.transferBind)
	if err != nil {
		return nil, fmt.Errorf("--transfer-bind-address: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return srv.Serve(ctx, ln) })); err != nil {
		return nil, err
	}
	return &controller.Containers{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Transfer: srv,
		Address: f.transferAddress, StepImage: f.stepImage, MaxBytes: f.transferMax,
	}, nil
}

// runnerName names this replica in job status: the pod name where the chart
// sets POD_NAME, else the host name and process id.
func runnerName() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func must(err error) {
	if err != nil {
		panic(err) // static scheme registration
	}
}
