package controller

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
	"toolkit.dev/image-toolkit/update-job-controller/forges"
	"toolkit.dev/image-toolkit/update-job-controller/internal/transfer"
)

var (
	env *testenv.Env
	// jobMetrics are the suite runner's domain metrics, for assertions.
	jobMetrics *JobMetrics
)

// Short enough for tests to see reclaims and retries in seconds.
const (
	unmanagedLabel = "test.toolkit.dev/unmanaged"
	testLease      = 3 * time.Second
	testBackoff    = 200 * time.Millisecond
	testStepImage  = "image-toolkit/update-job-controller:test"
)

func TestMain(m *testing.M) {
	cacheDir, err := os.MkdirTemp("", "updatejob-cache-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(cacheDir)
	jobMetrics = NewJobMetrics().MustRegister(prometheus.NewRegistry())
	forges.Register() // as main does
	// Jobs labelled unmanaged are invisible to the suite's runner until a
	// test removes the label, e.g. after staging a dead runner's claim.
	unmanaged, err := labels.Parse("!" + unmanagedLabel)
	if err != nil {
		panic(err)
	}
	testenv.MainWith(m, &env, func(o *ctrl.Options) {
		o.Cache.DefaultLabelSelector = unmanaged
	}, func(mgr ctrl.Manager) error {
		return newRunner(mgr, "replica-a", cacheDir, jobMetrics)
	}, testenv.UpdateJobChart, testenv.ReflectorChart)
}

// newRunner sets up an UpdateJob reconciler as a replica would, with its
// own cache directory.
func newRunner(mgr ctrl.Manager, name, cacheDir string, jm *JobMetrics) error {
	cache, err := mirror.NewCache(filepath.Join(cacheDir, "mirrors"))
	if err != nil {
		return err
	}
	work := filepath.Join(cacheDir, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	// Container mode: the transfer server on the loopback, where the
	// tests run the Pods' steps as local processes.
	srv, err := transfer.NewServer(transfer.TokenReviewer{Client: mgr.GetClient()}, "127.0.0.1", 0, nil)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return srv.Serve(ctx, ln) })); err != nil {
		return err
	}
	rec := metrics.NewRecorder("updatejob")
	rec.MustRegister(prometheus.NewRegistry())
	// The controller's own cloud identity, as main sets it up; the
	// protocol tests give the process one (testcloud).
	cloud, err := cloudauth.New(cloudauth.Options{}, nil)
	if err != nil {
		return err
	}
	return (&UpdateJobReconciler{
		Cloud:         cloud,
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Events:        events.New(events.NewWriter(mgr.GetClient(), mgr.GetScheme(), "update-job-controller")),
		Metrics:       rec,
		JobMetrics:    jm,
		Cache:         cache,
		WorkDir:       work,
		Runner:        name,
		LeaseDuration: testLease,
		Backoff:       testBackoff,
		Containers: &Containers{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Transfer: srv,
			Address: ln.Addr().String(), StepImage: testStepImage, Poll: 100 * time.Millisecond, Grace: time.Second,
		},
	}).SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptrTo(true)})
}

func ptrTo[T any](v T) *T { return &v }

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
