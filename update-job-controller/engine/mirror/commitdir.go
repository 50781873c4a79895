package mirror

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	git2go "github.com/libgit2/git2go/v34"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// CommitDir records dir as the whole new content of the repository
// directory prefix ("" for the root) on top of parent, and returns the
// changes against parent. Unlike Commit, which takes the files a setter
// says it changed, it takes what an arbitrary program left (a container
// mode job): files it added are added, files missing from dir are
// deleted, and the executable bit and symbolic links are kept as dir has
// them. Submodules (gitlinks) under prefix are kept, since a checkout has
// nothing for them. dir must hold only regular files, directories and
// symbolic links (the transfer's extraction makes sure of it).
func (m *Mirror) CommitDir(parent Hash, prefix, dir string, info CommitInfo) (Hash, []meta.FileResult, error) {
	oid, files, err := m.commitDir(parent.oid(), prefix, dir, info)
	return hashOf(oid), files, err
}

// commitDir is CommitDir on libgit2's object names.
func (m *Mirror) commitDir(parent *git2go.Oid, prefix, dir string, info CommitInfo) (*git2go.Oid, []meta.FileResult, error) {
	prefix = strings.Trim(path.Clean("/"+prefix), "/")
	pc, err := m.repo.LookupCommit(parent)
	if err != nil {
		return nil, nil, err
	}
	defer pc.Free()
	ptree, err := pc.Tree()
	if err != nil {
		return nil, nil, err
	}
	defer ptree.Free()
	idx, err := git2go.NewIndex()
	if err != nil {
		return nil, nil, err
	}
	defer idx.Free()
	if err := idx.ReadTree(ptree); err != nil {
		return nil, nil, err
	}
	if err := removeUnder(idx, prefix); err != nil {
		return nil, nil, err
	}
	if err := m.addDir(idx, prefix, dir); err != nil {
		return nil, nil, err
	}
	treeID, err := idx.WriteTreeTo(m.repo)
	if err != nil {
		return nil, nil, m.writeError(err, 0)
	}
	if treeID.Equal(ptree.Id()) {
		return nil, nil, ErrNoChange
	}
	tree, err := m.repo.LookupTree(treeID)
	if err != nil {
		return nil, nil, err
	}
	defer tree.Free()
	changes, err := m.changes(ptree, tree)
	if err != nil {
		return nil, nil, err
	}
	commit, err := m.writeCommit(pc, tree, info)
	if err != nil {
		return nil, nil, err
	}
	return commit, changes, nil
}

// removeUnder drops from idx every entry under prefix ("" for all) but
// gitlinks: the directory written after it is the whole content there,
// while a submodule the checkout could not fill stays as it was.
func removeUnder(idx *git2go.Index, prefix string) error {
	under := func(p string) bool { return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/") }
	// Removing while counting down keeps the indexes of the rest valid.
	for i := int(idx.EntryCount()) - 1; i >= 0; i-- {
		e, err := idx.EntryByIndex(uint(i))
		if err != nil {
			return err
		}
		if under(e.Path) && e.Mode != git2go.FilemodeCommit {
			if err := idx.RemoveByPath(e.Path); err != nil {
				return err
			}
		}
	}
	return nil
}

// addDir writes dir's files into the mirror as blobs and adds them to idx
// under prefix, keeping modes and symbolic links; anything else (a
// device, a socket) is refused.
func (m *Mirror) addDir(idx *git2go.Index, prefix, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		name := path.Join(prefix, filepath.ToSlash(rel))
		var data []byte
		mode := git2go.FilemodeBlob
		switch t := d.Type(); {
		case t.IsDir():
			return nil
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			data, mode = []byte(filepath.ToSlash(target)), git2go.FilemodeLink
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.Mode().Perm()&0o100 != 0 {
				mode = git2go.FilemodeBlobExecutable
			}
			if data, err = os.ReadFile(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: not a regular file, directory or symbolic link", name)
		}
		if _, err := idx.EntryByPath(name, 0); err == nil {
			// A gitlink kept above: the checkout had nothing there.
			return nil
		}
		blob, err := m.repo.CreateBlobFromBuffer(data)
		if err != nil {
			return m.writeError(err, len(data))
		}
		return idx.Add(&git2go.IndexEntry{Path: name, Id: blob, Mode: mode})
	})
}

// changes lists the files that differ between two trees, by path.
func (m *Mirror) changes(from, to *git2go.Tree) ([]meta.FileResult, error) {
	diff, err := m.repo.DiffTreeToTree(from, to, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = diff.Free() }()
	n, err := diff.NumDeltas()
	if err != nil {
		return nil, err
	}
	out := make([]meta.FileResult, 0, n)
	for i := range n {
		d, err := diff.Delta(i)
		if err != nil {
			return nil, err
		}
		c := meta.FileResult{Path: d.NewFile.Path}
		switch d.Status {
		case git2go.DeltaAdded:
			c.Operation = meta.FileAdded
		case git2go.DeltaDeleted:
			c.Path, c.Operation = d.OldFile.Path, meta.FileDeleted
		case git2go.DeltaTypeChange:
			c.Operation = meta.FileMode
		default:
			c.Operation = meta.FileModified
			if d.OldFile.Oid.Equal(d.NewFile.Oid) {
				c.Operation = meta.FileMode
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b meta.FileResult) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}
