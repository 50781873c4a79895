package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// ImageWebhookKind is the kind name of ImageWebhook.
const ImageWebhookKind = "ImageWebhook"

// Sender types of an ImageWebhook: who calls it, and so how a call is
// authenticated and which repositories its payload names.
const (
	// WebhookDistribution: a CNCF distribution registry's notifications
	// (notifications.endpoints), with the header Authorization: Bearer <token>.
	WebhookDistribution = "distribution"
	// WebhookDockerHub: Docker Hub repository webhooks. Docker Hub neither
	// signs nor sends a header, so the unguessable path is the credential.
	WebhookDockerHub = "dockerhub"
	// WebhookGitHub: GitHub package events (GHCR), signed with
	// X-Hub-Signature-256 (HMAC-SHA256 of the body with the token).
	WebhookGitHub = "github"
	// WebhookGitLab: GitLab webhooks, with the secret token in X-Gitlab-Token.
	WebhookGitLab = "gitlab"
	// WebhookHarbor: Harbor HTTP webhooks, with the configured auth header
	// in Authorization.
	WebhookHarbor = "harbor"
	// WebhookQuay: Quay repository notifications. Quay neither signs nor
	// sends a header, so the unguessable path is the credential.
	WebhookQuay = "quay"
	// WebhookACR: Azure Container Registry webhooks, with the custom
	// header Authorization: Bearer <token>.
	WebhookACR = "acr"
	// WebhookNexus: Nexus Repository component webhooks, signed with
	// X-Nexus-Webhook-Signature (hex HMAC-SHA1 of the body with the token).
	WebhookNexus = "nexus"
	// WebhookGCR: Google Artifact Registry / Container Registry
	// notifications through a Pub/Sub push subscription, authenticated by
	// its Google-signed OIDC ID token (the Secret's email and audience).
	WebhookGCR = "gcr"
	// WebhookGeneric: {"repositories": [...]} with Authorization: Bearer <token>.
	WebhookGeneric = "generic"
	// WebhookGenericHMAC: the generic payload, signed in X-Signature as
	// sha256=<hex HMAC-SHA256 of the body with the token>.
	WebhookGenericHMAC = "generic-hmac"
)

// ImageWebhookSpec says who calls the webhook, how a call is authenticated,
// and which ImageRepositories it may trigger.
type ImageWebhookSpec struct {
	// Type of the sender: distribution, dockerhub, github, gitlab, harbor,
	// quay, acr, gcr, nexus, generic or generic-hmac.
	// +kubebuilder:validation:Enum=distribution;dockerhub;github;gitlab;harbor;quay;acr;gcr;nexus;generic;generic-hmac
	// +required
	Type string `json:"type"`

	// SecretRef names a Secret in the same namespace whose key "token" is
	// the shared token, or the HMAC key for signing senders. The status
	// path is derived from it. A gcr webhook's Secret also has "email",
	// the push subscription's service account, and "audience", the
	// audience set on the subscription.
	// +required
	SecretRef meta.LocalObjectReference `json:"secretRef"`

	// ImageRepositorySelector selects the ImageRepositories of this
	// namespace a call may trigger; empty or absent selects all of them.
	// A call only ever triggers the selected ones its payload names.
	// +optional
	ImageRepositorySelector *metav1.LabelSelector `json:"imageRepositorySelector,omitempty"`

	// Suspend makes the webhook ignore calls (answered 200, nothing done).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// WebhookStatus is the observed state of an ImageWebhook or a GitWebhook.
type WebhookStatus struct {
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the last generation reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// WebhookPath is the URL path to give the sender, on the webhook
	// address of the controller serving the kind:
	// /hook/<sha256 of token, name and namespace>.
	// +optional
	WebhookPath string `json:"webhookPath,omitempty"`

	// Calls counts the calls the receivers answered for this webhook.
	// Each replica adds what it answered at most every ten seconds, so
	// the counts trail the calls by that much.
	// +optional
	Calls *WebhookCalls `json:"calls,omitempty"`

	meta.ReconcileRequestStatus `json:",inline"`
}

// WebhookCalls counts a webhook's calls: those it accepted (authenticated,
// read and acted on, or valid and about nothing to do) and those it
// refused (bad credentials, a bad payload, over its rate, suspended, ...).
type WebhookCalls struct {
	Accepted int64 `json:"accepted"`
	Refused  int64 `json:"refused"`
	// LastAccepted is when the last accepted call came.
	// +optional
	LastAccepted *metav1.Time `json:"lastAccepted,omitempty"`
	// LastRefused is when the last refused call came, and
	// LastRefusedReason why it was refused (the reason label of the
	// webhook_rejected_total metric).
	// +optional
	LastRefused *metav1.Time `json:"lastRefused,omitempty"`
	// +optional
	LastRefusedReason string `json:"lastRefusedReason,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=imghook,categories=image-toolkit
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.webhookPath`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ImageWebhook receives a registry's push notifications and scans the
// ImageRepositories they name at once.
type ImageWebhook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ImageWebhookSpec `json:"spec"`
	// +optional
	Status WebhookStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *ImageWebhook) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions.
func (in *ImageWebhook) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetWebhookStatus returns the status, which every webhook kind shares.
func (in *ImageWebhook) GetWebhookStatus() *WebhookStatus { return &in.Status }

// +kubebuilder:object:root=true

// ImageWebhookList is a list of ImageWebhooks.
type ImageWebhookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageWebhook `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ImageWebhook{}, &ImageWebhookList{})
}
