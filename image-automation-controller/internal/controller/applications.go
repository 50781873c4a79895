package controller

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
)

// Argo CD Applications are read from a cache of their own, not from the
// API server on every run: an automation over a thousand Applications
// would otherwise list them all at every interval and every policy
// change. The cache's informer starts the first time an automation reads
// Applications (a cluster without Argo CD starts none, and one that
// installs it later is served then), and is also the watch that brings
// automations back when an Application changes in a way that changes
// their jobs: its sources (spec), the images it runs
// (status.summary.images), how Argo CD renders it (status.sourceType),
// its labels. Argo CD rewrites an Application's status on every refresh
// (sync and health, the resource tree, the operation), which changes
// nothing an automation writes, so those updates pass no event.
//
// The cache is not the manager's: the manager's has the shard's label
// selector (--watch-label-selector), which Applications do not carry. It
// keeps of each Application only what is read here (spec, labels, the
// status fields above), so that Argo CD's large statuses are not held in
// memory.

// applicationsIndex indexes automations with spec.applicationSelector by
// namespace: an Application's change concerns only those of its own.
const applicationsIndex = ".spec.applicationSelector"

// applications is the lazily started Application cache and watch.
type applications struct {
	cache cache.Cache
	// ctrl and handler are where ensure adds the watch.
	ctrl    controller.Controller
	handler handler.EventHandler

	mu      sync.Mutex
	watched bool
}

// newApplications makes the Application cache (namespace: where the
// controller watches; all when empty) and adds it to the manager, which
// starts it; it holds no informer until ensure.
func newApplications(mgr ctrl.Manager, namespace string) (*applications, error) {
	opts := cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		DefaultTransform: trimApplication}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return nil, fmt.Errorf("the Application cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return &applications{cache: c}, nil
}

// ensure watches Applications unless they are watched already; an error
// (a *meta.NoKindMatchError when Argo CD is not installed) says they
// cannot be.
func (a *applications) ensure(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.watched {
		return nil
	}
	// A kind the cluster does not serve fails here, before any watch.
	// The first list may not succeed (the controller may not list
	// Applications): the run waits for it a while, not for ever.
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if _, err := a.cache.GetInformer(sctx, applicationObject()); err != nil {
		if sctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("the Applications were not listed within %s (may the controller list and watch applications.argoproj.io?): %w", syncTimeout, err)
		}
		return err
	}
	if err := a.ctrl.Watch(crsource.Kind[client.Object](a.cache, applicationObject(), a.handler, applicationChanged{})); err != nil {
		return fmt.Errorf("watching Applications: %w", err)
	}
	a.watched = true
	return nil
}

// syncTimeout bounds the wait for the first list of Applications.
const syncTimeout = 30 * time.Second

func applicationObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gitsource.ApplicationGVK)
	return u
}

// trimApplication keeps of an Application what automations read.
func trimApplication(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	// kubectl's copy of the whole object, and the operation Argo CD runs.
	if ann := u.GetAnnotations(); ann != nil {
		delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
		u.SetAnnotations(ann)
	}
	delete(u.Object, "operation")
	status, ok := u.Object["status"].(map[string]any)
	if !ok {
		return u, nil
	}
	kept := map[string]any{}
	for _, k := range []string{"sourceType", "sourceTypes"} {
		if v, ok := status[k]; ok {
			kept[k] = v
		}
	}
	if images, ok, _ := unstructured.NestedFieldNoCopy(status, "summary", "images"); ok {
		kept["summary"] = map[string]any{"images": images}
	}
	u.Object["status"] = kept
	return u, nil
}

// applicationChanged passes the Application changes that change an
// automation's jobs (the type's comment).
type applicationChanged struct{ predicate.Funcs }

func (applicationChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*unstructured.Unstructured)
	n, okN := e.ObjectNew.(*unstructured.Unstructured)
	if !okO || !okN {
		return true
	}
	// The cache trimmed both statuses to what automations read.
	return !reflect.DeepEqual(o.Object["spec"], n.Object["spec"]) || !reflect.DeepEqual(o.Object["status"], n.Object["status"]) ||
		!maps.Equal(o.GetLabels(), n.GetLabels())
}

// reader is what gitsource.Resolve reads through: Applications from the
// cache (started on first use), anything else from r.Client.
func (r *ImageUpdateAutomationReconciler) reader() client.Reader {
	if r.apps == nil {
		return r.Client
	}
	return applicationReader{Reader: r.Client, apps: r.apps}
}

type applicationReader struct {
	client.Reader
	apps *applications
}

func (a applicationReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if obj.GetObjectKind().GroupVersionKind() != gitsource.ApplicationGVK {
		return a.Reader.Get(ctx, key, obj, opts...)
	}
	if err := a.apps.ensure(ctx); err != nil {
		return err
	}
	return a.apps.cache.Get(ctx, key, obj, opts...)
}

func (a applicationReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	gvk := list.GetObjectKind().GroupVersionKind()
	if gvk != gitsource.ApplicationGVK.GroupVersion().WithKind(gitsource.ApplicationGVK.Kind+"List") {
		return a.Reader.List(ctx, list, opts...)
	}
	if err := a.apps.ensure(ctx); err != nil {
		return err
	}
	return a.apps.cache.List(ctx, list, opts...)
}

// applicationHandler enqueues the automations an Application concerns,
// before and after a change: those naming it in spec.sourceRef, and those
// of its namespace whose spec.applicationSelector matches its labels
// (old or new: one it stopped matching drops it now, not at its next
// interval).
func (r *ImageUpdateAutomationReconciler) applicationHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueueAdder, apps ...client.Object) {
		seen := map[client.ObjectKey]bool{}
		add := func(key client.ObjectKey) {
			if !seen[key] {
				seen[key] = true
				q.Add(ctrlreconcile.Request{NamespacedName: key})
			}
		}
		for _, app := range apps {
			for _, req := range r.automationsOfSource(gitsource.ApplicationGVK.Kind)(ctx, app) {
				add(req.NamespacedName)
			}
			list := &imagev1.ImageUpdateAutomationList{}
			if err := r.List(ctx, list, client.MatchingFields{applicationsIndex: app.GetNamespace()}); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "listing ImageUpdateAutomations for an Application change")
				continue
			}
			for i := range list.Items {
				au := &list.Items[i]
				if sel, err := metav1.LabelSelectorAsSelector(au.Spec.ApplicationSelector); err == nil && sel.Matches(labels.Set(app.GetLabels())) {
					add(client.ObjectKeyFromObject(au))
				}
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueueAdder) { enqueue(ctx, q, e.Object) },
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueueAdder) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueueAdder) { enqueue(ctx, q, e.Object) },
	}
}
