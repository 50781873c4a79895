package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

func ctrlOptions() controller.Options { return controller.Options{MaxConcurrentReconciles: 2} }

func TestCRDsInstalled(t *testing.T) {
	env.ExpectCRD(t, "imagerepositories.image.toolkit.dev", "imgrepo", "Last scan", "Tags", "Ready", "Status", "Age")
	env.ExpectCRD(t, "imagepolicies.image.toolkit.dev", "imgpol", "Image", "Tag", "Ready", "Status", "Age")
}

func TestImageRepositoryDefaults(t *testing.T) {
	ctx := context.Background()
	repo := &imagev1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: namespace(t)},
		Spec: imagev1.ImageRepositorySpec{
			Image:    "ghcr.io/stefanprodan/podinfo",
			Interval: metav1.Duration{Duration: 5 * time.Minute},
			AccessFrom: &meta.AccessFrom{NamespaceSelectors: []meta.NamespaceSelector{
				{MatchLabels: map[string]string{"team": "a"}},
			}},
		},
	}
	if err := env.Client.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	got := &imagev1.ImageRepository{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(repo), got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Spec.ExclusionList, []string{`^.*\.sig$`}) {
		t.Errorf("exclusionList = %q", got.Spec.ExclusionList)
	}
	if got.Spec.Provider != "generic" {
		t.Errorf("provider = %q, want generic", got.Spec.Provider)
	}
	if got.Spec.Interval.Duration != 5*time.Minute || got.Spec.AccessFrom.NamespaceSelectors[0].MatchLabels["team"] != "a" {
		t.Errorf("spec did not round-trip: %+v", got.Spec)
	}
}

func TestImagePolicyDefaults(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	tests := []struct {
		name   string
		policy imagev1.ImagePolicyChoice
		order  func(*imagev1.ImagePolicy) string
	}{
		{"alphabetical", imagev1.ImagePolicyChoice{Alphabetical: &imagev1.AlphabeticalPolicy{}},
			func(p *imagev1.ImagePolicy) string { return p.Spec.Policy.Alphabetical.Order }},
		{"numerical", imagev1.ImagePolicyChoice{Numerical: &imagev1.NumericalPolicy{}},
			func(p *imagev1.ImagePolicy) string { return p.Spec.Policy.Numerical.Order }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := &imagev1.ImagePolicy{
				ObjectMeta: metav1.ObjectMeta{Name: tt.name, Namespace: ns},
				Spec: imagev1.ImagePolicySpec{
					ImageRepositoryRef: meta.NamespacedObjectReference{Name: "podinfo"},
					Policy:             tt.policy,
				},
			}
			if err := env.Client.Create(ctx, pol); err != nil {
				t.Fatal(err)
			}
			got := &imagev1.ImagePolicy{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pol), got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.DigestReflectionPolicy != imagev1.ReflectNever {
				t.Errorf("digestReflectionPolicy = %q, want Never", got.Spec.DigestReflectionPolicy)
			}
			if o := tt.order(got); o != "asc" {
				t.Errorf("order = %q, want asc", o)
			}
		})
	}
}

func TestImagePolicyAcceptsAlwaysWithInterval(t *testing.T) {
	pol := newPolicy(namespace(t), "always", func(p *imagev1.ImagePolicy) {
		p.Spec.DigestReflectionPolicy = imagev1.ReflectAlways
		p.Spec.Interval = &metav1.Duration{Duration: time.Hour}
	})
	if err := env.Client.Create(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
}

func newPolicy(ns, name string, mutate func(*imagev1.ImagePolicy)) *imagev1.ImagePolicy {
	p := &imagev1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: imagev1.ImagePolicySpec{
			ImageRepositoryRef: meta.NamespacedObjectReference{Name: "podinfo"},
			Policy:             imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: "1.x"}},
		},
	}
	mutate(p)
	return p
}

func newRepository(ns, name string, mutate func(*imagev1.ImageRepository)) *imagev1.ImageRepository {
	r := &imagev1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: imagev1.ImageRepositorySpec{
			Image:    "ghcr.io/stefanprodan/podinfo",
			Interval: metav1.Duration{Duration: time.Minute},
		},
	}
	mutate(r)
	return r
}

// Every validation rule rejects an object that breaks it: one case per CEL
// rule, plus the schema constraints users meet most.
func TestValidationRejects(t *testing.T) {
	ns := namespace(t)
	tests := []struct {
		name string
		obj  client.Object
		want string
	}{
		{"policy: none chosen", newPolicy(ns, "none", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy = imagev1.ImagePolicyChoice{}
		}), "exactly one of semver, docker, alphabetical, numerical, newestBuild or promotion"},
		{"policy: two chosen", newPolicy(ns, "two", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy.Alphabetical = &imagev1.AlphabeticalPolicy{Order: "asc"}
		}), "exactly one of semver, docker, alphabetical, numerical, newestBuild or promotion"},
		{"policy: interval without Always", newPolicy(ns, "interval", func(p *imagev1.ImagePolicy) {
			p.Spec.Interval = &metav1.Duration{Duration: time.Hour}
		}), "spec.interval is only accepted when spec.digestReflectionPolicy is Always"},
		{"policy: Always without interval", newPolicy(ns, "always", func(p *imagev1.ImagePolicy) {
			p.Spec.DigestReflectionPolicy = imagev1.ReflectAlways
		}), "spec.interval must be set when spec.digestReflectionPolicy is Always"},
		{"policy: unknown reflection policy", newPolicy(ns, "reflect", func(p *imagev1.ImagePolicy) {
			p.Spec.DigestReflectionPolicy = "Sometimes"
		}), "spec.digestReflectionPolicy"},
		{"policy: bad order", newPolicy(ns, "order", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy = imagev1.ImagePolicyChoice{Numerical: &imagev1.NumericalPolicy{Order: "up"}}
		}), "spec.policy.numerical.order"},
		{"policy: newestBuild and semver", newPolicy(ns, "newest", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy.NewestBuild = &imagev1.NewestBuildPolicy{}
		}), "exactly one of semver, docker, alphabetical, numerical, newestBuild or promotion"},
		{"policy: newestBuild over 1000 candidates", newPolicy(ns, "candidates", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy = imagev1.ImagePolicyChoice{NewestBuild: &imagev1.NewestBuildPolicy{MaxCandidates: 1001}}
		}), "spec.policy.newestBuild.maxCandidates"},
		{"policy: unknown age source", newPolicy(ns, "source", func(p *imagev1.ImagePolicy) {
			p.Spec.MinimumAge = &imagev1.MinimumAge{Duration: metav1.Duration{Duration: time.Hour}, Source: "pushed"}
		}), "spec.minimumAge.source"},
		{"policy: empty range", newPolicy(ns, "range", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy.SemVer.Range = ""
		}), "spec.policy.semver.range"},
		{"policy: verify on a promotion", newPolicy(ns, "promote-verify", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy = imagev1.ImagePolicyChoice{Promotion: &imagev1.PromotionPolicy{From: imagev1.PromotionSource{Automation: "dev"},
				HealthOf: []imagev1.HealthObjectReference{{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "dev"}}}}
			p.Spec.Verify = &imagev1.ImageVerification{Provider: imagev1.SignatureProviderCosign, SecretRef: &meta.LocalObjectReference{Name: "keys"}}
		}), "spec.verify does not apply to a promotion policy"},
		{"repository: bad interval", unstructuredRepository(ns, "interval", "5 minutes"), "spec.interval"},
		{"repository: unknown provider", newRepository(ns, "provider", func(r *imagev1.ImageRepository) {
			r.Spec.Provider = "quay"
		}), "spec.provider"},
		{"repository: too many exclusions", newRepository(ns, "exclusions", func(r *imagev1.ImageRepository) {
			for i := range 26 {
				r.Spec.ExclusionList = append(r.Spec.ExclusionList, fmt.Sprintf("^x%d$", i))
			}
		}), "spec.exclusionList"},
		{"repository: no image", newRepository(ns, "image", func(r *imagev1.ImageRepository) {
			r.Spec.Image = ""
		}), "spec.image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env.ExpectInvalid(t, tt.obj, tt.want)
		})
	}
}

// A typed client cannot send a malformed duration; users' YAML can.
func unstructuredRepository(ns, name, interval string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": imagev1.GroupVersion.String(),
		"kind":       imagev1.ImageRepositoryKind,
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       map[string]any{"image": "ghcr.io/stefanprodan/podinfo", "interval": interval},
	}}
	return u
}

// The reconcilers record a handled reconcile request, so tooling that sets
// the annotation can tell it was seen.
func TestReconcileRequestIsHandled(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	const token = "2026-11-21T10:00:00Z"
	annotate := func(o client.Object) {
		o.SetAnnotations(map[string]string{meta.ReconcileRequestAnnotation: token})
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	repo := newRepository(ns, "req", func(*imagev1.ImageRepository) {})
	annotate(repo)
	pol := newPolicy(ns, "req", func(*imagev1.ImagePolicy) {})
	annotate(pol)
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(repo), repo)
		return repo.Status.LastHandledReconcileAt == token, err
	})
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(pol), pol)
		return pol.Status.LastHandledReconcileAt == token, err
	})
}
