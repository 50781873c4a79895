package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	git2go "github.com/libgit2/git2go/v34"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// Cache holds one bare mirror per repository URL, so a job fetches only
// what is new since the last job instead of cloning (libgit2 1.5 has no
// shallow clone).
type Cache struct {
	dir   string
	mu    sync.Mutex
	locks map[string]*sync.Mutex
	kept  keptCache
	// walks is where walks back through history ended, steps the
	// diffs they took (blame.go).
	walks changeCache
	steps stepCache
}

// NewCache opens (creating) a cache directory.
func NewCache(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	configureLibgit2.Do(func() {
		// libgit2 keeps parsed trees in its object cache only up to
		// 4 KiB, about 100 entries: a directory of a thousand files was
		// read and parsed again for every path looked up in it (a job's
		// hold check looks up each file it changes, twice), and one of
		// 100,000 files (a 4 MiB tree) took a first run minutes. Any tree
		// is kept now, and the whole cache, for every mirror, bounded at
		// 32 MiB of objects instead of libgit2's 256: a walk back through
		// history reads each version of a tree once, and needs the last
		// one kept, not all of them. libgit2 evicts at random when the
		// cache is full.
		cacheErr = errors.Join(
			git2go.SetCacheObjectLimit(git2go.ObjectTree, 64<<20),
			git2go.SetCacheMaxSize(32<<20))
	})
	if cacheErr != nil {
		return nil, fmt.Errorf("configuring libgit2's object cache: %w", cacheErr)
	}
	return &Cache{dir: dir, locks: map[string]*sync.Mutex{}}, nil
}

var (
	configureLibgit2 sync.Once
	cacheErr         error
)

// Mirror is a bare repository mirroring one URL, held exclusively.
type Mirror struct {
	URL  string
	Path string
	repo *git2go.Repository
	// mem holds the objects the job's Commit wrote; the pack of those a
	// push sent is kept in the mirror (inMemory).
	mem  *git2go.Mempack
	lock *sync.Mutex
	kept *keptCache
	// walks and steps are the Cache's.
	walks *changeCache
	steps *stepCache
}

// Yield unlocks the mirror while f runs, then locks it again: other jobs
// of the repository fetch and push meanwhile. f must not use the mirror.
// A container-mode job's container may run for minutes and needs only its
// checkout; holding the mirror all that time would stall every other job
// of the repository on this replica. What the job resolved stays valid:
// objects are never removed from a mirror in use, and refs are read from
// disk again.
func (m *Mirror) Yield(f func() error) error {
	m.lock.Unlock()
	defer m.lock.Lock()
	return f()
}

// Open locks and opens the mirror of url, creating it empty on first use.
// The caller must call the returned release when done.
func (c *Cache) Open(url string) (*Mirror, func(), error) {
	sum := sha256.Sum256([]byte(url))
	key := hex.EncodeToString(sum[:12])
	l := c.lock(key)
	l.Lock()

	path := filepath.Join(c.dir, key+".git")
	repo, err := git2go.OpenRepository(path)
	if err != nil {
		// A half-created mirror from a crash is discarded and recreated.
		_ = os.RemoveAll(path)
		if repo, err = git2go.InitRepository(path, true); err != nil {
			l.Unlock()
			return nil, nil, fmt.Errorf("creating the mirror of %s: %w", git.Redact(url), err)
		}
	}
	// Versions that pushed through libgit2 named the commit by a ref
	// under pushRefPrefix for the push; a runner killed meanwhile left it
	// behind, keeping the commit's objects forever. The mirror is ours
	// alone now.
	if it, err := repo.NewReferenceIteratorGlob(pushRefPrefix + "*"); err == nil {
		for ref, err := it.Next(); err == nil; ref, err = it.Next() {
			_ = ref.Delete()
			ref.Free()
		}
		it.Free()
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // last use, for pruning
	m := &Mirror{URL: url, Path: path, repo: repo, lock: l, kept: &c.kept, walks: &c.walks, steps: &c.steps}
	return m, func() { repo.Free(); l.Unlock(); giveBackFreed() }, nil
}

// inMemory makes the objects a job's Commit writes (its blobs, trees and
// commit) go to memory, not to a file each, from its first Commit on: each
// loose object's file and fsync was on the job's way to its push, and a
// batch of hundreds of apps writes a thousand objects. The push reads them from
// memory like any other, and once the server has taken them, the pack it
// sent is written to the mirror (keep); what no push took (a commit
// refused, a job that changed nothing) goes with the repository handle at
// release, where it was garbage on disk before. No ref of the mirror
// points at them (its refs are the server's, written by a fetch), so a
// job killed in between loses only what the next fetch brings back from
// the server it pushed to. Without the memory backend (libgit2 refused
// it), objects are written to files as before. A container's commit
// (CommitDir) may be as large as the tree it wrote, and stays on disk.
func (m *Mirror) inMemory() {
	if m.mem != nil {
		return
	}
	odb, err := m.repo.Odb()
	if err != nil {
		return
	}
	defer odb.Free()
	if mem, err := git2go.NewMempack(odb); err == nil {
		m.mem = mem
	}
}

// keep writes a pack the server took into the mirror. It fails only when
// the mirror cannot store it (a full disk): the push has landed all the
// same, and the next fetch brings the objects back.
func (m *Mirror) keep(pack []byte) error {
	if m.mem == nil || len(pack) <= emptyPack {
		return nil
	}
	odb, err := m.repo.Odb()
	if err != nil {
		return err
	}
	defer odb.Free()
	w, err := odb.NewWritePack(nil)
	if err != nil {
		return m.writeError(err, len(pack))
	}
	defer w.Free()
	if _, err := w.Write(pack); err != nil {
		return m.writeError(err, len(pack))
	}
	if err := w.Commit(); err != nil {
		return m.writeError(err, len(pack))
	}
	return nil
}

// emptyPack is the size of a pack of no objects: its 12-byte header and
// 20-byte checksum.
const emptyPack = 32

// Holds reports whether the local ref (a full name, as last fetched) is
// commit or descends from it, and returns the commit's message.
func (m *Mirror) Holds(ref, commit string) (string, bool) {
	want, err := git2go.NewOid(commit)
	if err != nil {
		return "", false
	}
	r, err := m.repo.References.Lookup(ref)
	if err != nil {
		return "", false
	}
	defer r.Free()
	head := r.Target()
	if head == nil {
		return "", false
	}
	if !head.Equal(want) {
		if ok, err := m.repo.DescendantOf(head, want); err != nil || !ok {
			return "", false
		}
	}
	c, err := m.repo.LookupCommit(want)
	if err != nil {
		return "", false
	}
	defer c.Free()
	return c.Message(), true
}

// Changed reports whether commit changed anything under dir (relative
// to the root, the root when empty) from its first parent: whether it
// carries a change of an update of dir. A commit it cannot read counts as
// changed, as Holds alone said before.
func (m *Mirror) Changed(commit, dir string) bool {
	id, err := git2go.NewOid(commit)
	if err != nil {
		return true
	}
	c, err := m.repo.LookupCommit(id)
	if err != nil {
		return true
	}
	defer c.Free()
	if c.ParentCount() == 0 {
		return true
	}
	p := c.Parent(0)
	if p == nil {
		return true
	}
	defer p.Free()
	now, okNow := subtree(c, dir)
	before, okBefore := subtree(p, dir)
	return okNow != okBefore || now != before
}

// subtree is the id of dir in c's tree, and whether dir is there.
func subtree(c *git2go.Commit, dir string) (git2go.Oid, bool) {
	tree, err := c.Tree()
	if err != nil {
		return git2go.Oid{}, false
	}
	defer tree.Free()
	if dir == "" {
		return *tree.Id(), true
	}
	e, err := tree.EntryByPath(dir)
	if err != nil || e == nil || e.Id == nil {
		return git2go.Oid{}, false
	}
	return *e.Id, true
}

// lock returns the mutex guarding the mirror with the given key.
func (c *Cache) lock(key string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.locks[key]
	if !ok {
		l = &sync.Mutex{}
		c.locks[key] = l
	}
	return l
}

// Prune removes mirrors unused for maxAge and not in use now.
func (c *Cache) Prune(maxAge time.Duration) error {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		key := strings.TrimSuffix(e.Name(), ".git")
		if !e.IsDir() || key == e.Name() {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < maxAge {
			continue
		}
		l := c.lock(key)
		if !l.TryLock() {
			continue // in use
		}
		errs = append(errs, os.RemoveAll(filepath.Join(c.dir, e.Name())))
		l.Unlock()
	}
	return errors.Join(errs...)
}

// anonymousRemote makes the in-memory remote of one operation. libgit2
// 1.5 reads the repository's config for url.*.insteadOf rules when it
// makes a remote, and its PCRE2 regexp code leaks the match data (tens of
// KiB) of every config entry the rule's pattern does not match: two
// remotes per job leaked hundreds of KiB of C memory per job, without end
// (TestSoak's update-job-controller, then TestFetchLeaksNoMemory). The
// rules could only break our URLs (gitops-http://op-N/ names a session,
// not a server), so the remote is made while the repository holds an empty
// in-memory config; the mirror is locked, so nothing else sees the swap.
func anonymousRemote(repo *git2go.Repository, url string) (*git2go.Remote, error) {
	orig, err := repo.Config()
	if err != nil {
		return nil, err
	}
	defer orig.Free()
	empty, err := git2go.NewConfig()
	if err != nil {
		return nil, err
	}
	defer empty.Free()
	if err := repo.SetConfig(empty); err != nil {
		return nil, err
	}
	remote, err := repo.Remotes.CreateAnonymous(url)
	if rerr := repo.SetConfig(orig); rerr != nil && err == nil {
		remote.Free()
		return nil, rerr
	}
	return remote, err
}

// Fetch brings the mirror up to date with every branch and tag of the
// remote, pruning what the remote deleted. It returns when ctx ends, with
// an error wrapping ctx.Err().
func (m *Mirror) Fetch(ctx context.Context, auth *git.Auth) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fetching %s: %w", git.Redact(m.URL), err)
	}
	s, err := newSession(ctx, auth, m.URL)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", git.Redact(m.URL), err)
	}
	defer s.close()
	remote, err := anonymousRemote(m.repo, s.remoteURL)
	if err != nil {
		return err
	}
	defer remote.Free()
	err = remote.Fetch([]string{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}, &git2go.FetchOptions{
		RemoteCallbacks: s.callbacks,
		Prune:           git2go.FetchPruneOn,
		DownloadTags:    git2go.DownloadTagsNone,
	}, "")
	if err != nil && s.ctx.Err() == nil {
		// A full disk is named (StorageFull), not left to libgit2's
		// "Generic": a job's own objects are written in memory
		// (inMemory), so a fetch is where a full mirror shows first.
		if full := m.noSpace(0); full != nil {
			return fmt.Errorf("fetching %s: %s (writing into the mirror: %w)", git.Redact(m.URL), s.scrub(err.Error()), full)
		}
	}
	return s.err("fetching", err)
}

// Resolve finds the commit a ref names in the mirror. It also returns the
// revision string for status, e.g. main@sha1:<hash>.
func (m *Mirror) Resolve(ref writeback.Ref) (Hash, string, error) {
	oid, rev, err := m.resolve(ref)
	return hashOf(oid), rev, err
}

// resolve is Resolve on libgit2's object names.
func (m *Mirror) resolve(ref writeback.Ref) (*git2go.Oid, string, error) {
	var spec, label string
	switch {
	case ref.Commit != "":
		obj, err := m.repo.RevparseSingle(ref.Commit)
		if err != nil {
			return nil, "", fmt.Errorf("commit %s not found: %w", ref.Commit, err)
		}
		defer obj.Free()
		c, err := obj.Peel(git2go.ObjectCommit)
		if err != nil {
			return nil, "", err
		}
		defer c.Free()
		label := ref.Branch
		if label == "" {
			label = "HEAD"
		}
		return c.Id(), git.FormatRevision(label, c.Id().String()), nil
	case ref.Name != "":
		spec, label = ref.Name, ref.Name
	case ref.SemVer != "":
		tag, err := m.semverTag(ref.SemVer)
		if err != nil {
			return nil, "", err
		}
		spec, label = "refs/tags/"+tag, tag
	case ref.Tag != "":
		spec, label = "refs/tags/"+ref.Tag, ref.Tag
	case ref.Branch != "":
		spec, label = "refs/heads/"+ref.Branch, ref.Branch
	default:
		return nil, "", errors.New("the checkout ref is empty")
	}
	r, err := m.repo.References.Lookup(spec)
	if err != nil {
		return nil, "", fmt.Errorf("%s not found in %s: %w", spec, git.Redact(m.URL), err)
	}
	defer r.Free()
	c, err := r.Peel(git2go.ObjectCommit)
	if err != nil {
		return nil, "", err
	}
	defer c.Free()
	return c.Id(), git.FormatRevision(label, c.Id().String()), nil
}

// semverTag returns the highest tag in the range.
func (m *Mirror) semverTag(rng string) (string, error) {
	c, err := semver.NewConstraint(rng)
	if err != nil {
		return "", fmt.Errorf("checkout semver %q: %w", rng, err)
	}
	tags, err := m.repo.Tags.List()
	if err != nil {
		return "", err
	}
	sort.Strings(tags) // ties to the greatest name, independent of order
	var best *semver.Version
	bestTag := ""
	for _, t := range tags {
		v, err := semver.NewVersion(t)
		if err != nil || !c.Check(v) {
			continue
		}
		if best == nil || !v.LessThan(best) {
			best, bestTag = v, t
		}
	}
	if bestTag == "" {
		return "", fmt.Errorf("no tag of %s matches semver %q", git.Redact(m.URL), rng)
	}
	return bestTag, nil
}

// Checkout writes the files of commit into dir (which must be empty or
// missing), without touching the mirror. With paths (repository-relative
// directories or files, e.g. a job's update.path), only the files under
// them are written: on a large repository this is most of a job's time.
func (m *Mirror) Checkout(commit Hash, dir string, paths ...string) error {
	return m.checkoutFiltered(commit.oid(), dir, Filter{}, paths...)
}

// Filter chooses the regular files a filtered checkout writes.
type Filter struct {
	// Name identifies Keep for the cache of what it kept: two filters of
	// one name must keep the same files. Empty: nothing is cached.
	Name string
	// Keep reports whether a file of this content is written.
	Keep func([]byte) bool
}

// CheckoutFiltered is Checkout writing only the regular files whose content
// the filter keeps (all when f.Keep is nil), with the directories that
// hold them, and every symbolic link. Creating files is most of a
// checkout's cost (10,000 take seconds on some file systems), and a job
// needs only those with markers.
//
// Reading every blob to filter it is the rest of the cost: 100,000 files
// took most of a job's second. What a named filter kept under a tree is
// cached by the tree's id (the Cache's, across jobs and mirrors, as ids
// name content): the next commit's checkout reads only the trees and
// blobs that changed, so a job's cost grows with what changed, not with
// the repository.
func (m *Mirror) CheckoutFiltered(commit Hash, dir string, f Filter, paths ...string) error {
	return m.checkoutFiltered(commit.oid(), dir, f, paths...)
}

// checkoutFiltered is CheckoutFiltered on libgit2's object names.
func (m *Mirror) checkoutFiltered(commit *git2go.Oid, dir string, f Filter, paths ...string) error {
	sparse, err := cleanPaths(paths)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	c, err := m.repo.LookupCommit(commit)
	if err != nil {
		return err
	}
	defer c.Free()
	tree, err := c.Tree()
	if err != nil {
		return err
	}
	defer tree.Free()
	if len(sparse) == 0 {
		return m.writeTree(root, "", tree, f)
	}
	for _, p := range sparse {
		// Paths are literal: a directory means what is under it.
		e, err := tree.EntryByPath(p)
		if err != nil {
			continue // not in this revision; the caller reports a missing path
		}
		if e.Type != git2go.ObjectTree {
			if err := root.MkdirAll(path.Dir(p), 0o755); err != nil {
				return err
			}
			if err := m.writeBlob(root, p, e.Id, e.Filemode); err != nil { // named: always written
				return err
			}
			continue
		}
		if err := root.MkdirAll(p, 0o755); err != nil {
			return err
		}
		sub, err := m.repo.LookupTree(e.Id)
		if err != nil {
			return err
		}
		err = m.writeTree(root, p+"/", sub, f)
		sub.Free()
		if err != nil {
			return err
		}
	}
	return nil
}

// kept is a file a filter kept, relative to the tree it was found under.
type kept struct {
	path string
	id   git2go.Oid
	mode git2go.Filemode
}

// writeTree writes the files of tree that f keeps under prefix, with
// their directories. libgit2's checkout writes all files at a fraction of
// the speed (seconds for 10,000, as it compares each path with a baseline
// and the work tree); a fresh work tree needs neither. Writing through
// root keeps every file inside it.
func (m *Mirror) writeTree(root *os.Root, prefix string, tree *git2go.Tree, f Filter) error {
	files, err := m.keptUnder(tree, f)
	if err != nil {
		return err
	}
	made := map[string]bool{}
	for _, k := range files {
		name := prefix + k.path
		if d := path.Dir(name); d != "." && !made[d] {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
			made[d] = true
		}
		if err := m.writeBlob(root, name, &k.id, k.mode); err != nil {
			return err
		}
	}
	return nil
}

// keptUnder lists the files under tree that f keeps, from the cache when
// a named filter has seen this tree before. Submodules (commit entries)
// have no content here and are skipped, as git does without
// --recurse-submodules.
func (m *Mirror) keptUnder(tree *git2go.Tree, f Filter) ([]kept, error) {
	key := f.Name + "\x00" + tree.Id().String()
	if f.Name != "" && f.Keep != nil {
		if files, ok := m.kept.get(key); ok {
			return files, nil
		}
	}
	var files []kept
	for i := range tree.EntryCount() {
		e := tree.EntryByIndex(i)
		switch {
		case e.Type == git2go.ObjectTree:
			sub, err := m.repo.LookupTree(e.Id)
			if err != nil {
				return nil, err
			}
			under, err := m.keptUnder(sub, f)
			sub.Free()
			if err != nil {
				return nil, err
			}
			for _, k := range under {
				files = append(files, kept{path: e.Name + "/" + k.path, id: k.id, mode: k.mode})
			}
		case e.Type != git2go.ObjectBlob:
		case e.Filemode == git2go.FilemodeLink || f.Keep == nil:
			files = append(files, kept{path: e.Name, id: *e.Id, mode: e.Filemode})
		default:
			keep, err := m.keeps(e.Id, f)
			if err != nil {
				return nil, err
			}
			if keep {
				files = append(files, kept{path: e.Name, id: *e.Id, mode: e.Filemode})
			}
		}
	}
	if f.Name != "" && f.Keep != nil {
		m.kept.put(key, files)
	}
	return files, nil
}

// keeps reports whether f keeps the blob id, from the cache when a named
// filter has read it before: a changed tree is mostly blobs that did not
// change, and reading them again would make a job's cost that of the
// directories it touches, not of the files.
func (m *Mirror) keeps(id *git2go.Oid, f Filter) (bool, error) {
	if f.Name != "" {
		if keep, ok := m.kept.verdict(f.Name, *id); ok {
			return keep, nil
		}
	}
	blob, err := m.repo.LookupBlob(id)
	if err != nil {
		return false, err
	}
	keep := f.Keep(blob.Contents())
	blob.Free()
	if f.Name != "" {
		m.kept.remember(f.Name, *id, keep)
	}
	return keep, nil
}

// writeBlob writes one blob as a file, executable or symbolic link.
func (m *Mirror) writeBlob(root *os.Root, name string, id *git2go.Oid, mode git2go.Filemode) error {
	if mode == git2go.FilemodeCommit {
		return nil
	}
	blob, err := m.repo.LookupBlob(id)
	if err != nil {
		return err
	}
	data := blob.Contents()
	blob.Free()
	switch mode {
	case git2go.FilemodeLink:
		return root.Symlink(string(data), name)
	case git2go.FilemodeBlobExecutable:
		return root.WriteFile(name, data, 0o755)
	default:
		return root.WriteFile(name, data, 0o644)
	}
}

// keptCache remembers what filters kept under trees, by tree id, and
// which blobs they keep, by blob id, for every mirror of a Cache. Ids
// name content, so an entry is never stale. Each map is emptied when it
// reaches its bound, a bound on memory: a tree's entry holds only the
// files kept under it, a blob's about 50 bytes (25 MiB at the bound).
type keptCache struct {
	mu    sync.Mutex
	m     map[string][]kept
	blobs map[string]map[git2go.Oid]bool
	nblob int
}

const (
	maxKeptTrees = 200000
	maxKeptBlobs = 500000
)

func (c *keptCache) verdict(filter string, id git2go.Oid) (keep, ok bool) {
	if c == nil {
		return false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	keep, ok = c.blobs[filter][id]
	return keep, ok
}

func (c *keptCache) remember(filter string, id git2go.Oid, keep bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blobs == nil || c.nblob >= maxKeptBlobs {
		c.blobs, c.nblob = map[string]map[git2go.Oid]bool{}, 0
	}
	if c.blobs[filter] == nil {
		c.blobs[filter] = map[git2go.Oid]bool{}
	}
	c.blobs[filter][id] = keep
	c.nblob++
}

func (c *keptCache) get(key string) ([]kept, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	files, ok := c.m[key]
	return files, ok
}

func (c *keptCache) put(key string, files []kept) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxKeptTrees {
		c.m = map[string][]kept{}
	}
	c.m[key] = files
}

// cleanPaths turns paths like "./clusters/prod/" or "/clusters/prod" into
// "clusters/prod". A path naming the root ("", ".", "/") means the whole
// tree: nil.
func cleanPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		c := path.Clean(p)
		if c == ".." || strings.HasPrefix(c, "../") {
			return nil, fmt.Errorf("checkout path %q is outside the repository", p)
		}
		if c = strings.TrimLeft(c, "/"); c == "" || c == "." {
			return nil, nil
		}
		out = append(out, c)
	}
	return out, nil
}
