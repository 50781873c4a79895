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
	// Line 2 at "line 2"; 4 at "line 4" and "another file"; 1 on the
	// branch; 3 and 5 at the last two. None at the merge.
	if fast != 8 {
		t.Errorf("answered %d lines without libgit2's blame, want 8", fast)
	}
}
