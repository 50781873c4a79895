package controller

import (
	"context"
	"errors"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/policy"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
)

// repositoryIndex indexes ImagePolicies by the namespace/name of their
// ImageRepository.
const repositoryIndex = ".spec.imageRepositoryRef"

// dependencyRetry is how soon a policy whose repository is not ready looks
// again; the repository watch usually comes first.
const dependencyRetry = 30 * time.Second

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// ImagePolicyReconciler selects the latest image of ImagePolicy objects.
type ImagePolicyReconciler struct {
	client.Client
	APIReader client.Reader
	Events    *events.Recorder
	Metrics   *metrics.Recorder
	Registry  *registry.Client
	Store     *store.Store
}

// SetupWithManager registers the reconciler and its watch of repositories.
func (r *ImagePolicyReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &imagev1.ImagePolicy{}, repositoryIndex, func(o client.Object) []string {
		p := o.(*imagev1.ImagePolicy)
		return []string{repositoryKey(p).String()}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImagePolicy{}, builder.WithPredicates(predicates.SpecOrRequest())).
		Watches(&imagev1.ImageRepository{},
			handler.EnqueueRequestsFromMapFunc(r.policiesOf),
			builder.WithPredicates(scanChanged{})).
		WithOptions(opts).
		Complete(r)
}

func repositoryKey(p *imagev1.ImagePolicy) types.NamespacedName {
	ns := p.Spec.ImageRepositoryRef.Namespace
	if ns == "" {
		ns = p.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: p.Spec.ImageRepositoryRef.Name}
}

func (r *ImagePolicyReconciler) policiesOf(ctx context.Context, o client.Object) []reconcile.Request {
	var list imagev1.ImagePolicyList
	if err := r.List(ctx, &list, client.MatchingFields{repositoryIndex: client.ObjectKeyFromObject(o).String()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the policies of an ImageRepository")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return reqs
}

// scanChanged passes repository events that can change a policy's answer:
// a new scan revision, readiness, or a spec change (accessFrom).
type scanChanged struct{ predicate.Funcs }

func (scanChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*imagev1.ImageRepository)
	n, okN := e.ObjectNew.(*imagev1.ImageRepository)
	if !okO || !okN {
		return false
	}
	rev := func(r *imagev1.ImageRepository) string {
		if r.Status.LastScanResult == nil {
			return ""
		}
		return r.Status.LastScanResult.Revision
	}
	return rev(o) != rev(n) || o.Generation != n.Generation || conditions.IsReady(o) != conditions.IsReady(n)
}

// Reconcile selects the latest image of one ImagePolicy.
func (r *ImagePolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	start := time.Now()
	obj := &imagev1.ImagePolicy{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(imagev1.ImagePolicyKind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(imagev1.ImagePolicyKind, start)
	r.Metrics.RecordSuspend(imagev1.ImagePolicyKind, obj, obj.Spec.Suspend)
	if obj.Spec.Suspend {
		return ctrl.Result{}, nil
	}
	helper := patch.NewHelper(obj, r.Client)
	defer func() {
		if err := helper.Patch(ctx, obj); err != nil {
			retErr = errors.Join(retErr, err)
		}
		r.Metrics.RecordReady(imagev1.ImagePolicyKind, obj)
	}()
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok {
		obj.Status.SetLastHandledReconcileRequest(v)
	}
	obj.Status.ObservedGeneration = obj.Generation

	latest, requeue, err := r.choose(ctx, obj)
	var f *conditions.Failure
	switch {
	case errors.As(err, &f):
		return ctrl.Result{RequeueAfter: conditions.Apply(obj, err, 0)}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	prev := obj.Status.LatestRef
	if prev == nil || *prev != latest {
		ev := r.Events.WithMetadata(map[string]string{events.MetaLatestImage: latest.String()})
		if prev != nil {
			p := *prev
			obj.Status.ObservedPreviousRef = &p
			ev.WithMetadata(map[string]string{events.MetaPreviousImage: p.String()}).Normal(ctx, obj, "NewImage", "Select",
				"latest image for "+latest.Name+" changed from "+prev.String()+" to "+latest.String())
		} else {
			ev.Normal(ctx, obj, "NewImage", "Select", "latest image for "+latest.Name+" is "+latest.String())
		}
		obj.Status.LatestRef = &latest
		now := metav1.NowMicro()
		obj.Status.LatestRefTime = &now
	}
	conditions.MarkReady(obj, conditions.SucceededReason, "latest image tag for %s resolved to %s", latest.Name, latest.Tag)
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// choose picks the latest image for the policy, and says when to look
// again. What stops it is a *conditions.Failure. Once it has the tags, it
// records how they were evaluated in status.lastSelection.
func (r *ImagePolicyReconciler) choose(ctx context.Context, obj *imagev1.ImagePolicy) (imagev1.ImageRef, time.Duration, error) {
	var none imagev1.ImageRef
	sel, err := policy.New(obj.Spec.Policy, obj.Spec.FilterTags)
	if err != nil {
		// A breakdown by rules that no longer stand would mislead.
		obj.Status.LastSelection = nil
		return none, 0, conditions.Stall(imagev1.InvalidPolicyReason, err)
	}

	repoKey := repositoryKey(obj)
	repo := &imagev1.ImageRepository{}
	if err := r.Get(ctx, repoKey, repo); err != nil {
		if !apierrors.IsNotFound(err) {
			return none, 0, err
		}
		return none, 0, conditions.Retryf(conditions.DependencyNotReadyReason, "ImageRepository %s not found", repoKey).After(dependencyRetry)
	}
	if repoKey.Namespace != obj.Namespace {
		allowed, err := r.allowed(ctx, repo, obj.Namespace)
		if err != nil {
			return none, 0, err
		}
		if !allowed {
			return none, 0, conditions.Retryf(conditions.AccessDeniedReason,
				"ImageRepository %s does not grant access to namespace %s (spec.accessFrom)", repoKey, obj.Namespace)
		}
	}
	if repo.Status.LastScanResult == nil {
		return none, 0, conditions.Retryf(conditions.DependencyNotReadyReason, "ImageRepository %s has not been scanned yet", repoKey).After(dependencyRetry)
	}
	entry, err := r.Store.Get(repoKey.String())
	if err != nil {
		return none, 0, conditions.Retryf(conditions.DependencyNotReadyReason, "no stored tags for ImageRepository %s yet", repoKey).After(dependencyRetry)
	}

	// The breakdown is recorded whether or not a tag is chosen: "why not"
	// is the question it answers most.
	explained := sel.Explain(entry.Tags, imagev1.MaxTopCandidates)
	explained.ScanRevision = entry.Revision
	obj.Status.LastSelection = &explained
	tag := explained.Selected()
	if explained.Kept == 0 {
		return none, 0, conditions.Retry(imagev1.NoMatchingTagReason, &policy.NoMatchError{Considered: explained.Considered,
			Filtered: explained.Filtered, Dropped: explained.Unparsable + explained.OutOfRange})
	}

	latest := imagev1.ImageRef{Name: repo.Spec.Image, Tag: tag}
	prev := obj.Status.LatestRef
	requeue := time.Duration(0)
	switch obj.Spec.DigestReflectionPolicy {
	case imagev1.ReflectAlways:
		requeue = obj.Spec.Interval.Duration
		fallthrough
	case imagev1.ReflectIfNotPresent:
		if obj.Spec.DigestReflectionPolicy == imagev1.ReflectIfNotPresent && prev != nil &&
			prev.Name == latest.Name && prev.Tag == tag && prev.Digest != "" {
			latest.Digest = prev.Digest
			break
		}
		digest, err := r.digest(ctx, repo, tag)
		if err != nil {
			return none, 0, conditions.Retry(imagev1.DigestLookupFailedReason, err).After(dependencyRetry)
		}
		latest.Digest = digest
	}
	return latest, requeue, nil
}

// allowed reports whether the repository's accessFrom selects namespace.
func (r *ImagePolicyReconciler) allowed(ctx context.Context, repo *imagev1.ImageRepository, namespace string) (bool, error) {
	if repo.Spec.AccessFrom == nil {
		return false, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		return false, err
	}
	for _, sel := range repo.Spec.AccessFrom.NamespaceSelectors {
		if labels.SelectorFromSet(sel.MatchLabels).Matches(labels.Set(ns.Labels)) {
			return true, nil
		}
	}
	return false, nil
}

// digest looks up the digest of repo:tag with the repository's credentials.
func (r *ImagePolicyReconciler) digest(ctx context.Context, repo *imagev1.ImageRepository, tag string) (string, error) {
	ref, err := parseImage(repo)
	if err != nil {
		return "", err
	}
	a, err := resolveAccess(ctx, r.APIReader, repo, ref)
	if err != nil {
		return "", err
	}
	if tr, ok := a.opts.Transport.(*http.Transport); ok && tr != defaultTransport {
		defer tr.CloseIdleConnections()
	}
	timeout := repo.Spec.Interval.Duration
	if repo.Spec.Timeout != nil {
		timeout = repo.Spec.Timeout.Duration
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d, err := r.Registry.Digest(ctx, ref.Tag(tag), a.opts)
	if err != nil {
		return "", errors.New(events.Redact(err.Error(), a.secrets...))
	}
	return d, nil
}
