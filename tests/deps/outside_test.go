package deps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// outsideModule writes a module of another project in a temporary
// directory: main.go importing imports, and a go.mod requiring this
// repository's modules, each replaced by its directory in the workspace
// (they are not published). It returns the directory.
func outsideModule(t *testing.T, imports []string, modules ...string) string {
	t.Helper()
	root := root(t)
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, imp := range imports {
		src.WriteString("\t_ \"" + imp + "\"\n")
	}
	src.WriteString(")\n\nfunc main() {}\n")
	mod := "module example.com/outside\n\ngo 1.26.0\n\nrequire (\n"
	for _, m := range modules {
		mod += "\t" + module + m + " v0.0.0\n"
	}
	mod += ")\n\nreplace (\n"
	for _, m := range modules {
		mod += "\t" + module + m + " => " + filepath.Join(root, m) + "\n"
	}
	mod += ")\n"
	for name, content := range map[string]string{"main.go": src.String(), "go.mod": mod} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// outside runs the go command in an outside module, out of the workspace.
func outsideGo(t *testing.T, dir string, args ...string) string {
	t.Helper()
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
	return string(goCmd(t, dir, args...))
}

// A module of another project that embeds the engine needs a replace for
// each of the two unpublished modules it requires and nothing else: go mod
// tidy resolves the tests of every package it imports (the test servers
// are pkg/testing, in the pkg module), go list -m all loads its whole
// graph, and it builds linking no Kubernetes package beyond kyaml's own.
func TestAnOutsideModuleEmbedsTheEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves modules from the proxy")
	}
	dir := outsideModule(t, []string{module + "update-job-controller/engine", module + "update-job-controller/forges"},
		"pkg", "update-job-controller")
	outsideGo(t, dir, "mod", "tidy")
	mods := strings.Fields(outsideGo(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
	if len(mods) < 50 {
		t.Fatalf("go list -m all listed %d modules", len(mods))
	}
	kyaml := map[string]bool{}
	for _, p := range strings.Fields(outsideGo(t, dir, "list", "-deps", "sigs.k8s.io/kustomize/kyaml/yaml")) {
		kyaml[p] = true
	}
	var k8s []string
	linked := strings.Fields(outsideGo(t, dir, "list", "-deps", "."))
	for _, p := range linked {
		if kubernetes(p) && !kyaml[p] {
			k8s = append(k8s, p)
		}
	}
	if len(k8s) > 0 {
		t.Errorf("the outside module links Kubernetes packages: %s", strings.Join(k8s, ", "))
	}
	t.Logf("embedding the engine and the built-in forges: %d packages linked, %d modules in the graph, 2 replaces", len(linked), len(mods))
}

// A module that imports only the API types resolves with go mod tidy and
// go list -m all too.
func TestAnOutsideModuleImportsTheAPITypes(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves modules from the proxy")
	}
	dir := outsideModule(t, []string{module + "pkg/apis/image/v1beta1", module + "pkg/apis/update/v1beta1"}, "pkg")
	outsideGo(t, dir, "mod", "tidy")
	mods := strings.Fields(outsideGo(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
	t.Logf("importing the API types: %d modules in the graph, 1 replace", len(mods))
}
