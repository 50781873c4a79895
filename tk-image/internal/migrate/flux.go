package migrate

// The fields of Flux's image API (image.toolkit.fluxcd.io v1, v1beta2 and
// v1beta1) that migrate reads. The three versions' fields are (nearly)
// nested supersets of each other, so one set of types reads them all; a
// field none of them has is decoded as unknown, and dropped with a warning.
// Every object is a pointer (nil when absent), every struct embeds fields
// (decode.go), and a field typed any is read by no one: it is known, so not
// reported, and not carried over.

// fluxHeader names an object in messages, before its kind is known.
type fluxHeader struct {
	fields
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   *struct {
		fields
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// fluxDocument is a whole object of one kind.
type fluxDocument[S any] struct {
	fields
	APIVersion any           `json:"apiVersion"` // read by fluxHeader
	Kind       any           `json:"kind"`
	Metadata   *fluxMetadata `json:"metadata"`
	Spec       *S            `json:"spec"`
	// The status is the controllers' to write; image-toolkit's differs.
	Status any `json:"status"`
}

type fluxMetadata struct {
	fields
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Finalizers  []string          `json:"finalizers"`
	// Written by the API server for the object it stored; a new object
	// gets its own.
	UID                        any `json:"uid"`
	ResourceVersion            any `json:"resourceVersion"`
	Generation                 any `json:"generation"`
	CreationTimestamp          any `json:"creationTimestamp"`
	ManagedFields              any `json:"managedFields"`
	SelfLink                   any `json:"selfLink"`
	DeletionTimestamp          any `json:"deletionTimestamp"`
	DeletionGracePeriodSeconds any `json:"deletionGracePeriodSeconds"`
}

type fluxLocalRef struct {
	fields
	Name string `json:"name"`
}

type fluxImageRepositorySpec struct {
	fields
	Image              string          `json:"image"`
	Insecure           bool            `json:"insecure"`
	Interval           string          `json:"interval"`
	Timeout            string          `json:"timeout"`
	SecretRef          *fluxLocalRef   `json:"secretRef"`
	ServiceAccountName string          `json:"serviceAccountName"`
	CertSecretRef      *fluxLocalRef   `json:"certSecretRef"`
	ProxySecretRef     *fluxLocalRef   `json:"proxySecretRef"`
	Suspend            bool            `json:"suspend"`
	AccessFrom         *fluxAccessFrom `json:"accessFrom"`
	ExclusionList      []string        `json:"exclusionList"`
	Provider           string          `json:"provider"`
}

type fluxAccessFrom struct {
	fields
	NamespaceSelectors []fluxNamespaceSelector `json:"namespaceSelectors"`
}

type fluxNamespaceSelector struct {
	fields
	MatchLabels map[string]string `json:"matchLabels"`
}

type fluxImagePolicySpec struct {
	fields
	ImageRepositoryRef     *fluxNamespacedRef `json:"imageRepositoryRef"`
	Policy                 *fluxPolicyChoice  `json:"policy"`
	FilterTags             *fluxTagFilter     `json:"filterTags"`
	DigestReflectionPolicy string             `json:"digestReflectionPolicy"`
	Interval               string             `json:"interval"`
	Suspend                bool               `json:"suspend"`
}

type fluxNamespacedRef struct {
	fields
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

type fluxPolicyChoice struct {
	fields
	SemVer       *fluxSemVerPolicy `json:"semver"`
	Alphabetical *fluxOrderPolicy  `json:"alphabetical"`
	Numerical    *fluxOrderPolicy  `json:"numerical"`
}

type fluxSemVerPolicy struct {
	fields
	Range string `json:"range"`
}

type fluxOrderPolicy struct {
	fields
	Order string `json:"order"`
}

type fluxTagFilter struct {
	fields
	Pattern string `json:"pattern"`
	Extract string `json:"extract"`
}

type fluxImageUpdateAutomationSpec struct {
	fields
	SourceRef      *fluxSourceRef     `json:"sourceRef"`
	Git            *fluxGitSpec       `json:"git"`
	Interval       string             `json:"interval"`
	PolicySelector *fluxLabelSelector `json:"policySelector"`
	Update         *fluxUpdateSpec    `json:"update"`
	Suspend        bool               `json:"suspend"`
}

type fluxSourceRef struct {
	fields
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
}

type fluxGitSpec struct {
	fields
	Checkout *fluxGitCheckout `json:"checkout"`
	Commit   *fluxCommitSpec  `json:"commit"`
	Push     *fluxPushSpec    `json:"push"`
}

type fluxGitCheckout struct {
	fields
	Ref *fluxGitRef `json:"ref"`
}

type fluxGitRef struct {
	fields
	Branch string `json:"branch"`
	Tag    string `json:"tag"`
	SemVer string `json:"semver"`
	Name   string `json:"name"`
	Commit string `json:"commit"`
}

type fluxCommitSpec struct {
	fields
	Author                *fluxCommitUser   `json:"author"`
	SigningKey            *fluxSigningKey   `json:"signingKey"`
	MessageTemplate       string            `json:"messageTemplate"`
	MessageTemplateValues map[string]string `json:"messageTemplateValues"`
}

type fluxCommitUser struct {
	fields
	Name  string `json:"name"`
	Email string `json:"email"`
}

type fluxSigningKey struct {
	fields
	SecretRef *fluxLocalRef `json:"secretRef"`
	Type      string        `json:"type"`
}

type fluxPushSpec struct {
	fields
	Branch  string            `json:"branch"`
	Refspec string            `json:"refspec"`
	Options map[string]string `json:"options"`
}

type fluxLabelSelector struct {
	fields
	MatchLabels      map[string]string         `json:"matchLabels"`
	MatchExpressions []fluxSelectorRequirement `json:"matchExpressions"`
}

type fluxSelectorRequirement struct {
	fields
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}

type fluxUpdateSpec struct {
	fields
	Strategy string `json:"strategy"`
	Path     string `json:"path"`
}
