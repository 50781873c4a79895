// Command image-automation-controller keeps image references in git up to
// date with ImagePolicies: it decides what must change and creates UpdateJobs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"toolkit.dev/image-toolkit/image-automation-controller/internal/controller"
	"toolkit.dev/image-toolkit/image-automation-controller/internal/webhook"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/app"
	"toolkit.dev/image-toolkit/pkg/runtime/healthwatch"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

const name = "image-automation-controller"

func main() {
	var a automation
	os.Exit(app.Main(app.Config{
		Name:             name,
		MetricsSubsystem: "automation",
		LeaderElect:      true,
		// A run mostly waits: on the API server, on a branch head read
		// shared with the branch's other automations, so a monorepo's
		// thousand automations decide sooner with many runs at once than
		// with controller-runtime's default (BenchmarkMonorepoAutomations;
		// docs/performance.md has the figures).
		Concurrent: 32,
		Scheme:     app.NewScheme(clientgoscheme.AddToScheme, imagev1.AddToScheme, updatev1.AddToScheme),
		Flags:      a.bindFlags,
		Setup:      a.setup,
	}, os.Args[1:], os.Stdout, os.Stderr))
}

// automation is the controller's own flags, and what it sets up with them.
type automation struct {
	noCrossNamespaceRefs bool
	argoCDNamespace      string
	jobHistoryLimit      int
	webhookAddr          string
	objectLevelWI        bool
	remote               healthwatch.RemoteOptions
}

func (a *automation) bindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&a.noCrossNamespaceRefs, "no-cross-namespace-refs", true, "Refuse sourceRefs to GitRepositories in other namespaces.")
	fs.StringVar(&a.argoCDNamespace, "argocd-namespace", gitsource.DefaultArgoCDNamespace,
		"Namespace Argo CD runs in: it names the override files of Applications elsewhere, and its repository Secrets are the credentials of Application sources.")
	fs.IntVar(&a.jobHistoryLimit, "job-history-limit", 3, "Finished UpdateJobs to keep per ImageUpdateAutomation; older ones are deleted.")
	fs.StringVar(&a.webhookAddr, "webhook-bind-address", ":9293", "Address the GitWebhook receiver (git push events) serves on; empty disables it.")
	fs.BoolVar(&a.objectLevelWI, cloudauth.FlagObjectLevelWorkloadIdentity, false, cloudauth.FlagUsage)
	a.remote.BindFlags(fs)
}

// setup adds the ImageUpdateAutomation reconciler and the webhook
// receiver.
func (a *automation) setup(ctx context.Context, mgr ctrl.Manager, opts app.Options) error {
	if a.jobHistoryLimit < 0 {
		return fmt.Errorf("--job-history-limit must not be negative, got %d", a.jobHistoryLimit)
	}
	// Git repositories with provider github or azure get their
	// credentials from it, through pkg/git.
	cloud, err := cloudauth.Setup(mgr.GetConfig(), mgr.GetScheme(), a.objectLevelWI, "automation", crmetrics.Registry)
	if err != nil {
		return err
	}
	cloudauth.RegisterGitProviders(cloud)
	rec := metrics.NewRecorder("automation").MustRegisterDefault()
	autos := &controller.ImageUpdateAutomationReconciler{
		Client:               mgr.GetClient(),
		APIReader:            mgr.GetAPIReader(),
		Events:               opts.Events,
		Metrics:              rec,
		Automation:           controller.NewAutomationMetrics().MustRegisterDefault(),
		NoCrossNamespaceRefs: a.noCrossNamespaceRefs,
		ArgoCDNamespace:      a.argoCDNamespace,
		WatchNamespace:       opts.WatchNamespace,
		JobHistoryLimit:      a.jobHistoryLimit,
		HealthRemote:         a.remote,
		Cloud:                cloud,
	}
	if a.webhookAddr != "" {
		if err := setupWebhooks(ctx, mgr, opts, rec, autos, a.webhookAddr, gitsource.Options{NoCrossNamespaceRefs: a.noCrossNamespaceRefs, ArgoCDNamespace: a.argoCDNamespace}); err != nil {
			return err
		}
	}
	return autos.SetupWithManager(ctx, mgr, opts.ControllerOptions())
}

// setupWebhooks adds the GitWebhook reconciler and the receiver, and tells
// the receiver when a run it requested starts.
func setupWebhooks(ctx context.Context, mgr ctrl.Manager, opts app.Options, rec *metrics.Recorder,
	autos *controller.ImageUpdateAutomationReconciler, addr string, source gitsource.Options) error {
	if err := webhook.SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	if err := controller.NewGitWebhookReconciler(mgr.GetClient(), mgr.GetAPIReader(), rec).SetupWithManager(mgr, opts.ControllerOptions()); err != nil {
		return err
	}
	m := webhook.NewMetrics()
	crmetrics.Registry.MustRegister(m.Collectors()...)
	srv := webhook.New(mgr.GetClient(), mgr.GetAPIReader(), m, webhook.Options{
		Addr: addr, Log: ctrl.Log.WithName("webhook"),
		Source: source, PushedByJob: autos.PushedByJob,
	})
	autos.RequestHandled = srv.RunStarted
	if err := mgr.AddReadyzCheck("webhook-receiver", srv.Listening); err != nil {
		return err
	}
	return mgr.Add(srv)
}
