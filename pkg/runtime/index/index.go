// Package index keeps field indexes of cached objects: for a value (the
// repository a policy reads, a repository's image path), the keys of the
// objects that have it. It replaces the cache's field indexes
// (FieldIndexer, MatchingFields) where there is an entry per object at
// scale, for what they hold:
//
//   - client-go's indexer keeps, for each value, a set (a Go map) of
//     keys, and controller-runtime indexes each value twice, under its
//     namespace and under all namespaces: about 700 bytes an object and
//     index, 14 MB for the reflector's two at 10,000 repositories and
//     10,000 policies. An Index keeps the value once, with a slice of
//     keys: about 100 bytes.
//   - A lookup through the cache lists the objects, each a deep copy, to
//     take their keys. An Index answers with the keys, which is all a
//     watch's map function enqueues, and a caller that needs an object
//     reads just that one.
//
// An Index follows an informer's events: the values of an object's old
// state are removed, those of its new state added. It answers once the
// informer has given it every object it had listed.
//
// It lags the cache: the informer stores an object and then tells each of
// its handlers, this one among them, in goroutines of their own. A reconcile
// of a new object may run before the Index has it, and a lookup made then
// misses it. So an Index serves where a miss costs nothing: the webhook
// receiver's lookup of the repositories a push names (a repository is
// scanned when it is created). It does not serve a watch that wakes a
// reconcile waiting for another object: the image policies' index by
// repository was one (a policy waits for its repository's first scan, and
// the scan's event must find it), and with it 4 of 6 full runs of
// tests/e2e left a policy or an automation unmoved; they stay field
// indexes, which the informer updates with its store.
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
)

// Index maps values to the keys of the objects that have them.
type Index struct {
	values func(client.Object) []string
	synced func() bool

	mu   sync.RWMutex
	keys map[string][]types.NamespacedName
}

// New indexes the objects of obj's kind in c by values, which returns an
// object's values (none, one or more).
func New(ctx context.Context, c cache.Cache, obj client.Object, values func(client.Object) []string) (*Index, error) {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("indexing %T: %w", obj, err)
	}
	ix := &Index{values: values, keys: map[string][]types.NamespacedName{}}
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

// update moves the object's key from the values of old to those of o;
// either may be nil.
func (ix *Index) update(old, o any) {
	before, after := ix.of(old), ix.of(o)
	var key types.NamespacedName
	switch {
	case o != nil:
		key = client.ObjectKeyFromObject(o.(client.Object))
	case old != nil:
		key = client.ObjectKeyFromObject(old.(client.Object))
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, v := range before {
		if slices.Contains(after, v) {
			continue
		}
		keys := slices.DeleteFunc(ix.keys[v], func(k types.NamespacedName) bool { return k == key })
		if len(keys) == 0 {
			delete(ix.keys, v)
		} else {
			ix.keys[v] = slices.Clip(keys)
		}
	}
	for _, v := range after {
		if !slices.Contains(ix.keys[v], key) {
			ix.keys[v] = append(ix.keys[v], key)
		}
	}
}

func (ix *Index) of(o any) []string {
	obj, ok := o.(client.Object)
	if !ok || obj == nil {
		return nil
	}
	return ix.values(obj)
}

// Lookup returns the keys of the objects with value, waiting until the
// Index has every object the informer listed at its start.
func (ix *Index) Lookup(ctx context.Context, value string) ([]types.NamespacedName, error) {
	if !ix.synced() && !toolscache.WaitForCacheSync(ctx.Done(), ix.synced) {
		return nil, fmt.Errorf("index lookup of %q: %w", value, context.Cause(ctx))
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return slices.Clone(ix.keys[value]), nil
}
