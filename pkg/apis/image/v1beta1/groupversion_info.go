// Package v1beta1 holds the image.toolkit.dev/v1beta1 API: ImageRepository,
// ImagePolicy, ImageWebhook, ImageUpdateAutomation and GitWebhook. Field names and meanings follow Flux's
// image.toolkit.fluxcd.io/v1; docs/api.md lists where we differ.
// +kubebuilder:object:generate=true
// +groupName=image.toolkit.dev
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is group version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "image.toolkit.dev", Version: "v1beta1"}

	// SchemeBuilder is used to add go types to the GroupVersionKind scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
