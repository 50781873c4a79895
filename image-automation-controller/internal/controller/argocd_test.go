package controller

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
)

func argoSource(images []string, written ...argocd.Source) gitsource.Source {
	return gitsource.Source{Describe: "Application argocd/shop", Path: "apps", Applications: []*gitsource.Application{{
		Application:   argocd.Application{Name: "shop", Namespace: "argocd", Images: images, Sources: written},
		Written:       written,
		ArgoNamespace: "argocd",
	}}}
}

// A job of strategy ArgoCD writes one override file per written source,
// with the policies whose image the Application runs at another tag (in
// the spelling its manifests use) and those spec.update.argoCD forces,
// with their Helm names; other policies stay out, named or not, and
// strategy Setters writes no file.
func TestArgoCDOverridesFollowWhatTheApplicationRuns(t *testing.T) {
	src := argoSource([]string{"podinfo:6.5.0", "docker.io/library/redis:7.2"},
		argocd.Source{Index: 0, Path: "apps/web", Type: argocd.TypeKustomize},
		argocd.Source{Index: 1, Path: "apps/api/", Type: argocd.TypeHelm})
	setters := []updatev1.PolicySetter{
		{Policy: "argocd:podinfo", ImageRef: meta.ImageRef{Name: "docker.io/library/podinfo", Tag: "6.5.1"}},
		{Policy: "argocd:redis", ImageRef: meta.ImageRef{Name: "docker.io/library/redis", Tag: "7.4"}},
		{Policy: "argocd:other", ImageRef: meta.ImageRef{Name: "ghcr.io/org/other", Tag: "1"}},
		{Policy: "argocd:sidecar", ImageRef: meta.ImageRef{Name: "ghcr.io/org/sidecar", Tag: "2"}},
	}
	spec := &imagev1.ImageUpdateAutomationSpec{Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD,
		ArgoCD: &imagev1.ArgoCDUpdate{Images: []imagev1.ArgoCDImage{{Policy: "sidecar", HelmImageSpec: "sidecar.image", Force: true}, {Policy: "other", HelmImageName: "other.image"}}}}}
	images := []updatev1.ArgoCDOverrideImage{
		{Policy: "argocd:podinfo", KustomizeName: "podinfo"},
		{Policy: "argocd:redis", KustomizeName: "docker.io/library/redis"},
		{Policy: "argocd:sidecar", HelmImageSpec: "sidecar.image"},
	}
	want := []updatev1.ArgoCDOverride{
		{File: "apps/web/.argocd-source-shop.yaml", Type: "Kustomize", Images: images},
		{File: "apps/api/.argocd-source-shop.yaml", Type: "Helm", Images: images},
	}
	if got := argoCDOverrides(spec, src, setters); !reflect.DeepEqual(got, want) {
		t.Errorf("overrides\n%+v\nwant\n%+v", got, want)
	}
	// An image the Application already runs as the policy says needs no
	// override: once Argo CD runs the new podinfo, only redis is written.
	src.Applications[0].Images[0] = "podinfo:6.5.1"
	if got := argoCDOverrides(spec, src, setters); len(got) != 2 || len(got[0].Images) != 2 || got[0].Images[0].Policy != "argocd:redis" {
		t.Errorf("with podinfo running 6.5.1: %+v", got)
	}
	job := jobSpec(spec, src, setters, nil)
	if job.Update.Path != "apps" || len(job.Update.ArgoCD) != 2 {
		t.Errorf("job update %+v", job.Update)
	}
	spec.Update.Strategy = imagev1.UpdateStrategySetters
	if got := jobSpec(spec, src, setters, nil); got.Update.ArgoCD != nil || got.Update.Path != "apps" {
		t.Errorf("strategy Setters: update %+v", got.Update)
	}
}

// Strategy ArgoCD needs an Application whose sources Argo CD renders as
// Kustomize or Helm; an Application not compared yet is waited for.
func TestCheckArgoCD(t *testing.T) {
	obj := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "a"},
		Spec: imagev1.ImageUpdateAutomationSpec{Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD}}}
	for _, tc := range []struct {
		name    string
		src     gitsource.Source
		reason  string
		stalled bool
	}{
		{"kustomize", argoSource(nil, argocd.Source{Type: argocd.TypeKustomize}), "", false},
		{"not an Application", gitsource.Source{Describe: "GitRepository argocd/fleet"}, imagev1.UnsupportedUpdateStrategyReason, true},
		{"directory", argoSource(nil, argocd.Source{Type: "Directory"}), imagev1.UnsupportedUpdateStrategyReason, true},
		{"not compared yet", argoSource(nil, argocd.Source{}), conditions.DependencyNotReadyReason, false},
	} {
		err := checkArgoCD(obj, &tc.src)
		f, _ := err.(*conditions.Failure)
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.reason != "" && (f == nil || f.Reason != tc.reason || f.Stalled != tc.stalled):
			t.Errorf("%s: %v, want reason %s (stalled %v)", tc.name, err, tc.reason, tc.stalled)
		}
	}
}

// application creates an Argo CD Application of fleet's main branch with
// the status Argo CD writes once it has compared it: how it rendered the
// source and the images its Pods run.
func (f *fixture) application(name, path, sourceType string, labels map[string]string, images ...string) {
	f.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"project":     "default",
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "default"},
			"source":      map[string]any{"repoURL": f.git.RepoURL("fleet"), "path": path, "targetRevision": "main"},
		},
		"status": map[string]any{"sourceType": sourceType, "summary": map[string]any{"images": toAny(images)}},
	}}
	u.SetGroupVersionKind(gitsource.ApplicationGVK)
	u.SetNamespace(f.ns)
	u.SetName(name)
	u.SetLabels(labels)
	create(f.t, u)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// One automation over the Applications spec.applicationSelector selects
// makes one UpdateJob for all of them: their repository and branch, their
// common path, and the override file of each source with the policies the
// Application runs. An Application labelled into the selection later makes
// a new job even though neither the branch nor a policy changed.
func TestApplicationSelectorMakesOneJobWithEachOverrideFile(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	shop := map[string]string{"team": "shop"}
	f.application("web", "apps/web", "Kustomize", shop, "ghcr.io/org/app:1.0.0")
	f.application("api", "apps/api", "Helm", shop, "ghcr.io/org/app:1.0.0", "docker.io/library/redis:7")
	f.application("other", "elsewhere", "Kustomize", map[string]string{"team": "other"}, "ghcr.io/org/app:1.0.0")
	f.policy("app", nil, "1.1.0")
	a := f.automation("shop", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
		a.Spec.ApplicationSelector = &metav1.LabelSelector{MatchLabels: shop}
		a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD}
	})
	job := waitJobs(t, f.ns, 1)[0]
	images := []updatev1.ArgoCDOverrideImage{{Policy: f.ns + ":app", KustomizeName: "ghcr.io/org/app"}}
	want := []updatev1.ArgoCDOverride{
		{File: "apps/api/.argocd-source-" + f.ns + "_api.yaml", Type: "Helm", Images: images},
		{File: "apps/web/.argocd-source-" + f.ns + "_web.yaml", Type: "Kustomize", Images: images},
	}
	if job.Spec.Repository.URL != f.git.RepoURL("fleet") || job.Spec.Checkout.Reference.Branch != "main" || job.Spec.Update.Path != "apps" ||
		!reflect.DeepEqual(job.Spec.Update.ArgoCD, want) {
		t.Fatalf("job spec %+v\nwant override files %+v", job.Spec, want)
	}
	finish(t, &job, updatev1.UpdateJobSucceeded, nil)
	waitAutomation(t, a, "the job recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.Name == job.Name
	})

	f.application("cart", "apps/cart", "Kustomize", shop, "ghcr.io/org/app:1.0.0")
	second := waitJobs(t, f.ns, 2)
	next := unfinished(t, second)
	if len(next.Spec.Update.ArgoCD) != 3 || next.Spec.Update.ArgoCD[1].File != "apps/cart/.argocd-source-"+f.ns+"_cart.yaml" {
		t.Errorf("after a new Application: override files %+v", next.Spec.Update.ArgoCD)
	}
}
