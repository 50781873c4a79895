// Command image-automation-controller keeps image references in git up to
// date with ImagePolicies: it decides what must change and creates UpdateJobs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"toolkit.dev/image-toolkit/image-automation-controller/internal/controller"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/app"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

const name = "image-automation-controller"

func main() {
	var (
		noCrossNamespaceRefs bool
		jobHistoryLimit      int
	)
	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(imagev1.AddToScheme(scheme))
	must(updatev1.AddToScheme(scheme))

	os.Exit(app.Main(app.Config{
		Name:             name,
		MetricsSubsystem: "automation",
		LeaderElect:      true,
		Scheme:           scheme,
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&noCrossNamespaceRefs, "no-cross-namespace-refs", true, "Refuse sourceRefs to GitRepositories in other namespaces.")
			fs.IntVar(&jobHistoryLimit, "job-history-limit", 3, "Finished UpdateJobs to keep per ImageUpdateAutomation; older ones are deleted.")
		},
		Setup: func(ctx context.Context, mgr ctrl.Manager, opts app.Options) error {
			if jobHistoryLimit < 0 {
				return fmt.Errorf("--job-history-limit must not be negative, got %d", jobHistoryLimit)
			}
			return (&controller.ImageUpdateAutomationReconciler{
				Client:               mgr.GetClient(),
				APIReader:            mgr.GetAPIReader(),
				Events:               opts.Events,
				Metrics:              metrics.NewRecorder("automation").MustRegisterDefault(),
				Automation:           controller.NewAutomationMetrics().MustRegisterDefault(),
				NoCrossNamespaceRefs: noCrossNamespaceRefs,
				JobHistoryLimit:      jobHistoryLimit,
			}).SetupWithManager(ctx, mgr, opts.ControllerOptions())
		},
	}, os.Args[1:], os.Stdout, os.Stderr))
}

func must(err error) {
	if err != nil {
		panic(err) // static scheme registration
	}
}
