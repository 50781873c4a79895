package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// GitWebhookKind is the kind name of GitWebhook.
const GitWebhookKind = "GitWebhook"

// Sender types of a GitWebhook: the git host whose push events call it,
// and so how a call is authenticated and read.
const (
	// GitWebhookGitHub: GitHub push events, signed with X-Hub-Signature-256
	// (HMAC-SHA256 of the body with the token).
	GitWebhookGitHub = "github"
	// GitWebhookGitLab: GitLab push events, with the secret token in
	// X-Gitlab-Token.
	GitWebhookGitLab = "gitlab"
	// GitWebhookGitea: Gitea and Forgejo push events, signed with
	// X-Gitea-Signature (hex HMAC-SHA256 of the body with the token).
	GitWebhookGitea = "gitea"
	// GitWebhookGeneric: {"repository": URL, "branch": NAME} with
	// Authorization: Bearer <token>.
	GitWebhookGeneric = "generic"
	// GitWebhookGenericHMAC: the generic payload, signed in X-Signature as
	// sha256=<hex HMAC-SHA256 of the body with the token>.
	GitWebhookGenericHMAC = "generic-hmac"
)

// GitWebhookSpec says which git host calls the webhook, how a call is
// authenticated, and which ImageUpdateAutomations it may trigger.
type GitWebhookSpec struct {
	// Type of the sender: github, gitlab, gitea (also Forgejo), generic or
	// generic-hmac.
	// +kubebuilder:validation:Enum=github;gitlab;gitea;generic;generic-hmac
	// +required
	Type string `json:"type"`

	// SecretRef names a Secret in the same namespace whose key "token" is
	// the shared token, or the HMAC key for signing senders. The status
	// path is derived from it.
	// +required
	SecretRef meta.LocalObjectReference `json:"secretRef"`

	// AutomationSelector selects the ImageUpdateAutomations of this
	// namespace a call may trigger; empty or absent selects all of them.
	// A push only ever triggers the selected automations whose repository
	// it is about and whose checkout branch it moved.
	// +optional
	AutomationSelector *metav1.LabelSelector `json:"automationSelector,omitempty"`

	// Suspend makes the webhook ignore calls (answered 200, nothing done).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=githook,categories=image-toolkit
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.webhookPath`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GitWebhook receives a git host's push events and runs the
// ImageUpdateAutomations whose checkout branch was pushed at once.
type GitWebhook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec GitWebhookSpec `json:"spec"`
	// +optional
	Status WebhookStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *GitWebhook) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions.
func (in *GitWebhook) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetWebhookStatus returns the status, which every webhook kind shares.
func (in *GitWebhook) GetWebhookStatus() *WebhookStatus { return &in.Status }

// +kubebuilder:object:root=true

// GitWebhookList is a list of GitWebhooks.
type GitWebhookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitWebhook `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GitWebhook{}, &GitWebhookList{})
}
