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

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/app"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
	"toolkit.dev/image-toolkit/update-job-controller/internal/controller"
	"toolkit.dev/image-toolkit/update-job-controller/internal/transfer"
)

const name = "update-job-controller"

func main() {
	var (
		cacheDir         string
		cacheMaxAge      time.Duration
		jobLeaseDuration time.Duration
		objectLevelWI    bool
		transferAddress  string
		transferBind     string
		stepImage        string
		transferMax      int64
	)
	// The steps of a container-mode job's Pod run this binary from the
	// same image: one image to build, pull and trust.
	if len(os.Args) > 1 && os.Args[1] == "step" {
		os.Exit(transfer.RunStep(os.Args[2:], os.Stderr))
	}
	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(updatev1.AddToScheme(scheme))

	os.Exit(app.Main(app.Config{
		Name:             name,
		MetricsSubsystem: "updatejob",
		// Every replica runs jobs; claims, not a leader, keep them apart.
		LeaderElect: false,
		Scheme:      scheme,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&cacheDir, "cache-dir", app.DataDir(name, "/cache"), "Directory of the git mirror cache (the chart mounts /cache).")
			fs.DurationVar(&cacheMaxAge, "cache-max-age", 24*time.Hour, "Remove mirrors unused for this long.")
			fs.DurationVar(&jobLeaseDuration, "job-lease-duration", time.Minute, "A Running job whose heartbeat is older than this is reclaimed.")
			fs.BoolVar(&objectLevelWI, cloudauth.FlagObjectLevelWorkloadIdentity, false, cloudauth.FlagUsage)
			fs.StringVar(&transferAddress, "transfer-address", "", "HOST:PORT at which container-mode jobs' Pods reach this replica, e.g. $(POD_IP):9444; container mode is refused when empty.")
			fs.StringVar(&transferBind, "transfer-bind-address", ":9444", "Address the transfer server of container-mode jobs listens on (with --transfer-address).")
			fs.StringVar(&stepImage, "step-image", "", "Image of the fetch and upload steps of container-mode jobs' Pods: this controller's image; container mode is refused when empty.")
			fs.Int64Var(&transferMax, "transfer-max-bytes", transfer.DefaultMaxBytes, "Largest checkout or result (tar bytes) a container-mode job moves.")
		},
		VersionInfo: mirror.LibGit2Version,
		Setup: func(ctx context.Context, mgr ctrl.Manager, opts app.Options) error {
			cache, err := mirror.NewCache(cacheDir)
			if err != nil {
				return err
			}
			// Git repositories with provider github or azure get their
			// credentials from it, through pkg/git.
			cloud, err := cloudauth.Setup(mgr.GetConfig(), mgr.GetScheme(), objectLevelWI, "updatejob", ctrlmetrics.Registry)
			if err != nil {
				return err
			}
			cloudauth.RegisterGitProviders(cloud)
			// Work trees left by a crash are of no use to anyone.
			workDir := filepath.Join(cacheDir, "work")
			if err := os.RemoveAll(workDir); err != nil {
				return err
			}
			if err := os.MkdirAll(workDir, 0o700); err != nil {
				return err
			}
			jobMetrics := controller.NewJobMetrics().MustRegister(ctrlmetrics.Registry)
			err = mgr.Add(&controller.CachePruner{
				Cache:    cache,
				MaxAge:   cacheMaxAge,
				Interval: min(max(cacheMaxAge/4, time.Minute), 10*time.Minute),
				Metrics:  jobMetrics,
			})
			if err != nil {
				return err
			}
			var containers *controller.Containers
			if (transferAddress == "") != (stepImage == "") {
				return fmt.Errorf("container mode needs both --transfer-address and --step-image (got %q and %q)", transferAddress, stepImage)
			}
			if transferAddress != "" {
				host, _, err := net.SplitHostPort(transferAddress)
				if err != nil {
					return fmt.Errorf("--transfer-address %q: %w", transferAddress, err)
				}
				log := ctrl.Log.WithName("transfer")
				srv, err := transfer.NewServer(transfer.TokenReviewer{Client: mgr.GetClient()}, host, transferMax,
					func(msg string, kv ...any) { log.Info(msg, kv...) })
				if err != nil {
					return err
				}
				ln, err := net.Listen("tcp", transferBind)
				if err != nil {
					return fmt.Errorf("--transfer-bind-address: %w", err)
				}
				if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return srv.Serve(ctx, ln) })); err != nil {
					return err
				}
				containers = &controller.Containers{
					Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Transfer: srv,
					Address: transferAddress, StepImage: stepImage, MaxBytes: transferMax,
				}
			}
			return (&controller.UpdateJobReconciler{
				Containers:    containers,
				Client:        mgr.GetClient(),
				APIReader:     mgr.GetAPIReader(),
				Events:        opts.Events,
				Metrics:       metrics.NewRecorder("updatejob").MustRegisterDefault(),
				JobMetrics:    jobMetrics,
				Cache:         cache,
				WorkDir:       workDir,
				Runner:        runnerName(),
				LeaseDuration: jobLeaseDuration,
			}).SetupWithManager(mgr, opts.ControllerOptions())
		},
	}, os.Args[1:], os.Stdout, os.Stderr))
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
