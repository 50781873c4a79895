package controller

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

func automation(ns, name string, mutate func(*imagev1.ImageUpdateAutomation)) *imagev1.ImageUpdateAutomation {
	a := &imagev1.ImageUpdateAutomation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: imagev1.ImageUpdateAutomationSpec{
			Interval: metav1.Duration{Duration: 5 * time.Minute},
			GitSpec: imagev1.GitSpec{
				Repository: &updatev1.GitRepositorySpec{URL: "https://git.example.com/org/fleet.git"},
				Checkout:   &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
				Commit: updatev1.CommitSpec{
					Author:     updatev1.CommitUser{Name: "bot", Email: "bot@example.com"},
					SigningKey: &updatev1.SigningKey{SecretRef: meta.LocalObjectReference{Name: "key"}},
				},
			},
		},
	}
	mutate(a)
	return a
}

func TestCRDInstalled(t *testing.T) {
	env.ExpectCRD(t, "imageupdateautomations.image.toolkit.dev", "iua", "Last run", "Ready", "Status", "Age")
}

func TestDefaultsAndRoundTrip(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	tests := []struct {
		name  string
		obj   *imagev1.ImageUpdateAutomation
		check func(*testing.T, *imagev1.ImageUpdateAutomation)
	}{
		{"standalone", automation(ns, "standalone", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"automation": "on"}}
			a.Spec.GitSpec.Push = &updatev1.PushSpec{Branch: "auto", Options: map[string]string{"ci.skip": ""}}
			a.Spec.GitSpec.Commit.MessageTemplateValues = map[string]string{"env": "prod"}
		}), func(t *testing.T, a *imagev1.ImageUpdateAutomation) {
			if a.Spec.Update == nil || a.Spec.Update.Strategy != imagev1.UpdateStrategySetters {
				t.Errorf("update = %+v, want strategy Setters", a.Spec.Update)
			}
			if a.Spec.GitSpec.Repository.Timeout == nil || a.Spec.GitSpec.Repository.Timeout.Duration != time.Minute {
				t.Errorf("repository timeout = %v, want 60s", a.Spec.GitSpec.Repository.Timeout)
			}
			if a.Spec.GitSpec.Commit.SigningKey.Type != updatev1.SigningKeyGPG {
				t.Errorf("signingKey type = %q, want gpg", a.Spec.GitSpec.Commit.SigningKey.Type)
			}
			if _, ok := a.Spec.GitSpec.Push.Options["ci.skip"]; !ok || a.Spec.PolicySelector.MatchLabels["automation"] != "on" ||
				a.Spec.GitSpec.Commit.MessageTemplateValues["env"] != "prod" {
				t.Errorf("spec did not round-trip: %+v", a.Spec)
			}
		}},
		{"flux source", automation(ns, "flux", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Name: "fleet"}
			a.Spec.GitSpec.Repository = nil
			a.Spec.GitSpec.Checkout = nil
		}), func(t *testing.T, a *imagev1.ImageUpdateAutomation) {
			if a.Spec.SourceRef.Kind != "GitRepository" {
				t.Errorf("sourceRef kind = %q, want GitRepository", a.Spec.SourceRef.Kind)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := env.Client.Create(ctx, tt.obj); err != nil {
				t.Fatal(err)
			}
			got := &imagev1.ImageUpdateAutomation{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tt.obj), got); err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
}

// One case per CEL rule, plus the enums.
func TestValidationRejects(t *testing.T) {
	ns := env.Namespace(t)
	tests := []struct {
		name   string
		mutate func(*imagev1.ImageUpdateAutomation)
		want   string
	}{
		{"both sources", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Name: "fleet"}
		}, "exactly one of spec.sourceRef, spec.git.repository and spec.applicationSelector must be set"},
		{"selector and sourceRef", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Repository = nil
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "Application", Name: "web"}
			a.Spec.ApplicationSelector = &metav1.LabelSelector{}
		}, "exactly one of spec.sourceRef, spec.git.repository and spec.applicationSelector must be set"},
		{"no source", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Repository = nil
		}, "exactly one of spec.sourceRef, spec.git.repository and spec.applicationSelector must be set"},
		{"standalone without checkout", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Checkout = nil
		}, "spec.git.checkout is required with spec.git.repository"},
		{"empty checkout ref", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Checkout.Reference = updatev1.GitRepositoryRef{}
		}, "ref must set one of branch, tag, semver, name or commit"},
		{"absolute update path", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: "/etc"}
		}, "path must be relative and stay inside the repository"},
		{"escaping update path", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: "apps/../../x"}
		}, "path must be relative and stay inside the repository"},
		{"unknown source kind", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Repository = nil
			a.Spec.GitSpec.Checkout = nil
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "Bucket", Name: "b"}
		}, "spec.sourceRef.kind"},
		{"unknown strategy", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Update = &imagev1.UpdateStrategy{Strategy: "Kustomize"}
		}, "spec.update.strategy"},
		{"unknown signing key type", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Commit.SigningKey.Type = "x509"
		}, "spec.git.commit.signingKey.type"},
		{"scp-style url", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Repository.URL = "git@example.com:org/fleet.git"
		}, "spec.git.repository.url"},
		{"no author email", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Commit.Author.Email = ""
		}, "spec.git.commit.author.email"},
		{"schedule without windows", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Schedule = &imagev1.UpdateSchedule{TimeZone: "UTC"}
		}, "spec.schedule.windows"},
		{"@every window", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Schedule = window("@every 1h", time.Hour)
		}, "spec.schedule.windows[0].cron"},
		{"cron with seconds", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Schedule = window("0 0 2 * * *", time.Hour)
		}, "spec.schedule.windows[0].cron"},
		{"cron with a zone", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Schedule = window("CRON_TZ=UTC 0 2 * * *", time.Hour)
		}, "spec.schedule.windows[0].cron"},
		{"zero window", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Schedule = window("0 2 * * *", 0)
		}, "a window must stay open at least 1s"},
		{"Local time zone", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Schedule = window("0 2 * * *", time.Hour)
			a.Spec.Schedule.TimeZone = "Local"
		}, "timeZone Local depends on the controller's machine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env.ExpectInvalid(t, automation(ns, "bad", tt.mutate), tt.want)
		})
	}
}

func window(cron string, d time.Duration) *imagev1.UpdateSchedule {
	return &imagev1.UpdateSchedule{Windows: []imagev1.UpdateWindow{{Cron: cron, Duration: metav1.Duration{Duration: d}}}}
}

func TestReconcileRequestIsHandled(t *testing.T) {
	ctx := context.Background()
	const token = "2026-11-21T10:00:00Z"
	a := automation(env.Namespace(t), "req", func(a *imagev1.ImageUpdateAutomation) {
		a.Annotations = map[string]string{meta.ReconcileRequestAnnotation: token}
	})
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), a)
		return a.Status.LastHandledReconcileAt == token, err
	})
}
