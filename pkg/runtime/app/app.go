// Package app is the common entry point of the image-toolkit controllers:
// the standard flags, logging, the manager with metrics, health probes,
// leader election and label-selector sharding. Each controller's main only
// adds its own flags and reconcilers.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/version"
)

// Options are the flags every controller has, with kubebuilder's names.
// --kubeconfig (or KUBECONFIG) is registered by controller-runtime.
type Options struct {
	MetricsAddr string
	ProbeAddr   string
	LeaderElect bool
	// LeaderElectionNamespace holds the Lease; Main fills it in when the
	// flag is empty (see resolveLeaderElectionNamespace).
	LeaderElectionNamespace string
	Concurrent              int
	WatchLabelSelector      string
	WatchNamespace          string
	LogLevel                string
	LogEncoding             string
	Version                 bool
	KubeAPIQPS              float64
	KubeAPIBurst            int
	EventsAddr              string
	// EnablePprof serves Go's runtime profiles on the metrics endpoint.
	EnablePprof bool

	// Events is the recorder the controller's reconcilers share, which
	// Main makes before Setup: Kubernetes events, also forwarded to
	// --events-addr when set.
	Events *events.Recorder
}

// Config describes one controller binary.
type Config struct {
	// Name of the binary, used for logs, events and the leader lease.
	Name string
	// MetricsSubsystem names the controller's metrics,
	// imagetoolkit_<subsystem>_..., e.g. reflector.
	MetricsSubsystem string
	// LeaderElect is the --leader-elect default.
	LeaderElect bool
	// Concurrent is the --concurrent default; 4 when 0.
	Concurrent int
	// Scheme holds the kinds the controller reads and writes.
	Scheme *runtime.Scheme
	// Flags registers the controller's own flags.
	Flags func(*flag.FlagSet)
	// VersionInfo adds lines to --version, e.g. the linked libgit2.
	VersionInfo func() string
	// Setup registers reconcilers with the manager.
	Setup func(ctx context.Context, mgr ctrl.Manager, opts Options) error
}

// NewScheme is a scheme holding the kinds each add registers, e.g.
// clientgoscheme.AddToScheme and the API packages' AddToScheme. They are
// static, so a failure is a programming error: it panics.
func NewScheme(add ...func(*runtime.Scheme) error) *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, f := range add {
		if err := f(scheme); err != nil {
			panic(fmt.Sprintf("registering the controller's kinds: %v", err))
		}
	}
	return scheme
}

// BindFlags registers the common flags.
func (o *Options) BindFlags(fs *flag.FlagSet, leaderElect bool) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "The address the metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "The address the health probe endpoint binds to.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", leaderElect, "Enable leader election, so only one replica is active.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "The namespace of the leader election Lease. Default: $RUNTIME_NAMESPACE, else the namespace of the kubeconfig's current context (as kubectl picks it), else the pod's own namespace in a cluster.")
	fs.IntVar(&o.Concurrent, "concurrent", 4, "The number of concurrent reconciles per kind.")
	fs.StringVar(&o.WatchLabelSelector, "watch-label-selector", "", "Watch only objects matching this label selector, e.g. sharding.toolkit.dev/key=shard1.")
	fs.StringVar(&o.WatchNamespace, "watch-namespace", "", "Watch only objects in this namespace, so a namespaced Role is enough; all namespaces when empty.")
	fs.StringVar(&o.LogLevel, "log-level", "info", "Log verbosity: trace (which adds what each reconcile phase took), debug, info or error.")
	fs.StringVar(&o.LogEncoding, "log-encoding", "json", "Log encoding: json or console.")
	fs.BoolVar(&o.Version, "version", false, "Print the version and exit.")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", 0, "Requests per second to the Kubernetes API server; 0: no limit in the client, the API server's priority and fairness decides (as for kubectl).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 300, "Request burst to the Kubernetes API server, with --kube-api-qps.")
	fs.BoolVar(&o.EnablePprof, "enable-pprof", false, "Serve Go's runtime profiles (CPU, heap, goroutines) at /debug/pprof/ on the metrics endpoint, for go tool pprof.")
	fs.StringVar(&o.EventsAddr, "events-addr", "", "Also send every event to this HTTP endpoint, as Flux's notification-controller event API takes them, e.g. http://notification-controller.flux-system.svc.cluster.local./; Kubernetes events only when empty.")
}

// Validate checks the flag values.
func (o *Options) Validate() error {
	var errs []error
	if o.Concurrent < 1 {
		errs = append(errs, fmt.Errorf("--concurrent must be at least 1, got %d", o.Concurrent))
	}
	if _, err := o.level(); err != nil {
		errs = append(errs, err)
	}
	if o.KubeAPIQPS < 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps must not be negative and --kube-api-burst must be positive"))
	}
	if o.LogEncoding != "json" && o.LogEncoding != "console" {
		errs = append(errs, fmt.Errorf("--log-encoding must be json or console, got %q", o.LogEncoding))
	}
	if _, err := o.selector(); err != nil {
		errs = append(errs, err)
	}
	if o.EventsAddr != "" {
		if err := events.ValidateAddress(o.EventsAddr); err != nil {
			errs = append(errs, fmt.Errorf("--events-addr: %w", err))
		}
	}
	for flag, ns := range map[string]string{"--watch-namespace": o.WatchNamespace, "--leader-election-namespace": o.LeaderElectionNamespace} {
		if ns == "" {
			continue
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", flag, ns, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

func (o *Options) level() (zapcore.Level, error) {
	switch o.LogLevel {
	case "trace":
		// controller-runtime logs V(2) and beyond as negative zap levels.
		return zapcore.Level(-2), nil
	case "debug":
		return zapcore.DebugLevel, nil
	case "info":
		return zapcore.InfoLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	return 0, fmt.Errorf("--log-level must be trace, debug, info or error, got %q", o.LogLevel)
}

func (o *Options) selector() (labels.Selector, error) {
	if o.WatchLabelSelector == "" {
		return nil, nil
	}
	s, err := labels.Parse(o.WatchLabelSelector)
	if err != nil {
		return nil, fmt.Errorf("--watch-label-selector: %w", err)
	}
	return s, nil
}

// Shard is the --watch-label-selector, nil without one: the reconcilers
// use it to say when a reference leaves the shard (pkg/runtime/shard).
func (o *Options) Shard() labels.Selector {
	s, _ := o.selector()
	return s
}

// Logger builds the zap logger the flags ask for.
func (o *Options) Logger(w io.Writer) logr.Logger {
	lvl, _ := o.level()
	enc := zap.JSONEncoder()
	if o.LogEncoding == "console" {
		enc = zap.ConsoleEncoder()
	}
	return zap.New(zap.WriteTo(w), zap.Level(lvl), zap.UseDevMode(false), enc)
}

// ManagerOptions builds the manager's options from the flags.
func (o *Options) ManagerOptions(cfg Config) ctrl.Options {
	sel, _ := o.selector()
	var namespaces map[string]cache.Config
	if o.WatchNamespace != "" {
		namespaces = map[string]cache.Config{o.WatchNamespace: {}}
	}
	return ctrl.Options{
		Scheme:                        cfg.Scheme,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr, ExtraHandlers: o.pprofHandlers()},
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.leaderElectionID(cfg.Name),
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Objects outside the shard are invisible to this process: its
		// caches, watches and reconcilers never see them. --watch-namespace
		// narrows namespaced kinds the same way; cluster-scoped kinds stay
		// cluster-wide.
		Cache: cache.Options{DefaultLabelSelector: sel, DefaultNamespaces: namespaces, ByObject: unsharded(sel),
			DefaultTransform: TrimForCache},
		GracefulShutdownTimeout: ptr(10 * time.Second),
	}
}

// lastApplied is the annotation kubectl apply keeps a copy of the whole
// object in.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TrimForCache drops from the objects the caches keep what no controller
// reads: managedFields (a few entries of every field's owner, often larger
// than the spec) and kubectl's last-applied copy of the object. At 10,000
// ImageRepositories and 10,000 ImagePolicies they are most of the
// informers' memory. The controllers write with merge patches computed
// between two cached copies, both trimmed, so the server keeps its own;
// none writes a whole object (an update without managedFields would keep
// them too, but would drop the annotation).
func TrimForCache(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
		if a := o.GetAnnotations(); a[lastApplied] != "" {
			delete(a, lastApplied)
			o.SetAnnotations(a)
		}
	}
	return obj, nil
}

// unsharded are the kinds the shard's selector does not apply to:
// Namespaces, whose labels an ImageRepository's accessFrom reads. They
// carry no shard label, and a shard's policies may live in any of them.
func unsharded(sel labels.Selector) map[client.Object]cache.ByObject {
	if sel == nil {
		return nil
	}
	return map[client.Object]cache.ByObject{&corev1.Namespace{}: {Label: labels.Everything()}}
}

// clientLimits are the client's QPS and burst. By default there is no
// limit in the client (QPS -1 to client-go): the API server's API
// Priority and Fairness queues and sheds requests by priority, which
// knows the server's load, where a fixed QPS in each client only guesses
// it. With 50 a second, a tag followed by a monorepo's 1,000 automations
// (about ten requests each: source, job, status, events) waited minutes
// in the client while the server idled.
func (o *Options) clientLimits() (float32, int) {
	if o.KubeAPIQPS == 0 {
		return -1, -1
	}
	return float32(o.KubeAPIQPS), o.KubeAPIBurst
}

// pprofHandlers are net/http/pprof's handlers when --enable-pprof is set:
// on the metrics endpoint, so that profiling needs no port of its own.
func (o *Options) pprofHandlers() map[string]http.Handler {
	if !o.EnablePprof {
		return nil
	}
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}

// leaderElectionID names the Lease. Shards (label selectors) and
// namespace-scoped instances are separate controllers, often installed in
// the same namespace: each needs its own leader, so its own Lease.
func (o *Options) leaderElectionID(name string) string {
	if o.WatchLabelSelector == "" && o.WatchNamespace == "" {
		return name + ".toolkit.dev"
	}
	sel := o.WatchLabelSelector
	if s, err := o.selector(); err == nil && s != nil {
		sel = s.String() // "a = b" and "a=b" are one shard
	}
	h := fnv.New32a()
	h.Write([]byte(o.WatchNamespace + "\x00" + sel))
	return fmt.Sprintf("%s-%08x.toolkit.dev", name, h.Sum32())
}

// inClusterNamespaceFile is where Kubernetes mounts a pod's namespace.
var inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// resolveLeaderElectionNamespace picks the Lease's namespace when the flag
// does not name one, and says where it came from, for the log. The order
// follows controller-runtime's choice of cluster (--kubeconfig, KUBECONFIG,
// in-cluster, ~/.kube/config), so the Lease lands in the cluster the
// controller talks to:
//  1. RUNTIME_NAMESPACE, which the charts set to the pod's namespace (Flux's
//     convention);
//  2. with --kubeconfig or KUBECONFIG, that kubeconfig's current context
//     namespace, or "default" when the context names none, as kubectl does;
//  3. in a cluster, the pod's own namespace;
//  4. else the current context of ~/.kube/config, as in 2.
//
// Without it, controller-runtime refuses to start outside a cluster.
func (o *Options) resolveLeaderElectionNamespace(kubeconfigFlag string) (ns, source string, err error) {
	if o.LeaderElectionNamespace != "" {
		return o.LeaderElectionNamespace, "--leader-election-namespace", nil
	}
	if ns := os.Getenv("RUNTIME_NAMESPACE"); ns != "" {
		return ns, "RUNTIME_NAMESPACE", nil
	}
	if kubeconfigFlag == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		if b, err := os.ReadFile(inClusterNamespaceFile); err == nil {
			if ns := strings.TrimSpace(string(b)); ns != "" {
				return ns, "the pod's namespace (" + inClusterNamespaceFile + ")", nil
			}
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfigFlag
	raw, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).RawConfig()
	if err != nil {
		return "", "", fmt.Errorf("reading the kubeconfig for the leader election namespace: %w", err)
	}
	kc, ok := raw.Contexts[raw.CurrentContext]
	if !ok {
		return "", "", fmt.Errorf("no leader election namespace: the kubeconfig has no current context; set --leader-election-namespace or RUNTIME_NAMESPACE")
	}
	if kc.Namespace == "" {
		return namespaceDefault, fmt.Sprintf("kubeconfig context %q, which names no namespace", raw.CurrentContext), nil
	}
	return kc.Namespace, fmt.Sprintf("kubeconfig context %q", raw.CurrentContext), nil
}

// namespaceDefault is kubectl's namespace when a context names none.
const namespaceDefault = "default"

// DataDir is the default of a controller's on-disk state flag
// (--storage-path, --cache-dir): the volume the chart mounts, e.g. /data, in
// a cluster; outside one, where / is seldom writable, a directory of the
// user's cache (~/.cache/image-toolkit/<name>).
func DataDir(name, inCluster string) string {
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return inCluster
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return inCluster
	}
	return filepath.Join(dir, "image-toolkit", name)
}

// MaxRetryDelay caps the pause before a reconcile that returned an error
// runs again. controller-runtime's default doubles it from 5 ms up to
// 1000 s, so an API server down for a minute (every status write failing,
// each failure doubling) left objects idle for 80 s and more after it came
// back (tests/faults TestAPIServerRestart).
const MaxRetryDelay = 15 * time.Second

// ControllerOptions are the options for every controller of the manager:
// controller-runtime's default rate limiter (per-object exponential
// backoff, and 10 retries a second overall with bursts of 100), the
// backoff capped at MaxRetryDelay.
func (o *Options) ControllerOptions() controller.Options {
	return controller.Options{
		MaxConcurrentReconciles: o.Concurrent,
		RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxRetryDelay),
			&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
		),
	}
}

// Main runs a controller binary and returns its exit code.
func Main(cfg Config, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(cfg.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	// controller-runtime registers --kubeconfig on the default flag set.
	flag.CommandLine.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	var opts Options
	opts.BindFlags(fs, cfg.LeaderElect)
	if cfg.Concurrent > 0 {
		f := fs.Lookup("concurrent")
		f.DefValue = strconv.Itoa(cfg.Concurrent)
		_ = f.Value.Set(f.DefValue) // an int always parses
	}
	if cfg.Flags != nil {
		cfg.Flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if opts.Version {
		fmt.Fprintln(stdout, version.String(cfg.Name))
		if cfg.VersionInfo != nil {
			fmt.Fprintln(stdout, strings.TrimSpace(cfg.VersionInfo()))
		}
		return 0
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	log := opts.Logger(stderr).WithName(cfg.Name)
	ctrl.SetLogger(log)

	if opts.LeaderElect {
		if err := opts.chooseLeaderElectionNamespace(fs, log); err != nil {
			log.Error(err, "choosing the leader election namespace")
			return 1
		}
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig")
		return 1
	}
	restCfg.UserAgent = cfg.Name + "/" + version.Version
	restCfg.QPS, restCfg.Burst = opts.clientLimits()
	mgr, err := ctrl.NewManager(restCfg, opts.ManagerOptions(cfg))
	if err != nil {
		log.Error(err, "creating manager")
		return 1
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding health check")
		return 1
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "adding ready check")
		return 1
	}
	if opts.Events, err = eventRecorder(cfg, opts, mgr, log); err != nil {
		log.Error(err, "setting up events")
		return 1
	}
	ctx := ctrl.SetupSignalHandler()
	if err := cfg.Setup(ctx, mgr, opts); err != nil {
		log.Error(err, "setting up controllers")
		return 1
	}
	log.Info("starting manager", "version", version.Version)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "running manager")
		return 1
	}
	return 0
}

// chooseLeaderElectionNamespace fills in the Lease's namespace when
// --leader-election-namespace is empty, and logs where it came from.
func (o *Options) chooseLeaderElectionNamespace(fs *flag.FlagSet, log logr.Logger) error {
	var kubeconfig string
	if f := fs.Lookup("kubeconfig"); f != nil {
		kubeconfig = f.Value.String()
	}
	ns, source, err := o.resolveLeaderElectionNamespace(kubeconfig)
	if err != nil {
		return err
	}
	o.LeaderElectionNamespace = ns
	log.Info("leader election", "namespace", ns, "from", source)
	return nil
}

// eventRecorder makes the controller's event recorder and, with
// --events-addr, the forwarder it feeds: run by the manager, its metrics
// served with the controller's.
func eventRecorder(cfg Config, opts Options, mgr ctrl.Manager, log logr.Logger) (*events.Recorder, error) {
	w := events.NewWriter(mgr.GetClient(), mgr.GetScheme(), cfg.Name)
	if err := mgr.Add(w); err != nil {
		return nil, err
	}
	rec := events.New(w)
	if opts.EventsAddr == "" {
		return rec, nil
	}
	fwd, err := events.NewForwarder(events.ForwarderOptions{
		Address:    opts.EventsAddr,
		Controller: cfg.Name,
		Scheme:     mgr.GetScheme(),
		Subsystem:  cfg.MetricsSubsystem,
		Log:        log.WithName("events"),
	})
	if err != nil {
		return nil, err
	}
	for _, c := range fwd.Collectors() {
		if err := crmetrics.Registry.Register(c); err != nil {
			return nil, err
		}
	}
	if err := mgr.Add(fwd); err != nil {
		return nil, err
	}
	log.Info("forwarding events", "address", events.Redact(opts.EventsAddr))
	return rec.ForwardTo(fwd), nil
}

func ptr[T any](v T) *T { return &v }
