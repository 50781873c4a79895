package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

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
			sel, st := validateSpec(a)
			switch {
			case tt.reason == "" && (st != nil || sel == nil):
				t.Errorf("stalled: %+v", st)
			case tt.reason != "" && (st == nil || st.reason != tt.reason):
				t.Errorf("got %+v, want reason %s", st, tt.reason)
			}
		})
	}
}

func TestJobName(t *testing.T) {
	in := inputsHash(updatev1.UpdateJobSpec{}, "main@sha1:abc", 1)
	if jobName("fleet", in, 0) != jobName("fleet", in, 0) {
		t.Error("job names are not deterministic")
	}
	if jobName("fleet", in, 0) == jobName("fleet", in, 1) {
		t.Error("a retry gets the same name")
	}
	for _, name := range []string{
		strings.Repeat("a", 253),
		strings.Repeat("a", 241) + ".b" + strings.Repeat("c", 10),
		strings.Repeat("a", 241) + "-b" + strings.Repeat("c", 10),
	} {
		got := jobName(name, in, 0)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("jobName(%d chars) = %q: %v", len(name), got, errs)
		}
	}
}

func TestInputsHash(t *testing.T) {
	spec := updatev1.UpdateJobSpec{Update: updatev1.UpdateSpec{Setters: []updatev1.PolicySetter{{Policy: "ns:app", Name: "app", Tag: "1"}}}}
	base := inputsHash(spec, "main@sha1:a", 1)
	other := spec.DeepCopy()
	other.Update.Setters[0].Tag = "2"
	for name, h := range map[string]string{
		"head":       inputsHash(spec, "main@sha1:b", 1),
		"generation": inputsHash(spec, "main@sha1:a", 2),
		"setters":    inputsHash(*other, "main@sha1:a", 1),
	} {
		if h == base {
			t.Errorf("a change of %s keeps the inputs hash", name)
		}
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
		{"tag checkout", updatev1.GitRepositoryRef{Tag: "v1"}, &updatev1.PushSpec{Branch: "main"}, false},
		{"branch and commit", updatev1.GitRepositoryRef{Branch: "main", Commit: "abcdef1"}, nil, false},
	}
	for _, tt := range tests {
		if got := canShortCircuit(tt.ref, tt.push); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRevisionAfterPush(t *testing.T) {
	sha1 := strings.Repeat("a", 40)
	sha256 := strings.Repeat("b", 64)
	job := func(push *updatev1.PushSpec, pushed string) *updatev1.UpdateJob {
		return &updatev1.UpdateJob{
			Spec:   updatev1.UpdateJobSpec{Checkout: updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}}, Push: push},
			Status: updatev1.UpdateJobStatus{CheckoutRevision: "main@sha1:" + strings.Repeat("c", 40), PushedCommit: pushed},
		}
	}
	tests := []struct {
		name string
		job  *updatev1.UpdateJob
		want string
	}{
		{"same branch", job(nil, sha1), "main@sha1:" + sha1},
		{"same branch named", job(&updatev1.PushSpec{Branch: "main"}, sha1), "main@sha1:" + sha1},
		{"sha256", job(nil, sha256), "main@sha256:" + sha256},
		{"other branch", job(&updatev1.PushSpec{Branch: "auto"}, sha1), "main@sha1:" + strings.Repeat("c", 40)},
	}
	for _, tt := range tests {
		if got := revisionAfterPush(tt.job); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestChangeTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	sel := &selection{
		setters: []updatev1.PolicySetter{
			{Policy: "ns:same", Name: "a", Tag: "1"},
			{Policy: "ns:new-tag", Name: "b", Tag: "2"},
			{Policy: "ns:no-time", Name: "c", Tag: "2"},
			{Policy: "ns:first", Name: "d", Tag: "1"},
		},
		times: map[string]time.Time{"ns:same": t0, "ns:new-tag": t0, "ns:first": t0},
	}
	last := imagev1.ObservedPolicies{"same": {Name: "a", Tag: "1"}, "new-tag": {Name: "b", Tag: "1"}, "no-time": {Name: "c", Tag: "1"}}
	got := changeTimes(sel, last)
	want := "2026-01-02T03:04:05.6Z"
	if len(got) != 2 || got["ns:new-tag"] != want || got["ns:first"] != want {
		t.Errorf("changeTimes = %v", got)
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
	if _, st, err := r.resolveSource(ctx, a); err != nil || st == nil || st.reason != "AccessDenied" {
		t.Fatalf("refused: stall %+v, err %v", st, err)
	}
	r.NoCrossNamespaceRefs = false
	_, st, err := r.resolveSource(ctx, a)
	if err != nil || st == nil || st.reason != conditions.SecretNotFoundReason || !strings.Contains(st.message, "Secret "+ns+"/auth") {
		t.Fatalf("secret only in the other namespace: stall %+v, err %v", st, err)
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "auth", Namespace: ns}, Data: map[string][]byte{"username": []byte("bot"), "password": []byte("ours")}})
	src, st, err := r.resolveSource(ctx, a)
	if err != nil || st != nil {
		t.Fatalf("stall %+v, err %v", st, err)
	}
	if src.repository.URL != "https://git.example.com/fleet.git" || src.ref != (updatev1.GitRepositoryRef{Tag: "v1"}) ||
		src.repository.SecretRef == nil || src.repository.SecretRef.Name != "auth" || src.remote.Password != "ours" {
		t.Errorf("source %+v, remote password %q", src.repository, src.remote.Password)
	}
	// Without a ref, Flux checks out master.
	create(t, gitRepository(other, "noref", map[string]any{"url": "https://git.example.com/x.git", "interval": "5m"}))
	a.Spec.SourceRef.Name = "noref"
	a.Spec.GitSpec.Push = nil
	if src, st, err := r.resolveSource(ctx, a); err != nil || st != nil || src.ref != (updatev1.GitRepositoryRef{Branch: "master"}) {
		t.Errorf("default ref: %+v, %+v, %v", src, st, err)
	}
}
