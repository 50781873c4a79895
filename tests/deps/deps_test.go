// Package deps checks the module boundaries with `go list -deps`, the import
// graph the compiler sees, so that no one can widen it by accident:
//
//   - The API packages (pkg/apis/...) import only what apimachinery and
//     controller-runtime's scheme helpers bring, so an outside project can
//     import our types as cheaply as Flux's api/ modules. The allowed set is
//     computed from those packages' own dependencies, not listed by hand, so
//     an apimachinery upgrade does not break this test but a new import of,
//     say, pkg/setters from an API package does.
//   - The write-back engine (update-job-controller/engine and its mirror)
//     links no Kubernetes client, API machinery or controller-runtime, so a
//     program that embeds it does not carry them. The only k8s.io packages
//     it may link are those kyaml, the YAML library of the setters, brings
//     itself (kube-openapi's spec types), computed from kyaml's own
//     dependencies. Nor does it link a forge's client library: the
//     built-in adapters (update-job-controller/forges) are registered by
//     the front ends, so an embedder links only those it registers.
//   - No shipped binary links the test servers (pkg/testing)
//     or anything else of the tests tree.
//   - Every hand-written file groups its imports the one way
//     (imports_test.go): the standard library, other modules, this
//     repository.
//   - The Makefile's MODULES, over which lint, vet and the tests run, are
//     the workspace's modules, so a new module is not left out of make test.
package deps

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	module  = "toolkit.dev/image-toolkit/"
	apis    = module + "pkg/apis/"
	testsNS = module + "tests/"
	// testingNS are the test servers that live in pkg, so that an outside
	// module's go mod tidy resolves the tests of the packages it imports.
	testingNS = module + "pkg/testing/"
)

// allowedRoots are the packages whose dependencies the API packages may have.
// k8s.io/api/core/v1 is a types-only package that brings nothing apimachinery
// does not (its own dependencies must stay inside the computed set, which
// this test checks as well): UpdateJob's pod settings are Kubernetes' own
// types (EnvVar, ResourceRequirements, ...), so that users write them as in a
// Pod.
var allowedRoots = []string{
	"k8s.io/apimachinery/pkg/apis/meta/v1",
	"sigs.k8s.io/controller-runtime/pkg/scheme",
}

// allowedLeaves may be imported, but their dependencies must be allowed on
// their own.
var allowedLeaves = []string{"k8s.io/api/core/v1"}

// mains are the four shipped binaries.
var mains = []string{"./image-reflector-controller", "./image-automation-controller", "./update-job-controller", "./tk-image"}

// pkgInfo is the part of `go list -json` this test reads.
type pkgInfo struct {
	ImportPath string
	Standard   bool
	Imports    []string
}

// root is the workspace root: the directory of the go.work the go command uses.
func root(t *testing.T) string {
	t.Helper()
	out := goCmd(t, "", "env", "GOWORK")
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		t.Fatalf("not in the go.work workspace (GOWORK=%q)", work)
	}
	return filepath.Dir(work)
}

func goCmd(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// -mod=mod, accepted in single-module mode, is refused in the workspace.
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// listDeps runs `go list -deps -json` on the patterns in the workspace root.
func listDeps(t *testing.T, dir string, args ...string) []pkgInfo {
	t.Helper()
	out := goCmd(t, dir, append([]string{"list", "-deps", "-json=ImportPath,Standard,Imports"}, args...)...)
	var pkgs []pkgInfo
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// outside returns the packages of deps that are neither in the standard
// library nor allowed, each followed by the packages of deps importing it,
// sorted.
func outside(deps []pkgInfo, allowed func(string) bool) []string {
	importers := map[string][]string{}
	for _, p := range deps {
		for _, imp := range p.Imports {
			importers[imp] = append(importers[imp], p.ImportPath)
		}
	}
	var bad []string
	for _, p := range deps {
		if p.Standard || allowed(p.ImportPath) {
			continue
		}
		by := importers[p.ImportPath]
		slices.Sort(by)
		line := p.ImportPath
		if len(by) > 0 {
			line += " (imported by " + strings.Join(by, ", ") + ")"
		}
		bad = append(bad, line)
	}
	slices.Sort(bad)
	return bad
}

// apiOutside lists the API packages' dependencies outside the allowed set;
// overlay, when not empty, is passed to go list -overlay.
func apiOutside(t *testing.T, dir, overlay string) []string {
	t.Helper()
	allowed := map[string]bool{}
	for _, p := range listDeps(t, dir, allowedRoots...) {
		allowed[p.ImportPath] = true
	}
	args := []string{"./pkg/apis/..."}
	if overlay != "" {
		args = append([]string{"-overlay", overlay}, args...)
	}
	return outside(listDeps(t, dir, args...), func(path string) bool {
		return allowed[path] || slices.Contains(allowedLeaves, path) || strings.HasPrefix(path, apis)
	})
}

func TestAPIPackagesImportOnlyAPIMachinery(t *testing.T) {
	if bad := apiOutside(t, root(t), ""); len(bad) > 0 {
		// The imports an API package makes itself first: those are the ones to move.
		slices.SortStableFunc(bad, func(a, b string) int {
			return boolInt(!strings.Contains(a, " "+apis)) - boolInt(!strings.Contains(b, " "+apis))
		})
		t.Errorf("pkg/apis depends on packages beyond apimachinery and controller-runtime's scheme helpers; "+
			"move what needs them out of the API packages:\n  %s", strings.Join(bad, "\n  "))
	}
}

// The check above fails when an API package imports a heavier package:
// an overlay adds a file importing kyaml to pkg/apis/meta, without
// touching the tree.
func TestAPICheckCatchesNewImport(t *testing.T) {
	dir := root(t)
	overlay := overlayFile(t, filepath.Join(dir, "pkg", "apis", "meta", "zz_probe.go"),
		"package meta\n\nimport _ \"sigs.k8s.io/kustomize/kyaml/yaml\"\n")
	bad := apiOutside(t, dir, overlay)
	want := "sigs.k8s.io/kustomize/kyaml/yaml (imported by " + apis + "meta)"
	if !slices.Contains(bad, want) {
		t.Errorf("an import of kyaml from pkg/apis/meta was not reported; want %q among:\n  %s", want, strings.Join(bad, "\n  "))
	}
}

// engine are the packages of the write-back engine an embedder imports.
var engine = []string{"./update-job-controller/engine", "./update-job-controller/engine/mirror"}

// kubernetes reports whether path is Kubernetes' client side: anything of
// k8s.io, and controller-runtime.
func kubernetes(path string) bool {
	return strings.HasPrefix(path, "k8s.io/") || strings.HasPrefix(path, "sigs.k8s.io/controller-runtime")
}

// engineKubernetes lists the Kubernetes packages the engine links beyond
// what kyaml brings; overlay, when not empty, is passed to go list.
func engineKubernetes(t *testing.T, dir, overlay string) []string {
	t.Helper()
	kyaml := map[string]bool{}
	for _, p := range listDeps(t, dir, "sigs.k8s.io/kustomize/kyaml/yaml") {
		kyaml[p.ImportPath] = true
	}
	args := engine
	if overlay != "" {
		args = append([]string{"-overlay", overlay}, args...)
	}
	deps := listDeps(t, dir, args...)
	if len(deps) < 50 {
		t.Fatalf("go list -deps %v listed only %d packages", engine, len(deps))
	}
	return outside(deps, func(path string) bool { return !kubernetes(path) || kyaml[path] })
}

func TestEngineLinksNoKubernetes(t *testing.T) {
	if bad := engineKubernetes(t, root(t), ""); len(bad) > 0 {
		t.Errorf("the write-back engine links Kubernetes packages; keep what needs them in the controllers "+
			"(Secrets are read by pkg/git/gitsecret, not pkg/git):\n  %s", strings.Join(bad, "\n  "))
	}
}

// forgeSDKs are the module paths of the built-in forges' client libraries.
var forgeSDKs = []string{"github.com/google/go-github/", "gitlab.com/gitlab-org/api/", "code.gitea.io/sdk/", module + "update-job-controller/forges"}

func TestEngineLinksNoForgeSDK(t *testing.T) {
	deps := listDeps(t, root(t), engine...)
	bad := outside(deps, func(path string) bool {
		return !slices.ContainsFunc(forgeSDKs, func(sdk string) bool { return strings.HasPrefix(path, sdk) })
	})
	if len(bad) > 0 {
		t.Errorf("the write-back engine links a forge's client library; the front ends register forges "+
			"(update-job-controller/forges), the engine knows only pkg/forge:\n  %s", strings.Join(bad, "\n  "))
	}
}

// The check above fails when the engine imports a Kubernetes package: an
// overlay adds a file importing controller-runtime's client to the engine.
func TestEngineCheckCatchesNewImport(t *testing.T) {
	dir := root(t)
	overlay := overlayFile(t, filepath.Join(dir, "update-job-controller", "engine", "zz_probe.go"),
		"package engine\n\nimport _ \"sigs.k8s.io/controller-runtime/pkg/client\"\n")
	bad := engineKubernetes(t, dir, overlay)
	want := "sigs.k8s.io/controller-runtime/pkg/client (imported by " + module + "update-job-controller/engine)"
	if !slices.Contains(bad, want) {
		t.Errorf("an import of controller-runtime from the engine was not reported; want %q among:\n  %s", want, strings.Join(bad, "\n  "))
	}
}

// overlayFile writes a go list -overlay file that adds a file of src at
// path, without touching the tree.
func overlayFile(t *testing.T, path, src string) string {
	t.Helper()
	probe := filepath.Join(t.TempDir(), "probe.go")
	if err := os.WriteFile(probe, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {path: probe}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(file, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestMainsLinkNoTestCode(t *testing.T) {
	deps := listDeps(t, root(t), mains...)
	if len(deps) < 100 {
		t.Fatalf("go list -deps %v listed only %d packages", mains, len(deps))
	}
	bad := outside(deps, func(path string) bool {
		return !strings.HasPrefix(path, testsNS) && !strings.HasPrefix(path, testingNS)
	})
	if len(bad) > 0 {
		t.Errorf("a shipped binary links test code:\n  %s", strings.Join(bad, "\n  "))
	}
}

func TestMakefileModulesAreTheWorkspace(t *testing.T) {
	dir := root(t)
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(goCmd(t, dir, "work", "edit", "-json"), &work); err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, u := range work.Use {
		used = append(used, filepath.Clean(u.DiskPath))
	}
	mk, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MODULES := (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no MODULES")
	}
	listed := strings.Fields(string(m[1]))
	slices.Sort(used)
	slices.Sort(listed)
	if !slices.Equal(used, listed) {
		t.Errorf("the Makefile's MODULES %q are not go.work's modules %q", listed, used)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestOutside(t *testing.T) {
	deps := []pkgInfo{
		{ImportPath: "a/api", Imports: []string{"fmt", "a/heavy", "a/ok"}},
		{ImportPath: "a/ok"},
		{ImportPath: "a/heavy", Imports: []string{"a/heavier"}},
		{ImportPath: "a/heavier"},
		{ImportPath: "fmt", Standard: true},
	}
	allowOK := func(p string) bool { return p == "a/api" || p == "a/ok" }
	for _, tc := range []struct {
		name    string
		allowed func(string) bool
		want    []string
	}{
		{"standard library is always allowed", func(string) bool { return true }, nil},
		{"each outsider is named with its importers", allowOK,
			[]string{"a/heavier (imported by a/heavy)", "a/heavy (imported by a/api)"}},
		{"a root has no importer to name", func(string) bool { return false },
			[]string{"a/api", "a/heavier (imported by a/heavy)", "a/heavy (imported by a/api)", "a/ok (imported by a/api)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outside(deps, tc.allowed); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
