package mirror

import (
	"fmt"
	"io/fs"
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
func (m *Mirror) LastChange(commit *git2go.Oid, path string, line int) (LineChange, error) {
	if line < 1 || line > 1<<16-1 {
		// libgit2 1.5's hunks number lines in 16 bits.
		return LineChange{}, fmt.Errorf("blaming %s: line %d out of range", path, line)
	}
	opts, err := git2go.DefaultBlameOptions()
	if err != nil {
		return LineChange{}, err
	}
	opts.NewestCommit = commit
	opts.MinLine, opts.MaxLine = uint32(line), uint32(line)
	b, err := m.repo.BlameFile(path, &opts)
	if err != nil {
		return LineChange{}, fmt.Errorf("blaming %s: %w", path, err)
	}
	defer b.Free()
	h, err := b.HunkByLine(line)
	if err != nil {
		return LineChange{}, fmt.Errorf("blaming %s line %d: %w", path, line, err)
	}
	c, err := m.repo.LookupCommit(h.FinalCommitId)
	if err != nil {
		return LineChange{}, fmt.Errorf("blaming %s: %w", path, err)
	}
	defer c.Free()
	out := LineChange{Commit: h.FinalCommitId.String()}
	if a := c.Author(); a != nil {
		out.Name, out.Email, out.When = a.Name, a.Email, a.When
	}
	if c.ParentCount() > 0 {
		out.Parent = c.ParentId(0)
	}
	return out, nil
}

// File returns the file at path in commit; an error wrapping
// fs.ErrNotExist when the commit has none.
func (m *Mirror) File(commit *git2go.Oid, path string) ([]byte, error) {
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
	if err != nil {
		if git2go.IsErrorCode(err, git2go.ErrorCodeNotFound) {
			return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
		}
		return nil, err
	}
	if e.Type != git2go.ObjectBlob {
		return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	blob, err := m.repo.LookupBlob(e.Id)
	if err != nil {
		return nil, err
	}
	defer blob.Free()
	return append([]byte(nil), blob.Contents()...), nil
}
