package meta

// The values below travel from scan to commit unchanged: the reflector
// records an ImageRef, the automation hands it to a job, the write-back
// plan carries it, the setters write it, and what they change comes back
// as FileResults and DiscoveredImages that the UpdateJob's status stores
// as they are. They live here, beside the object references, because this
// package imports nothing: the setters, the write-back plan and the engine
// (none of which know Kubernetes) share them with the API groups without a
// copy at any hop.

import "strings"

// ImageRef is an image value: name, tag and optional digest.
type ImageRef struct {
	// Name is the image name, without tag or digest, e.g. ghcr.io/org/app.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Name string `json:"name"`

	// Tag is the image tag, or a chart version, whose build metadata
	// follows a '+' (1.2.3+build.1).
	// +kubebuilder:validation:Pattern="^[\\w][\\w.+-]{0,127}$"
	// +required
	Tag string `json:"tag"`

	// Digest is the image digest, e.g. sha256:..., when known.
	// +kubebuilder:validation:Pattern="^[a-z0-9]+([+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$"
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Digest string `json:"digest,omitempty"`
}

// String returns name:tag, or name:tag@digest when the digest is known.
func (r ImageRef) String() string {
	s := r.Name + ":" + r.Tag
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// MaxListedFiles is how many files a marker summary or a discovered image
// lists; the counts beside them stay exact.
const MaxListedFiles = 3

// FileOperation is what a container-mode update did to a file.
// +kubebuilder:validation:Enum=added;modified;deleted;mode
type FileOperation string

const (
	FileAdded    FileOperation = "added"
	FileModified FileOperation = "modified"
	FileDeleted  FileOperation = "deleted"
	// FileMode: only the executable bit or the kind (file, link) changed.
	FileMode FileOperation = "mode"
)

// FileResult is the changes made to one file.
type FileResult struct {
	// Path relative to the update path, with forward slashes.
	Path string `json:"path"`
	// Operation is set by container-mode updates, which see files, not
	// objects: added, modified, deleted or mode.
	// +optional
	Operation FileOperation `json:"operation,omitempty"`
	// Objects changed in the file, in document order.
	// +optional
	Objects []ObjectResult `json:"objects,omitempty"`
}

// ObjectID identifies an object (a YAML document) in a file. Commit
// message templates read its fields, as Flux's ObjectIdentifier's.
type ObjectID struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
}

// String names the object as KIND/NAMESPACE/NAME, leaving out what its file
// does not say (Kustomization, not Kustomization//), the way the CLI, the
// dashboard and the default commit message name it.
func (o ObjectID) String() string {
	parts := []string{o.Kind}
	if o.Kind == "" {
		parts[0] = "(no kind)"
	}
	if o.Namespace != "" {
		parts = append(parts, o.Namespace)
	}
	if o.Name != "" {
		parts = append(parts, o.Name)
	}
	return strings.Join(parts, "/")
}

// ObjectResult is the changes made to one object, in document order.
type ObjectResult struct {
	ObjectID `json:",inline"`
	// Changes in document order.
	// +optional
	Changes []Change `json:"changes,omitempty"`
}

// Change is one replaced value.
type Change struct {
	// OldValue is the value before the update.
	OldValue string `json:"oldValue"`
	// NewValue is the value after the update.
	NewValue string `json:"newValue"`
	// Setter is the marker that caused the change, e.g. apps:podinfo or
	// apps:podinfo:tag.
	Setter string `json:"setter"`
	// Source is what the new image says of its source, and what changed
	// in it since the value replaced, when the image says.
	// +optional
	Source *ChangeSource `json:"source,omitempty"`
	// Approval is who approved the new image, when a promotion with
	// approval Required chose it.
	// +optional
	Approval *Approval `json:"approval,omitempty"`
}

// DiscoveredImage is an image found in a repository: the value most of
// its locations write, how many there are, and what follows it.
type DiscoveredImage struct {
	// Name is canonical (docker.io/library/nginx); Tag and Digest are what
	// most of its locations have.
	ImageRef `json:",inline"`
	// Locations is how many places write it.
	Locations int `json:"locations"`
	// Files are up to three of the files writing it, relative to the
	// update path, in path order.
	// +optional
	Files []string `json:"files,omitempty"`
	// Policy is the ImagePolicy that sets it, when one does: in an
	// UpdateJob's result, the setter the job applied (NAMESPACE:NAME); in
	// an automation's status, the policy that follows it there (NAME).
	// +optional
	Policy string `json:"policy,omitempty"`
	// PolicyAnnotation is the policy a workload annotation sets for it
	// (e.g. semver:~1.4), for the automation to follow.
	// +optional
	PolicyAnnotation string `json:"policyAnnotation,omitempty"`
}
