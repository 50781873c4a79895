// Package index keeps field indexes of cached objects: for a value (the
// repository a policy reads, a repository's image path), the keys of the
// objects that have it. It replaces the cache's field indexes
// (FieldIndexer, MatchingFields) where there is an entry per object at
// scale, for what they hold:
//
//   - client-go's indexer keeps, for each value, a set (a Go map) of
//     keys, and controller-runtime indexes each value twice, under its
//     namespace and under all namespaces: two maps' entries and a map
//     for each object and index. An Index keeps the value once, with a
//     slice of keys.
//   - A lookup through the cache lists the objects, each a deep copy, to
//     take their keys. An Index answers with the keys, which is all a
//     watch's map function enqueues, and a caller that needs an object
//     reads just that one.
//
// A field index is updated with the informer's store, before any handler
// hears of the change. An Index hears of it from a handler, so for a
// moment the cache may hold a state of an object that the Index does not
// have yet. Two ways to feed an Index make that moment harmless:
//
//   - Predicate feeds it from the controller's own watch of the indexed
//     kind, in the handler that queues the object's reconcile, before it
//     queues it; and it queues the object whenever its values change. So
//     every state of an object that moves it in the Index is followed by
//     a reconcile that reads it after the Index has it. This is what a
//     watch that wakes a waiting reconcile needs: the image policies'
//     index by repository wakes a policy waiting for its repository's
//     first scan, and a scan that misses a policy the Index lacks is
//     followed by that policy's own reconcile, which sees the scan. (Fed
//     by a handler of its own instead, 4 of 6 full runs of tests/e2e left
//     a policy or an automation unmoved: its reconcile waited, and the
//     scan's lookup came before the Index had it.)
//   - Follow feeds it from a handler of its own on the informer. It serves
//     where a miss costs nothing: the webhook receiver's lookup of the
//     repositories a push names (a repository is scanned when it is
//     created).
package index

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Index maps values to the keys of the objects that have them.
type Index struct {
	values func(client.Object) []string
	// synced, when set, is whether the Index has every object its
	// informer listed at its start (Follow).
	synced func() bool

	mu   sync.RWMutex
	keys map[string][]types.NamespacedName
}

// New is an empty Index of objects by values, which returns an object's
// values (none, one or more); Predicate or Follow feeds it.
func New(values func(client.Object) []string) *Index {
	return &Index{values: values, keys: map[string][]types.NamespacedName{}}
}

// Follow is an Index of the objects of obj's kind in c by values, fed by
// a handler of its own on c's informer: it lags the cache (see the
// package doc).
func Follow(ctx context.Context, c cache.Cache, obj client.Object, values func(client.Object) []string) (*Index, error) {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("indexing %T: %w", obj, err)
	}
	ix := New(values)
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { ix.update(nil, o) },
		UpdateFunc: func(old, o any) { ix.update(old, o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			ix.update(o, nil)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("indexing %T: %w", obj, err)
	}
	ix.synced = reg.HasSynced
	return ix, nil
}

// Predicate feeds the indexes from the events of the watch it filters,
// and passes an event when next does or when the object's values changed
// in one of them. Give it to the controller's For, whose handler queues
// the object's reconcile once the predicates have run; it must see every
// event of the kind, so no predicate may run before it (builder.
// WithEventFilter's run first).
//
// The controller's workers start once its watches have synced, so by its
// first reconcile the indexes have every object listed at the start.
func Predicate(next predicate.Predicate, ixs ...*Index) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			changed := updateAll(ixs, nil, e.Object)
			return next.Create(e) || changed
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			changed := updateAll(ixs, e.ObjectOld, e.ObjectNew)
			return next.Update(e) || changed
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			changed := updateAll(ixs, e.Object, nil)
			return next.Delete(e) || changed
		},
		GenericFunc: next.Generic,
	}
}

func updateAll(ixs []*Index, old, o client.Object) bool {
	changed := false
	for _, ix := range ixs {
		// Every index is updated: no short-circuit.
		if ix.update(old, o) {
			changed = true
		}
	}
	return changed
}

// update moves the object's key from the values of old to those of o;
// either may be nil. It reports whether any value changed.
func (ix *Index) update(old, o any) bool {
	before, after := ix.of(old), ix.of(o)
	obj := object(o)
	if obj == nil {
		obj = object(old)
	}
	if obj == nil {
		return false
	}
	key := client.ObjectKeyFromObject(obj)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	changed := false
	for _, v := range before {
		if slices.Contains(after, v) {
			continue
		}
		n := len(ix.keys[v])
		keys := slices.DeleteFunc(ix.keys[v], func(k types.NamespacedName) bool { return k == key })
		changed = changed || len(keys) != n
		if len(keys) == 0 {
			delete(ix.keys, v)
		} else {
			ix.keys[v] = slices.Clip(keys)
		}
	}
	for _, v := range after {
		if !slices.Contains(ix.keys[v], key) {
			ix.keys[v] = append(ix.keys[v], key)
			changed = true
		}
	}
	return changed
}

func object(o any) client.Object {
	obj, _ := o.(client.Object)
	return obj
}

func (ix *Index) of(o any) []string {
	if obj := object(o); obj != nil {
		return ix.values(obj)
	}
	return nil
}

// Lookup returns the keys of the objects with value; an Index made by
// Follow first waits until it has every object its informer listed.
func (ix *Index) Lookup(ctx context.Context, value string) ([]types.NamespacedName, error) {
	if ix.synced != nil && !ix.synced() && !toolscache.WaitForCacheSync(ctx.Done(), ix.synced) {
		return nil, fmt.Errorf("index lookup of %q: %w", value, context.Cause(ctx))
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return slices.Clone(ix.keys[value]), nil
}
