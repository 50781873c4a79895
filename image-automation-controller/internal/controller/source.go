package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Flux's GitRepository, read as unstructured so that Flux's types are not
// a dependency.
const (
	fluxSourceGroup       = "source.toolkit.fluxcd.io"
	gitRepositoryKind     = "GitRepository"
	defaultSourceVersion  = "v1"
	defaultFluxBranch     = "master"
	defaultGitTimeout     = 60 * time.Second
	gitRepositoryResource = "gitrepositories"
)

// validateSpec checks what the spec alone decides, before anything is read:
// the update strategy, the policy selector and the message template.
func validateSpec(obj *imagev1.ImageUpdateAutomation) (labels.Selector, error) {
	if u := obj.Spec.Update; u != nil && u.Strategy != imagev1.UpdateStrategySetters {
		return nil, conditions.Stallf(imagev1.UnsupportedUpdateStrategyReason,
			"update strategy %q is not supported: the only strategy is Setters", u.Strategy)
	}
	sel, err := policySelector(obj)
	if err != nil {
		return nil, conditions.Stallf(imagev1.InvalidPolicySelectorReason, "invalid spec.policySelector: %s", err)
	}
	c := obj.Spec.GitSpec.Commit
	if err := commitmsg.Validate(c.MessageTemplate, c.MessageTemplateValues); err != nil {
		return nil, conditions.Stallf(imagev1.InvalidMessageTemplateReason, "spec.git.commit.messageTemplate: %s", err)
	}
	return sel, nil
}

// policySelector selects the automation's policies; all without a selector.
func policySelector(obj *imagev1.ImageUpdateAutomation) (labels.Selector, error) {
	if obj.Spec.PolicySelector == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(obj.Spec.PolicySelector)
}

// source is where the automation's jobs read and write, and how the
// controller reaches it to read the branch head.
type source struct {
	repository updatev1.GitRepositorySpec
	ref        updatev1.GitRepositoryRef
	remote     *git.Auth
	// describe names the source in messages.
	describe string
}

// resolveSource reads the repository from spec.git.repository or the Flux
// GitRepository of spec.sourceRef, the checkout ref (spec.git.checkout
// wins over the GitRepository's), and the credentials. A problem with the
// spec, the source or its Secrets is a *conditions.Failure (Stalled, or
// retried soon when something is missing); any other error is transient.
func (r *ImageUpdateAutomationReconciler) resolveSource(ctx context.Context, obj *imagev1.ImageUpdateAutomation) (*source, error) {
	src := &source{}
	if ref := obj.Spec.SourceRef; ref != nil {
		if err := r.fluxSource(ctx, obj, ref, src); err != nil {
			return nil, err
		}
	} else {
		if obj.Spec.GitSpec.Repository == nil {
			return nil, conditions.Stallf(conditions.InvalidSpecReason, "set spec.sourceRef or spec.git.repository")
		}
		if obj.Spec.GitSpec.Checkout == nil {
			return nil, conditions.Stallf(conditions.InvalidSpecReason, "spec.git.checkout is required with spec.git.repository")
		}
		src.repository = *obj.Spec.GitSpec.Repository.DeepCopy()
		src.describe = "spec.git.repository"
		if err := checkURL(src.repository.URL, src.describe); err != nil {
			return nil, err
		}
	}
	if c := obj.Spec.GitSpec.Checkout; c != nil {
		src.ref = c.Reference
	}
	if src.repository.Timeout == nil {
		src.repository.Timeout = &metav1.Duration{Duration: defaultGitTimeout}
	}
	if !hasRef(src.ref) {
		return nil, conditions.Stallf(conditions.InvalidSpecReason, "the checkout ref sets none of branch, tag, semver, name or commit")
	}
	if src.ref.Branch == "" {
		if p := obj.Spec.GitSpec.Push; p == nil || (p.Branch == "" && p.Refspec == "") {
			return nil, conditions.Stallf(conditions.InvalidSpecReason,
				"the checkout ref is not a branch, so there is no branch to push to: set spec.git.push.branch or spec.git.push.refspec")
		}
	}
	if err := r.credentials(ctx, obj, src); err != nil {
		return nil, err
	}
	return src, nil
}

// fluxSource reads a Flux GitRepository into src.
func (r *ImageUpdateAutomationReconciler) fluxSource(ctx context.Context, obj *imagev1.ImageUpdateAutomation,
	ref *imagev1.CrossNamespaceSourceReference, src *source) error {
	if ref.Kind != "" && ref.Kind != gitRepositoryKind {
		return conditions.Stallf(imagev1.InvalidSourceReason, "spec.sourceRef.kind %q is not supported: only GitRepository", ref.Kind)
	}
	gv := schema.GroupVersion{Group: fluxSourceGroup, Version: defaultSourceVersion}
	if ref.APIVersion != "" {
		parsed, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || parsed.Group != fluxSourceGroup || parsed.Version == "" {
			return conditions.Stallf(imagev1.InvalidSourceReason, "spec.sourceRef.apiVersion %q is not a version of %s", ref.APIVersion, fluxSourceGroup)
		}
		gv = parsed
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if key.Namespace == "" {
		key.Namespace = obj.Namespace
	}
	if key.Namespace != obj.Namespace && r.NoCrossNamespaceRefs {
		return conditions.Stallf(conditions.AccessDeniedReason,
			"cannot use GitRepository %s from namespace %s: cross-namespace references are disabled (--no-cross-namespace-refs)", key, obj.Namespace)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gv.WithKind(gitRepositoryKind))
	// Unstructured objects are read from the API server, not the cache.
	if err := r.Get(ctx, key, u); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return conditions.Retryf(imagev1.SourceNotFoundReason, "GitRepository %s not found", key)
		case apimeta.IsNoMatchError(err):
			return conditions.Stallf(imagev1.SourceNotFoundReason, "the %s kind (%s) is not installed", gitRepositoryKind, gv)
		}
		return fmt.Errorf("reading GitRepository %s: %w", key, err)
	}
	src.describe = "GitRepository " + key.String()
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(spec, path...)
		return s
	}
	src.repository.URL = str("url")
	if err := checkURL(src.repository.URL, src.describe); err != nil {
		return err
	}
	if p := str("provider"); p != "" && p != "generic" {
		return conditions.Stallf(imagev1.InvalidSourceReason, "%s uses provider %q: only generic credentials (secretRef) are supported", src.describe, p)
	}
	if n := str("secretRef", "name"); n != "" {
		src.repository.SecretRef = &meta.LocalObjectReference{Name: n}
	}
	if n := str("proxySecretRef", "name"); n != "" {
		src.repository.ProxySecretRef = &meta.LocalObjectReference{Name: n}
	}
	if t := str("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return conditions.Stallf(imagev1.InvalidSourceReason, "%s has an invalid spec.timeout %q", src.describe, t)
		}
		src.repository.Timeout = &metav1.Duration{Duration: d}
	}
	if _, ok := spec["ref"]; ok {
		src.ref = updatev1.GitRepositoryRef{
			Branch: str("ref", "branch"), Tag: str("ref", "tag"), SemVer: str("ref", "semver"),
			Name: str("ref", "name"), Commit: str("ref", "commit"),
		}
	} else {
		src.ref = updatev1.GitRepositoryRef{Branch: defaultFluxBranch}
	}
	return nil
}

// credentials reads the Secrets the repository names. They are read in the
// automation's namespace, where its UpdateJobs run and read them too, also
// when the GitRepository is in another namespace; directly, so the
// controller needs no cluster-wide list and watch of Secrets.
func (r *ImageUpdateAutomationReconciler) credentials(ctx context.Context, obj *imagev1.ImageUpdateAutomation, src *source) error {
	var secret, proxy string
	if ref := src.repository.SecretRef; ref != nil {
		secret = ref.Name
	}
	if ref := src.repository.ProxySecretRef; ref != nil {
		proxy = ref.Name
	}
	auth, _, err := git.ReadAuth(ctx, r.APIReader, obj.Namespace, src.repository.URL, secret, proxy)
	switch {
	case errors.Is(err, git.ErrSecretNotFound):
		return conditions.Retryf(conditions.SecretNotFoundReason, "%s, for %s; the UpdateJobs run in namespace %s and read it there",
			err, src.describe, obj.Namespace)
	case errors.Is(err, git.ErrInvalidCredentials):
		return conditions.Stallf(imagev1.InvalidSecretReason, "credentials of %s: %s", src.describe, err)
	case err != nil:
		return err
	}
	src.remote = auth
	return nil
}

// checkURL accepts the URLs an UpdateJob accepts: the one rule of pkg/git.
func checkURL(raw, describe string) error {
	if raw == "" {
		return conditions.Stallf(imagev1.InvalidSourceReason, "%s has no URL", describe)
	}
	if _, err := git.ParseEndpoint(raw); err != nil {
		return conditions.Stallf(imagev1.InvalidSourceReason, "%s: %s", describe, err)
	}
	return nil
}

func hasRef(r updatev1.GitRepositoryRef) bool {
	return r.Branch != "" || r.Tag != "" || r.SemVer != "" || r.Name != "" || r.Commit != ""
}

// branchOnly reports whether the ref names just a branch, whose head
// ls-remote can read.
func branchOnly(r updatev1.GitRepositoryRef) bool {
	return r.Branch != "" && r.Tag == "" && r.SemVer == "" && r.Name == "" && r.Commit == ""
}

// canShortCircuit reports whether the branch head tells all that changed in
// git: the job checks out a branch and pushes back to it, and nothing else.
// With another push branch or a refspec, drift there is invisible (as in
// Flux), so every interval makes a job.
func canShortCircuit(ref updatev1.GitRepositoryRef, push *updatev1.PushSpec) bool {
	if !branchOnly(ref) {
		return false
	}
	return push == nil || ((push.Branch == "" || push.Branch == ref.Branch) && push.Refspec == "")
}
