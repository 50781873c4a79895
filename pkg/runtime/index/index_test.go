package index

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// The Index follows a real informer of envtest's kube-apiserver.
var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, nil)
}

// byRepo indexes ConfigMaps by their data's "repo" entries, comma-free
// values standing for an ImagePolicy's repository.
func byRepo(o client.Object) []string {
	var out []string
	for _, k := range []string{"repo", "also"} {
		if v := o.(*corev1.ConfigMap).Data[k]; v != "" {
			out = append(out, v)
		}
	}
	return out
}

// newIndex makes a cache of the namespace's ConfigMaps, not started, and
// an Index byRepo of them.
func newIndex(ctx context.Context, t *testing.T, ns string) (cache.Cache, *Index) {
	t.Helper()
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := Follow(ctx, c, &corev1.ConfigMap{}, byRepo)
	if err != nil {
		t.Fatal(err)
	}
	return c, ix
}

// An Index answers with the keys of the objects that have a value, and
// follows them as they are created, changed (a value dropped, kept or
// added) and deleted; objects there before the Index was made are in it.
func TestIndexFollowsObjects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	cm := func(name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
	}
	before := cm("before", map[string]string{"repo": "a"})
	if err := env.Client.Create(ctx, before); err != nil {
		t.Fatal(err)
	}
	c, ix := newIndex(ctx, t, ns)
	go func() { _ = c.Start(ctx) }()

	want := func(value string, names ...string) {
		t.Helper()
		var keys []types.NamespacedName
		for _, n := range names {
			keys = append(keys, types.NamespacedName{Namespace: ns, Name: n})
		}
		testenv.Eventually(t, 10*time.Second, func() (bool, error) {
			got, err := ix.Lookup(ctx, value)
			return fmt.Sprint(got) == fmt.Sprint(keys), err
		})
	}
	want("a", "before")

	two := cm("two", map[string]string{"repo": "a", "also": "b"})
	if err := env.Client.Create(ctx, two); err != nil {
		t.Fatal(err)
	}
	want("a", "before", "two")
	want("b", "two")

	two.Data = map[string]string{"repo": "b", "also": "c"} // a dropped, b kept, c added
	if err := env.Client.Update(ctx, two); err != nil {
		t.Fatal(err)
	}
	want("a", "before")
	want("b", "two")
	want("c", "two")

	if err := env.Client.Delete(ctx, before); err != nil {
		t.Fatal(err)
	}
	want("a")
	if err := env.Client.Delete(ctx, two); err != nil {
		t.Fatal(err)
	}
	want("b")
	want("c")
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if len(ix.keys) != 0 {
		t.Errorf("values left with no object: %v", ix.keys)
	}
}

// A lookup before the informer has listed its objects waits for them,
// and gives up with the caller's context.
func TestLookupWaitsForTheInitialList(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}, Data: map[string]string{"repo": "a"}}); err != nil {
		t.Fatal(err)
	}
	c, ix := newIndex(ctx, t, ns)
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if keys, err := ix.Lookup(short, "a"); err == nil {
		t.Fatalf("a lookup before the cache started answered %v", keys)
	}
	go func() { _ = c.Start(ctx) }()
	keys, err := ix.Lookup(ctx, "a")
	if err != nil || len(keys) != 1 || keys[0].Name != "x" {
		t.Errorf("lookup = %v, %v; want the ConfigMap x", keys, err)
	}
}

// Predicate updates every index from the events of the watch it filters
// before it answers, and passes an event that moved the object in an
// index even when the next predicate would not: the reconcile it queues
// then reads an object the indexes already have. It needs no API server:
// it is fed the events a watch would give.
func TestPredicateFeedsIndexesAndPassesMoves(t *testing.T) {
	ctx := context.Background()
	byRepoIx := New(byRepo)
	byAlso := New(func(o client.Object) []string {
		if v := o.(*corev1.ConfigMap).Data["also"]; v != "" {
			return []string{v}
		}
		return nil
	})
	never := predicate.NewPredicateFuncs(func(client.Object) bool { return false })
	p := Predicate(never, byRepoIx, byAlso)
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}, Data: data}
	}
	lookup := func(ix *Index, value string) string {
		keys, err := ix.Lookup(ctx, value)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(keys)
	}
	const x = "[ns/x]"

	v1 := cm(map[string]string{"repo": "a", "also": "b"})
	if !p.Create(event.CreateEvent{Object: v1}) {
		t.Error("a create that adds values did not pass")
	}
	if lookup(byRepoIx, "a") != x || lookup(byAlso, "b") != x {
		t.Errorf("after create: a=%s b=%s", lookup(byRepoIx, "a"), lookup(byAlso, "b"))
	}
	if p.Update(event.UpdateEvent{ObjectOld: v1, ObjectNew: cm(map[string]string{"repo": "a", "also": "b", "other": "1"})}) {
		t.Error("an update that moves no value passed a predicate that refuses it")
	}
	v2 := cm(map[string]string{"repo": "a", "also": "c"}) // only the second index moves
	if !p.Update(event.UpdateEvent{ObjectOld: v1, ObjectNew: v2}) {
		t.Error("an update that moves a value in the second index did not pass")
	}
	if lookup(byAlso, "b") != "[]" || lookup(byAlso, "c") != x || lookup(byRepoIx, "a") != x {
		t.Errorf("after update: b=%s c=%s a=%s", lookup(byAlso, "b"), lookup(byAlso, "c"), lookup(byRepoIx, "a"))
	}
	if !p.Delete(event.DeleteEvent{Object: v2}) {
		t.Error("a delete that removes values did not pass")
	}
	if lookup(byRepoIx, "a") != "[]" || lookup(byAlso, "c") != "[]" {
		t.Errorf("after delete: a=%s c=%s", lookup(byRepoIx, "a"), lookup(byAlso, "c"))
	}

	// The next predicate's answer stands when nothing moves.
	always := Predicate(predicate.NewPredicateFuncs(func(client.Object) bool { return true }), New(byRepo))
	if !always.Update(event.UpdateEvent{ObjectOld: v1, ObjectNew: v1}) {
		t.Error("an update the next predicate passes was refused")
	}
}
