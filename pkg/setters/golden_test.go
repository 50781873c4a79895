package setters

import (
	"bytes"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite the expected files of the golden tests")

// testPolicies are the policy values every golden test applies.
var testPolicies = Policies{
	"apps:podinfo": {Name: "ghcr.io/stefanprodan/podinfo", Tag: "5.0.3"},
	"apps:redis": {Name: "localhost:5000/library/redis", Tag: "7.2.4",
		Digest: "sha256:2d9a00b3981628a533ff43352193b1838b0a4bf6b0033444286f563205e51a2c"},
	"apps:numbers": {Name: "example.com/app", Tag: "1.10"},
}

// copyTree copies a directory, keeping modes.
func copyTree(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readTree(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// The golden trees: testdata/golden (Kubernetes YAML) and testdata/formats
// (the other Formats), whose in/ is updated with testPolicies and must
// equal out/ byte for byte; result.json and problems.txt hold the expected
// result. Run `go test -run TestGolden -update` to rewrite the
// expectations, then review the diff between in/ and out/.
func TestGolden(t *testing.T) {
	for _, tree := range []string{"testdata/golden", "testdata/formats"} {
		t.Run(filepath.Base(tree), func(t *testing.T) { goldenTree(t, tree) })
	}
}

func goldenTree(t *testing.T, dir string) {
	work := t.TempDir()
	copyTree(t, dir+"/in", work)
	// git cannot track a .git directory; make one that must be skipped.
	if err := os.MkdirAll(filepath.Join(work, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitFile := []byte("image: redis:6 # {\"$imagepolicy\": \"apps:redis\"}\n")
	if err := os.WriteFile(filepath.Join(work, ".git", "config.yaml"), gitFile, 0o644); err != nil {
		t.Fatal(err)
	}
	// Files without a change must not be written: give them an old mtime.
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	before := readTree(t, work)
	for p := range before {
		if err := os.Chtimes(filepath.Join(work, p), old, old); err != nil {
			t.Fatal(err)
		}
	}

	res, err := UpdateDir(work, testPolicies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := readTree(t, work)
	if !bytes.Equal(got[".git/config.yaml"], gitFile) {
		t.Error(".git was not skipped")
	}
	delete(got, ".git/config.yaml")

	resultJSON, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var problems strings.Builder
	for _, p := range res.Problems {
		problems.WriteString(p.Error() + "\n")
	}

	if *updateGolden {
		if err := os.RemoveAll(dir + "/out"); err != nil {
			t.Fatal(err)
		}
		for p, b := range got {
			dst := filepath.Join(dir+"/out", p)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_ = os.WriteFile(dir+"/result.json", append(resultJSON, '\n'), 0o644)
		_ = os.WriteFile(dir+"/problems.txt", []byte(problems.String()), 0o644)
		return
	}

	want := readTree(t, dir+"/out")
	for p, w := range want {
		if !bytes.Equal(got[p], w) {
			t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", p, got[p], w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected file %s", p)
		}
	}
	wantJSON, _ := os.ReadFile(dir + "/result.json")
	if string(resultJSON)+"\n" != string(wantJSON) {
		t.Errorf("result:\n%s\nwant:\n%s", resultJSON, wantJSON)
	}
	wantProblems, _ := os.ReadFile(dir + "/problems.txt")
	if problems.String() != string(wantProblems) {
		t.Errorf("problems:\n%s\nwant:\n%s", problems.String(), wantProblems)
	}

	// Unchanged files keep their old mtime; changed ones were rewritten.
	changed := map[string]bool{}
	for _, f := range res.Files {
		changed[f.Path] = true
	}
	for p := range before {
		info, err := os.Stat(filepath.Join(work, p))
		if err != nil {
			t.Fatal(err)
		}
		if written := !info.ModTime().Equal(old); written != changed[p] {
			t.Errorf("%s: written %v, changed %v", p, written, changed[p])
		}
	}

	// Idempotence: a second run changes nothing and writes nothing.
	again, err := UpdateDir(work, testPolicies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Files) != 0 {
		t.Errorf("second run changed %+v", again.Files)
	}
}
