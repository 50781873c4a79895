// Package predicates holds the event filters shared by the controllers.
package predicates

import (
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// ReconcileRequested passes updates that change the reconcile request
// annotation (reconcile.toolkit.dev/requestedAt), which the generation does
// not count.
type ReconcileRequested struct {
	predicate.Funcs
}

// Update passes when the annotation value changed.
func (ReconcileRequested) Update(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return false
	}
	newV, newOK := meta.ReconcileAnnotationValue(e.ObjectNew.GetAnnotations())
	oldV, _ := meta.ReconcileAnnotationValue(e.ObjectOld.GetAnnotations())
	return newOK && newV != oldV
}

// SpecOrRequest passes creations, deletions, spec changes and reconcile
// requests, but not the controller's own status writes.
func SpecOrRequest() predicate.Predicate {
	return predicate.Or(predicate.GenerationChangedPredicate{}, ReconcileRequested{})
}

// AnnotationChanged is true on an update that sets or changes the
// annotation key (a request written as an annotation, such as an
// automation's release-holds).
func AnnotationChanged(key string) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld == nil || e.ObjectNew == nil {
				return false
			}
			v, ok := e.ObjectNew.GetAnnotations()[key]
			return ok && v != e.ObjectOld.GetAnnotations()[key]
		},
	}
}
