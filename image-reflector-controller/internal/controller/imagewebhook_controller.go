package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/webhook"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagewebhooks,verbs=get;list;watch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagewebhooks/status,verbs=get;patch

// ImageWebhookReconciler gives each ImageWebhook its URL path: the shared
// webhook reconciler (pkg/receiver), with the ImageWebhook's spec.
type ImageWebhookReconciler = receiver.Reconciler[*imagev1.ImageWebhook]

// NewImageWebhookReconciler makes the ImageWebhook reconciler; api reads
// Secrets without caching (or listing) them.
func NewImageWebhookReconciler(c client.Client, api client.Reader, m *metrics.Recorder) *ImageWebhookReconciler {
	return receiver.NewReconciler(imagev1.ImageWebhookKind, c, api, m,
		func() *imagev1.ImageWebhook { return &imagev1.ImageWebhook{} },
		func(w *imagev1.ImageWebhook) receiver.Spec {
			return receiver.Spec{Type: w.Spec.Type, Secret: w.Spec.SecretRef.Name, Keys: webhook.SecretKeys(w.Spec.Type),
				Selector: w.Spec.ImageRepositorySelector, SelectorField: "imageRepositorySelector", Suspend: w.Spec.Suspend}
		})
}
