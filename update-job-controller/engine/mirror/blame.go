package mirror

import (
	"bytes"
	"cmp"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	git2go "github.com/libgit2/git2go/v34"
)

// LineChange is the commit that last changed a line, as git blame says.
type LineChange struct {
	Commit string
	// Parent is the commit's first parent; zero for a root commit.
	Parent      Hash
	Name, Email string
	When        time.Time
}

// LastChange blames one line (from 1) of the file at path in commit:
// only that line is tracked, so the walk stops at the commit that last
// changed it rather than following the whole file back.
//
// follow answers nearly every line; libgit2's blame only what follow
// cannot tell (a merge that changed the file against all its parents, a
// file new in a commit that deleted one, which may be a rename). libgit2's
// blame diffs the whole trees of each commit and its parent to look for
// renames (blame_git.c, find_origin): every entry of both trees at each
// step, so on a large repository a first run's values took minutes, and
// every tree it read filled libgit2's object cache.
func (m *Mirror) LastChange(commit Hash, path string, line int) (LineChange, error) {
	return m.lastChange(commit.oid(), path, line)
}

// lastChange is LastChange on libgit2's object names.
func (m *Mirror) lastChange(commit *git2go.Oid, path string, line int) (LineChange, error) {
	if line < 1 || line > 1<<16-1 {
		// libgit2 1.5's hunks number lines in 16 bits.
		return LineChange{}, fmt.Errorf("blaming %s: line %d out of range", path, line)
	}
	last, err := m.follow(commit, path, line)
	if err != nil {
		return LineChange{}, fmt.Errorf("blaming %s: %w", path, err)
	}
	if last == nil {
		if last, err = m.blame(commit, path, line); err != nil {
			return LineChange{}, err
		}
	}
	c, err := m.repo.LookupCommit(last)
	if err != nil {
		return LineChange{}, fmt.Errorf("blaming %s: %w", path, err)
	}
	defer c.Free()
	out := LineChange{Commit: last.String()}
	if a := c.Author(); a != nil {
		out.Name, out.Email, out.When = a.Name, a.Email, a.When
	}
	if c.ParentCount() > 0 {
		out.Parent = hashOf(c.ParentId(0))
	}
	return out, nil
}

// blame asks libgit2 which commit last changed line.
func (m *Mirror) blame(commit *git2go.Oid, path string, line int) (*git2go.Oid, error) {
	opts, err := git2go.DefaultBlameOptions()
	if err != nil {
		return nil, err
	}
	opts.NewestCommit = commit
	opts.MinLine, opts.MaxLine = uint32(line), uint32(line)
	b, err := m.repo.BlameFile(path, &opts)
	if err != nil {
		return nil, fmt.Errorf("blaming %s: %w", path, err)
	}
	defer b.Free()
	h, err := b.HunkByLine(line)
	if err != nil {
		return nil, fmt.Errorf("blaming %s line %d: %w", path, line, err)
	}
	return h.FinalCommitId, nil
}

// follow tracks one line back as libgit2's blame does, without its
// search for renames. Blame passes a file unchanged from a parent to that
// parent whole (the first such parent, a merge's too), and the lines a
// commit's diff from its only parent leaves alone to the parent at their
// line there; a commit owns the lines of its diff's hunks (the same
// xdiff, no context). A file new in a commit is that commit's, every
// line, when the commit deleted no file: libgit2's blame looks for the
// file's origin among renames, and a rename needs a file deleted
// (find_origin asks the diff for GIT_DIFF_FIND_RENAMES alone, whose
// sources are deleted files). A file in a root commit is the root
// commit's. nil, nil when it cannot tell: a merge whose file differs from
// every parent's, or a file new in a commit that deleted one.
//
// The walk back to the commit that changed the file is what costs on a
// long history. Each step is a diff of two trees that the Cache keeps
// (stepCache), so the hundred files of a job walk the history once
// between them, and each walk's end is kept (changeCache): the next job,
// from a later commit, stops where this one started.
func (m *Mirror) follow(commit *git2go.Oid, path string, line int) (*git2go.Oid, error) {
	id := *commit
	blob, err := m.blobAt(&id, path)
	if err != nil || blob == nil {
		return nil, err
	}
	for {
		change, err := m.fileChange(id, path, *blob)
		if err != nil {
			return nil, err
		}
		parents, err := m.parents(change)
		if err != nil {
			return nil, err
		}
		switch len(parents) {
		case 0:
			return &change, nil
		case 1:
		default:
			return nil, nil
		}
		parent := parents[0]
		before, err := m.parentBlob(parent, change, path, *blob)
		if err != nil {
			return nil, err
		}
		if before == nil {
			st, err := m.step(parent, change)
			if err != nil || st.deletes {
				return nil, err
			}
			return &change, nil
		}
		moved, changed, err := m.lineBefore(before, blob, line)
		if err != nil {
			return nil, err
		}
		if changed {
			return &change, nil
		}
		id, blob, line = parent, before, moved
	}
}

// fileChange walks back from id, where the file at path is blob, to the
// commit that changed it: the first whose parents all have another file
// there, or none. It follows the first parent with the same file, as
// blame passes such a file on.
func (m *Mirror) fileChange(id git2go.Oid, path string, blob git2go.Oid) (git2go.Oid, error) {
	start := id
walk:
	for {
		if to, ok := m.walks.get(id, path); ok {
			id = to
		}
		parents, err := m.parents(id)
		if err != nil {
			return git2go.Oid{}, err
		}
		for _, p := range parents {
			b, err := m.parentBlob(p, id, path, blob)
			if err != nil {
				return git2go.Oid{}, err
			}
			if b != nil && *b == blob {
				id = p
				continue walk
			}
		}
		m.walks.put(start, path, id)
		return id, nil
	}
}

func (m *Mirror) parents(id git2go.Oid) ([]git2go.Oid, error) {
	c, err := m.repo.LookupCommit(&id)
	if err != nil {
		return nil, err
	}
	defer c.Free()
	out := make([]git2go.Oid, c.ParentCount())
	for i := range out {
		out[i] = *c.ParentId(uint(i))
	}
	return out, nil
}

// parentBlob is the file at path in parent, a parent of commit, whose file
// there is blob: nil when parent has none. The step's diff answers it.
func (m *Mirror) parentBlob(parent, commit git2go.Oid, path string, blob git2go.Oid) (*git2go.Oid, error) {
	st, err := m.step(parent, commit)
	if err != nil {
		return nil, err
	}
	if st.before == nil {
		// Too large a change to keep: look the path up.
		return m.blobAt(&parent, path)
	}
	if before, changed := st.before[path]; changed {
		if before.IsZero() {
			return nil, nil
		}
		return &before, nil
	}
	for _, dir := range st.added {
		if strings.HasPrefix(path, dir) {
			return nil, nil
		}
	}
	return &blob, nil
}

// step is what a commit changed from one of its parents: the files that
// differ, with the parent's blob at each (zero: none there), the
// directories new in the commit (with a trailing slash: everything under
// them is new), and whether it deleted a file of the parent (a path gone,
// or no longer of the same kind: a tree become a file, a file a link).
// Blame's question at each step of a walk is the file's blob in the
// parent; looking it up parses the directories along its path, and the
// hundred files of a job would each parse them again at every step (a
// directory of 100,000 files is a 4 MiB tree).
type step struct {
	// before is nil when the change is too large to keep (a first import
	// of a repository): paths are then looked up.
	before  map[string]git2go.Oid
	added   []string
	deletes bool
}

// maxStepPaths bounds the files one step keeps.
const maxStepPaths = 4096

// step diffs commit's tree against parent's, reading the raw trees
// (libgit2's diff allocated for every entry of both, so a step cost in
// proportion to the directory's size, not to what changed) and descending
// only into the trees that differ.
func (m *Mirror) step(parent, commit git2go.Oid) (*step, error) {
	if st, ok := m.steps.get(parent, commit); ok {
		return st, nil
	}
	var trees [2]git2go.Oid
	for i, id := range []git2go.Oid{parent, commit} {
		c, err := m.repo.LookupCommit(&id)
		if err != nil {
			return nil, err
		}
		trees[i] = *c.TreeId()
		c.Free()
	}
	odb, err := m.repo.Odb()
	if err != nil {
		return nil, err
	}
	defer odb.Free()
	st := &step{before: map[string]git2go.Oid{}}
	if err := st.diff(odb, trees[0], trees[1], ""); err != nil {
		return nil, err
	}
	if len(st.before) > maxStepPaths {
		st.before = nil
	}
	m.steps.put(parent, commit, st)
	return st, nil
}

// diff records what differs between trees a (the parent's) and b under
// dir.
func (st *step) diff(odb *git2go.Odb, a, b git2go.Oid, dir string) error {
	if a == b {
		return nil
	}
	oa, err := odb.Read(&a)
	if err != nil {
		return err
	}
	defer oa.Free()
	ob, err := odb.Read(&b)
	if err != nil {
		return err
	}
	defer ob.Free()
	ra, rb := treeReader{id: a, data: oa.Data()}, treeReader{id: b, data: ob.Data()}
	ea, okA, err := ra.next()
	if err != nil {
		return err
	}
	eb, okB, err := rb.next()
	if err != nil {
		return err
	}
	for okA || okB {
		order := 0
		switch {
		case !okA:
			order = 1
		case !okB:
			order = -1
		default:
			order = compareEntries(ea, eb)
		}
		switch {
		case order < 0: // gone from the commit
			st.deletes = true
		case order > 0: // new in the commit
			st.add(dir, eb)
		default:
			if err := st.change(odb, dir, ea, eb); err != nil {
				return err
			}
		}
		if order <= 0 {
			if ea, okA, err = ra.next(); err != nil {
				return err
			}
		}
		if order >= 0 {
			if eb, okB, err = rb.next(); err != nil {
				return err
			}
		}
	}
	return nil
}

// add records entry e of the commit, new under dir.
func (st *step) add(dir string, e rawEntry) {
	switch {
	case e.tree():
		st.added = append(st.added, dir+string(e.name)+"/")
	case st.before != nil && len(st.before) <= maxStepPaths:
		st.before[dir+string(e.name)] = git2go.Oid{}
	}
}

// change records the entry of one name in the parent (a) and the commit
// (b).
func (st *step) change(odb *git2go.Odb, dir string, a, b rawEntry) error {
	switch {
	case a.tree() && b.tree():
		return st.diff(odb, a.id, b.id, dir+string(a.name)+"/")
	case a.tree() != b.tree(), a.gitlink() != b.gitlink(), a.link() != b.link():
		// A change of kind deletes the parent's.
		st.deletes = true
		if b.tree() {
			st.added = append(st.added, dir+string(b.name)+"/")
		} else if st.before != nil && len(st.before) <= maxStepPaths {
			var before git2go.Oid
			if !a.tree() && !a.gitlink() {
				before = a.id
			}
			st.before[dir+string(b.name)] = before
		}
	case a.id != b.id && !b.gitlink() && st.before != nil && len(st.before) <= maxStepPaths:
		// The same content under another mode is the same file to blame.
		st.before[dir+string(b.name)] = a.id
	}
	return nil
}

// rawEntry is one entry of a raw tree object: "MODE NAME\0" and 20 bytes
// of id.
type rawEntry struct {
	mode []byte
	name []byte
	id   git2go.Oid
}

func (e rawEntry) tree() bool    { return string(e.mode) == "40000" }
func (e rawEntry) gitlink() bool { return string(e.mode) == "160000" }
func (e rawEntry) link() bool    { return string(e.mode) == "120000" }

// compareEntries orders entries as git sorts a tree: by name, a tree's
// as if it ended in a slash.
func compareEntries(a, b rawEntry) int {
	n := min(len(a.name), len(b.name))
	if c := bytes.Compare(a.name[:n], b.name[:n]); c != 0 {
		return c
	}
	end := func(e rawEntry, n int) byte {
		switch {
		case n < len(e.name):
			return e.name[n]
		case e.tree():
			return '/'
		}
		return 0
	}
	return cmp.Compare(end(a, n), end(b, n))
}

// treeReader reads the entries of tree id, whose raw object is data.
type treeReader struct {
	id   git2go.Oid
	data []byte
}

func (r *treeReader) next() (rawEntry, bool, error) {
	if len(r.data) == 0 {
		return rawEntry{}, false, nil
	}
	sp := bytes.IndexByte(r.data, ' ')
	nul := bytes.IndexByte(r.data, 0)
	if sp < 0 || nul < sp || len(r.data) < nul+1+20 {
		return rawEntry{}, false, fmt.Errorf("tree %s in the mirror does not parse at entry %q", r.id.String(), r.data[:min(len(r.data), 40)])
	}
	e := rawEntry{mode: r.data[:sp], name: r.data[sp+1 : nul]}
	copy(e.id[:], r.data[nul+1:nul+21])
	r.data = r.data[nul+21:]
	return e, true, nil
}

// blobAt is the id of the file at path in commit; nil when there is none.
func (m *Mirror) blobAt(commit *git2go.Oid, path string) (*git2go.Oid, error) {
	c, err := m.repo.LookupCommit(commit)
	if err != nil {
		return nil, err
	}
	defer c.Free()
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	defer tree.Free()
	e, err := tree.EntryByPath(path)
	if git2go.IsErrorCode(err, git2go.ErrorCodeNotFound) || (err == nil && e.Type != git2go.ObjectBlob) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return e.Id, nil
}

// lineBefore diffs the file's blob before a commit with its blob after
// and says whether line (of after) lies in a hunk; when not, moved is its
// line in before.
func (m *Mirror) lineBefore(before, after *git2go.Oid, line int) (moved int, changed bool, err error) {
	old, err := m.repo.LookupBlob(before)
	if err != nil {
		return 0, false, err
	}
	defer old.Free()
	cur, err := m.repo.LookupBlob(after)
	if err != nil {
		return 0, false, err
	}
	defer cur.Free()
	opts, err := git2go.DefaultDiffOptions()
	if err != nil {
		return 0, false, err
	}
	opts.ContextLines = 0
	shift := 0
	err = git2go.DiffBlobs(old, "", cur, "", &opts, func(git2go.DiffDelta, float64) (git2go.DiffForEachHunkCallback, error) {
		return func(h git2go.DiffHunk) (git2go.DiffForEachLineCallback, error) {
			switch {
			case h.NewLines > 0 && h.NewStart <= line && line < h.NewStart+h.NewLines:
				changed = true
			// A hunk that only deletes starts after the line before
			// the deletion (git's numbering of an empty range).
			case h.NewLines > 0 && h.NewStart+h.NewLines <= line, h.NewLines == 0 && h.NewStart < line:
				shift += h.NewLines - h.OldLines
			}
			return nil, nil
		}, nil
	}, git2go.DiffDetailHunks)
	return line - shift, changed, err
}

// File returns the file at path in commit; an error wrapping
// fs.ErrNotExist when the commit has none.
func (m *Mirror) File(commit Hash, path string) ([]byte, error) {
	return m.file(commit.oid(), path)
}

// file is File on libgit2's object names.
func (m *Mirror) file(commit *git2go.Oid, path string) ([]byte, error) {
	id, err := m.blobAt(commit, path)
	if err != nil {
		return nil, err
	}
	if id == nil {
		return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	blob, err := m.repo.LookupBlob(id)
	if err != nil {
		return nil, err
	}
	defer blob.Free()
	return append([]byte(nil), blob.Contents()...), nil
}

// changeCache remembers, for a Cache's mirrors, where fileChange's walks
// ended: from a commit, the commit that last changed a file. Commits are
// content, so an entry is never stale; a first run over a long history
// walks it once, and later jobs, from later commits, stop where it began.
// The map is emptied at its bound, about 100 bytes an entry.
type changeCache struct {
	mu sync.Mutex
	m  map[changeKey]git2go.Oid
}

type changeKey struct {
	commit git2go.Oid
	path   string
}

const maxChanges = 100000

func (c *changeCache) get(commit git2go.Oid, path string) (git2go.Oid, bool) {
	if c == nil {
		return git2go.Oid{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	to, ok := c.m[changeKey{commit, path}]
	return to, ok
}

func (c *changeCache) put(commit git2go.Oid, path string, to git2go.Oid) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxChanges {
		c.m = map[changeKey]git2go.Oid{}
	}
	c.m[changeKey{commit, path}] = to
}

// stepCache keeps, for a Cache's mirrors, the steps follow diffed, by
// parent and commit (content: never stale). It is emptied when it holds
// maxStepCachePaths paths, about 100 bytes each.
type stepCache struct {
	mu    sync.Mutex
	m     map[[2]git2go.Oid]*step
	paths int
}

const maxStepCachePaths = 200000

func (c *stepCache) get(parent, commit git2go.Oid) (*step, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.m[[2]git2go.Oid{parent, commit}]
	return st, ok
}

func (c *stepCache) put(parent, commit git2go.Oid, st *step) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(st.before) + len(st.added) + 1
	if c.m == nil || c.paths+n > maxStepCachePaths {
		c.m, c.paths = map[[2]git2go.Oid]*step{}, 0
	}
	c.m[[2]git2go.Oid{parent, commit}] = st
	c.paths += n
}
