package reconcile

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// The preamble (get, finalizer, suspend, reconcile request, the one patch,
// AfterPatch) is the skeleton's contract with the API server, so it is
// tested against a real one, with a real kind: ImageRepository.

const testFinalizer = "test.toolkit.dev/finalizer"

type repoScope = Scope[*imagev1.ImageRepository, struct{}]

// harness is a Kind under test with a record of what it was asked to do,
// and a client that counts status writes.
type harness struct {
	kind         *Kind[*imagev1.ImageRepository, struct{}]
	reg          *prometheus.Registry
	mu           sync.Mutex
	ran          []string
	requests     []string
	finalized    []string
	forgotten    []string
	afterPatch   int
	failures     []string
	statusWrites int
}

func (h *harness) note(list *[]string, v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*list = append(*list, v)
}

func newHarness(t *testing.T, env *testenv.Env, phases ...Phase[*imagev1.ImageRepository, struct{}]) *harness {
	t.Helper()
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{reg: prometheus.NewRegistry()}
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			h.mu.Lock()
			h.statusWrites++
			h.mu.Unlock()
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	rec := metrics.NewRecorder("preamble")
	rec.MustRegister(h.reg)
	if len(phases) == 0 {
		phases = []Phase[*imagev1.ImageRepository, struct{}]{{Name: "ready", Run: func(_ context.Context, s *repoScope) (Result, error) {
			h.note(&h.ran, s.Obj.Name)
			conditions.MarkReady(s.Obj, conditions.SucceededReason, "done")
			return Continue, nil
		}}}
	}
	h.kind = &Kind[*imagev1.ImageRepository, struct{}]{
		Name: imagev1.ImageRepositoryKind, Client: c, Metrics: rec,
		New:       func() *imagev1.ImageRepository { return &imagev1.ImageRepository{} },
		Suspended: func(o *imagev1.ImageRepository) bool { return o.Spec.Suspend },
		Request:   func(o *imagev1.ImageRepository) *meta.ReconcileRequestStatus { return &o.Status.ReconcileRequestStatus },
		RequestHandled: func(namespace, name, value string) {
			h.note(&h.requests, name+"="+value)
		},
		Finalizer: testFinalizer, AddFinalizer: true,
		Finalize: func(_ context.Context, o *imagev1.ImageRepository) error {
			h.note(&h.finalized, o.Name)
			return nil
		},
		Forget: func(key client.ObjectKey) { h.note(&h.forgotten, key.Name) },
		Phases: phases,
		OnFailure: func(_ context.Context, s *repoScope, f *conditions.Failure, _ string) {
			h.note(&h.failures, s.Phase+":"+f.Reason)
		},
		AfterPatch: func(context.Context, *repoScope) error {
			h.mu.Lock()
			h.afterPatch++
			h.mu.Unlock()
			return nil
		},
	}
	return h
}

// newHarnessAround is a harness whose phases are: one that names the
// image in the status, middle, and one that must never run (recorded in
// h.ran).
func newHarnessAround(t *testing.T, env *testenv.Env, middle Phase[*imagev1.ImageRepository, struct{}]) *harness {
	var h *harness
	h = newHarness(t, env,
		Phase[*imagev1.ImageRepository, struct{}]{Name: "name", Run: func(_ context.Context, s *repoScope) (Result, error) {
			s.Obj.Status.CanonicalImageName = "registry.example.com/team/app"
			return Continue, nil
		}},
		middle,
		Phase[*imagev1.ImageRepository, struct{}]{Name: "never", Run: func(context.Context, *repoScope) (Result, error) {
			h.note(&h.ran, "never")
			return Continue, nil
		}},
	)
	return h
}

// suspended reads the suspend gauge of name; -1 when it has no series.
func (h *harness) suspended(t *testing.T, name string) float64 {
	t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !strings.HasSuffix(f.GetName(), "_suspended") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

func (h *harness) reconcile(t *testing.T, obj client.Object) ctrl.Result {
	t.Helper()
	res, err := h.kind.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func newRepository(t *testing.T, env *testenv.Env, ns, name string, mutate ...func(*imagev1.ImageRepository)) *imagev1.ImageRepository {
	t.Helper()
	obj := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: imagev1.ImageRepositorySpec{Image: "registry.example.com/team/app", Interval: metav1.Duration{Duration: time.Hour}}}
	for _, m := range mutate {
		m(obj)
	}
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func fetch(t *testing.T, env *testenv.Env, obj *imagev1.ImageRepository) *imagev1.ImageRepository {
	t.Helper()
	fresh := &imagev1.ImageRepository{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), fresh); err != nil {
		t.Fatal(err)
	}
	return fresh
}

func TestPreambleAgainstAPIServer(t *testing.T) {
	env, err := testenv.Start(testenv.ReflectorChart)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ns := env.Namespace(t)
	ctx := context.Background()

	t.Run("suspend stops the phases and is recorded", func(t *testing.T) {
		h := newHarness(t, env)
		obj := newRepository(t, env, ns, "suspended", func(o *imagev1.ImageRepository) { o.Spec.Suspend = true })
		if res := h.reconcile(t, obj); res != (ctrl.Result{}) {
			t.Errorf("suspended: result %+v, want none", res)
		}
		if len(h.ran) != 0 {
			t.Errorf("phases ran while suspended: %v", h.ran)
		}
		if got := h.suspended(t, "suspended"); got != 1 {
			t.Errorf("suspend gauge %v while suspended, want 1", got)
		}
		obj = fetch(t, env, obj)
		obj.Spec.Suspend = false
		if err := env.Client.Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
		h.reconcile(t, obj)
		if len(h.ran) != 1 {
			t.Errorf("phases ran %v after resuming, want once", h.ran)
		}
		if got := h.suspended(t, "suspended"); got != -1 {
			t.Errorf("suspend gauge %v after resuming, want none", got)
		}
	})

	t.Run("a reconcile request is taken once", func(t *testing.T) {
		h := newHarness(t, env)
		obj := newRepository(t, env, ns, "requested", func(o *imagev1.ImageRepository) {
			o.Annotations = map[string]string{meta.ReconcileRequestAnnotation: "first"}
		})
		h.reconcile(t, obj)
		h.reconcile(t, obj)
		if got := strings.Join(h.requests, ","); got != "requested=first" {
			t.Errorf("requests handled %q, want the one request once", got)
		}
		if got := fetch(t, env, obj).Status.LastHandledReconcileAt; got != "first" {
			t.Errorf("lastHandledReconcileAt %q, want first", got)
		}
	})

	t.Run("the finalizer is added and Finalize runs on delete", func(t *testing.T) {
		h := newHarness(t, env)
		obj := newRepository(t, env, ns, "deleted")
		h.reconcile(t, obj)
		if !controllerutil.ContainsFinalizer(fetch(t, env, obj), testFinalizer) {
			t.Fatal("no finalizer after the first reconcile")
		}
		if err := env.Client.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
		if len(h.finalized) != 0 {
			t.Fatalf("finalized %v before the reconcile", h.finalized)
		}
		h.reconcile(t, obj)
		if got := strings.Join(h.finalized, ","); got != "deleted" {
			t.Errorf("finalized %q, want deleted", got)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), &imagev1.ImageRepository{}); !apierrors.IsNotFound(err) {
			t.Errorf("after Finalize the object is still there (get: %v)", err)
		}
		h.reconcile(t, obj)
		if got := strings.Join(h.forgotten, ","); got != "deleted" {
			t.Errorf("forgotten %q, want deleted", got)
		}
		if got := h.suspended(t, "deleted"); got != -1 {
			t.Errorf("the gone object keeps a suspend series (%v)", got)
		}
	})

	t.Run("without AddFinalizer, no finalizer is added and an earlier one is released", func(t *testing.T) {
		h := newHarness(t, env)
		h.kind.AddFinalizer = false
		fresh := newRepository(t, env, ns, "unfinalized")
		h.reconcile(t, fresh)
		if got := fetch(t, env, fresh); len(got.Finalizers) != 0 {
			t.Errorf("finalizers %v after the first reconcile, want none", got.Finalizers)
		}
		// An object an earlier version finalized is released on delete.
		old := newRepository(t, env, ns, "finalized-before", func(o *imagev1.ImageRepository) {
			o.Finalizers = []string{testFinalizer}
		})
		if err := env.Client.Delete(ctx, old); err != nil {
			t.Fatal(err)
		}
		h.reconcile(t, old)
		if got := strings.Join(h.finalized, ","); got != "finalized-before" {
			t.Errorf("finalized %q, want finalized-before", got)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), &imagev1.ImageRepository{}); !apierrors.IsNotFound(err) {
			t.Errorf("the object an earlier version finalized is still there (get: %v)", err)
		}
	})

	t.Run("an optimistic-lock conflict requeues without AfterPatch", func(t *testing.T) {
		h := newHarness(t, env, Phase[*imagev1.ImageRepository, struct{}]{Name: "race", Run: func(ctx context.Context, s *repoScope) (Result, error) {
			// Another writer changes the object while this reconcile works.
			other := s.Obj.DeepCopy()
			other.Labels = map[string]string{"touched": "yes"}
			if err := env.Client.Update(ctx, other); err != nil {
				return Continue, err
			}
			conditions.MarkReady(s.Obj, conditions.SucceededReason, "done")
			return Continue, nil
		}})
		h.kind.OptimisticLock = true
		obj := newRepository(t, env, ns, "conflict", func(o *imagev1.ImageRepository) {
			o.Finalizers = []string{testFinalizer}
		})
		res := h.reconcile(t, obj)
		if res.RequeueAfter != ConflictRetry {
			t.Errorf("result %+v after a conflict, want a requeue after %s", res, ConflictRetry)
		}
		if h.afterPatch != 0 {
			t.Errorf("AfterPatch ran %d times after a conflict", h.afterPatch)
		}
		if conditions.Get(fetch(t, env, obj), conditions.ReadyCondition) != nil {
			t.Error("the conflicting status was written")
		}
	})

	t.Run("a refused mid-reconcile write under the lock ends the reconcile with nothing recorded", func(t *testing.T) {
		var h *harness
		h = newHarness(t, env,
			Phase[*imagev1.ImageRepository, struct{}]{Name: "claim", Run: func(ctx context.Context, s *repoScope) (Result, error) {
				// Another replica claims the object first.
				other := s.Obj.DeepCopy()
				other.Labels = map[string]string{"claimed-by": "other"}
				if err := env.Client.Update(ctx, other); err != nil {
					return Continue, err
				}
				conditions.MarkReconciling(s.Obj, conditions.ProgressingReason, "claimed by this one")
				return Continue, s.Patch(ctx)
			}},
			Phase[*imagev1.ImageRepository, struct{}]{Name: "work", Run: func(_ context.Context, s *repoScope) (Result, error) {
				h.note(&h.ran, "work")
				return Continue, nil
			}},
		)
		h.kind.OptimisticLock = true
		obj := newRepository(t, env, ns, "refused", func(o *imagev1.ImageRepository) {
			o.Finalizers = []string{testFinalizer}
		})
		res := h.reconcile(t, obj)
		if res.RequeueAfter != ConflictRetry {
			t.Errorf("result %+v after a refused claim, want a requeue after %s", res, ConflictRetry)
		}
		if len(h.ran) != 0 || len(h.failures) != 0 || h.afterPatch != 0 {
			t.Errorf("after a refused claim: ran %v, failures %v, AfterPatch %d; want none", h.ran, h.failures, h.afterPatch)
		}
		if h.statusWrites != 1 || len(fetch(t, env, obj).Status.Conditions) != 0 {
			t.Errorf("%d status writes, conditions %v: want only the refused one", h.statusWrites, fetch(t, env, obj).Status.Conditions)
		}
	})

	t.Run("what a phase stored itself is not written again", func(t *testing.T) {
		h := newHarness(t, env, Phase[*imagev1.ImageRepository, struct{}]{Name: "own", Run: func(ctx context.Context, s *repoScope) (Result, error) {
			// The kind's own guarded write, on a copy.
			own := s.Obj.DeepCopy()
			conditions.MarkReady(own, conditions.SucceededReason, "stored by the phase")
			if err := env.Client.Status().Update(ctx, own); err != nil {
				return Continue, err
			}
			s.Stored(own)
			return Continue, nil
		}})
		h.kind.OptimisticLock = true
		obj := newRepository(t, env, ns, "stored", func(o *imagev1.ImageRepository) {
			o.Finalizers = []string{testFinalizer}
		})
		if res := h.reconcile(t, obj); res.RequeueAfter == ConflictRetry {
			t.Errorf("result %+v: the final write conflicted with the phase's own", res)
		}
		if h.statusWrites != 0 || h.afterPatch != 1 {
			t.Errorf("%d final status writes, AfterPatch %d; want none and once", h.statusWrites, h.afterPatch)
		}
		if c := conditions.Get(fetch(t, env, obj), conditions.ReadyCondition); c == nil || c.Message != "stored by the phase" {
			t.Errorf("Ready %+v, want the phase's own", c)
		}
	})

	t.Run("a phase that waits on another object writes nothing", func(t *testing.T) {
		h := newHarnessAround(t, env, Phase[*imagev1.ImageRepository, struct{}]{Name: "dependency",
			Run: func(context.Context, *repoScope) (Result, error) { return Wait(time.Minute), nil }})
		obj := newRepository(t, env, ns, "waiting")
		if res := h.reconcile(t, obj); res.RequeueAfter != time.Minute {
			t.Errorf("requeue after %s, want the wait's minute", res.RequeueAfter)
		}
		if h.statusWrites != 0 || h.afterPatch != 0 || len(h.ran) != 0 {
			t.Errorf("%d status writes, AfterPatch %d, later phases %v; want none", h.statusWrites, h.afterPatch, h.ran)
		}
		got := fetch(t, env, obj)
		if got.Status.CanonicalImageName != "" || len(got.Finalizers) != 0 || got.ResourceVersion != obj.ResourceVersion {
			t.Errorf("the server's object changed while waiting: %+v", got)
		}
	})

	t.Run("the status is written once when a phase fails", func(t *testing.T) {
		h := newHarnessAround(t, env, Phase[*imagev1.ImageRepository, struct{}]{Name: "scan",
			Run: func(context.Context, *repoScope) (Result, error) {
				return Continue, conditions.Retryf(conditions.AuthenticationFailedReason, "registry said no").After(time.Minute)
			}})
		obj := newRepository(t, env, ns, "failing", func(o *imagev1.ImageRepository) {
			o.Finalizers = []string{testFinalizer}
		})
		if res := h.reconcile(t, obj); res.RequeueAfter != time.Minute {
			t.Errorf("requeue after %s, want the failure's minute", res.RequeueAfter)
		}
		if h.statusWrites != 1 {
			t.Errorf("%d status writes, want 1", h.statusWrites)
		}
		if len(h.ran) != 0 {
			t.Errorf("a phase after the failure ran: %v", h.ran)
		}
		if got := strings.Join(h.failures, ","); got != "scan:"+conditions.AuthenticationFailedReason {
			t.Errorf("OnFailure told %q", got)
		}
		got := fetch(t, env, obj)
		if got.Status.CanonicalImageName == "" {
			t.Error("the work of the phase before the failure was not written")
		}
		if c := conditions.Get(got, conditions.ReadyCondition); c == nil || c.Status != metav1.ConditionFalse ||
			c.Reason != conditions.AuthenticationFailedReason || c.Message != "registry said no" {
			t.Errorf("Ready %+v, want False/AuthenticationFailed", c)
		}
		if h.afterPatch != 1 {
			t.Errorf("AfterPatch ran %d times, want once after the write", h.afterPatch)
		}
	})
}
