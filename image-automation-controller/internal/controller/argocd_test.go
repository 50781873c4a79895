package controller

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

func argoSource(images []string, written ...argocd.Source) gitsource.Source {
	return gitsource.Source{Describe: "Application argocd/shop", Path: "apps", Applications: []*gitsource.Application{{
		Application:   argocd.Application{Name: "shop", Namespace: "argocd", Images: images, Sources: written},
		Written:       written,
		ArgoNamespace: "argocd",
	}}}
}

// A job of strategy ArgoCD writes one override file per written source,
// with the policies whose image the Application runs (in the spelling its
// manifests use) and those spec.update.argoCD lists with their Helm names;
// other policies stay out, and strategy Setters writes no file.
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
		ArgoCD: &imagev1.ArgoCDUpdate{Images: []imagev1.ArgoCDImage{{Policy: "sidecar", HelmImageSpec: "sidecar.image"}}}}}
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
	job := jobSpec(spec, src, setters)
	if job.Update.Path != "apps" || len(job.Update.ArgoCD) != 2 {
		t.Errorf("job update %+v", job.Update)
	}
	spec.Update.Strategy = imagev1.UpdateStrategySetters
	if got := jobSpec(spec, src, setters); got.Update.ArgoCD != nil || got.Update.Path != "apps" {
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
