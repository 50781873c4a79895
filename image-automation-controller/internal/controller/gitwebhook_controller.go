package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/image-automation-controller/internal/webhook"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=gitwebhooks,verbs=get;list;watch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=gitwebhooks/status,verbs=get;patch

// GitWebhookReconciler gives each GitWebhook its URL path: the shared
// webhook reconciler (pkg/receiver), with the GitWebhook's spec.
type GitWebhookReconciler = receiver.Reconciler[*imagev1.GitWebhook]

// NewGitWebhookReconciler makes the GitWebhook reconciler; api reads
// Secrets without caching (or listing) them.
func NewGitWebhookReconciler(c client.Client, api client.Reader, m *metrics.Recorder) *GitWebhookReconciler {
	return receiver.NewReconciler(imagev1.GitWebhookKind, c, api, m,
		func() *imagev1.GitWebhook { return &imagev1.GitWebhook{} },
		func(w *imagev1.GitWebhook) receiver.Spec {
			return receiver.Spec{Type: w.Spec.Type, Secret: w.Spec.SecretRef.Name, Keys: webhook.SecretKeys(w.Spec.Type),
				Selector: w.Spec.AutomationSelector, SelectorField: "automationSelector", Suspend: w.Spec.Suspend}
		})
}
