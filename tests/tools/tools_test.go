// Package tools tests hack/tools.sh, which builds the tools the build and
// tests need from pinned modules into a cache shared by every clone.
package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// toolEnv is a tools directory, cache and bin directory of a test's own.
type toolEnv struct {
	t                    *testing.T
	script               string
	tools, cache, bindir string
}

func newToolEnv(t *testing.T) *toolEnv {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	d := t.TempDir()
	return &toolEnv{t: t, script: filepath.Join(root, "hack", "tools.sh"),
		tools: filepath.Join(d, "tools"), cache: filepath.Join(d, "cache"), bindir: filepath.Join(d, "bin")}
}

// tool writes a tool module: a main package with the given body, pinned by
// go.mod and an empty go.sum, and a tool.sh describing one binary.
func (e *toolEnv) tool(name, main string) {
	e.t.Helper()
	e.write(name, map[string]string{
		"go.mod":        "module example.test/" + name + "\n\ngo 1.26.0\n\nrequire example.test/pinned v1.2.3\n\nreplace example.test/pinned => ./pinned\n",
		"go.sum":        "",
		"tool.sh":       "version=$(modversion example.test/pinned)\nbin " + name + " example.test/" + name + "/cmd --version\n",
		"cmd/main.go":   "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n" + main + "\n}\n\nvar _ = fmt.Sprint\nvar _ = os.Exit\n",
		"pinned/go.mod": "module example.test/pinned\n\ngo 1.26.0\n",
	})
}

// write writes files (path → content) into the tool's module.
func (e *toolEnv) write(tool string, files map[string]string) {
	e.t.Helper()
	for f, body := range files {
		p := filepath.Join(e.tools, tool, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
}

// run runs hack/tools.sh on the tools and returns its output and whether it
// succeeded.
func (e *toolEnv) run(tools ...string) (string, bool) {
	e.t.Helper()
	cmd := exec.Command(e.script, tools...)
	cmd.Env = append(os.Environ(), "IMAGE_TOOLKIT_TOOLS="+e.tools, "IMAGE_TOOLKIT_CACHE="+e.cache, "IMAGE_TOOLKIT_BIN="+e.bindir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			e.t.Fatal(err)
		}
	}
	return string(out), err == nil
}

// entries lists what the cache holds for a tool.
func (e *toolEnv) entries(tool string) []string {
	m, _ := filepath.Glob(filepath.Join(e.cache, "tools", tool+"-*"))
	return m
}

const good = `if len(os.Args) > 1 && os.Args[1] == "--version" { fmt.Println("good v1.2.3"); return }`

// A build that works is cached under its version, marked complete only
// after its binary answered --version, linked into bin/, and reused.
func TestBuildCachesAndLinks(t *testing.T) {
	e := newToolEnv(t)
	e.tool("good", good)
	out, ok := e.run("good")
	if !ok {
		t.Fatalf("build failed:\n%s", out)
	}
	ent := e.entries("good")
	if len(ent) != 1 || !strings.HasPrefix(filepath.Base(ent[0]), "good-v1.2.3-") {
		t.Fatalf("cache entries = %v, want one named good-v1.2.3-<hash>", ent)
	}
	if v, err := os.ReadFile(filepath.Join(ent[0], ".versions")); err != nil || !strings.Contains(string(v), "good v1.2.3") {
		t.Errorf(".versions = %q, %v", v, err)
	}
	if _, err := os.Stat(filepath.Join(ent[0], ".complete")); err != nil {
		t.Error(err)
	}
	if v, err := exec.Command(filepath.Join(e.bindir, "good"), "--version").Output(); err != nil || string(v) != "good v1.2.3\n" {
		t.Errorf("bin/good --version = %q, %v", v, err)
	}
	out, ok = e.run("good")
	if !ok || strings.Contains(out, "building") {
		t.Errorf("a complete entry was rebuilt (ok=%v):\n%s", ok, out)
	}
}

// A multi-call binary named twice (Argo CD's application controller and
// repo server) is built once: the second name is a hard link, and each name
// runs as itself.
func TestMultiCallBinaryIsBuiltOnce(t *testing.T) {
	e := newToolEnv(t)
	e.tool("multi", `fmt.Println(os.Args[0])`)
	sh := "version=$(modversion example.test/pinned)\nbin first example.test/multi/cmd --version\nbin second example.test/multi/cmd --version\n"
	if err := os.WriteFile(filepath.Join(e.tools, "multi", "tool.sh"), []byte(sh), 0o644); err != nil {
		t.Fatal(err)
	}
	out, ok := e.run("multi")
	if !ok || strings.Count(out, "building") != 1 {
		t.Fatalf("want one build (ok=%v):\n%s", ok, out)
	}
	ent := e.entries("multi")[0]
	first, err1 := os.Stat(filepath.Join(ent, "first"))
	second, err2 := os.Stat(filepath.Join(ent, "second"))
	if err1 != nil || err2 != nil || !os.SameFile(first, second) {
		t.Fatalf("first and second are not one file: %v %v", err1, err2)
	}
	for _, name := range []string{"first", "second"} {
		if v, err := exec.Command(filepath.Join(e.bindir, name)).Output(); err != nil || !strings.HasSuffix(strings.TrimSpace(string(v)), "/"+name) {
			t.Errorf("bin/%s runs as %q, %v", name, v, err)
		}
	}
}

// A failed build fails the script and leaves nothing in the cache that a
// later run could trust: the defect that once kept a cache without
// kube-apiserver on every later run.
func TestFailedBuildLeavesNoEntry(t *testing.T) {
	tests := []struct {
		name, main, says string
	}{
		{"compile error", `undefined()`, "undefined"},
		{"binary fails its version check", `os.Exit(3)`, "--version failed"},
		{"dependency not pinned in go.sum", "", "go.sum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newToolEnv(t)
			e.tool("bad", tt.main)
			if tt.says == "go.sum" {
				// An import no pin provides must fail, not be resolved from
				// the network at build time.
				p := filepath.Join(e.tools, "bad", "cmd", "dep.go")
				if err := os.WriteFile(p, []byte("package main\n\nimport _ \"golang.org/x/mod/semver\"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				tt.says = "golang.org/x/mod"
			}
			out, ok := e.run("bad")
			if ok {
				t.Fatalf("the script succeeded:\n%s", out)
			}
			if !strings.Contains(out, tt.says) {
				t.Errorf("output does not say %q:\n%s", tt.says, out)
			}
			if ent := e.entries("bad"); len(ent) != 0 {
				t.Errorf("a failed build left cache entries %v", ent)
			}
			if _, err := os.Lstat(filepath.Join(e.bindir, "bad")); err == nil {
				t.Error("a failed build was linked into bin/")
			}
		})
	}
}

// An entry that is not complete, or claims to be but lacks a binary (as a
// cache written by an older script can), is rebuilt rather than trusted.
func TestDamagedEntryIsRebuilt(t *testing.T) {
	for _, damage := range []string{".complete", "good"} {
		t.Run("without "+damage, func(t *testing.T) {
			e := newToolEnv(t)
			e.tool("good", good)
			if out, ok := e.run("good"); !ok {
				t.Fatalf("build failed:\n%s", out)
			}
			ent := e.entries("good")[0]
			if err := os.Remove(filepath.Join(ent, damage)); err != nil {
				t.Fatal(err)
			}
			out, ok := e.run("good")
			if !ok || !strings.Contains(out, "is incomplete; rebuilding") || !strings.Contains(out, "building good") {
				t.Fatalf("damaged entry not rebuilt (ok=%v):\n%s", ok, out)
			}
			for _, f := range []string{".complete", "good"} {
				if _, err := os.Stat(filepath.Join(ent, f)); err != nil {
					t.Errorf("after the rebuild: %v", err)
				}
			}
		})
	}
}

// Two runs that need the same missing entry (two clones, two makes) build
// it once: the second waits for the first and links its entry. The version
// check sleeps so the first build is still running when the second starts.
func TestConcurrentRunsBuildOnce(t *testing.T) {
	e := newToolEnv(t)
	e.tool("slow", "")
	e.write("slow", map[string]string{"cmd/main.go": "package main\n\nimport (\n\t\"fmt\"\n\t\"time\"\n)\n\n" +
		"func main() {\n\ttime.Sleep(2 * time.Second)\n\tfmt.Println(\"slow v1.2.3\")\n}\n"})
	outs := make(chan string, 2)
	for range 2 {
		go func() {
			out, ok := e.run("slow")
			if !ok {
				out = "FAILED\n" + out
			}
			outs <- out
		}()
	}
	all := <-outs + <-outs
	if strings.Contains(all, "FAILED") || strings.Count(all, "building slow") != 1 {
		t.Fatalf("want one build and two successes:\n%s", all)
	}
	if n := len(e.entries("slow")); n != 1 {
		t.Errorf("%d cache entries, want 1", n)
	}
}

// A changed pin is a new cache entry: a build never reuses binaries made
// from other dependencies.
func TestChangedPinIsNewEntry(t *testing.T) {
	e := newToolEnv(t)
	e.tool("good", good)
	if out, ok := e.run("good"); !ok {
		t.Fatalf("build failed:\n%s", out)
	}
	gosum := filepath.Join(e.tools, "good", "go.sum")
	if err := os.WriteFile(gosum, []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := e.run("good"); !ok || !strings.Contains(out, "building good") {
		t.Fatalf("a changed go.sum reused the old build (ok=%v):\n%s", ok, out)
	}
	if n := len(e.entries("good")); n != 2 {
		t.Errorf("%d cache entries, want 2", n)
	}
}

// The repository's own tools are each pinned: a go.mod and go.sum under
// hack/tools, whose tool.sh names a version found in that go.mod.
func TestRepositoryToolsArePinned(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"kube", "etcd", "helm", "kustomize", "gitea", "controller-gen", "node", "argocd", "flux-controllers", "notification-controller", "flux", "cosign", "notation"} {
		for _, f := range []string{"go.mod", "go.sum", "tool.sh"} {
			b, err := os.ReadFile(filepath.Join(root, "hack", "tools", tool, f))
			if err != nil {
				t.Fatal(err)
			}
			if f == "go.sum" && len(b) == 0 {
				t.Errorf("%s/go.sum is empty", tool)
			}
		}
	}
}

// A tool that reads files of its module at run time (gitea's options/ and
// templates/) gets them copied into its entry and linked beside the binary;
// its build tags and cgo setting reach the build; an entry whose data
// directory is gone is rebuilt, not trusted.
func TestDataTagsAndCgo(t *testing.T) {
	e := newToolEnv(t)
	e.tool("withdata", `if len(os.Args) > 1 && os.Args[1] == "--version" { fmt.Println("withdata " + tagged + " " + cgo); return }`)
	e.write("withdata", map[string]string{
		"tool.sh":               "version=$(modversion example.test/pinned)\ncgo=1\ntags=\"special\"\ndata example.test/withdata assets manifests/crds\nbin withdata example.test/withdata/cmd --version\n",
		"assets/greeting.txt":   "hello\n",
		"manifests/crds/a.yaml": "kind: CustomResourceDefinition\n",
		"cmd/tagged.go":         "//go:build special\n\npackage main\n\nconst tagged = \"tagged\"\n",
		"cmd/untagged.go":       "//go:build !special\n\npackage main\n\nconst tagged = \"untagged\"\n",
		"cmd/cgo.go":            "//go:build cgo\n\npackage main\n\nconst cgo = \"cgo\"\n",
		"cmd/nocgo.go":          "//go:build !cgo\n\npackage main\n\nconst cgo = \"nocgo\"\n",
	})
	out, ok := e.run("withdata")
	if !ok || !strings.Contains(out, "withdata tagged cgo") {
		t.Fatalf("build (ok=%v):\n%s", ok, out)
	}
	if b, err := os.ReadFile(filepath.Join(e.bindir, "assets", "greeting.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("bin/assets/greeting.txt = %q, %v", b, err)
	}
	// A nested directory (Argo CD's manifests/crds) keeps its path.
	if b, err := os.ReadFile(filepath.Join(e.bindir, "manifests", "crds", "a.yaml")); err != nil || string(b) != "kind: CustomResourceDefinition\n" {
		t.Errorf("bin/manifests/crds/a.yaml = %q, %v", b, err)
	}
	ent := e.entries("withdata")[0]
	if err := os.RemoveAll(filepath.Join(ent, "assets")); err != nil {
		t.Fatal(err)
	}
	out, ok = e.run("withdata")
	if !ok || !strings.Contains(out, "is incomplete; rebuilding") {
		t.Errorf("an entry without its data was trusted (ok=%v):\n%s", ok, out)
	}
}

// Data from two modules may fill one directory under another name (Flux's
// two controllers each ship config/crd/bases; bin/flux-controllers/crds holds both).
func TestDataOfTwoModulesFillsOneNamedDirectory(t *testing.T) {
	e := newToolEnv(t)
	e.tool("twodata", good)
	e.write("twodata", map[string]string{
		"tool.sh":                        "version=$(modversion example.test/pinned)\ndata example.test/twodata config/crd/bases=crds\ndata example.test/pinned config/crd/bases=crds\nbin twodata example.test/twodata/cmd --version\n",
		"config/crd/bases/a.yaml":        "a\n",
		"pinned/config/crd/bases/b.yaml": "b\n",
	})
	if out, ok := e.run("twodata"); !ok {
		t.Fatalf("build failed:\n%s", out)
	}
	for f, want := range map[string]string{"a.yaml": "a\n", "b.yaml": "b\n"} {
		if b, err := os.ReadFile(filepath.Join(e.bindir, "crds", f)); err != nil || string(b) != want {
			t.Errorf("bin/crds/%s = %q, %v; want %q", f, b, err, want)
		}
	}
}
