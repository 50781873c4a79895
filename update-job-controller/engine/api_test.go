package engine

import (
	"reflect"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// leaks lists the types reachable from t (through pointers, slices, maps,
// functions' parameters and results, exported struct fields and exported
// methods) whose package is libgit2's binding.
func leaks(t reflect.Type, path string, seen map[reflect.Type]bool, out *[]string) {
	if seen[t] {
		return
	}
	seen[t] = true
	if strings.Contains(t.PkgPath(), "libgit2/git2go") {
		*out = append(*out, path+": "+t.String())
		return
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
		leaks(t.Elem(), path, seen, out)
	case reflect.Map:
		leaks(t.Key(), path, seen, out)
		leaks(t.Elem(), path, seen, out)
	case reflect.Func:
		for i := range t.NumIn() {
			leaks(t.In(i), path, seen, out)
		}
		for i := range t.NumOut() {
			leaks(t.Out(i), path, seen, out)
		}
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				leaks(f.Type, path+"."+f.Name, seen, out)
			}
		}
	}
	for i := range t.NumMethod() {
		m := t.Method(i)
		leaks(m.Type, path+"."+m.Name, seen, out)
	}
}

// The engine's and its mirror's exported API speaks this repository's
// types, so that an embedder imports no git2go: no method, field, parameter
// or result reachable from them is libgit2's binding's.
func TestTheExportedAPISpeaksNoGit2go(t *testing.T) {
	var found []string
	seen := map[reflect.Type]bool{}
	for name, v := range map[string]any{
		"Engine": (*Engine)(nil), "Result": Result{}, "Hooks": Hooks{}, "Credentials": Credentials{},
		"mirror.Cache": (*mirror.Cache)(nil), "mirror.Mirror": (*mirror.Mirror)(nil),
	} {
		leaks(reflect.TypeOf(v), name, seen, &found)
	}
	if len(seen) < 20 {
		t.Fatalf("walked only %d types", len(seen))
	}
	if len(found) > 0 {
		t.Errorf("the exported API exposes git2go's types:\n  %s", strings.Join(found, "\n  "))
	}
}
