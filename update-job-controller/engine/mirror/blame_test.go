package mirror

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// LastChange answers as libgit2's blame does, for every line, at every
// commit of a history with changes of other lines, of other files, lines
// inserted and deleted above others, a long run of commits that leave the
// file alone, and merges; follow answers all but the merge whose file
// differs from both parents'.
func TestLastChangeAgreesWithBlame(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	file := func(lines ...string) map[string]string {
		return map[string]string{"apps/app.yaml": strings.Join(lines, "\n") + "\n"}
	}
	c := srv.CreateRepo(t, "fleet", file("l1: 1", "l2: 1", "l3: 1", "l4: 1", "l5: 1"))
	commits := []string{strings.TrimSpace(testgit.Git(t, c.Dir, "rev-parse", "HEAD"))}
	commits = append(commits, c.Commit("line 2", file("l1: 1", "l2: 2", "l3: 1", "l4: 1", "l5: 1")))
	commits = append(commits, c.Commit("line 4", file("l1: 1", "l2: 2", "l3: 1", "l4: 4", "l5: 1")))
	commits = append(commits, c.Commit("another file", map[string]string{"README.md": "x\n"}))
	testgit.Git(t, c.Dir, "checkout", "-q", "-b", "side", commits[1])
	commits = append(commits, c.Commit("line 1 on a branch", file("l1: 7", "l2: 2", "l3: 1", "l4: 1", "l5: 1")))
	testgit.Git(t, c.Dir, "checkout", "-q", "main")
	testgit.Git(t, c.Dir, "merge", "-q", "--no-ff", "-m", "merge", "side")
	commits = append(commits, strings.TrimSpace(testgit.Git(t, c.Dir, "rev-parse", "HEAD")))
	commits = append(commits, c.Commit("line 5 and 3", file("l1: 7", "l2: 2", "l3: 3", "l4: 4", "l5: 5")))
	commits = append(commits, c.Commit("another file again", map[string]string{"README.md": "y\n"}))
	commits = append(commits, c.Commit("two lines on top", file("top: 1", "top: 2", "l1: 7", "l2: 2", "l3: 3", "l4: 4", "l5: 5")))
	commits = append(commits, c.Commit("line l2 gone", file("top: 1", "top: 2", "l1: 7", "l3: 3", "l4: 4", "l5: 5")))
	// A change of mode alone: the same blob, passed on.
	if err := os.Chmod(filepath.Join(c.Dir, "apps/app.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	commits = append(commits, c.Commit("executable", nil))
	for i := range 40 {
		commits = append(commits, c.Commit(fmt.Sprintf("elsewhere %d", i), map[string]string{"other/f.yaml": fmt.Sprintf("n: %d\n", i)}))
	}
	commits = append(commits, c.Commit("one line replaced by two", file("top: 1", "top: 2", "l1: 7", "l3: 3", "l4: 8", "l4b: 8", "l5: 5")))
	// A merge whose file is the side branch's: blame passes it there.
	testgit.Git(t, c.Dir, "checkout", "-q", "-b", "side2")
	commits = append(commits, c.Commit("line l5 on a branch", file("top: 1", "top: 2", "l1: 7", "l3: 3", "l4: 8", "l4b: 8", "l5: 9")))
	testgit.Git(t, c.Dir, "checkout", "-q", "main")
	commits = append(commits, c.Commit("elsewhere on main", map[string]string{"other/f.yaml": "n: main\n"}))
	testgit.Git(t, c.Dir, "merge", "-q", "--no-ff", "-m", "merge side2", "side2")
	commits = append(commits, strings.TrimSpace(testgit.Git(t, c.Dir, "rev-parse", "HEAD")))
	commits = append(commits, c.Commit("after the merges", map[string]string{"README.md": "z\n"}))
	c.Push()
	m, _ := fetchedFresh(t, srv)

	lines, fast := 0, 0
	// Newest first, as jobs come, and oldest first: the walks the Cache
	// remembers must not change an answer.
	for _, order := range []string{"newest first", "oldest first"} {
		for k := range commits {
			commit := commits[len(commits)-1-k]
			if order == "oldest first" {
				commit = commits[k]
			}
			id := mustOid(t, commit)
			data, err := m.File(id, "apps/app.yaml")
			if err != nil {
				t.Fatal(err)
			}
			for line := 1; line <= strings.Count(string(data), "\n"); line++ {
				got, err := m.LastChange(id, "apps/app.yaml", line)
				if err != nil {
					t.Fatal(err)
				}
				want, err := m.blame(id.oid(), "apps/app.yaml", line)
				if err != nil {
					t.Fatal(err)
				}
				if got.Commit != want.String() {
					t.Errorf("%s, at %s line %d: %s, blame says %s", order, commit[:7], line, got.Commit[:7], want.String()[:7])
				}
				near, err := m.follow(id.oid(), "apps/app.yaml", line)
				if err != nil {
					t.Fatal(err)
				}
				if near != nil {
					fast++
				}
				lines++
			}
		}
	}
	// The first merge's file differs from both parents' (line 1 from one,
	// line 4 from the other): its lines, and those of later commits that
	// blame passes to it, are libgit2's.
	if slow := lines - fast; slow == 0 || slow > lines/3 {
		t.Errorf("answered %d of %d lines without libgit2's blame", fast, lines)
	}
	t.Logf("%d of %d lines answered without libgit2's blame", fast, lines)
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
	m, _ := fetchedFresh(t, srv)

	for _, tc := range []struct {
		at, path string
		line     int
		want     string
		fast     bool
	}{
		{root, "apps/a.yaml", 1, root, true},
		{added, "apps/b.yaml", 1, added, true},
		{added, "apps/a.yaml", 1, root, true}, // kept by the change: followed to the parent
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
		blamed, err := m.blame(id.oid(), tc.path, tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if got.Commit != tc.want || blamed.String() != tc.want {
			t.Errorf("%s line %d at %s: %s, blame says %s, want %s", tc.path, tc.line, tc.at[:7], got.Commit[:7], blamed.String()[:7], tc.want[:7])
		}
		near, err := m.follow(id.oid(), tc.path, tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if (near != nil) != tc.fast {
			t.Errorf("%s line %d at %s: answered without libgit2's blame: %t, want %t", tc.path, tc.line, tc.at[:7], near != nil, tc.fast)
		}
	}
}

// The files of a job walk a long history once between them: each step's
// diff is kept, so a second file of the same commit diffs nothing again,
// and where a walk ended is kept, so the next job, one commit later, walks
// one step.
func TestWalksShareTheirSteps(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	files := map[string]string{}
	for i := range 3 {
		files[fmt.Sprintf("apps/app-%d.yaml", i)] = fmt.Sprintf("image: app:%d.0.0\n", i)
	}
	c := srv.CreateRepo(t, "fleet", files)
	var head string
	for i := range 60 {
		head = c.Commit(fmt.Sprintf("elsewhere %d", i), map[string]string{fmt.Sprintf("other/f-%d.yaml", i%7): fmt.Sprintf("n: %d\n", i)})
	}
	c.Push()
	m, cache := fetchedFresh(t, srv)
	steps := func() int { return len(cache.steps.m) }

	id := mustOid(t, head)
	for i := range 3 {
		got, err := m.LastChange(id, fmt.Sprintf("apps/app-%d.yaml", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := m.blame(id.oid(), fmt.Sprintf("apps/app-%d.yaml", i), 1); got.Commit != want.String() {
			t.Errorf("app-%d: %s, blame says %s", i, got.Commit, want)
		}
		if steps() != 60 {
			t.Errorf("after file %d: %d steps diffed, want the history's 60", i, steps())
		}
	}
	next := mustOid(t, c.Commit("one more", map[string]string{"other/g.yaml": "n: 1\n"}))
	c.Push()
	if err := m.Fetch(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.LastChange(next, "apps/app-0.yaml", 1); err != nil {
		t.Fatal(err)
	}
	if steps() != 61 {
		t.Errorf("one commit later: %d steps diffed, want 61", steps())
	}
}

// fetchedFresh is the fleet repository of srv fetched into a mirror of a
// new Cache, released when the test ends.
func fetchedFresh(t *testing.T, srv *testgit.Server) (*Mirror, *Cache) {
	t.Helper()
	cache, err := NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, release, _ := fetched(t, cache, srv)
	t.Cleanup(release)
	return m, cache
}

// A raw tree that does not parse is an error that names the tree, never a
// panic or a wrong answer.
func TestTreeThatDoesNotParse(t *testing.T) {
	for _, data := range []string{"100644 name-without-nul", "100644 short\x00abc", "nospace\x00" + strings.Repeat("x", 20)} {
		r := treeReader{data: []byte(data)}
		if _, _, err := r.next(); err == nil || !strings.Contains(err.Error(), "does not parse") || !strings.Contains(err.Error(), r.id.String()) {
			t.Errorf("%q: %v", data, err)
		}
	}
}
