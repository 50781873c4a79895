package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// HealthWebhookKind is the kind name of HealthWebhook.
const HealthWebhookKind = "HealthWebhook"

// Sender types of a HealthWebhook: the GitOps controller of another
// cluster that pushes the health of what it deploys.
const (
	// HealthFlux: Flux notification-controller's generic Provider posting
	// Kustomization and HelmRelease events, with the header
	// Authorization: Bearer <token> (the Provider Secret's headers key).
	HealthFlux = "flux"
	// HealthFluxHMAC: Flux notification-controller's generic-hmac
	// Provider, which signs each event in X-Signature as sha256=<hex
	// HMAC-SHA256 of the body with the token>.
	HealthFluxHMAC = "flux-hmac"
	// HealthArgoCD: Argo CD Notifications' webhook service posting an
	// Application's sync, health and operation status (the template in
	// docs/policies.md), with the header Authorization: Bearer <token>.
	HealthArgoCD = "argocd"
)

// MaxPushedObjects bounds the objects a HealthWebhook's status records:
// the least recently pushed go first.
const MaxPushedObjects = 100

// HealthWebhookSpec says who pushes health to the webhook and how a call
// is authenticated.
type HealthWebhookSpec struct {
	// Type of the sender: flux, flux-hmac or argocd.
	// +kubebuilder:validation:Enum=flux;flux-hmac;argocd
	// +required
	Type string `json:"type"`
	// SecretRef names a Secret in the same namespace whose key "token" is
	// the shared token, or the HMAC key for flux-hmac. The status path is
	// derived from it.
	// +required
	SecretRef meta.LocalObjectReference `json:"secretRef"`
	// Suspend makes the webhook ignore calls (answered 200, nothing
	// recorded): the health it last recorded stays.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// PushedHealth is one object's health as its cluster last pushed it.
type PushedHealth struct {
	HealthStatus `json:",inline"`
	// APIGroup of the object (kustomize.toolkit.fluxcd.io,
	// helm.toolkit.fluxcd.io, argoproj.io).
	APIGroup string `json:"apiGroup"`
	// Since is when the object was first pushed in this state at this
	// revision (the sender's time): how long it has been healthy, for a
	// soak.
	Since metav1.Time `json:"since"`
	// LastPushed is the sender's time of the latest call about the
	// object; an older call that arrives late changes nothing.
	LastPushed metav1.Time `json:"lastPushed"`
}

// HealthWebhookStatus is the observed state of a HealthWebhook.
type HealthWebhookStatus struct {
	WebhookStatus `json:",inline"`
	// Objects are the objects whose health was pushed, the most recently
	// pushed first, at most 100.
	// +optional
	// +listType=atomic
	Objects []PushedHealth `json:"objects,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=healthhook,categories=image-toolkit
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.webhookPath`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// HealthWebhook receives the health of Flux Kustomizations and
// HelmReleases, or Argo CD Applications, pushed from a cluster the
// controllers cannot reach, and records it for the healthOf entries that
// name it (webhookRef).
type HealthWebhook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec HealthWebhookSpec `json:"spec"`
	// +optional
	Status HealthWebhookStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *HealthWebhook) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions.
func (in *HealthWebhook) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetWebhookStatus returns the status every webhook kind shares.
func (in *HealthWebhook) GetWebhookStatus() *WebhookStatus { return &in.Status.WebhookStatus }

// Pushed returns the health recorded for the object of group, kind,
// namespace and name, or nil.
func (in *HealthWebhook) Pushed(group, kind, namespace, name string) *PushedHealth {
	object := kind + "/" + namespace + "/" + name
	for i := range in.Status.Objects {
		if p := &in.Status.Objects[i]; p.APIGroup == group && p.Object == object {
			return p
		}
	}
	return nil
}

// +kubebuilder:object:root=true

// HealthWebhookList is a list of HealthWebhooks.
type HealthWebhookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HealthWebhook `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HealthWebhook{}, &HealthWebhookList{})
}
