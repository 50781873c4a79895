package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// GitRepositorySpec says where a git repository is and how to reach it. It
// carries the subset of Flux's GitRepository spec that a writer needs.
type GitRepositorySpec struct {
	// URL of the repository, http://, https:// or ssh://.
	// +kubebuilder:validation:Pattern="^(http|https|ssh)://.*$"
	// +kubebuilder:validation:MaxLength=2048
	// +required
	URL string `json:"url"`

	// SecretRef names a Secret in the same namespace with the credentials:
	// username and password, or bearerToken, and optionally ca.crt, for HTTPS;
	// identity, known_hosts and optionally password for SSH.
	// +optional
	SecretRef *meta.LocalObjectReference `json:"secretRef,omitempty"`

	// ProxySecretRef names a Secret in the same namespace with the proxy
	// address, and optionally username and password.
	// +optional
	ProxySecretRef *meta.LocalObjectReference `json:"proxySecretRef,omitempty"`

	// Timeout bounds each git operation (clone, fetch, push, ls-remote).
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m))+$"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// GitCheckoutSpec says which revision to check out.
type GitCheckoutSpec struct {
	// Reference to check out.
	// +required
	Reference GitRepositoryRef `json:"ref"`
}

// GitRepositoryRef names a git revision. When several fields are set, the
// most specific wins, in the order commit, name, semver, tag, branch, as in
// Flux; branch is still used as the default push branch.
// +kubebuilder:validation:XValidation:rule="has(self.branch) || has(self.tag) || has(self.semver) || has(self.name) || has(self.commit)",message="ref must set one of branch, tag, semver, name or commit"
type GitRepositoryRef struct {
	// Branch to check out.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`

	// Tag to check out.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Tag string `json:"tag,omitempty"`

	// SemVer range over the repository's tags; the highest matching tag is
	// checked out.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	SemVer string `json:"semver,omitempty"`

	// Name of a reference, e.g. refs/heads/main or refs/pull/42/head.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Name string `json:"name,omitempty"`

	// Commit SHA to check out.
	// +kubebuilder:validation:Pattern="^[0-9a-f]{7,64}$"
	// +optional
	Commit string `json:"commit,omitempty"`
}

// CommitSpec says how to write the commit.
type CommitSpec struct {
	// Author of the commit.
	// +required
	Author CommitUser `json:"author"`

	// SigningKey signs the commit.
	// +optional
	SigningKey *SigningKey `json:"signingKey,omitempty"`

	// MessageTemplate is a Go text/template for the commit message; see the
	// API documentation for its data.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	MessageTemplate string `json:"messageTemplate,omitempty"`

	// MessageTemplateValues are user-defined values available to the
	// template as .Values.
	// +optional
	MessageTemplateValues map[string]string `json:"messageTemplateValues,omitempty"`
}

// CommitUser is the name and email of a commit author.
type CommitUser struct {
	// Name of the author.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Name string `json:"name,omitempty"`

	// Email of the author.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=256
	// +required
	Email string `json:"email"`
}

// SigningKeyType is the kind of key commits are signed with.
// +kubebuilder:validation:Enum=gpg;ssh
type SigningKeyType string

const (
	// SigningKeyGPG signs with an OpenPGP key: Secret key git.asc, optional passphrase.
	SigningKeyGPG SigningKeyType = "gpg"
	// SigningKeySSH signs with an SSH key: Secret key identity, optional password.
	SigningKeySSH SigningKeyType = "ssh"
)

// SigningKey references the Secret holding a commit signing key.
type SigningKey struct {
	// SecretRef names the Secret holding the key.
	// +required
	SecretRef meta.LocalObjectReference `json:"secretRef"`

	// Type of the key; Flux supports only gpg.
	// +kubebuilder:default=gpg
	// +optional
	Type SigningKeyType `json:"type,omitempty"`
}

// PushSpec says where to push the commit.
type PushSpec struct {
	// Branch to push to; defaults to the checkout branch. When it differs from
	// the checkout branch, it is force-pushed as the checkout revision plus
	// the new commit, as Flux does.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`

	// Refspec is pushed in addition to the branch, e.g.
	// refs/heads/main:refs/heads/auto.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Refspec string `json:"refspec,omitempty"`

	// Options are git push options (-o key=value).
	// +optional
	Options map[string]string `json:"options,omitempty"`
}
