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

	// Provider of the credentials: generic (the secretRef's, as they are),
	// github (installation tokens of the GitHub App whose githubAppID,
	// githubAppInstallationID or githubAppInstallationOwner,
	// githubAppPrivateKey and optional githubAppBaseURL the secretRef
	// holds) or azure (Azure DevOps tokens of the controller's workload
	// identity, or the ServiceAccount's). Only for https:// URLs.
	// +kubebuilder:validation:Enum=generic;github;azure
	// +optional
	Provider string `json:"provider,omitempty"`

	// ServiceAccountName, with provider azure, names a ServiceAccount in
	// the same namespace whose cloud identity is used instead of the
	// controller's (needs --object-level-workload-identity).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

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
// +kubebuilder:validation:XValidation:rule="!has(self.pullRequest) || (!has(self.branch) && !has(self.refspec))",message="push.pullRequest pushes to its own head branch (pullRequest.branchTemplate): push.branch and push.refspec cannot be set with it"
type PushSpec struct {
	// Branch to push to; defaults to the checkout branch. When it differs from
	// the checkout branch, it is force-pushed as the checkout revision plus
	// the new commit, as Flux does.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`

	// Refspec is pushed, e.g. refs/heads/main:refs/heads/auto: with Branch
	// as well as the branch, without it instead of the checkout branch, as
	// Flux's push.refspec is.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Refspec string `json:"refspec,omitempty"`

	// Options are git push options (-o key=value).
	// +optional
	Options map[string]string `json:"options,omitempty"`

	// PullRequest proposes the change as a pull (merge) request instead of
	// pushing it to the checkout branch: the commit goes to a head branch
	// of its own, rebuilt from the base at every update, and one request
	// per head branch is opened and kept up to date.
	// +optional
	PullRequest *PullRequestSpec `json:"pullRequest,omitempty"`
}

// ForgeProvider names a forge's API.
// +kubebuilder:validation:Enum=github;gitlab;gitea;bitbucket;bitbucketserver;azuredevops;gerrit
type ForgeProvider string

// ForgeProviders are the enum's values, in its order, for the front ends'
// flags and completion. update-job-controller's forge registry holds one
// entry for each (its test checks both ways), and a test here holds the
// list equal to the enum marker above.
var ForgeProviders = []ForgeProvider{"github", "gitlab", "gitea", "bitbucket", "bitbucketserver", "azuredevops", "gerrit"}

// MergeMethod is how an auto-merged request is merged.
// +kubebuilder:validation:Enum=merge;squash;rebase
type MergeMethod string

// PullRequestSpec says how to propose an update as a pull request.
type PullRequestSpec struct {
	// Provider of the forge: github, gitlab, gitea (which covers
	// Forgejo), bitbucket (Bitbucket Cloud), bitbucketserver (Bitbucket
	// Data Center), azuredevops or gerrit. When empty it is told from the
	// repository's host: github.com or a host with "github" in its name,
	// gitlab.com or "gitlab", codeberg.org or "gitea" or "forgejo",
	// bitbucket.org (Cloud) or another host with "bitbucket" (Data
	// Center), dev.azure.com, ssh.dev.azure.com or "visualstudio.com",
	// "gerrit" or "-review.googlesource.com". On Gerrit the update is
	// pushed to refs/for/BASE with the head branch's name as its topic,
	// and every update of the stream is a patch set of one change.
	// +optional
	Provider ForgeProvider `json:"provider,omitempty"`

	// APIURL is the forge API's base URL, e.g. https://github.example.com/api/v3/.
	// When empty it is derived from the repository URL: https://api.github.com/
	// for github.com, https://HOST/api/v3/ for other GitHub hosts,
	// https://HOST/ for GitLab, Gitea and Azure DevOps Server,
	// https://api.bitbucket.org/2.0/ for Bitbucket Cloud,
	// https://HOST/rest/api/1.0/ for Bitbucket Data Center,
	// https://dev.azure.com/ for Azure DevOps and https://HOST/a/ for
	// Gerrit (http:// when the repository URL is http://).
	// +kubebuilder:validation:Pattern="^https?://.*$"
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	APIURL string `json:"apiURL,omitempty"`

	// SecretRef names a Secret in the same namespace whose key token holds
	// the API token (and key username, when the token is a password the
	// forge takes by basic authentication, as a Bitbucket app password).
	// When empty, the repository's Secret is used: its
	// bearerToken, else its password (with its username, for the forges
	// that take a password by basic authentication: a Bitbucket app
	// password, an Azure DevOps personal access token).
	// +optional
	SecretRef *meta.LocalObjectReference `json:"secretRef,omitempty"`

	// Base is the branch the request merges into; defaults to the checkout
	// branch. The update is always made on the checkout revision.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Base string `json:"base,omitempty"`

	// BranchTemplate is a Go template for the head branch, with the data of
	// commit messages. One head branch is one update stream with at most
	// one open request. The default is
	// image-toolkit/<namespace>-<automation> for an automation's jobs, and
	// image-toolkit/<namespace>-<job> for other jobs.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	BranchTemplate string `json:"branchTemplate,omitempty"`

	// TitleTemplate is a Go template for the request's title, with the
	// data of commit messages; the default names the images and tags.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	TitleTemplate string `json:"titleTemplate,omitempty"`

	// BodyTemplate is a Go template for the request's description, with the
	// data of commit messages; the default is a table of the changes.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	BodyTemplate string `json:"bodyTemplate,omitempty"`

	// Labels are put on a new request (Azure DevOps' tags); Bitbucket has
	// none, and refuses them.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Labels []string `json:"labels,omitempty"`

	// Reviewers are user names asked to review a new request (on GitHub,
	// ORG/TEAM asks a team; on Bitbucket Cloud, account ids or {uuid}s;
	// on Azure DevOps, identity ids).
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Reviewers []string `json:"reviewers,omitempty"`

	// Assignees are user names a new request is assigned to; Bitbucket and
	// Azure DevOps have none, and refuse them.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Assignees []string `json:"assignees,omitempty"`

	// Draft opens requests as drafts.
	// +optional
	Draft bool `json:"draft,omitempty"`

	// AutoMerge asks the forge to merge a new request, with this method,
	// once its checks pass (GitHub's auto-merge, GitLab's merge when the
	// pipeline succeeds, Gitea's merge when checks succeed, Bitbucket Data
	// Center's auto-merge, Azure DevOps' auto-complete); Bitbucket Cloud's
	// API has none, and refuses it. Unset: a person merges.
	// +optional
	AutoMerge MergeMethod `json:"autoMerge,omitempty"`
}
