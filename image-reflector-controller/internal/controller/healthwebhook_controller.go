package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/healthhook"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=healthwebhooks,verbs=get;list;watch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=healthwebhooks/status,verbs=get;patch

// HealthWebhookReconciler gives each HealthWebhook its URL path: the
// shared webhook reconciler (pkg/receiver), with the HealthWebhook's spec.
// The receiver (internal/healthhook) writes the pushed health.
type HealthWebhookReconciler = receiver.Reconciler[*imagev1.HealthWebhook]

// NewHealthWebhookReconciler makes the HealthWebhook reconciler; api
// reads Secrets without caching (or listing) them.
func NewHealthWebhookReconciler(c client.Client, api client.Reader, m *metrics.Recorder) *HealthWebhookReconciler {
	return receiver.NewReconciler(imagev1.HealthWebhookKind, c, api, m,
		func() *imagev1.HealthWebhook { return &imagev1.HealthWebhook{} },
		func(w *imagev1.HealthWebhook) receiver.Spec {
			return receiver.Spec{Type: w.Spec.Type, Secret: w.Spec.SecretRef.Name, Keys: healthhook.SecretKeys(w.Spec.Type), Suspend: w.Spec.Suspend}
		})
}
