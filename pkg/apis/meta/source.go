package meta

// ImageSource is where an image says it was built from: its OCI
// annotations, or its config's labels, org.opencontainers.image.source,
// .revision, .version and .created, as docker/metadata-action and most
// builders write them. Values that are not what they claim (a source that
// is no https URL, a revision that is no commit hash, anything too long)
// are dropped, and Dropped says why: a label is the image builder's word,
// and it ends up in commit messages and pull requests.
type ImageSource struct {
	// URL is the source repository's https address.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	URL string `json:"url,omitempty"`
	// Revision is the source commit the image was built from.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Revision string `json:"revision,omitempty"`
	// Version is the version the image was built as.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Version string `json:"version,omitempty"`
	// Created is when the image was built, RFC 3339.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Created string `json:"created,omitempty"`
	// Verified says URL and Revision are a verified SLSA provenance's
	// (spec.verify.attestations), not the image's labels.
	// +optional
	Verified bool `json:"verified,omitempty"`
	// Dropped says which labels were not taken, and why.
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	Dropped []string `json:"dropped,omitempty"`
}

// IsZero reports whether the image said nothing usable of its source.
func (s *ImageSource) IsZero() bool {
	return s == nil || (s.URL == "" && s.Revision == "" && s.Version == "" && s.Created == "")
}

// ImageSourceChange is what an update of one policy's image brings: the
// new image's source, and the one it replaces when the policy knows it
// (the image it chose before).
type ImageSourceChange struct {
	// Source is the new image's.
	Source ImageSource `json:"source"`
	// Previous is the image the policy chose before the new one, whose
	// source PreviousSource is: a change from that value has the two
	// revisions to compare.
	// +optional
	Previous *ImageRef `json:"previous,omitempty"`
	// +optional
	PreviousSource *ImageSource `json:"previousSource,omitempty"`
}

// ChangeSource is the source side of one replaced value: what commit
// messages and pull requests say of it (.Changed.Changes[].Source).
type ChangeSource struct {
	URL      string `json:"url,omitempty"`
	Revision string `json:"revision,omitempty"`
	// PreviousRevision is the revision of the value replaced, when the
	// replaced value is the image the policy chose before.
	// +optional
	PreviousRevision string `json:"previousRevision,omitempty"`
	// CompareURL is the forge's page of the changes from PreviousRevision
	// to Revision (GitHub, GitLab, Gitea, Bitbucket, Azure DevOps).
	// +optional
	CompareURL string `json:"compareURL,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// Verified says URL and Revision come from a verified SLSA
	// provenance, not from the image's labels.
	// +optional
	Verified bool `json:"verified,omitempty"`
	// Commits are the source's commits from PreviousRevision to
	// Revision, oldest first and at most MaxSourceCommits, when the pull
	// request's forge serves the source repository too; Subjects are
	// escaped for Markdown. For the request's body only: not stored.
	Commits []SourceCommit `json:"-"`
	// TotalCommits counts all of them.
	TotalCommits int `json:"-"`
}

// MaxSourceCommits is how many source commits a request lists per image.
const MaxSourceCommits = 50

// SourceCommit is one commit of a source repository.
type SourceCommit struct {
	SHA, Subject string
}
