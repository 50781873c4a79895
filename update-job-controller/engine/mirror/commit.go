package mirror

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	git2go "github.com/libgit2/git2go/v34"

	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// ErrNoChange: the files changed in the work tree equal the parent's.
var ErrNoChange = errors.New("no change to commit")

// ErrNonFastForward: the remote branch moved since the fetch; fetch, apply
// the update again and retry.
var ErrNonFastForward = errors.New("the remote branch has commits the push does not contain")

// Author is a commit's author and committer.
type Author struct {
	Name, Email string
}

// CommitInfo is what a commit says besides its files.
type CommitInfo struct {
	Author  Author
	Message string
	// Signer signs the commit; nil: unsigned.
	Signer Signer
}

// Commit records changed files of the work tree dir (paths relative to it,
// with forward slashes) on top of parent, in the mirror's object database:
// no index or work tree of the mirror is involved. Files are read through
// os.Root, so a path cannot leave dir. Only the trees on the changed
// paths are written (replaceInTree), so a commit costs what it changes,
// not what the repository holds: an index of the whole tree, as git
// builds, read 100,000 entries for a change of a hundred.
func (m *Mirror) Commit(parent Hash, dir string, changed []string, info CommitInfo) (Hash, error) {
	oid, err := m.commit(parent.oid(), dir, changed, info)
	return hashOf(oid), err
}

// commit is Commit on libgit2's object names.
func (m *Mirror) commit(parent *git2go.Oid, dir string, changed []string, info CommitInfo) (*git2go.Oid, error) {
	m.inMemory()
	pc, err := m.repo.LookupCommit(parent)
	if err != nil {
		return nil, err
	}
	defer pc.Free()
	ptree, err := pc.Tree()
	if err != nil {
		return nil, err
	}
	defer ptree.Free()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	blobs := map[string]treeFile{}
	for _, p := range changed {
		mode := git2go.FilemodeBlob
		if e, err := ptree.EntryByPath(p); err == nil {
			mode = e.Filemode
		}
		if mode == git2go.FilemodeLink {
			return nil, fmt.Errorf("%s is a symbolic link in the repository; update the file it points to", p)
		}
		data, err := root.ReadFile(p)
		if err != nil {
			return nil, err
		}
		blob, err := m.repo.CreateBlobFromBuffer(data)
		if err != nil {
			return nil, m.writeError(err, len(data))
		}
		blobs[p] = treeFile{id: blob, mode: mode}
	}
	treeID, err := m.replaceInTree(ptree, "", blobs)
	if err != nil {
		return nil, m.writeError(err, 0)
	}
	if treeID.Equal(ptree.Id()) {
		return nil, ErrNoChange
	}
	tree, err := m.repo.LookupTree(treeID)
	if err != nil {
		return nil, err
	}
	defer tree.Free()
	return m.writeCommit(pc, tree, info)
}

// treeFile is a blob to put at a path of a tree.
type treeFile struct {
	id   *git2go.Oid
	mode git2go.Filemode
}

// replaceInTree writes base (nil: an empty tree) with files put at their
// paths (relative to base, which is at prefix), and returns the new
// tree's id; subtrees no path enters are kept as they are. libgit2's tree
// builder refuses the names git refuses ("", ".", "..", ".git").
func (m *Mirror) replaceInTree(base *git2go.Tree, prefix string, files map[string]treeFile) (*git2go.Oid, error) {
	here := map[string]treeFile{}
	below := map[string]map[string]treeFile{}
	for p, f := range files {
		first, rest, nested := strings.Cut(p, "/")
		if !nested {
			here[first] = f
			continue
		}
		if below[first] == nil {
			below[first] = map[string]treeFile{}
		}
		below[first][rest] = f
	}
	var tb *git2go.TreeBuilder
	var err error
	if base != nil {
		tb, err = m.repo.TreeBuilderFromTree(base)
	} else {
		tb, err = m.repo.TreeBuilder()
	}
	if err != nil {
		return nil, err
	}
	defer tb.Free()
	entry := func(name string) *git2go.TreeEntry {
		if base == nil {
			return nil
		}
		return base.EntryByName(name)
	}
	for name, f := range here {
		if e := entry(name); e != nil && e.Type == git2go.ObjectTree {
			return nil, fmt.Errorf("%s%s is a directory in the repository", prefix, name)
		}
		if err := tb.Insert(name, f.id, f.mode); err != nil {
			return nil, fmt.Errorf("%s%s: %w", prefix, name, err)
		}
	}
	for name, sub := range below {
		var subtree *git2go.Tree
		if e := entry(name); e != nil {
			if e.Type != git2go.ObjectTree {
				return nil, fmt.Errorf("%s%s is a file in the repository", prefix, name)
			}
			if subtree, err = m.repo.LookupTree(e.Id); err != nil {
				return nil, err
			}
		}
		id, err := m.replaceInTree(subtree, prefix+name+"/", sub)
		if subtree != nil {
			subtree.Free()
		}
		if err != nil {
			return nil, err
		}
		if err := tb.Insert(name, id, git2go.FilemodeTree); err != nil {
			return nil, fmt.Errorf("%s%s: %w", prefix, name, err)
		}
	}
	return tb.Write()
}

// writeCommit creates the commit of tree on top of pc, signed when info
// has a Signer.
func (m *Mirror) writeCommit(pc *git2go.Commit, tree *git2go.Tree, info CommitInfo) (*git2go.Oid, error) {
	// The API leaves the author's name optional, as Flux's does, but git
	// (and libgit2) refuse a signature without one: the email stands in.
	name := info.Author.Name
	if strings.TrimSpace(name) == "" {
		name = info.Author.Email
	}
	sig := &git2go.Signature{Name: name, Email: info.Author.Email, When: time.Now()}
	if info.Signer == nil {
		id, err := m.repo.CreateCommit("", sig, sig, info.Message, tree, pc)
		return id, m.writeError(err, 0)
	}
	// A signed commit is its content with the signature of that content
	// in a gpgsig header, which verifiers strip before checking.
	content, err := m.repo.CreateCommitBuffer(sig, sig, git2go.MessageEncodingUTF8, info.Message, tree, pc)
	if err != nil {
		return nil, err
	}
	signature, err := info.Signer.Sign(content)
	if err != nil {
		return nil, err
	}
	// libgit2 indents every line after a newline, so a trailing one would
	// leave a stray " " line in the header, unlike git.
	id, err := m.repo.CreateCommitWithSignature(string(content), strings.TrimRight(string(signature), "\n"), "gpgsig")
	return id, m.writeError(err, len(content)+len(signature))
}

// writeError adds the cause to a failed write of an object of about size
// bytes into the mirror when its file system is full: libgit2 reports a
// loose object it could not write as a bare "Generic" error, without
// errno, which would read as a git failure (GitOperationFailed) where the
// remedy is space. Reserving the object's size (at least a page) beside
// the objects tells, without writing it.
func (m *Mirror) writeError(err error, size int) error {
	if err == nil {
		return nil
	}
	if full := m.noSpace(size); full != nil {
		return fmt.Errorf("%w (writing into the mirror: %w)", err, full)
	}
	return err
}

// noSpace is ENOSPC or EDQUOT when the mirror's file system cannot take
// about size bytes more, else nil.
func (m *Mirror) noSpace(size int) error {
	f, perr := os.CreateTemp(filepath.Join(m.repo.Path(), "objects"), "space-probe-")
	if perr != nil {
		if errors.Is(perr, syscall.ENOSPC) || errors.Is(perr, syscall.EDQUOT) {
			return perr
		}
		return nil
	}
	defer os.Remove(f.Name())
	defer f.Close()
	perr = syscall.Fallocate(int(f.Fd()), 0, 0, int64(max(size, os.Getpagesize())))
	if errors.Is(perr, syscall.ENOSPC) || errors.Is(perr, syscall.EDQUOT) {
		return perr
	}
	return nil
}

// Proposes reports whether branch (as last fetched) already holds what
// commit would make of base: a single commit on top of base with commit's
// tree, which it returns. A pull request's head branch that does is up to
// date, and pushing it again would only churn the request.
func (m *Mirror) Proposes(branch string, base, commit Hash) (string, bool) {
	return m.proposes(branch, base.oid(), commit.oid())
}

// proposes is Proposes on libgit2's object names.
func (m *Mirror) proposes(branch string, base, commit *git2go.Oid) (string, bool) {
	head, _, err := m.resolve(writeback.Ref{Branch: branch})
	if err != nil {
		return "", false
	}
	h, err := m.repo.LookupCommit(head)
	if err != nil {
		return "", false
	}
	defer h.Free()
	c, err := m.repo.LookupCommit(commit)
	if err != nil {
		return "", false
	}
	defer c.Free()
	if h.ParentCount() != 1 || !h.ParentId(0).Equal(base) || !h.TreeId().Equal(c.TreeId()) {
		return "", false
	}
	return head.String(), true
}

// Remade is the name commit would have made by author and committer at
// their times, unsigned: the same tree, parents and message. A forge that
// knows a commit by its metadata alone (a Gerrit patch set: its parent,
// people, times and message, not its tree) holds commit's change exactly
// when its commit's name is Remade's, so pushing commit again would only
// add an empty patch set. Nothing is written.
func (m *Mirror) Remade(commit Hash, author, committer forge.Signature) (Hash, error) {
	c, err := m.repo.LookupCommit(commit.oid())
	if err != nil {
		return Hash{}, err
	}
	defer c.Free()
	tree, err := c.Tree()
	if err != nil {
		return Hash{}, err
	}
	defer tree.Free()
	parents := make([]*git2go.Commit, 0, c.ParentCount())
	for i := range c.ParentCount() {
		p := c.Parent(i)
		if p == nil {
			return Hash{}, fmt.Errorf("reading the parents of %s", commit)
		}
		defer p.Free()
		parents = append(parents, p)
	}
	sig := func(s forge.Signature) *git2go.Signature {
		return &git2go.Signature{Name: s.Name, Email: s.Email, When: s.When}
	}
	content, err := m.repo.CreateCommitBuffer(sig(author), sig(committer), git2go.MessageEncodingUTF8, c.Message(), tree, parents...)
	if err != nil {
		return Hash{}, err
	}
	odb, err := m.repo.Odb()
	if err != nil {
		return Hash{}, err
	}
	defer odb.Free()
	id, err := odb.Hash(content, git2go.ObjectCommit)
	if err != nil {
		return Hash{}, err
	}
	return hashOf(id), nil
}
