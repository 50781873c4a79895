package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The phase table of docs/architecture.md is the code's: each row's
// phases, in order, are one phase list of a kind (a slice literal of
// reconcile.Phase values, {Name: …, Run: …}), and every phase list of the
// shipped code is a row. The list is read from the source, so a phase
// renamed, added or moved in the code without the table fails here.
func TestArchitecturePhaseTable(t *testing.T) {
	root, arch := read(t, "docs", "architecture.md")
	rows := phaseRows(t, arch)
	if len(rows) < 5 {
		t.Fatalf("docs/architecture.md's phase table has %d rows", len(rows))
	}
	lists := phaseLists(t, root)
	if len(lists) < 5 {
		t.Fatalf("found %d phase lists in the code", len(lists))
	}
	matched := map[string]bool{}
	for kind, phases := range rows {
		at := ""
		for where, names := range lists {
			if slices.Equal(names, phases) {
				at = where
			}
		}
		if at == "" {
			t.Errorf("the phase table's row %s lists %s; no kind runs these phases. The code's phase lists:\n%s",
				kind, strings.Join(phases, " → "), describeLists(lists))
			continue
		}
		matched[at] = true
	}
	for where, names := range lists {
		if !matched[where] {
			t.Errorf("%s runs the phases %s, which the phase table of docs/architecture.md does not list",
				where, strings.Join(names, " → "))
		}
	}
}

// phaseRows reads the table under "| kind | phases |": each row's kind and
// its phases, without the parenthesized remarks.
func phaseRows(t *testing.T, text string) map[string][]string {
	t.Helper()
	i := strings.Index(text, "| kind | phases |")
	if i < 0 {
		t.Fatal("docs/architecture.md has no table headed | kind | phases |")
	}
	rows := map[string][]string{}
	remark := regexp.MustCompile(`\([^)]*\)`)
	for _, line := range strings.Split(text[i:], "\n")[2:] {
		cells := strings.Split(strings.Trim(line, " |"), "|")
		if !strings.HasPrefix(line, "|") || len(cells) != 2 {
			break
		}
		var phases []string
		for _, p := range strings.Split(remark.ReplaceAllString(cells[1], ""), "→") {
			phases = append(phases, strings.TrimSpace(p))
		}
		rows[strings.TrimSpace(cells[0])] = phases
	}
	return rows
}

// phaseLists finds every slice literal of {Name: "…", Run: …} elements in
// the non-test Go files of the controllers and pkg, by file and line.
func phaseLists(t *testing.T, root string) map[string][]string {
	t.Helper()
	lists := map[string][]string{}
	for _, dir := range []string{"image-reflector-controller", "image-automation-controller", "update-job-controller", "pkg"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				if names := phaseNames(lit); names != nil {
					rel, _ := filepath.Rel(root, path)
					lists[filepath.ToSlash(rel)+":"+strconv.Itoa(fset.Position(lit.Pos()).Line)] = names
					return false
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return lists
}

// phaseNames is the names of a slice literal whose every element is a
// phase ({Name: "…", Run: …}); nil for any other literal.
func phaseNames(lit *ast.CompositeLit) []string {
	if len(lit.Elts) == 0 {
		return nil
	}
	var names []string
	for _, e := range lit.Elts {
		el, ok := e.(*ast.CompositeLit)
		if !ok || len(el.Elts) != 2 {
			return nil
		}
		var name string
		run := false
		for _, f := range el.Elts {
			kv, ok := f.(*ast.KeyValueExpr)
			if !ok {
				return nil
			}
			switch key, _ := kv.Key.(*ast.Ident); {
			case key == nil:
				return nil
			case key.Name == "Name":
				s, ok := kv.Value.(*ast.BasicLit)
				if !ok || s.Kind != token.STRING {
					return nil
				}
				name, _ = strconv.Unquote(s.Value)
			case key.Name == "Run":
				run = true
			}
		}
		if name == "" || !run {
			return nil
		}
		names = append(names, name)
	}
	return names
}

func describeLists(lists map[string][]string) string {
	var out []string
	for where, names := range lists {
		out = append(out, "  "+where+": "+strings.Join(names, " → "))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
