// Package testenv starts a real control plane (kube-apiserver and etcd from
// bin/testenv, built by `make testenv`) with the image-toolkit CRDs installed,
// for integration tests in every module.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// Charts whose CRDs an environment can install.
const (
	ReflectorChart  = "image-reflector-controller"
	AutomationChart = "image-automation-controller"
	UpdateJobChart  = "update-job-controller"
)

// AllCharts lists every chart with CRDs.
var AllCharts = []string{ReflectorChart, AutomationChart, UpdateJobChart}

// Scheme knows the built-in kinds and all image-toolkit kinds.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, imagev1.AddToScheme, updatev1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // static registration; cannot fail at run time
		}
	}
	return s
}

// RepoRoot finds the workspace root (the directory holding go.work) above
// the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory")
		}
		dir = parent
	}
}

// New returns an environment that installs the CRDs of the given charts.
// KUBEBUILDER_ASSETS wins when set; otherwise bin/testenv is used.
func New(charts ...string) (*envtest.Environment, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "testenv")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make testenv` first", b, assets)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	env.CRDDirectoryPaths = CRDPaths(root, charts...)
	// The ServiceAccount issuer's discovery names its keys at the
	// advertised address (jwks_uri), by default the host's own address,
	// where this loopback API server does not listen: another API server
	// trusting this one's tokens (Flux's generic provider between
	// clusters) must read them here. A loopback address needs the
	// endpoint reconciler off: it writes the kubernetes Service's
	// endpoints, which no test reads.
	env.ControlPlane.GetAPIServer().Configure().
		Set("advertise-address", "127.0.0.1").
		Set("endpoint-reconciler-type", "none")
	return env, nil
}

// CRDPaths are the CRD directories of the given charts of the repository
// at root, for envtest.InstallCRDs into a cluster envtest did not start.
func CRDPaths(root string, charts ...string) []string {
	var paths []string
	for _, c := range charts {
		paths = append(paths, filepath.Join(root, "charts", c, "files", "crds"))
	}
	return paths
}

// Env is a running control plane with a client for it.
type Env struct {
	*envtest.Environment
	Config *rest.Config
	Client client.Client
	// Requests counts the requests of the manager MainWith starts.
	Requests *Requests
}

// Start starts a control plane with the CRDs of the given charts.
func Start(charts ...string) (*Env, error) {
	env, err := New(charts...)
	if err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	// Tests create objects by the thousand; client-go's default of 5 QPS
	// would measure the client, not the system.
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Environment: env, Config: cfg, Client: c}, nil
}

// StartManager runs a manager (no metrics server, no leader election) with
// the reconcilers setup registers, until the returned stop is called.
func (e *Env) StartManager(setup func(ctrl.Manager) error) (stop func(), err error) {
	return e.StartManagerWith(nil, setup)
}

// StartManagerWith is StartManager with a hook to change the manager's
// options, e.g. a cache label selector to run a second manager on a shard.
func (e *Env) StartManagerWith(tune func(*ctrl.Options), setup func(ctrl.Manager) error) (stop func(), err error) {
	return e.StartManagerOn(e.Config, tune, setup)
}

// StartManagerOn is StartManagerWith on a config of the caller's, e.g. one
// whose WrapTransport counts the manager's requests.
func (e *Env) StartManagerOn(cfg *rest.Config, tune func(*ctrl.Options), setup func(ctrl.Manager) error) (stop func(), err error) {
	opts := ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr(true)},
	}
	if tune != nil {
		tune(&opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := setup(mgr); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}, nil
}

// Main starts an environment with the CRDs of charts and, when setup is not
// nil, a manager with its reconcilers; runs the tests; stops everything; and
// exits. Tests reach the environment through *env.
func Main(m *testing.M, env **Env, setup func(ctrl.Manager) error, charts ...string) {
	MainWith(m, env, nil, setup, charts...)
}

// MainWith is Main with a hook to change the manager's options.
func MainWith(m *testing.M, env **Env, tune func(*ctrl.Options), setup func(ctrl.Manager) error, charts ...string) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	e, err := Start(charts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*env = e
	stopManager := func() {}
	if setup != nil {
		e.Requests = &Requests{}
		cfg := rest.CopyConfig(e.Config)
		cfg.WrapTransport = e.Requests.wrap
		if stopManager, err = e.StartManagerOn(cfg, tune, setup); err != nil {
			fmt.Fprintln(os.Stderr, err)
			_ = e.Stop()
			os.Exit(1)
		}
	}
	code := m.Run()
	stopManager()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

var nsCounter atomic.Int64

// Namespace creates a fresh namespace for one test, deleted at its end.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: fmt.Sprintf("test-%d-", nsCounter.Add(1)),
	}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// ExpectInvalid creates obj and fails the test unless the API server
// rejects it as invalid with a message containing want.
func (e *Env) ExpectInvalid(t testing.TB, obj client.Object, want string) {
	t.Helper()
	err := e.Client.Create(context.Background(), obj)
	switch {
	case err == nil:
		t.Errorf("%T %s was accepted; want rejection containing %q", obj, obj.GetName(), want)
		_ = e.Client.Delete(context.Background(), obj)
	case !apierrors.IsInvalid(err):
		t.Errorf("creating %s: want an Invalid error, got %v", obj.GetName(), err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("creating %s: error %q does not contain %q", obj.GetName(), err, want)
	}
}

// CRD returns the installed CustomResourceDefinition of the given name.
func (e *Env) CRD(t testing.TB, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	for _, crd := range e.CRDs {
		if crd.Name == name {
			return crd
		}
	}
	t.Fatalf("CRD %s was not installed", name)
	return nil
}

// ExpectCRD checks the shape every image-toolkit CRD must have: served and
// stored as v1beta1 with a status subresource, in the image-toolkit
// category, with the given short name and default printer columns.
func (e *Env) ExpectCRD(t testing.TB, name, shortName string, columns ...string) {
	t.Helper()
	crd := e.CRD(t, name)
	if !slices.Contains(crd.Spec.Names.ShortNames, shortName) {
		t.Errorf("%s: short names %v lack %q", name, crd.Spec.Names.ShortNames, shortName)
	}
	if !slices.Contains(crd.Spec.Names.Categories, "image-toolkit") {
		t.Errorf("%s: categories %v lack image-toolkit", name, crd.Spec.Names.Categories)
	}
	v := crd.Spec.Versions[0]
	if len(crd.Spec.Versions) != 1 || v.Name != "v1beta1" || !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("%s: want one served, stored v1beta1 with a status subresource, got %+v", name, crd.Spec.Versions)
	}
	var cols []string
	for _, c := range v.AdditionalPrinterColumns {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	if !slices.Equal(cols, columns) {
		t.Errorf("%s: printer columns %v, want %v", name, cols, columns)
	}
}

// Eventually polls cond every 100ms until it returns true or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s (last error: %v)", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }
