// Package readme checks that the repository README's commands are the
// build's: the make targets, the tool versions and the controller flags it
// names exist as it says.
package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/tests/internal/localenv"
	"toolkit.dev/image-toolkit/tests/testkit/testenv"
)

func read(t *testing.T, path ...string) (root, text string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(append([]string{root}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return root, string(b)
}

// makeTargets are the Makefile's documented targets (those with "## help").
func makeTargets(t *testing.T) []string {
	_, mk := read(t, "Makefile")
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^([a-z-]+):.*## `).FindAllStringSubmatch(mk, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}

// The README's table of make targets lists exactly the Makefile's targets,
// and every `make X` it mentions anywhere is one of them.
func TestMakeTargets(t *testing.T) {
	_, readme := read(t, "README.md")
	targets := makeTargets(t)
	if len(targets) < 10 {
		t.Fatalf("found only %v in the Makefile", targets)
	}
	i := strings.Index(readme, "\n## Make targets")
	if i < 0 {
		t.Fatal("README has no Make targets section")
	}
	section := readme[i:]
	var table []string
	for _, m := range regexp.MustCompile("(?m)^\\| `make ([a-z-]+)` \\|").FindAllStringSubmatch(section, -1) {
		table = append(table, m[1])
	}
	slices.Sort(table)
	if !slices.Equal(table, targets) {
		t.Errorf("README's make targets table lists %v; the Makefile has %v", table, targets)
	}
	for _, m := range regexp.MustCompile(`\bmake ([a-z][a-z-]*)`).FindAllStringSubmatch(readme, -1) {
		if !slices.Contains(targets, m[1]) {
			t.Errorf("README mentions `make %s`, which the Makefile does not have", m[1])
		}
	}
}

// The tool versions the README states are the pinned ones.
func TestToolVersions(t *testing.T) {
	_, readme := read(t, "README.md")
	row := func(target string) string {
		m := regexp.MustCompile("(?m)^\\| `make " + target + "` \\|.*$").FindString(readme)
		if m == "" {
			t.Fatalf("no README row for make %s", target)
		}
		return m
	}
	for _, c := range []struct{ tool, module, target string }{
		{"kube", "k8s.io/kubernetes", "testenv"},
		{"etcd", "go.etcd.io/etcd/server/v3", "testenv"},
		{"helm", "helm.sh/helm/v3", "testenv"},
		{"kustomize", "sigs.k8s.io/kustomize/kustomize/v5", "testenv"},
		{"gitea", "code.gitea.io/gitea", "testenv"},
		{"controller-gen", "sigs.k8s.io/controller-tools", "tools"},
		{"node", "k8s.io/kubernetes", "node-tools"},
	} {
		_, gomod := read(t, "hack", "tools", c.tool, "go.mod")
		m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(c.module) + `\s+(v\S+)`).FindStringSubmatch(gomod)
		if m == nil {
			t.Fatalf("hack/tools/%s/go.mod does not require %s", c.tool, c.module)
		}
		if r := row(c.target); !strings.Contains(r, m[1]) {
			t.Errorf("README's make %s row does not say %s %s: %s", c.target, c.tool, m[1], r)
		}
	}
}

// Every flag the README's "Running a controller" section names is a flag of
// the controller binaries.
func TestControllerFlags(t *testing.T) {
	root, readme := read(t, "README.md")
	i := strings.Index(readme, "## Running a controller on your machine")
	if i < 0 {
		t.Fatal("README has no section on running a controller")
	}
	section := readme[i:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	flags := regexp.MustCompile("`(--[a-z-]+)`").FindAllStringSubmatch(section, -1)
	if len(flags) < 4 {
		t.Fatalf("found only %v", flags)
	}
	bin := localenv.BinDir(root)
	var help string
	for _, c := range localenv.Controllers {
		out, _ := exec.Command(filepath.Join(bin, c), "--help").CombinedOutput()
		if !strings.Contains(string(out), "-health-probe-bind-address") {
			t.Fatalf("%s --help (build it first: make build): %s", c, out)
		}
		help += string(out)
	}
	for _, f := range flags {
		if !strings.Contains(help, "\n  -"+strings.TrimPrefix(f[1], "--")+" ") {
			t.Errorf("README names %s, which no controller has", f[1])
		}
	}
}

// The README's layout table names every Go package there is, and every
// path in its first column exists.
func TestLayoutListsPackages(t *testing.T) {
	root, readme := read(t, "README.md")
	i := strings.Index(readme, "\n## Layout")
	j := strings.Index(readme, "\n## Make targets")
	if i < 0 || j < i {
		t.Fatal("README has no Layout section before Make targets")
	}
	listed := map[string]bool{}
	for _, row := range regexp.MustCompile("(?m)^\\| (`[^|]+`) \\|").FindAllStringSubmatch(readme[i:j], -1) {
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(row[1], -1) {
			p := strings.TrimSuffix(m[1], "/")
			listed[p] = true
			if strings.Contains(p, "<") {
				continue // charts/<controller>
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("the layout table lists %s: %v", p, err)
			}
		}
	}
	packages := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "hack" || rel == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(rel, ".go") {
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); !listed[dir] {
			listed[dir] = true // report once
			t.Errorf("the layout table does not list package %s", dir)
		} else {
			packages++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if packages < 20 {
		t.Fatalf("found only %d Go files in listed packages", packages)
	}
}

// Every reason in docs/api.md's reason tables is a constant of the code,
// and every reason constant is in a table and set by some controller.
func TestReasonTables(t *testing.T) {
	root, api := read(t, "docs", "api.md")
	documented := map[string]bool{}
	inTable := false
	for _, line := range strings.Split(api, "\n") {
		switch {
		case strings.HasPrefix(line, "| reason |"):
			inTable = true
		case !strings.HasPrefix(line, "|"):
			inTable = false
		case inTable:
			if m := regexp.MustCompile("^\\| `([A-Za-z]+)` \\|").FindStringSubmatch(line); m != nil {
				documented[m[1]] = true
			}
		}
	}
	if len(documented) < 20 {
		t.Fatalf("found only %d reasons in docs/api.md's tables", len(documented))
	}

	declared := map[string]string{} // value → constant
	declRe := regexp.MustCompile(`(?m)^\s*(\w+Reason)\s*=\s*"(\w+)"`)
	var declFiles []string
	for _, f := range []string{"pkg/runtime/conditions/conditions.go", "pkg/apis/image/v1beta1/condition_types.go", "pkg/apis/update/v1beta1/condition_types.go"} {
		_, src := read(t, f)
		for _, m := range declRe.FindAllStringSubmatch(src, -1) {
			if prev, ok := declared[m[2]]; ok {
				t.Errorf("reason %s is declared twice: %s and %s", m[2], prev, m[1])
			}
			declared[m[2]] = m[1]
		}
		declFiles = append(declFiles, filepath.Join(root, f))
	}

	// What the controllers' code (not tests) says.
	var code strings.Builder
	for _, dir := range []string{"image-reflector-controller", "image-automation-controller", "update-job-controller", "pkg"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || slices.Contains(declFiles, path) {
				return err
			}
			b, err := os.ReadFile(path)
			code.Write(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for value, name := range declared {
		if !documented[value] {
			t.Errorf("reason %s (%s) is in no table of docs/api.md", value, name)
		}
		if !regexp.MustCompile(`\b` + name + `\b`).MatchString(code.String()) {
			t.Errorf("reason %s (%s) is declared but no controller sets it", value, name)
		}
	}
	for value := range documented {
		if _, ok := declared[value]; !ok {
			t.Errorf("docs/api.md documents reason %s, which no constant declares", value)
		}
	}
}

// Every tk-image command the README shows exists, with the flags it uses.
func TestCLICommands(t *testing.T) {
	root, readme := read(t, "README.md")
	cli := filepath.Join(localenv.BinDir(root), "tk-image")
	cmdRe := regexp.MustCompile(`tk-image((?: [a-z][a-z-]*)*)([^|"<>\n` + "`" + `]*)`)
	seen := 0
	for _, m := range cmdRe.FindAllStringSubmatch(readme, -1) {
		words := strings.Fields(m[1])
		if len(words) == 0 {
			continue // the name in prose
		}
		// The command is the longest prefix of the words that names one;
		// the rest are its arguments (a kind, a name).
		var out []byte
		n := len(words)
		for ; n > 0; n-- {
			help, err := exec.Command(cli, append(slices.Clone(words[:n]), "--help")...).CombinedOutput()
			if err != nil {
				t.Errorf("tk-image %s --help: %v\n%s", strings.Join(words[:n], " "), err, help)
				break
			}
			// Cobra answers an unknown subcommand with its parent's help;
			// a command's own help starts its usage with its path.
			if regexp.MustCompile(`(?m)^  tk-image ` + regexp.QuoteMeta(strings.Join(words[:n], " ")) + `( |$)`).Match(help) {
				out = help
				break
			}
		}
		if out == nil {
			t.Errorf("README shows `tk-image %s`, which is not a command", strings.Join(words, " "))
			continue
		}
		words = words[:n]
		for _, f := range regexp.MustCompile(`(?:^|\s)(--[a-z][a-z-]*)`).FindAllStringSubmatch(m[2], -1) {
			if !strings.Contains(string(out), f[1]+" ") && !strings.Contains(string(out), f[1]+"\n") && !strings.Contains(string(out), f[1]+"=") {
				t.Errorf("README shows `tk-image %s %s`; its help has no such flag", strings.Join(words, " "), f[1])
			}
		}
		seen++
	}
	if seen < 5 {
		t.Fatalf("found only %d tk-image commands in the README", seen)
	}
}
