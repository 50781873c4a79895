package gitsource

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// SourceKind is a kind of object an automation's spec.sourceRef may name:
// the kind, at the version read when the reference gives no apiVersion,
// and how an object of it says where the repository is. The object is
// read as unstructured, so that the kind's Go types (Flux's, Argo CD's)
// are not a dependency. Resolve does what every kind shares (the
// apiVersion check, the namespace rule, the read and its failures); the
// automation controller watches every kind installed in the cluster.
// Adding a source kind is an entry here with its reader and test, the
// API's spec.sourceRef.kind enum (a test holds the two equal), and the
// controller's RBAC marker to read it.
type SourceKind struct {
	GVK schema.GroupVersionKind
	// Read fills src (whose Describe is set) from the object; a problem
	// with the object is an *Error.
	Read func(obj *unstructured.Unstructured, src *Source) error
}

// SourceKinds are the kinds spec.sourceRef may name, by kind.
var SourceKinds = map[string]SourceKind{
	GitRepositoryGVK.Kind: {GVK: GitRepositoryGVK, Read: fromGitRepository},
	ApplicationGVK.Kind:   {GVK: ApplicationGVK, Read: fromApplication},
}

// SourceKindOf is the kind a reference names: its kind, or GitRepository
// when it names none (the CRD's default; an older CRD may not set it).
func SourceKindOf(ref *imagev1.CrossNamespaceSourceReference) string {
	if ref.Kind == "" {
		return GitRepositoryGVK.Kind
	}
	return ref.Kind
}

// SourceKey is how an automation's sourceRef is indexed, and how a
// change of a source object finds the automations using it: kind,
// namespace (the automation's when the reference names none) and name.
func SourceKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// SourceKindNames are the registered kinds, sorted.
func SourceKindNames() []string {
	return slices.Sorted(maps.Keys(SourceKinds))
}
