package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

func TestValidateSpec(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*imagev1.ImageUpdateAutomation)
		reason string
	}{
		{"defaults", func(*imagev1.ImageUpdateAutomation) {}, ""},
		{"setters", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters}
		}, ""},
		// The CRD's enum stops this at the API server; an older CRD may not.
		{"unsupported strategy", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Update = &imagev1.UpdateStrategy{Strategy: "Kustomize"}
		}, imagev1.UnsupportedUpdateStrategyReason},
		{"bad selector", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}
		}, imagev1.InvalidPolicySelectorReason},
		{"unknown template field", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Commit.MessageTemplate = "{{ .Nope }}"
		}, imagev1.InvalidMessageTemplateReason},
		{"template does not parse", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Commit.MessageTemplate = "{{ if }}"
		}, imagev1.InvalidMessageTemplateReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &imagev1.ImageUpdateAutomation{}
			tt.mutate(a)
			sel, err := validateSpec(a)
			switch {
			case tt.reason == "" && (err != nil || sel == nil):
				t.Errorf("stalled: %v", err)
			case tt.reason != "" && (err == nil || !conditions.AsFailure(err).Stalled || conditions.AsFailure(err).Reason != tt.reason):
				t.Errorf("got %v, want a Stalled failure with reason %s", err, tt.reason)
			}
		})
	}
}

func TestCanShortCircuit(t *testing.T) {
	main := updatev1.GitRepositoryRef{Branch: "main"}
	tests := []struct {
		name string
		ref  updatev1.GitRepositoryRef
		push *updatev1.PushSpec
		want bool
	}{
		{"no push", main, nil, true},
		{"push to the checkout branch", main, &updatev1.PushSpec{Branch: "main"}, true},
		{"push options only", main, &updatev1.PushSpec{Options: map[string]string{"ci.skip": ""}}, true},
		{"other push branch", main, &updatev1.PushSpec{Branch: "auto"}, false},
		{"refspec", main, &updatev1.PushSpec{Refspec: "refs/heads/main:refs/heads/x"}, false},
		{"refspec alone, even to the checkout branch", main, &updatev1.PushSpec{Refspec: "HEAD:refs/heads/main"}, false},
		{"push branch with a refspec naming the same branch", main, &updatev1.PushSpec{Branch: "main", Refspec: "HEAD:main"}, true},
		{"a refspec that does not parse", main, &updatev1.PushSpec{Refspec: "main"}, false},
		{"pull request", main, &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{}}, true},
		{"tag checkout", updatev1.GitRepositoryRef{Tag: "v1"}, &updatev1.PushSpec{Branch: "main"}, false},
		{"branch and commit", updatev1.GitRepositoryRef{Branch: "main", Commit: "abcdef1"}, nil, false},
	}
	for _, tt := range tests {
		if got := canShortCircuit(tt.ref, tt.push); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// With --no-cross-namespace-refs=false a GitRepository elsewhere is used,
// but its Secrets are read in the automation's namespace, where the jobs
// run: a Secret of the other namespace is never read for it.
func TestCrossNamespaceSourceAllowed(t *testing.T) {
	ctx := context.Background()
	ns, other := env.Namespace(t), env.Namespace(t)
	create(t, gitRepository(other, "fleet", map[string]any{
		"url": "https://git.example.com/fleet.git", "interval": "5m",
		"secretRef": map[string]any{"name": "auth"}, "ref": map[string]any{"tag": "v1"},
	}))
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "auth", Namespace: other}, Data: map[string][]byte{"username": []byte("bot"), "password": []byte("theirs")}})
	r := &ImageUpdateAutomationReconciler{Client: env.Client, APIReader: env.Client}
	a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}}
	a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Name: "fleet", Namespace: other}
	a.Spec.GitSpec.Push = &updatev1.PushSpec{Branch: "auto"}

	r.NoCrossNamespaceRefs = true
	if _, err := r.resolveSource(ctx, a); !stalledWith(err, conditions.AccessDeniedReason) {
		t.Fatalf("refused: %v", err)
	}
	r.NoCrossNamespaceRefs = false
	_, err := r.resolveSource(ctx, a)
	if f := conditions.AsFailure(err); err == nil || f.Stalled || f.Reason != conditions.SecretNotFoundReason || !strings.Contains(err.Error(), "Secret "+ns+"/auth") {
		t.Fatalf("secret only in the other namespace: %v", err)
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "auth", Namespace: ns}, Data: map[string][]byte{"username": []byte("bot"), "password": []byte("ours")}})
	src, err := r.resolveSource(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if src.Repository.URL != "https://git.example.com/fleet.git" || src.Ref != (updatev1.GitRepositoryRef{Tag: "v1"}) ||
		src.Repository.SecretRef == nil || src.Repository.SecretRef.Name != "auth" || src.remote.Password != "ours" {
		t.Errorf("source %+v, remote password %q", src.Repository, src.remote.Password)
	}
	// Without a ref, Flux checks out master.
	create(t, gitRepository(other, "noref", map[string]any{"url": "https://git.example.com/x.git", "interval": "5m"}))
	a.Spec.SourceRef.Name = "noref"
	a.Spec.GitSpec.Push = nil
	if src, err := r.resolveSource(ctx, a); err != nil || src.Ref != (updatev1.GitRepositoryRef{Branch: "master"}) {
		t.Errorf("default ref: %+v, %v", src, err)
	}
}

// stalledWith reports whether err is a Stalled failure with the reason.
func stalledWith(err error, reason string) bool {
	f := conditions.AsFailure(err)
	return err != nil && f.Stalled && f.Reason == reason
}
