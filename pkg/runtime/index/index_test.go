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

	"toolkit.dev/image-toolkit/tests/testkit/testenv"
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
	ix, err := New(ctx, c, &corev1.ConfigMap{}, byRepo)
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
