package mirror

import (
	"fmt"
	"io/fs"
	"sync"
	"time"

	git2go "github.com/libgit2/git2go/v34"
)

// LineChange is the commit that last changed a line, as git blame says.
type LineChange struct {
	Commit string
	// Parent is the commit's first parent; nil for a root commit.
	Parent      *git2go.Oid
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
// renames (blame_git.c, find_origin): 100,000 entries a step on a large
// repository, 75 ms a line, minutes for a first run's 100 values over 200
// commits, and every tree it read filled libgit2's object cache.
func (m *Mirror) LastChange(commit *git2go.Oid, path string, line int) (LineChange, error) {
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
		out.Parent = c.ParentId(0)
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
			deletes, err := m.deletesFile(&parent, &change)
			if err != nil || deletes {
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
	if st == nil {
		// Too large a change to keep: look the path up.
		return m.blobAt(&parent, path)
	}
	before, changed := st[path]
	if !changed {
		return &blob, nil
	}
	if before.IsZero() {
		return nil, nil
	}
	return &before, nil
}

// step is the paths whose files differ between a commit and one of its
// parents, with the parent's blob at each (zero: no file there). A
// commit's diff from its parent reads only the trees that differ, and
// each version of a tree once, where looking each path up would parse,
// at every step of every file's walk, the directories along it: a
// directory of 100,000 files is a 4 MiB tree.
type step map[string]git2go.Oid

// maxStepPaths bounds the paths one step keeps; a larger change (a
// repository's first import) is looked up path by path.
const maxStepPaths = 4096

func (m *Mirror) step(parent, commit git2go.Oid) (step, error) {
	if st, ok := m.steps.get(parent, commit); ok {
		return st, nil
	}
	trees := [2]*git2go.Tree{}
	for i, id := range []git2go.Oid{parent, commit} {
		c, err := m.repo.LookupCommit(&id)
		if err != nil {
			return nil, err
		}
		t, err := c.Tree()
		c.Free()
		if err != nil {
			return nil, err
		}
		defer t.Free()
		trees[i] = t
	}
	diff, err := m.repo.DiffTreeToTree(trees[0], trees[1], nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = diff.Free() }()
	n, err := diff.NumDeltas()
	if err != nil {
		return nil, err
	}
	var st step
	if n <= maxStepPaths {
		st = make(step, n)
		for i := range n {
			d, err := diff.Delta(i)
			if err != nil {
				return nil, err
			}
			// A file turned link or gitlink is a deletion and an
			// addition of one path: keep what the parent had.
			if _, seen := st[d.NewFile.Path]; seen && d.Status != git2go.DeltaDeleted {
				continue
			}
			var before git2go.Oid
			if d.Status != git2go.DeltaAdded && (d.OldFile.Mode == uint16(git2go.FilemodeBlob) ||
				d.OldFile.Mode == uint16(git2go.FilemodeBlobExecutable) || d.OldFile.Mode == uint16(git2go.FilemodeLink)) {
				before = *d.OldFile.Oid
			}
			st[d.OldFile.Path] = before
		}
	}
	m.steps.put(parent, commit, st)
	return st, nil
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

// deletesFile reports whether commit deleted a file of parent, its only
// parent: whether any path of parent's tree is gone from commit's, or is
// no longer a file of the same kind (a regular file become a symbolic
// link is, to a diff without type changes, a deletion and an addition).
// Subtrees with the same id are equal and skipped, so the walk reads only
// the trees along the paths the commit changed.
func (m *Mirror) deletesFile(parent, commit *git2go.Oid) (bool, error) {
	if d, ok := m.deletes[*commit]; ok {
		return d, nil
	}
	trees := [2]*git2go.Oid{}
	for i, id := range []*git2go.Oid{parent, commit} {
		c, err := m.repo.LookupCommit(id)
		if err != nil {
			return false, err
		}
		trees[i] = c.TreeId()
		c.Free()
	}
	d, err := m.treeDeletes(trees[0], trees[1])
	if err != nil {
		return false, err
	}
	if m.deletes == nil || len(m.deletes) >= 1024 {
		m.deletes = map[git2go.Oid]bool{}
	}
	m.deletes[*commit] = d
	return d, nil
}

func (m *Mirror) treeDeletes(before, after *git2go.Oid) (bool, error) {
	if before.Equal(after) {
		return false, nil
	}
	old, err := m.repo.LookupTree(before)
	if err != nil {
		return false, err
	}
	defer old.Free()
	cur, err := m.repo.LookupTree(after)
	if err != nil {
		return false, err
	}
	defer cur.Free()
	for i := range old.EntryCount() {
		e := old.EntryByIndex(i)
		now := cur.EntryByName(e.Name)
		switch {
		case now == nil || now.Type != e.Type:
			return true, nil
		case e.Type == git2go.ObjectTree:
			if d, err := m.treeDeletes(e.Id, now.Id); err != nil || d {
				return d, err
			}
		case e.Type == git2go.ObjectBlob && (e.Filemode == git2go.FilemodeLink) != (now.Filemode == git2go.FilemodeLink):
			return true, nil
		}
	}
	return false, nil
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
func (m *Mirror) File(commit *git2go.Oid, path string) ([]byte, error) {
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
// parent and commit (content: never stale). nil is kept too: a change too
// large to keep. It is emptied when it holds maxStepCachePaths paths,
// about 100 bytes each.
type stepCache struct {
	mu    sync.Mutex
	m     map[[2]git2go.Oid]step
	paths int
}

const maxStepCachePaths = 200000

func (c *stepCache) get(parent, commit git2go.Oid) (step, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.m[[2]git2go.Oid{parent, commit}]
	return st, ok
}

func (c *stepCache) put(parent, commit git2go.Oid, st step) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.paths+len(st) > maxStepCachePaths {
		c.m, c.paths = map[[2]git2go.Oid]step{}, 0
	}
	c.m[[2]git2go.Oid{parent, commit}] = st
	c.paths += len(st) + 1
}
