package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

func newWebhook(ns, name, secret string, mutate ...func(*imagev1.ImageWebhook)) *imagev1.ImageWebhook {
	w := &imagev1.ImageWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: imagev1.ImageWebhookSpec{Type: imagev1.WebhookDistribution, SecretRef: meta.LocalObjectReference{Name: secret}}}
	for _, m := range mutate {
		m(w)
	}
	return w
}

// An ImageWebhook is Ready with the path derived from its token, name and
// namespace; without its Secret, without the token key or with a selector
// that does not parse it has no path and says why; the API refuses
// unknown types, and the CRD has the short name and columns docs/api.md
// gives.
func TestImageWebhookPath(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token"}, Data: map[string][]byte{"token": []byte("t0ken")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nokey"}, Data: map[string][]byte{"password": []byte("x")}})
	tests := []struct {
		hook     *imagev1.ImageWebhook
		reason   string
		stalled  bool
		wantPath bool
	}{
		{newWebhook(ns, "ready", "token"), conditions.SucceededReason, false, true},
		{newWebhook(ns, "nosecret", "absent"), conditions.SecretNotFoundReason, false, false},
		{newWebhook(ns, "nokey", "nokey"), imagev1.InvalidSecretReason, false, false},
		// gcr also needs the service account and audience.
		{newWebhook(ns, "gcr", "token", func(w *imagev1.ImageWebhook) { w.Spec.Type = imagev1.WebhookGCR }), imagev1.InvalidSecretReason, false, false},
		{newWebhook(ns, "badselector", "token", func(w *imagev1.ImageWebhook) {
			w.Spec.ImageRepositorySelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
		}), conditions.InvalidSpecReason, true, false},
	}
	for _, tt := range tests {
		create(t, tt.hook)
	}
	for _, tt := range tests {
		t.Run(tt.hook.Name, func(t *testing.T) {
			waitReason(t, tt.hook, tt.reason)
			if got := conditions.IsTrue(tt.hook, conditions.StalledCondition); got != tt.stalled {
				t.Errorf("stalled %v, want %v", got, tt.stalled)
			}
			want := ""
			if tt.wantPath {
				want = receiver.Path([]byte("t0ken"), tt.hook.Name, ns)
			}
			if tt.hook.Status.WebhookPath != want {
				t.Errorf("path %q, want %q", tt.hook.Status.WebhookPath, want)
			}
		})
	}

	// The Secret appearing and a reconcile request bring the path.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "absent"}, Data: map[string][]byte{"token": []byte("t0ken")}})
	h := tests[1].hook
	h.Annotations = map[string]string{meta.ReconcileRequestAnnotation: time.Now().String()}
	if err := env.Client.Update(ctx, h); err != nil {
		t.Fatal(err)
	}
	waitReason(t, h, conditions.SucceededReason)
	if h.Status.WebhookPath != receiver.Path([]byte("t0ken"), "nosecret", ns) {
		t.Errorf("path %q after the Secret appeared", h.Status.WebhookPath)
	}

	env.ExpectInvalid(t, newWebhook(ns, "ecr", "token", func(w *imagev1.ImageWebhook) { w.Spec.Type = "ecr" }), "spec.type")
	env.ExpectCRD(t, "imagewebhooks.image.toolkit.dev", "imghook", "Type", "Ready", "Status", "Age")
}
