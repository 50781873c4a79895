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
// each of the three unpublished modules it requires and nothing else: go mod
// tidy resolves the tests of every package it imports (the test servers
// are pkg/testing, in the pkg module), go list -m all loads its whole
// graph, and it builds linking no Kubernetes package beyond kyaml's own.
func TestAnOutsideModuleEmbedsTheEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves modules from the proxy")
	}
	dir := outsideModule(t, []string{module + "update-job-controller/engine", module + "update-job-controller/forges"},
		"pkg", "pkg/apis", "update-job-controller")
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
	t.Logf("embedding the engine and the built-in forges: %d packages linked, %d modules in the graph, 3 replaces", len(linked), len(mods))
}

// A module that imports only the API types needs the one replace of
// their module, and its graph is no larger than that of a module importing
// Flux's image-automation API types (testdata/fluxapi, pinned by its own
// go.mod and go.sum): the API types' module requires apimachinery, k8s.io/api
// and controller-runtime, not what the controllers need.
func TestAnOutsideModuleImportsTheAPITypes(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves modules from the proxy")
	}
	fluxDir := copyDir(t, filepath.Join(root(t), "tests", "deps", "testdata", "fluxapi"))
	dir := outsideModule(t, []string{module + "pkg/apis/image/v1beta1", module + "pkg/apis/update/v1beta1", module + "pkg/apis/meta"}, "pkg/apis")
	outsideGo(t, dir, "mod", "tidy")
	ours := strings.Fields(outsideGo(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
	flux := strings.Fields(outsideGo(t, fluxDir, "list", "-m", "-f", "{{.Path}}", "all"))
	if len(flux) < 50 {
		t.Fatalf("go list -m all listed %d modules for Flux's API types", len(flux))
	}
	if len(ours) > len(flux) {
		fluxHas := map[string]bool{}
		for _, m := range flux {
			fluxHas[m] = true
		}
		var extra []string
		for _, m := range ours {
			if !fluxHas[m] {
				extra = append(extra, m)
			}
		}
		t.Errorf("importing the API types brings %d modules, Flux's API types %d; beyond Flux's: %s",
			len(ours), len(flux), strings.Join(extra, ", "))
	}
	t.Logf("importing the API types: %d modules in the graph (Flux's image-automation api: %d), 1 replace", len(ours), len(flux))
}

// copyDir copies the files of dir (not its subdirectories) to a temporary
// directory, so the go command may write there.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
