package mirror

import (
	"fmt"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/tests/testkit/testgit"
)

// LastChange answers as libgit2's blame does, for every line, at every
// commit of a history with changes of other lines, of other files and a
// merge; the line changed by the file's last change is answered without
// libgit2's blame (nearby), and the others by it.
func TestLastChangeAgreesWithBlame(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	file := func(v ...int) map[string]string {
		var b strings.Builder
		for i, n := range v {
			fmt.Fprintf(&b, "l%d: %d\n", i+1, n)
		}
		return map[string]string{"apps/app.yaml": b.String()}
	}
	c := srv.CreateRepo(t, "fleet", file(1, 1, 1, 1, 1))
	commits := []string{strings.TrimSpace(testgit.Git(t, c.Dir, "rev-parse", "HEAD"))}
	commits = append(commits, c.Commit("line 2", file(1, 2, 1, 1, 1)))
	commits = append(commits, c.Commit("line 4", file(1, 2, 1, 4, 1)))
	commits = append(commits, c.Commit("another file", map[string]string{"README.md": "x\n"}))
	testgit.Git(t, c.Dir, "checkout", "-q", "-b", "side", commits[1])
	commits = append(commits, c.Commit("line 1 on a branch", file(7, 2, 1, 1, 1)))
	testgit.Git(t, c.Dir, "checkout", "-q", "main")
	testgit.Git(t, c.Dir, "merge", "-q", "--no-ff", "-m", "merge", "side")
	commits = append(commits, strings.TrimSpace(testgit.Git(t, c.Dir, "rev-parse", "HEAD")))
	commits = append(commits, c.Commit("line 5 and 3", file(7, 2, 3, 4, 5)))
	commits = append(commits, c.Commit("another file again", map[string]string{"README.md": "y\n"}))
	c.Push()
	cache, err := NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, release, _ := fetched(t, cache, srv)
	defer release()

	fast := 0
	for _, commit := range commits {
		id := mustOid(t, commit)
		for line := 1; line <= 5; line++ {
			got, err := m.LastChange(id, "apps/app.yaml", line)
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.blame(id, "apps/app.yaml", line)
			if err != nil {
				t.Fatal(err)
			}
			if got.Commit != want.String() {
				t.Errorf("at %s line %d: %s, blame says %s", commit[:7], line, got.Commit[:7], want.String()[:7])
			}
			if near, _ := m.nearby(id, "apps/app.yaml", line); near != nil {
				fast++
			}
		}
	}
	// Every line at the root commit; line 2 at "line 2"; 4 at "line 4"
	// and "another file"; 1 on the branch; 3 and 5 at the last two. None
	// at the merge.
	if fast != 13 {
		t.Errorf("answered %d lines without libgit2's blame, want 13", fast)
	}
}

// A file new in a commit is that commit's when the commit deleted no file,
// answered without libgit2's blame; when it deleted one, libgit2's blame
// answers, since it may find the file renamed (and then names the commit
// that made the line before the rename).
func TestLastChangeOfNewFiles(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	body := "a: 1\nb: 2\nc: 3\n"
	c := srv.CreateRepo(t, "fleet", map[string]string{"apps/a.yaml": body, "README.md": "x\n"})
	root := strings.TrimSpace(testgit.Git(t, c.Dir, "rev-parse", "HEAD"))
	added := c.Commit("add b", map[string]string{"apps/b.yaml": "b: 1\n", "apps/a.yaml": "a: 1\nb: 2\nc: 4\n"})
	testgit.Git(t, c.Dir, "mv", "apps/a.yaml", "apps/renamed.yaml")
	renamed := c.Commit("rename a", nil)
	testgit.Git(t, c.Dir, "rm", "-q", "README.md")
	dropped := c.Commit("add d, drop the README", map[string]string{"apps/d.yaml": "d: 1\n"})
	testgit.Git(t, c.Dir, "rm", "-q", "apps/b.yaml")
	deep := c.Commit("add e elsewhere, drop b", map[string]string{"other/e.yaml": "e: 1\n"})
	c.Push()
	cache, err := NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, release, _ := fetched(t, cache, srv)
	defer release()

	for _, tc := range []struct {
		at, path string
		line     int
		want     string
		fast     bool
	}{
		{root, "apps/a.yaml", 1, root, true},
		{added, "apps/b.yaml", 1, added, true},
		{added, "apps/a.yaml", 1, root, false}, // kept by the change
		{renamed, "apps/renamed.yaml", 1, root, false},
		{renamed, "apps/renamed.yaml", 3, added, false},
		{dropped, "apps/d.yaml", 1, dropped, false},
		{deep, "other/e.yaml", 1, deep, false},
		{deep, "apps/d.yaml", 1, dropped, false},
	} {
		id := mustOid(t, tc.at)
		got, err := m.LastChange(id, tc.path, tc.line)
		if err != nil {
			t.Fatal(err)
		}
		blamed, err := m.blame(id, tc.path, tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if got.Commit != tc.want || blamed.String() != tc.want {
			t.Errorf("%s line %d at %s: %s, blame says %s, want %s", tc.path, tc.line, tc.at[:7], got.Commit[:7], blamed.String()[:7], tc.want[:7])
		}
		near, err := m.nearby(id, tc.path, tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if (near != nil) != tc.fast {
			t.Errorf("%s line %d at %s: answered without libgit2's blame: %t, want %t", tc.path, tc.line, tc.at[:7], near != nil, tc.fast)
		}
	}
}
