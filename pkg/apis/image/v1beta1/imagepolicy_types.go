package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// ImagePolicyKind is the kind name of ImagePolicy.
const ImagePolicyKind = "ImagePolicy"

// ImagePolicySpec says how to pick the latest image of an ImageRepository.
// +kubebuilder:validation:XValidation:rule="!has(self.interval) || (has(self.digestReflectionPolicy) && self.digestReflectionPolicy == 'Always')",message="spec.interval is only accepted when spec.digestReflectionPolicy is Always"
// +kubebuilder:validation:XValidation:rule="!has(self.digestReflectionPolicy) || self.digestReflectionPolicy != 'Always' || has(self.interval)",message="spec.interval must be set when spec.digestReflectionPolicy is Always"
// +kubebuilder:validation:XValidation:rule="!has(self.verify) || !has(self.policy.promotion)",message="spec.verify does not apply to a promotion policy, which takes the image its upstream ran: verify on the upstream's policy"
type ImagePolicySpec struct {
	// ImageRepositoryRef names the ImageRepository whose tags are chosen
	// from; in another namespace only if its accessFrom allows it.
	// +required
	ImageRepositoryRef meta.NamespacedObjectReference `json:"imageRepositoryRef"`

	// Policy orders the tags.
	// +required
	Policy ImagePolicyChoice `json:"policy"`

	// FilterTags keeps only the tags matching a pattern, and can extract the
	// part of the tag the policy orders by.
	// +optional
	FilterTags *TagFilter `json:"filterTags,omitempty"`

	// DigestReflectionPolicy says when to look up the digest of the latest
	// tag: Never, IfNotPresent (once per tag), Always (every interval).
	// +kubebuilder:default=Never
	// +optional
	DigestReflectionPolicy ReflectionPolicy `json:"digestReflectionPolicy,omitempty"`

	// Interval between digest look-ups; required with, and only with,
	// digestReflectionPolicy Always.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Platform (os/architecture[/variant], e.g. linux/arm64) makes the
	// reflected digest that platform's manifest in the tag's index instead
	// of the index itself, and is the platform whose build time counts for
	// minimumAge.source created and newestBuild. Unset, the digest is the
	// one the tag points to (the index of a multi-platform image).
	// +kubebuilder:validation:Pattern="^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$"
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Platform string `json:"platform,omitempty"`

	// MinimumAge makes a tag a candidate only once it is at least this old:
	// since a scan first listed it (source seen) or since the image was
	// built (source created).
	// +optional
	MinimumAge *MinimumAge `json:"minimumAge,omitempty"`

	// Verify makes only images whose signature verifies candidates: the
	// candidates are checked from the best down, the first whose digest
	// carries a trusted signature is chosen, and latestRef records that
	// digest, which is what the update job writes.
	// +optional
	Verify *ImageVerification `json:"verify,omitempty"`

	// Suspend stops updating the policy's result.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ImageVerification says which signatures a policy trusts, in the words of
// Flux source-controller's spec.verify.
// +kubebuilder:validation:XValidation:rule="self.provider != 'notation' || (has(self.secretRef) && has(self.trustPolicyRef))",message="notation needs secretRef (the trusted certificates) and trustPolicyRef"
// +kubebuilder:validation:XValidation:rule="self.provider != 'cosign' || (has(self.secretRef) != (has(self.matchOIDCIdentity) && size(self.matchOIDCIdentity) > 0))",message="cosign needs either secretRef (public keys) or matchOIDCIdentity (keyless), not both"
// +kubebuilder:validation:XValidation:rule="!has(self.trustedRootSecretRef) || (self.provider == 'cosign' && !has(self.secretRef))",message="trustedRootSecretRef is for cosign keyless verification"
// +kubebuilder:validation:XValidation:rule="!has(self.trustPolicyRef) || self.provider == 'notation'",message="trustPolicyRef is for notation"
// +kubebuilder:validation:XValidation:rule="!has(self.attestations) || size(self.attestations) == 0 || self.provider == 'cosign'",message="attestations are verified with cosign (Sigstore DSSE attestations): set provider cosign"
// +kubebuilder:validation:XValidation:rule="!has(self.attestations) || self.attestations.all(a, !has(a.matchOIDCIdentity) || size(a.matchOIDCIdentity) == 0 || (has(self.matchOIDCIdentity) && size(self.matchOIDCIdentity) > 0))",message="attestations[].matchOIDCIdentity names keyless signers: it needs keyless verification (matchOIDCIdentity, not secretRef)"
type ImageVerification struct {
	// Provider is the signature scheme: cosign (Sigstore bundles found as
	// OCI referrers or through the referrers tag schema, and legacy
	// sha256-<hex>.sig tags) or notation.
	// +kubebuilder:validation:Enum=cosign;notation
	// +kubebuilder:default=cosign
	// +required
	Provider string `json:"provider"`

	// SecretRef names a Secret in the policy's namespace: for cosign, the
	// public keys (every key ending in .pub; a signature by any of them
	// verifies); for notation, the trust store's certificates (every key
	// ending in .crt or .pem).
	// +optional
	SecretRef *meta.LocalObjectReference `json:"secretRef,omitempty"`

	// MatchOIDCIdentity are the keyless (cosign) signers trusted: a
	// signature verifies when its Fulcio certificate matches any entry.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	MatchOIDCIdentity []OIDCIdentityMatch `json:"matchOIDCIdentity,omitempty"`

	// TrustedRootSecretRef names a Secret whose trusted_root.json is the
	// Sigstore trusted root of keyless verification, for a private
	// Sigstore; unset, the public Sigstore root (fetched through its TUF
	// repository).
	// +optional
	TrustedRootSecretRef *meta.LocalObjectReference `json:"trustedRootSecretRef,omitempty"`

	// TrustPolicyRef names a ConfigMap whose trustpolicy.json is the
	// Notation trust policy. Its trustStores name stores of the
	// certificates of secretRef (any name: the Secret is the store).
	// +optional
	TrustPolicyRef *meta.LocalObjectReference `json:"trustPolicyRef,omitempty"`

	// Attestations are in-toto attestations a candidate must carry besides
	// its signature, each signed by the signers trusted above and saying
	// what its rule requires (the SLSA provenance of a build from the
	// right repository and ref, a vulnerability scan without critical
	// findings). A candidate is chosen only when its signature and every
	// rule verify.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	// +optional
	Attestations []AttestationRule `json:"attestations,omitempty"`
}

// AttestationRule is an attestation a candidate must carry: its predicate
// type, who must have signed it, and conditions on what it says. The
// attestations are found where signers put them: Sigstore bundle
// referrers (cosign attest, GitHub's attest-build-provenance with
// push-to-registry) and cosign's legacy sha256-<hex>.att tags. One that
// meets the rule is enough.
// +kubebuilder:validation:XValidation:rule="!has(self.slsa) || self.predicateType in ['slsaprovenance', 'slsaprovenance02', 'slsaprovenance1', 'https://slsa.dev/provenance/v0.2', 'https://slsa.dev/provenance/v1']",message="slsa conditions need an SLSA provenance predicateType (slsaprovenance1, slsaprovenance02 or their URIs)"
type AttestationRule struct {
	// Name names the rule in the status and in messages.
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`

	// PredicateType is the in-toto predicate type: one of cosign attest's
	// --type names (slsaprovenance1, slsaprovenance02, slsaprovenance,
	// vuln, spdx, spdxjson, cyclonedx, openvex, link, custom) or any
	// predicate type URI (https://slsa.dev/provenance/v1).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	PredicateType string `json:"predicateType"`

	// MatchOIDCIdentity are the keyless signers trusted for this
	// attestation instead of spec.verify.matchOIDCIdentity, e.g. the CI
	// workflow that writes the provenance when a person signs releases.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	MatchOIDCIdentity []OIDCIdentityMatch `json:"matchOIDCIdentity,omitempty"`

	// SLSA are conditions on an SLSA provenance (v1 or v0.2).
	// +optional
	SLSA *SLSAProvenanceMatch `json:"slsa,omitempty"`

	// Conditions are CEL expressions that must each be true of the
	// attestation's statement: predicate (the predicate, as JSON),
	// predicateType and subject, e.g.
	// predicate.scanner.result.summary.critical == 0. An expression that
	// fails to evaluate (a missing field) does not hold.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=1024
	// +optional
	Conditions []string `json:"conditions,omitempty"`
}

// SLSAProvenanceMatch is what an SLSA provenance must say of the build.
// Each value is matched whole: a glob (path.Match: * does not cross /),
// or, starting with ^, a regular expression (Go syntax, anchor it with $
// too). An unset value matches anything.
type SLSAProvenanceMatch struct {
	// BuilderID matches the builder's id, e.g.
	// https://github.com/actions/runner/github-hosted.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	BuilderID string `json:"builderID,omitempty"`

	// SourceRepository matches the repository the build's source came
	// from, without its scheme and .git (github.com/acme/*): a
	// provenance's git+https://github.com/acme/api.git is
	// github.com/acme/api.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	SourceRepository string `json:"sourceRepository,omitempty"`

	// SourceRef matches the source ref built, e.g. refs/heads/main or
	// refs/tags/v*.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	SourceRef string `json:"sourceRef,omitempty"`

	// BuildType matches the build type URI, e.g.
	// https://actions.github.io/buildtypes/workflow/v1.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	BuildType string `json:"buildType,omitempty"`
}

// OIDCIdentityMatch is a keyless signer: regular expressions (Go syntax,
// anchor them with ^ and $) over the OIDC issuer and the subject of the
// signing certificate.
type OIDCIdentityMatch struct {
	// Issuer matches the OIDC issuer, e.g.
	// ^https://token.actions.githubusercontent.com$.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Issuer string `json:"issuer"`
	// Subject matches the certificate's subject (SAN), e.g.
	// ^https://github.com/org/repo/.github/workflows/release.yml@refs/tags/.*$.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Subject string `json:"subject"`
}

// SignatureProviderCosign and SignatureProviderNotation are
// spec.verify.provider's values.
const (
	SignatureProviderCosign   = "cosign"
	SignatureProviderNotation = "notation"
)

// MinimumAge is a soak time: how old a tag must be to be chosen.
type MinimumAge struct {
	// Duration a tag must have existed before it can be chosen, e.g. 24h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Duration metav1.Duration `json:"duration"`

	// Source of a tag's age: seen (default), when a scan of the
	// ImageRepository first listed the tag; created, the image config's
	// build time, looked up only for the candidates that could win and
	// cached.
	// +kubebuilder:validation:Enum=seen;created
	// +kubebuilder:default=seen
	// +optional
	Source AgeSource `json:"source,omitempty"`
}

// AgeSource says where a tag's age comes from.
type AgeSource string

const (
	// AgeSeen: since a scan first listed the tag.
	AgeSeen AgeSource = "seen"
	// AgeCreated: since the image config's created time.
	AgeCreated AgeSource = "created"
)

// ReflectionPolicy says when the digest of the latest image is looked up.
// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
type ReflectionPolicy string

const (
	// ReflectAlways looks the digest up every interval.
	ReflectAlways ReflectionPolicy = "Always"
	// ReflectIfNotPresent looks the digest up once per new tag.
	ReflectIfNotPresent ReflectionPolicy = "IfNotPresent"
	// ReflectNever never looks the digest up.
	ReflectNever ReflectionPolicy = "Never"
)

// ImagePolicyChoice is exactly one ordering of tags.
// +kubebuilder:validation:XValidation:rule="[has(self.semver), has(self.docker), has(self.alphabetical), has(self.numerical), has(self.newestBuild), has(self.promotion)].filter(x, x).size() == 1",message="exactly one of semver, docker, alphabetical, numerical, newestBuild or promotion must be set"
type ImagePolicyChoice struct {
	// SemVer picks the highest version in a range.
	// +optional
	SemVer *SemVerPolicy `json:"semver,omitempty"`

	// Docker picks the highest Docker-style version (postgres:16.4,
	// redis:7.4-alpine, node:22) in a range, of the same shape as a
	// reference tag: the same number of parts and the same suffix.
	// +optional
	Docker *DockerPolicy `json:"docker,omitempty"`

	// Alphabetical orders tags as byte strings.
	// +optional
	Alphabetical *AlphabeticalPolicy `json:"alphabetical,omitempty"`

	// Numerical orders tags as numbers.
	// +optional
	Numerical *NumericalPolicy `json:"numerical,omitempty"`

	// NewestBuild orders tags by the build time (config created) of their
	// images, newest first. It costs registry requests: see
	// NewestBuildPolicy.
	// +optional
	NewestBuild *NewestBuildPolicy `json:"newestBuild,omitempty"`

	// Promotion follows what an upstream environment ran healthy: the
	// image an upstream ImageUpdateAutomation applied, once the objects of
	// healthOf have run it healthy for soak. It orders no tags: the image
	// is the upstream's, tag and digest, never resolved again.
	// +optional
	Promotion *PromotionPolicy `json:"promotion,omitempty"`
}

// PromotionPolicy promotes the image an upstream environment ran healthy.
type PromotionPolicy struct {
	// From is the upstream: the automation that writes it, and which of
	// its policies to follow.
	// +required
	From PromotionSource `json:"from"`

	// HealthOf are the objects whose health says the upstream ran the
	// image healthy: Flux Kustomizations and HelmReleases, Argo CD
	// Applications, or any object with kstatus conditions. Each must be
	// healthy at a revision that holds the upstream's image; at least one
	// must name its revision (Flux's lastAppliedRevision, Argo CD's
	// sync.revision).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +required
	HealthOf []HealthObjectReference `json:"healthOf"`

	// Soak is how long the upstream must have run the image healthy,
	// counted from the moment health was first seen at a revision holding
	// it; 0 promotes as soon as it is seen healthy.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Soak *metav1.Duration `json:"soak,omitempty"`

	// Approval Required makes a promotion that would move wait, once
	// healthy and soaked, until a person approves that exact image: the
	// ImagePolicy's image.toolkit.dev/approve annotation naming its
	// digest (tk-image approve, the dashboard's Approve button). An
	// approval names one digest: it never approves a newer image. None
	// (the default) promotes without one.
	// +kubebuilder:validation:Enum=None;Required
	// +optional
	Approval ApprovalMode `json:"approval,omitempty"`
}

// ApprovalMode says whether a promotion waits for a person's approval.
type ApprovalMode string

const (
	ApprovalNone     ApprovalMode = "None"
	ApprovalRequired ApprovalMode = "Required"
)

// ApproveAnnotation on a promotion ImagePolicy with approval Required
// approves the image whose digest it holds (for an upstream image without
// a digest, its tag). ApprovedByAnnotation names who approved: tk-image
// and the dashboard write the user the API server authenticated them as
// (a SelfSubjectReview), and the reflector chart's admission policy
// refuses any other value. Without it, the approver recorded is the field
// manager that wrote ApproveAnnotation (kubectl-annotate).
const (
	ApproveAnnotation    = "image.toolkit.dev/approve"
	ApprovedByAnnotation = "image.toolkit.dev/approved-by"
)

// PromotionSource names the upstream of a promotion, in the policy's
// namespace: an automation, a policy, or both.
// +kubebuilder:validation:XValidation:rule="has(self.automation) || has(self.policy)",message="promotion.from needs an automation, a policy or both"
type PromotionSource struct {
	// Automation is the ImageUpdateAutomation that writes the upstream
	// environment; when left out, the one automation that applies Policy.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Automation string `json:"automation,omitempty"`

	// Policy is which of the automation's ImagePolicies to follow; it may
	// be left out when the automation applies exactly one.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Policy string `json:"policy,omitempty"`
}

// HealthObjectReference names an object whose health a promotion or a
// rollback reads.
// +kubebuilder:validation:XValidation:rule="!(has(self.kubeConfig) && has(self.webhookRef))",message="kubeConfig reads the object, webhookRef receives its health: name one"
type HealthObjectReference struct {
	// APIVersion of the object, e.g. kustomize.toolkit.fluxcd.io/v1.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	APIVersion string `json:"apiVersion"`
	// Kind of the object, e.g. Kustomization.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Namespace of the object; the referrer's namespace when empty.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// KubeConfig reads the object from another cluster (the environment
	// Flux or Argo CD deploys there), watched through the kubeconfig of a
	// Secret in the referrer's namespace; by default the object is in the
	// controller's own cluster.
	// +optional
	KubeConfig *meta.KubeConfigReference `json:"kubeConfig,omitempty"`
	// WebhookRef reads the object's health as its cluster pushes it to the
	// HealthWebhook of this name in the referrer's namespace (Flux
	// notification-controller, Argo CD Notifications), for a cluster the
	// controllers cannot reach; Namespace is then the object's namespace in
	// that cluster.
	// +optional
	WebhookRef *meta.LocalObjectReference `json:"webhookRef,omitempty"`
}

// HealthStatus is one object's health as last seen.
type HealthStatus struct {
	// Object is the object, as Kind/namespace/name.
	Object string `json:"object"`
	// State is Healthy, Progressing, Degraded or Unknown (or NotFound).
	State string `json:"state"`
	// Revision is the source revision the state is about, as the object
	// names it; empty for kinds that name none.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Reason and Message are the object's own.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// DefaultMaxCandidates is newestBuild.maxCandidates when unset.
const DefaultMaxCandidates = 100

// NewestBuildPolicy picks the tag whose image was built last. Build times
// are read from each candidate's image config (two or three registry
// requests per tag) once and cached with the repository's tags: a new tag
// costs its own lookup only.
type NewestBuildPolicy struct {
	// MaxCandidates bounds the candidates (after filterTags) whose build
	// time is looked up: the ones a scan first listed most recently, ties
	// broken by the greater tag. Older candidates cannot be chosen.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=100
	// +optional
	MaxCandidates int `json:"maxCandidates,omitempty"`
}

// SemVerPolicy picks the highest semantic version within a range.
type SemVerPolicy struct {
	// Range of versions, in Masterminds/semver/v3 syntax, e.g. ">=1.0 <2.0".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	Range string `json:"range"`
}

// DockerPolicy picks the highest Docker-style version within a range:
// tags of 1 to 4 numbers (an optional v, leading zeros allowed), an
// optional prerelease, and an optional suffix after a dash, the
// compatibility (7.4-alpine). Only tags with CompatibleWith's suffix and
// number of parts are candidates.
type DockerPolicy struct {
	// Range of versions, in Masterminds/semver/v3 syntax over the tag's
	// first three numbers (missing ones are 0), e.g. ">=7.2 <8".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	Range string `json:"range"`

	// CompatibleWith is a tag whose shape the candidates must have: its
	// suffix and its number of parts (7.2-alpine: two numbers, then
	// -alpine). Unset, only tags without a suffix are candidates, of any
	// number of parts.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	CompatibleWith string `json:"compatibleWith,omitempty"`
}

// AlphabeticalPolicy orders tags as byte strings.
type AlphabeticalPolicy struct {
	// Order: asc picks the greatest tag, desc the least.
	// +kubebuilder:validation:Enum=asc;desc
	// +kubebuilder:default=asc
	// +optional
	Order string `json:"order,omitempty"`
}

// NumericalPolicy orders tags as numbers.
type NumericalPolicy struct {
	// Order: asc picks the greatest number, desc the least.
	// +kubebuilder:validation:Enum=asc;desc
	// +kubebuilder:default=asc
	// +optional
	Order string `json:"order,omitempty"`
}

// TagFilter keeps tags matching a regular expression.
type TagFilter struct {
	// Pattern is a Go regular expression tags must match.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Pattern string `json:"pattern,omitempty"`

	// Extract is the replacement template, e.g. $ts, of the value ordered by
	// the policy; the whole tag when empty.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Extract string `json:"extract,omitempty"`
}

// ImagePolicyStatus is the observed state of an ImagePolicy.
type ImagePolicyStatus struct {
	// LatestRef is the image the policy picked.
	// +optional
	LatestRef *meta.ImageRef `json:"latestRef,omitempty"`

	// ObservedPreviousRef is the image picked before the latest one.
	// +optional
	ObservedPreviousRef *meta.ImageRef `json:"observedPreviousRef,omitempty"`

	// LatestSource is what latestRef's image says it was built from (its
	// org.opencontainers.image.* annotations or labels), read once per
	// image; commits and pull requests that bring the image name it.
	// +optional
	LatestSource *meta.ImageSource `json:"latestSource,omitempty"`

	// ObservedPreviousSource is observedPreviousRef's, for the changes
	// between the two.
	// +optional
	ObservedPreviousSource *meta.ImageSource `json:"observedPreviousSource,omitempty"`

	// LatestRefTime is when latestRef last changed, to the microsecond; the
	// automation controller measures the time from here to the push.
	// +optional
	LatestRefTime *metav1.MicroTime `json:"latestRefTime,omitempty"`

	// PendingRef is the tag minimumAge holds back that will be chosen
	// next, and when; the policy is evaluated again then.
	// +optional
	PendingRef *PendingRef `json:"pendingRef,omitempty"`

	// HeldRef is set while latestRef is held against a downgrade: the
	// latest scans do not list latestRef's tag, and the best tag they list
	// ranks lower. latestRef moves there only once two consecutive
	// complete scans lacked its tag; a scan that lists it again clears
	// this. A registry that answers one listing short (a partial replica,
	// a flapping index) never downgrades a deployment.
	// +optional
	HeldRef *HeldRef `json:"heldRef,omitempty"`

	// Verification is who signed latestRef's digest, when spec.verify is
	// set.
	// +optional
	Verification *VerificationStatus `json:"verification,omitempty"`

	// UnverifiedRef is the best candidate whose signature did not verify,
	// when it ranks above latestRef (or no candidate verified): the tag
	// that would have been chosen, and why it was not.
	// +optional
	UnverifiedRef *UnverifiedRef `json:"unverifiedRef,omitempty"`

	// LastSelection is how the last evaluation treated the repository's
	// tags, also when it chose none: what each step dropped and the best
	// candidates, so that why a tag was (or was not) chosen can be read
	// from the status.
	// +optional
	LastSelection *TagSelection `json:"lastSelection,omitempty"`

	// Promotion is, for a promotion policy, where latestRef came from and
	// the health of its upstream as last seen.
	// +optional
	Promotion *PromotionStatus `json:"promotion,omitempty"`

	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the last generation reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	meta.ReconcileRequestStatus `json:",inline"`
}

// PendingRef is a tag that becomes the policy's choice at EligibleAt,
// unless a scan changes the answer first; for a promotion, the upstream's
// image waiting for health and soak.
type PendingRef struct {
	// Tag is the tag that will be chosen.
	Tag string `json:"tag"`
	// EligibleAt is when it reaches the minimum age, or when its soak
	// ends; unset while a promotion's upstream is not healthy.
	// +optional
	EligibleAt *metav1.Time `json:"eligibleAt,omitempty"`
	// Image is a promotion's upstream image, tag and digest as the
	// upstream applied it.
	// +optional
	Image *meta.ImageRef `json:"image,omitempty"`
	// UpstreamRevision is the upstream commit whose files hold Image.
	// +optional
	UpstreamRevision string `json:"upstreamRevision,omitempty"`
	// HealthSeen is when every healthOf object was first seen healthy at
	// a revision holding Image; the soak counts from here.
	// +optional
	HealthSeen *metav1.Time `json:"healthSeen,omitempty"`
	// SoakLeft is what remained of the soak at the last reconcile.
	// +optional
	SoakLeft *metav1.Duration `json:"soakLeft,omitempty"`
	// Approval is, under approval Required, the approval of Image once a
	// person gave it; the image still waits for health or soak.
	// +optional
	Approval *PromotionApproval `json:"approval,omitempty"`
}

// PromotionStatus is what a promotion policy last saw of its upstream.
type PromotionStatus struct {
	// Automation and Policy are the upstream followed.
	Automation string `json:"automation"`
	// +optional
	Policy string `json:"policy,omitempty"`
	// Health of the healthOf objects, in their order.
	// +optional
	Health []HealthStatus `json:"health,omitempty"`
	// PromotedRevision is the upstream commit latestRef was promoted from,
	// and PromotedHealthSeen when its health was first seen there.
	// +optional
	PromotedRevision string `json:"promotedRevision,omitempty"`
	// +optional
	PromotedHealthSeen *metav1.Time `json:"promotedHealthSeen,omitempty"`
	// Approval is the approval latestRef was promoted with, under
	// approval Required: who approved which digest, and when the
	// reflector first saw it. Commits and pull requests that bring the
	// image name the approver.
	// +optional
	Approval *PromotionApproval `json:"approval,omitempty"`
	// Group are the other promotion policies of the same upstream
	// automation whose images differ from their latest at the upstream
	// commit this image waits at or was promoted from: what ran together
	// upstream moves together, so none is promoted while another cannot
	// move. Each says whether it can, and what it waits for.
	// +optional
	// +listType=atomic
	Group []PromotionGroupMember `json:"group,omitempty"`
}

// PromotionGroupMember is one other policy of a promotion group.
type PromotionGroupMember struct {
	// Policy is the ImagePolicy's name.
	Policy string `json:"policy"`
	// Ready says it can move now.
	Ready bool `json:"ready"`
	// Reason and Message say what it waits for, when not ready.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// PromotionApproval is a person's approval of one image.
type PromotionApproval struct {
	meta.Approval `json:",inline"`
	// SeenAt is when the reflector first saw the approval.
	// +optional
	SeenAt *metav1.Time `json:"seenAt,omitempty"`
}

// VerificationStatus is who signed latestRef's digest.
type VerificationStatus struct {
	// Digest is the digest that verified, latestRef's tag's digest
	// (with spec.platform, the index's; see platformDigest).
	Digest string `json:"digest"`
	// Signer is the key ("key cosign.pub"), the keyless identity
	// ("subject ... issued by ...") or the Notation certificate subject
	// whose signature verified.
	Signer string `json:"signer"`
	// Format is where the signature was found: bundle (a Sigstore bundle
	// referrer), legacy (a .sig tag) or notation.
	Format string `json:"format"`
	// PlatformDigest is, with spec.platform, the digest of that
	// platform's manifest in the index that verified: the digest
	// latestRef carries and the automation writes. The index's signature
	// covers it, as an index names its manifests by digest.
	// +optional
	PlatformDigest string `json:"platformDigest,omitempty"`
	// Skipped is how many better candidates did not verify.
	// +optional
	Skipped int `json:"skipped,omitempty"`
	// Attestations are the attestations of spec.verify.attestations that
	// verified for Digest, one per rule, and what they said.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Attestations []meta.Attestation `json:"attestations,omitempty"`
}

// UnverifiedRef is a candidate whose signature did not verify.
type UnverifiedRef struct {
	// Tag is the candidate's tag.
	Tag string `json:"tag"`
	// Digest is the digest its tag pointed to when it was checked.
	// +optional
	Digest string `json:"digest,omitempty"`
	// Reason is NoSignature, Untrusted, Malformed, TooLarge,
	// TooManyReferrers, NoAttestation or ProvenanceMismatch.
	Reason string `json:"reason"`
	// Message says more.
	// +optional
	Message string `json:"message,omitempty"`
}

// HeldRef is latestRef's tag held against a lower one (status.heldRef).
type HeldRef struct {
	// Tag is latestRef's tag, missing from the latest scans.
	Tag string `json:"tag"`
	// Candidate is the lower tag the policy would move to.
	Candidate string `json:"candidate"`
	// MissingScans counts the consecutive complete scans without Tag.
	MissingScans int32 `json:"missingScans"`
	// LastScanTime is the time of the last of those scans.
	LastScanTime metav1.Time `json:"lastScanTime"`
}

// DowngradeScans is how many consecutive complete scans must lack a
// policy's latestRef before it moves to a lower tag.
const DowngradeScans = 2

// MaxTopCandidates is how many of the kept tags the controller records in
// status.lastSelection.topCandidates.
const MaxTopCandidates = 5

// TagSelection is what one evaluation of a policy did with the tags of its
// ImageRepository: every tag is counted in exactly one of filtered,
// unparsable, outOfRange and kept.
type TagSelection struct {
	// ScanRevision is the ImageRepository's lastScanResult.revision whose
	// tags were evaluated.
	// +optional
	ScanRevision string `json:"scanRevision,omitempty"`

	// Considered is the number of tags evaluated: the repository's tags
	// after its exclusionList.
	Considered int `json:"considered"`

	// Filtered is how many tags filterTags.pattern did not match.
	Filtered int `json:"filtered"`

	// Unparsable is how many tags (or extracted values) the policy cannot
	// order: not a semantic version for semver (which needs all three
	// numbers), not a Docker-style version of compatibleWith's shape for
	// docker, not a finite number for numerical. Alphabetical orders every
	// tag.
	Unparsable int `json:"unparsable"`

	// OutOfRange is how many semantic versions are outside semver.range.
	OutOfRange int `json:"outOfRange"`

	// BeyondLimit is how many candidates newestBuild left out because they
	// were first seen before its maxCandidates most recent ones.
	// +optional
	BeyondLimit int `json:"beyondLimit,omitempty"`

	// Kept is how many tags remained candidates.
	Kept int `json:"kept"`

	// TooNew is how many kept tags that rank above the chosen one are
	// younger than minimumAge (all of them when none is chosen).
	// +optional
	TooNew int `json:"tooNew,omitempty"`

	// TopCandidates are the best kept tags, best first, at most five: the
	// first is the one chosen. With minimumAge, the candidates ranking
	// above it that are too new are left out; those after it are listed in
	// the policy's order.
	// +optional
	TopCandidates []string `json:"topCandidates,omitempty"`
}

// Selected is the tag the evaluation chose, "" when none.
func (s *TagSelection) Selected() string {
	if len(s.TopCandidates) == 0 {
		return ""
	}
	return s.TopCandidates[0]
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=imgpol,categories=image-toolkit
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.latestRef.name`
// +kubebuilder:printcolumn:name="Tag",type=string,JSONPath=`.status.latestRef.tag`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.status.latestRef.digest`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ImagePolicy picks the latest image of an ImageRepository.
type ImagePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ImagePolicySpec `json:"spec"`
	// +optional
	Status ImagePolicyStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *ImagePolicy) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions.
func (in *ImagePolicy) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// +kubebuilder:object:root=true

// ImagePolicyList is a list of ImagePolicies.
type ImagePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImagePolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ImagePolicy{}, &ImagePolicyList{})
}
