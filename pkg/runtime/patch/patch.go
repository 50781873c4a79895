// Package patch writes a reconciler's changes to an object back to the API
// server as merge patches: one for metadata and spec, one for the status
// subresource, each sent only when something changed.
package patch

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Helper patches an object against the state it had when the helper was
// made.
type Helper struct {
	client client.Client
	before client.Object
}

// NewHelper snapshots obj; call it before changing obj.
func NewHelper(obj client.Object, c client.Client) *Helper {
	return &Helper{client: c, before: obj.DeepCopyObject().(client.Object)}
}

// Option changes how Patch writes.
type Option func(*options)

type options struct{ optimisticLock bool }

// WithOptimisticLock makes the patches fail with a Conflict when the object
// changed on the server since the snapshot, e.g. for claiming work.
func WithOptimisticLock() Option { return func(o *options) { o.optimisticLock = true } }

// Patch writes the changes made to obj since the snapshot. obj is updated
// with the server's response, keeping the status the caller set.
func (h *Helper) Patch(ctx context.Context, obj client.Object, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	before, err := runtime.DefaultUnstructuredConverter.ToUnstructured(h.before)
	if err != nil {
		return err
	}
	after, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	wantStatus, hasStatus := after["status"]
	base := h.before

	if !equality.Semantic.DeepEqual(without(before, "status"), without(after, "status")) {
		if err := h.client.Patch(ctx, obj, h.mergeFrom(base, o)); err != nil {
			return fmt.Errorf("patching %s: %w", client.ObjectKeyFromObject(obj), err)
		}
		// The response carries the server's status; put ours back, and
		// patch it against the new server state.
		base = obj.DeepCopyObject().(client.Object)
		if err := setStatus(base, before["status"]); err != nil {
			return err
		}
		if err := setStatus(obj, wantStatus); err != nil {
			return err
		}
	}
	if !hasStatus || equality.Semantic.DeepEqual(before["status"], wantStatus) {
		return nil
	}
	err = h.client.Status().Patch(ctx, obj, h.mergeFrom(base, o))
	if apierrors.IsNotFound(err) && obj.GetDeletionTimestamp() != nil {
		// Removing the last finalizer deleted it: nothing left to record.
		return nil
	}
	if err != nil {
		return fmt.Errorf("patching status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

func (h *Helper) mergeFrom(base client.Object, o options) client.Patch {
	if o.optimisticLock {
		return client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	}
	return client.MergeFrom(base)
}

func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

func setStatus(obj client.Object, status any) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	if status == nil {
		delete(u, "status")
	} else {
		u["status"] = status
	}
	// Start from the zero value so fields absent from u do not survive.
	v := reflect.ValueOf(obj).Elem()
	v.Set(reflect.Zero(v.Type()))
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u, obj)
}
