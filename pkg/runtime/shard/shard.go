// Package shard explains a reference that a sharded controller cannot
// follow. With --watch-label-selector a controller's cache holds only the
// objects of its shard, so an object it refers to that carries another
// shard's label (or none) reads as missing. That is a configuration
// error, not a dependency that will appear: Outside tells the two apart
// by reading past the cache, so the condition says what to fix instead
// of "not found".
package shard

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Outside returns an error saying that the object of kind gvk at key
// exists but outside the shard sel, when it does; nil when sel is nil (no
// sharding), the object is missing, or it is in the shard (the cache has
// not seen it yet). reader reads past the cache; only the object's
// metadata is read.
func Outside(ctx context.Context, reader client.Reader, sel labels.Selector, gvk schema.GroupVersionKind, key client.ObjectKey) error {
	if sel == nil || sel.Empty() {
		return nil
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	switch err := reader.Get(ctx, key, m); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", gvk.Kind, key, err)
	}
	if sel.Matches(labels.Set(m.Labels)) {
		return nil
	}
	return fmt.Errorf("%s %s is outside this controller's shard: its labels (%s) do not match --watch-label-selector=%s; give it the shard label of the objects that refer to it",
		gvk.Kind, key, labels.Set(m.Labels), sel)
}
