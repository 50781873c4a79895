// Package v1beta1 holds the update.toolkit.dev/v1beta1 API: UpdateJob, a
// one-off write to a git repository, and the git types it shares with
// ImageUpdateAutomation.
// +kubebuilder:object:generate=true
// +groupName=update.toolkit.dev
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is group version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "update.toolkit.dev", Version: "v1beta1"}

	// SchemeBuilder is used to add go types to the GroupVersionKind scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
