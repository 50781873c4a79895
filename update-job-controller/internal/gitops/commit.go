package gitops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	git2go "github.com/libgit2/git2go/v34"
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

// Commit records changed files of the work tree dir (paths relative to it,
// with forward slashes) on top of parent, in the mirror's object database:
// no index or work tree of the mirror is involved. Files are read through
// os.Root, so a path cannot leave dir.
func (m *Mirror) Commit(parent *git2go.Oid, dir string, changed []string, author Author, message string) (*git2go.Oid, error) {
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
	idx, err := git2go.NewIndex()
	if err != nil {
		return nil, err
	}
	defer idx.Free()
	if err := idx.ReadTree(ptree); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for _, p := range changed {
		mode := git2go.FilemodeBlob
		if e, err := idx.EntryByPath(p, 0); err == nil {
			mode = e.Mode
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
			return nil, err
		}
		if err := idx.Add(&git2go.IndexEntry{Path: p, Id: blob, Mode: mode}); err != nil {
			return nil, err
		}
	}
	treeID, err := idx.WriteTreeTo(m.repo)
	if err != nil {
		return nil, err
	}
	if treeID.Equal(ptree.Id()) {
		return nil, ErrNoChange
	}
	tree, err := m.repo.LookupTree(treeID)
	if err != nil {
		return nil, err
	}
	defer tree.Free()
	sig := &git2go.Signature{Name: author.Name, Email: author.Email, When: time.Now()}
	return m.repo.CreateCommit("", sig, sig, message, tree, pc)
}

// Push updates the remote branch to commit. Without force, a branch that
// moved since the fetch is left alone and ErrNonFastForward returned; force
// is for branches we own (a push branch other than the checkout branch).
func (m *Mirror) Push(ctx context.Context, auth *Auth, commit *git2go.Oid, branch string, force bool) error {
	// libgit2 pushes refs, not object ids: name the commit for the push.
	tmp := "refs/image-toolkit/push/" + commit.String()
	ref, err := m.repo.References.Create(tmp, commit, true, "push")
	if err != nil {
		return err
	}
	defer func() { _ = ref.Delete(); ref.Free() }()

	spec := tmp + ":refs/heads/" + branch
	if force {
		spec = "+" + spec
	}
	remote, err := m.repo.Remotes.CreateAnonymous(m.URL)
	if err != nil {
		return err
	}
	defer remote.Free()
	cb, failure := auth.callbacks(ctx)
	var rejected string
	cb.PushUpdateReferenceCallback = func(refname, status string) error {
		if status != "" {
			rejected = refname + ": " + status
		}
		return nil
	}
	err = remote.Push([]string{spec}, &git2go.PushOptions{RemoteCallbacks: cb, Headers: auth.headers()})
	if err == nil && rejected != "" {
		err = errors.New(rejected)
	}
	if err != nil && nonFastForward(err.Error()) {
		return fmt.Errorf("pushing to %s of %s: %w (%v)", branch, m.URL, ErrNonFastForward, err)
	}
	return m.wrap("pushing to "+branch+" of", err, *failure, ctx)
}

func nonFastForward(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range []string{"non-fast-forward", "non-fastforward", "fetch first", "not present locally"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
