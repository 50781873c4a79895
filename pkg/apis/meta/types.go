package meta

// ReconcileRequestAnnotation asks a controller to reconcile an object now,
// regardless of its interval. Any change of its value is a new request; the
// controller echoes the value it handled in status.lastHandledReconcileAt.
// Flux's equivalent is reconcile.fluxcd.io/requestedAt.
const ReconcileRequestAnnotation = "reconcile.toolkit.dev/requestedAt"

// LocalObjectReference refers to an object in the same namespace.
type LocalObjectReference struct {
	// Name of the referent: an object name (DNS subdomain).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`
}

// SecretKeyReference names a Secret in the referrer's namespace and,
// optionally, one of its keys.
type SecretKeyReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// Key of the Secret's data to read; each use says its default.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]*$`
	// +optional
	Key string `json:"key,omitempty"`
}

// KubeConfigReference says how to reach another cluster, in the shape
// Flux's Kustomization and HelmRelease use (spec.kubeConfig).
// +kubebuilder:validation:XValidation:rule="has(self.secretRef) != has(self.configMapRef)",message="kubeConfig needs one of secretRef (a kubeconfig) and configMapRef (a cloud identity)"
type KubeConfigReference struct {
	// SecretRef is a Secret in the referrer's namespace holding a
	// kubeconfig under Key: by default "value", else "value.yaml", as Flux
	// reads it. A kubeconfig that runs a program (exec, auth-provider),
	// skips TLS verification or names files of the controller's disk is
	// refused unless the controller's flags allow it.
	// +optional
	SecretRef *SecretKeyReference `json:"secretRef,omitempty"`
	// ConfigMapRef is a ConfigMap in the referrer's namespace whose keys
	// say how a cloud identity reaches the cluster, without a Secret, as
	// Flux 2.6+ reads them: provider (aws, azure, gcp or generic),
	// cluster (the EKS ARN, AKS resource ID or GKE resource name), address
	// (the API server; required for generic), ca.crt, audiences (one per
	// line) and serviceAccountName (whose identity to use, with
	// --object-level-workload-identity; the controller's own otherwise).
	// +optional
	ConfigMapRef *LocalObjectReference `json:"configMapRef,omitempty"`
}

// NamespacedObjectReference refers to an object, by default in the same
// namespace as the referrer.
type NamespacedObjectReference struct {
	// Name of the referent: an object name (DNS subdomain).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// Namespace of the referent (a DNS label); when empty, the referrer's
	// namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// ReconcileRequestStatus records the last reconcile request a controller handled.
type ReconcileRequestStatus struct {
	// LastHandledReconcileAt holds the value of the most recent
	// reconcile request annotation value handled by the controller.
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
}

// SetLastHandledReconcileRequest records a handled reconcile request.
func (in *ReconcileRequestStatus) SetLastHandledReconcileRequest(token string) {
	in.LastHandledReconcileAt = token
}

// ReconcileAnnotationValue returns the reconcile request annotation value, if any.
func ReconcileAnnotationValue(annotations map[string]string) (string, bool) {
	v, ok := annotations[ReconcileRequestAnnotation]
	return v, ok
}

// NamespaceSelector selects the namespaces allowed to refer to an object.
type NamespaceSelector struct {
	// MatchLabels is a map of {key,value} pairs. A map of {} selects every
	// namespace.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// AccessFrom defines which namespaces may refer to an object from elsewhere.
type AccessFrom struct {
	// NamespaceSelectors is the list of namespace selectors; a namespace that
	// matches any of them is granted access.
	// +kubebuilder:validation:MaxItems=32
	// +required
	NamespaceSelectors []NamespaceSelector `json:"namespaceSelectors"`
}

// DefaultHelmImageName and DefaultHelmImageTag are the Helm parameters of
// an image's name and tag when ArgoCDImageFields names none, as
// argocd-image-updater's defaults.
const (
	DefaultHelmImageName = "image.repository"
	DefaultHelmImageTag  = "image.tag"
)

// ArgoCDImageFields is where an Argo CD parameter override file
// (.argocd-source-<app>.yaml) holds one image, in the words of
// argocd-image-updater's <alias>.kustomize.image-name and
// <alias>.helm.image-name, image-tag and image-spec. Which fields count
// depends on how Argo CD renders the source: KustomizeName for Kustomize,
// the Helm names for Helm. The automation's spec, the UpdateJob's and the
// write-back plan all carry this one type.
type ArgoCDImageFields struct {
	// KustomizeName is the image name the manifests use, which
	// kustomize.images matches (then renamed to the policy's image). When
	// empty: in an automation, the name the Application reports running,
	// else the policy's; in an UpdateJob, the image's own name.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	KustomizeName string `json:"kustomizeName,omitempty"`

	// HelmImageName is the Helm parameter of the image's name;
	// image.repository when empty.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	HelmImageName string `json:"helmImageName,omitempty"`

	// HelmImageTag is the Helm parameter of the tag (tag@digest with a
	// digest); image.tag when empty.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	HelmImageTag string `json:"helmImageTag,omitempty"`

	// HelmImageSpec, instead of the two, is one Helm parameter for the
	// whole reference (name:tag or name@digest).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	HelmImageSpec string `json:"helmImageSpec,omitempty"`

	// HelmValuesObject writes the Helm names into helm.valuesObject
	// (nested maps, as the names spell them) instead of helm.parameters,
	// for this image (update.argoCD.helmValuesObject does for every one).
	// +optional
	HelmValuesObject bool `json:"helmValuesObject,omitempty"`
}

// ArgoCDChart names the chart sources of an Argo CD Application whose
// targetRevision (the chart version) is written, found by the
// Application's name in its manifest, without a marker. The automation's
// spec, the UpdateJob's and the write-back plan all carry this one type.
type ArgoCDChart struct {
	// Application is the name of the Argo CD Application whose manifest
	// holds the chart version.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Application string `json:"application"`

	// Namespace is the Application's namespace: a manifest naming another
	// is not written; one naming none is. In an automation, its own
	// namespace when empty (its UpdateJobs get it filled in).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Chart names the chart source to follow, among several of a
	// multi-source Application; every chart source when empty.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Chart string `json:"chart,omitempty"`
}

// FileUpdate names a value to set in a file that cannot carry a marker
// (JSON has no comments): the file, the value's place in it, and the
// policy whose image it gets, as a marker would name it. The automation's
// spec, the UpdateJob's and the write-back plan all carry this one type.
type FileUpdate struct {
	// Path of the file, relative to the update path. Only JSON files are
	// named this way; values of the other formats are marked.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^[^/].*\.json$`
	// +required
	Path string `json:"path"`

	// Pointer is the value's JSON Pointer (RFC 6901), e.g.
	// /containerDefinitions/0/image. It must name a string.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	// +required
	Pointer string `json:"pointer"`

	// Policy is what a marker would say: NAMESPACE:NAME of an ImagePolicy
	// the automation applies, and :tag, :name or :digest to set only that
	// part (the whole reference when none).
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:(tag|name|digest))?$`
	// +required
	Policy string `json:"policy"`
}

// Approval is a person's approval of one image for a promotion: the
// digest approved (the tag, for an image without one) and who approved
// it. It goes with the image from the ImagePolicy to the commit, whose
// Approved-by trailer names By.
type Approval struct {
	// Digest is what was approved.
	// +kubebuilder:validation:MaxLength=256
	// +required
	Digest string `json:"digest"`
	// By is who approved: the user the API server authenticated, as
	// tk-image approve records it, or the field manager that wrote the
	// approval annotation.
	// +kubebuilder:validation:MaxLength=512
	// +required
	By string `json:"by"`
}
