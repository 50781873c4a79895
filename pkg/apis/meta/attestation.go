package meta

// Attestation is an in-toto attestation that verified for an image
// digest: which rule it met, who signed it, and what it said of the
// build. The verifier reaches it, the verdict cache keeps it, and
// ImagePolicy's status and explain show it: one type from the registry to
// the user.
type Attestation struct {
	// Name is the rule's name (spec.verify.attestations[].name).
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// PredicateType is the statement's predicate type URI.
	// +kubebuilder:validation:MaxLength=512
	PredicateType string `json:"predicateType"`
	// Signer is the key ("key cosign.pub") or keyless identity ("subject
	// ... issued by ...") that signed it.
	// +kubebuilder:validation:MaxLength=1024
	Signer string `json:"signer"`
	// Format is where it was found: bundle (a Sigstore bundle referrer)
	// or legacy (a cosign .att tag).
	// +kubebuilder:validation:MaxLength=16
	Format string `json:"format"`
	// Builder is an SLSA provenance's builder id.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Builder string `json:"builder,omitempty"`
	// BuildType is an SLSA provenance's build type.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	BuildType string `json:"buildType,omitempty"`
	// SourceRepository is an SLSA provenance's source repository, as the
	// provenance names it (e.g. git+https://github.com/acme/api).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	SourceRepository string `json:"sourceRepository,omitempty"`
	// SourceRef is the source ref it was built from (refs/heads/main).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	SourceRef string `json:"sourceRef,omitempty"`
	// Revision is the source commit it was built from.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Revision string `json:"revision,omitempty"`
}

// String says in a line what the attestation is and said: "provenance
// (https://slsa.dev/provenance/v1, bundle) signed by key cosign.pub:
// built by B from github.com/acme/api refs/heads/main at 0123456".
func (a Attestation) String() string {
	s := a.Name + " (" + a.PredicateType + ", " + a.Format + ") signed by " + a.Signer
	var built []string
	if a.Builder != "" {
		built = append(built, "by "+a.Builder)
	}
	if a.SourceRepository != "" {
		from := "from " + a.SourceRepository
		if a.SourceRef != "" {
			from += " " + a.SourceRef
		}
		built = append(built, from)
	}
	if a.Revision != "" {
		built = append(built, "at "+a.Revision)
	}
	if len(built) > 0 {
		s += ": built"
		for _, b := range built {
			s += " " + b
		}
	}
	return s
}
