// Package readme checks that the README's and docs' commands are the
// build's: the make targets, the tool versions, the controller flags and the
// tk-image commands they name exist as they say, every package is in the
// layout table, every reason is in a table, the architecture's phase table is
// the code's phase lists, and every link leads somewhere.
// The README is the front door; the reference it links to lives in docs/,
// so each check reads the page that now holds what it checks.
package readme

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
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

// pages are README.md and every docs/*.md, by path from the repository root.
func pages(t *testing.T) map[string]string {
	t.Helper()
	root, readme := read(t, "README.md")
	out := map[string]string{"README.md": readme}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) < 10 {
		t.Fatalf("docs/*.md: %v %v", docs, err)
	}
	for _, d := range docs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		out["docs/"+filepath.Base(d)] = string(b)
	}
	return out
}

// section is the part of a page from its heading line up to the next
// heading of the same or a higher level outside code blocks (or the end).
func section(t *testing.T, page, text, heading string) string {
	t.Helper()
	level := strings.Index(heading, " ")
	lines := strings.SplitAfter(text, "\n")
	start := slices.Index(lines, heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", page, heading)
	}
	code := false
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "```") {
			code = !code
		}
		if n := headingLevel(lines[i]); !code && n > 0 && n <= level {
			return strings.Join(lines[start:i], "")
		}
	}
	return strings.Join(lines[start:], "")
}

// headingLevel is the number of #s of a Markdown heading line, else 0.
func headingLevel(line string) int {
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n == 0 || n > 6 || !strings.HasPrefix(line[n:], " ") {
		return 0
	}
	return n
}

// anchors are the ids GitHub gives a page's headings: lower case, letters,
// digits, - and _ kept, spaces made -, the rest dropped; a repeated one
// gets -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	code := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			code = !code
		}
		n := headingLevel(line)
		if code || n == 0 {
			continue
		}
		var id strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(line[n:])) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				id.WriteRune(r)
			case r == ' ':
				id.WriteByte('-')
			}
		}
		a := id.String()
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", id.String(), i)
		}
		out[a] = true
	}
	return out
}

// Every relative link of the README and the docs leads to a file or
// directory of the repository, and a #fragment to a heading of the page it
// names: the reference moved into docs/ without leaving links behind.
func TestLinks(t *testing.T) {
	root, _ := read(t, "README.md")
	all := pages(t)
	linkRe := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, page := range slices.Sorted(maps.Keys(all)) {
		for _, m := range linkRe.FindAllStringSubmatch(all[page], -1) {
			target, fragment, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path := page // a bare #fragment is on the page itself
			if target != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(page), target))
			}
			b, err := os.ReadFile(filepath.Join(root, path))
			if err != nil {
				if _, serr := os.Stat(filepath.Join(root, path)); serr != nil || fragment != "" {
					t.Errorf("%s links to %s: %v", page, m[1], serr)
				}
				continue // a directory
			}
			if fragment != "" && strings.HasSuffix(path, ".md") && !anchors(string(b))[fragment] {
				t.Errorf("%s links to %s: %s has no heading #%s", page, m[1], path, fragment)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("found only %d relative links in the README and docs", checked)
	}
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

// The front door is short and shows the two commands a newcomer runs, and
// every page of docs/ is reachable from it.
func TestFrontDoor(t *testing.T) {
	_, readme := read(t, "README.md")
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; the front door keeps to 250 and links to docs/", n)
	}
	for _, cmd := range []string{"make demo", "make test"} {
		if !regexp.MustCompile(`(?m)^` + cmd + `\b`).MatchString(readme) {
			t.Errorf("README.md does not show %q as a command", cmd)
		}
	}
	for page := range pages(t) {
		if page != "README.md" && !strings.Contains(readme, "]("+page+")") {
			t.Errorf("README.md does not link to %s", page)
		}
	}
}

// The make targets table (docs/development.md) lists exactly the
// Makefile's targets, and every `make X` the README or a doc shows (in
// code: after a backtick, at the start of a line, or after &&) is one of
// them.
func TestMakeTargets(t *testing.T) {
	all := pages(t)
	targets := makeTargets(t)
	if len(targets) < 10 {
		t.Fatalf("found only %v in the Makefile", targets)
	}
	sec := section(t, "docs/development.md", all["docs/development.md"], "## Make targets")
	var table []string
	for _, m := range regexp.MustCompile("(?m)^\\| `make ([a-z-]+)` \\|").FindAllStringSubmatch(sec, -1) {
		table = append(table, m[1])
	}
	slices.Sort(table)
	if !slices.Equal(table, targets) {
		t.Errorf("docs/development.md's make targets table lists %v; the Makefile has %v", table, targets)
	}
	seen := 0
	for page, text := range all {
		for _, m := range regexp.MustCompile("(?m)(?:^|`|&& )make ([a-z][a-z-]*)").FindAllStringSubmatch(text, -1) {
			seen++
			if !slices.Contains(targets, m[1]) {
				t.Errorf("%s mentions `make %s`, which the Makefile does not have", page, m[1])
			}
		}
	}
	if seen < 20 {
		t.Fatalf("found only %d make commands in the README and docs", seen)
	}
}

// The tool versions docs/development.md states are the pinned ones.
func TestToolVersions(t *testing.T) {
	_, dev := read(t, "docs", "development.md")
	row := func(target string) string {
		m := regexp.MustCompile("(?m)^\\| `make " + target + "` \\|.*$").FindString(dev)
		if m == "" {
			t.Fatalf("no docs/development.md row for make %s", target)
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
		{"argocd", "github.com/argoproj/argo-cd/v3", "argocd-tools"},
		{"flux-controllers", "github.com/fluxcd/kustomize-controller", "flux-tools"},
		{"flux-controllers", "github.com/fluxcd/source-controller", "flux-tools"},
		{"notification-controller", "github.com/fluxcd/notification-controller", "flux-tools"},
		{"flux", "github.com/fluxcd/flux2/v2", "flux-tools"},
	} {
		_, gomod := read(t, "hack", "tools", c.tool, "go.mod")
		m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(c.module) + `\s+(v\S+)`).FindStringSubmatch(gomod)
		if m == nil {
			t.Fatalf("hack/tools/%s/go.mod does not require %s", c.tool, c.module)
		}
		if r := row(c.target); !strings.Contains(r, m[1]) {
			t.Errorf("docs/development.md's make %s row does not say %s %s: %s", c.target, c.tool, m[1], r)
		}
	}
}

// Every flag the "Running a controller" section of docs/install.md names is
// a flag of the controller binaries.
func TestControllerFlags(t *testing.T) {
	root, install := read(t, "docs", "install.md")
	sec := section(t, "docs/install.md", install, "## Running a controller on your machine")
	flags := regexp.MustCompile("`(--[a-z-]+)`").FindAllStringSubmatch(sec, -1)
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
			t.Errorf("docs/install.md names %s, which no controller has", f[1])
		}
	}
}

// The layout table of docs/development.md names every Go package there
// is, and every path in its first column exists.
func TestLayoutListsPackages(t *testing.T) {
	root, dev := read(t, "docs", "development.md")
	sec := section(t, "docs/development.md", dev, "## Layout")
	listed := map[string]bool{}
	for _, row := range regexp.MustCompile("(?m)^\\| (`[^|]+`) \\|").FindAllStringSubmatch(sec, -1) {
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

// Every tk-image command the README and the docs show exists, with the
// flags it uses.
func TestCLICommands(t *testing.T) {
	root, _ := read(t, "README.md")
	cli := filepath.Join(localenv.BinDir(root), "tk-image")
	helps := map[string][]byte{} // "create policy" → its --help
	help := func(words []string) ([]byte, error) {
		key := strings.Join(words, " ")
		if out, ok := helps[key]; ok {
			return out, nil
		}
		out, err := exec.Command(cli, append(slices.Clone(words), "--help")...).CombinedOutput()
		if err == nil {
			helps[key] = out
		}
		return out, err
	}
	all := pages(t)
	cmdRe := regexp.MustCompile(`tk-image((?: [a-z][a-z-]*)*)([^|"<>\n` + "`" + `]*)`)
	seen := 0
	for _, page := range slices.Sorted(maps.Keys(all)) {
		for _, m := range cmdRe.FindAllStringSubmatch(all[page], -1) {
			seen += checkCommand(t, page, m, help)
		}
	}
	t.Logf("%d tk-image commands checked", seen)
	// The README and docs show well over a hundred; far fewer means the
	// pattern stopped matching.
	if seen < 100 {
		t.Fatalf("found only %d tk-image commands in the README and docs", seen)
	}
}

// checkCommand checks one `tk-image WORDS FLAGS` a page shows, and says
// whether it was a command (1) or the name in prose (0).
func checkCommand(t *testing.T, page string, m []string, help func([]string) ([]byte, error)) int {
	t.Helper()
	words := strings.Fields(m[1])
	if len(words) == 0 {
		return 0 // the name in prose
	}
	// The command is the longest prefix of the words that names one;
	// the rest are its arguments (a kind, a name).
	var out []byte
	n := len(words)
	for ; n > 0; n-- {
		usage, err := help(words[:n])
		if err != nil {
			t.Errorf("tk-image %s --help: %v\n%s", strings.Join(words[:n], " "), err, usage)
			break
		}
		// Cobra answers an unknown subcommand with its parent's help;
		// a command's own help starts its usage with its path.
		if regexp.MustCompile(`(?m)^  tk-image ` + regexp.QuoteMeta(strings.Join(words[:n], " ")) + `( |$)`).Match(usage) {
			out = usage
			break
		}
	}
	if out == nil {
		t.Errorf("%s shows `tk-image %s`, which is not a command", page, strings.Join(words, " "))
		return 1
	}
	words = words[:n]
	for _, f := range regexp.MustCompile(`(?:^|\s)(--[a-z][a-z-]*)`).FindAllStringSubmatch(m[2], -1) {
		if !strings.Contains(string(out), f[1]+" ") && !strings.Contains(string(out), f[1]+"\n") && !strings.Contains(string(out), f[1]+"=") {
			t.Errorf("%s shows `tk-image %s %s`; its help has no such flag", page, strings.Join(words, " "), f[1])
		}
	}
	return 1
}
