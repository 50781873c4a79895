package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// ImageRepositoryKind is the kind name of ImageRepository.
const ImageRepositoryKind = "ImageRepository"

// ImageRepositorySpec says which image repository to scan, and how.
type ImageRepositorySpec struct {
	// Image is the image repository to scan, without tag or digest, e.g.
	// ghcr.io/org/app or nginx (docker.io/library/nginx); an OCI
	// chart repository is given the same way (ghcr.io/org/charts/app). A
	// chart of an HTTP(S) Helm repository is https://REPOSITORY/CHART
	// (REPOSITORY as given to helm repo add): its index.yaml's versions are
	// the tags.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Image string `json:"image"`

	// Interval between scans.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Interval metav1.Duration `json:"interval"`

	// Timeout bounds authentication and a scan; defaults to the interval.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m))+$"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// SecretRef names a Secret in the same namespace with the credentials:
	// for a registry a kubernetes.io/dockerconfigjson Secret; for a Helm
	// repository over HTTP(S) username and password (basic authentication,
	// e.g. a kubernetes.io/basic-auth Secret), or bearerToken.
	// +optional
	SecretRef *meta.LocalObjectReference `json:"secretRef,omitempty"`

	// ServiceAccountName names a ServiceAccount in the same namespace whose
	// imagePullSecrets are used as registry credentials; not for a Helm
	// repository over HTTP(S). With a cloud provider, it is the
	// ServiceAccount whose cloud identity is used instead of the
	// controller's (needs --object-level-workload-identity).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// CertSecretRef names a Secret with TLS material for the registry: ca.crt,
	// and tls.crt with tls.key for client authentication.
	// +optional
	CertSecretRef *meta.LocalObjectReference `json:"certSecretRef,omitempty"`

	// ProxySecretRef names a Secret with the proxy address, and optionally
	// username and password.
	// +optional
	ProxySecretRef *meta.LocalObjectReference `json:"proxySecretRef,omitempty"`

	// Suspend stops scanning; the last result stays available.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// AccessFrom lists the namespaces whose ImagePolicies may refer to this
	// repository; by default only policies in its own namespace may.
	// +optional
	AccessFrom *meta.AccessFrom `json:"accessFrom,omitempty"`

	// ExclusionList holds regular expressions; matching tags are dropped.
	// +kubebuilder:default:={"^.*\\.sig$"}
	// +kubebuilder:validation:MaxItems=25
	// +optional
	ExclusionList []string `json:"exclusionList,omitempty"`

	// Provider of the registry's credentials: generic (secretRef, the
	// ServiceAccount's imagePullSecrets, or none), or aws (ECR, ECR
	// Public), gcp (Artifact Registry, GCR) or azure (ACR) for credentials
	// from the controller's cloud identity, or the ServiceAccount's. A
	// secretRef wins over a cloud provider.
	// +kubebuilder:validation:Enum=generic;aws;azure;gcp
	// +kubebuilder:default=generic
	// +optional
	Provider string `json:"provider,omitempty"`

	// Insecure allows plain HTTP to the registry, or an http:// Helm
	// repository.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// ScanResult is the outcome of the last scan.
type ScanResult struct {
	// Revision is the sha256 of the sorted tag set.
	// +optional
	Revision string `json:"revision,omitempty"`

	// TagCount is the number of tags kept after exclusion.
	TagCount int `json:"tagCount"`

	// ExcludedCount is the number of tags the exclusionList dropped.
	// +optional
	ExcludedCount int `json:"excludedCount,omitempty"`

	// ScanTime is when the scan finished.
	// +optional
	ScanTime metav1.Time `json:"scanTime,omitempty"`

	// LatestTags are up to ten tags, in descending string order.
	// +optional
	LatestTags []string `json:"latestTags,omitempty"`

	// RecentTags are up to ten tags a scan first listed last, newest
	// first, with when and, where known, when their images were built
	// (known once a policy asked: newestBuild, a minimum age by build
	// time, a Helm index). Tags the first scan listed are left out
	// unless their build time is known: all were first seen at once.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	RecentTags []TagTimes `json:"recentTags,omitempty"`
}

// MaxRecentTags bounds status.lastScanResult.recentTags.
const MaxRecentTags = 10

// TagTimes is a tag with what the reflector knows of its age.
type TagTimes struct {
	Tag string `json:"tag"`
	// FirstSeen is when a scan first listed the tag.
	FirstSeen metav1.Time `json:"firstSeen"`
	// Created is the image's build time.
	// +optional
	Created *metav1.Time `json:"created,omitempty"`
}

// ImageRepositoryStatus is the observed state of an ImageRepository.
type ImageRepositoryStatus struct {
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the last generation reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// CanonicalImageName is the image with registry and repository made
	// explicit, e.g. docker.io/library/nginx (pkg/imagename).
	// +optional
	CanonicalImageName string `json:"canonicalImageName,omitempty"`

	// LastScanResult is the outcome of the last successful scan.
	// +optional
	LastScanResult *ScanResult `json:"lastScanResult,omitempty"`

	// ObservedExclusionList is the exclusion list the last scan applied.
	// +optional
	ObservedExclusionList []string `json:"observedExclusionList,omitempty"`

	meta.ReconcileRequestStatus `json:",inline"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=imgrepo,categories=image-toolkit
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.canonicalImageName`,priority=1
// +kubebuilder:printcolumn:name="Last scan",type=date,JSONPath=`.status.lastScanResult.scanTime`
// +kubebuilder:printcolumn:name="Tags",type=integer,JSONPath=`.status.lastScanResult.tagCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ImageRepository scans an image repository's tags.
type ImageRepository struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ImageRepositorySpec `json:"spec"`
	// +optional
	Status ImageRepositoryStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *ImageRepository) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions.
func (in *ImageRepository) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// +kubebuilder:object:root=true

// ImageRepositoryList is a list of ImageRepositories.
type ImageRepositoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageRepository `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ImageRepository{}, &ImageRepositoryList{})
}
