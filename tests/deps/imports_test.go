package deps

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// importClass orders a file's import groups: the standard library, other
// modules, then this repository's packages.
func importClass(path string) int {
	switch first, _, _ := strings.Cut(path, "/"); {
	case strings.HasPrefix(path, "toolkit.dev/"):
		return 2
	case strings.Contains(first, "."):
		return 1
	}
	return 0
}

// importGroupProblem says what is wrong with a file's import groups (one
// class per group, each class in one group, in importClass's order), or "".
func importGroupProblem(src []byte) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return "", err
	}
	last, lastLine, seen := -1, 0, map[int]bool{}
	for _, spec := range f.Imports {
		path, _ := strconv.Unquote(spec.Path.Value)
		if path == "C" {
			continue // cgo's, a declaration of its own
		}
		start := spec.Pos()
		if spec.Doc != nil {
			start = spec.Doc.Pos() // a comment above an import is part of its group
		}
		class, line := importClass(path), fset.Position(start).Line
		newGroup := last < 0 || line > lastLine+1
		switch {
		case !newGroup && class != last:
			return path + " shares a group with imports of another kind", nil
		case newGroup && seen[class]:
			return path + " is in a second group of its kind", nil
		case newGroup && class < last:
			return path + " comes after a later group's kind", nil
		}
		seen[class], last, lastLine = true, class, fset.Position(spec.End()).Line
	}
	return "", nil
}

// Every hand-written Go file groups its imports as gofmt leaves them and
// goimports writes them: the standard library, other modules, then this
// repository's packages, each group once.
func TestImportGroups(t *testing.T) {
	dir := root(t)
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "node_modules"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasPrefix(d.Name(), "zz_generated"):
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		problem, err := importGroupProblem(src)
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if problem != "" {
			rel, _ := filepath.Rel(dir, path)
			t.Errorf("%s: %s", rel, problem)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("read only %d Go files under %s", n, dir)
	}
}

func TestImportGroupProblem(t *testing.T) {
	for _, tt := range []struct{ name, imports, want string }{
		{"one group of each kind in order", "import (\n\t\"fmt\"\n\n\t\"github.com/x/y\"\n\n\t\"toolkit.dev/image-toolkit/pkg/git\"\n)\n", ""},
		{"a single import", "import \"fmt\"\n", ""},
		{"a comment above an import stays in its group", "import (\n\t\"fmt\"\n\t// why\n\t_ \"time/tzdata\"\n\n\t\"github.com/x/y\"\n)\n", ""},
		{"cgo's import is its own", "import \"C\"\n\nimport (\n\t\"fmt\"\n)\n", ""},
		{"a leftover group first", "import (\n\t\"toolkit.dev/image-toolkit/pkg/apis/meta\"\n\n\t\"fmt\"\n)\n", "fmt comes after a later group's kind"},
		{"ours among other modules", "import (\n\t\"fmt\"\n\n\t\"github.com/x/y\"\n\t\"toolkit.dev/image-toolkit/pkg/git\"\n)\n", "toolkit.dev/image-toolkit/pkg/git shares a group with imports of another kind"},
		{"a kind in two groups", "import (\n\t\"fmt\"\n\n\t\"github.com/x/y\"\n\n\t\"github.com/x/z\"\n)\n", "github.com/x/z is in a second group of its kind"},
	} {
		got, err := importGroupProblem([]byte("package p\n\n" + tt.imports))
		if err != nil || got != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}
