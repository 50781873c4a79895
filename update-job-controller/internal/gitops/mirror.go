package gitops

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	git2go "github.com/libgit2/git2go/v34"
)

// Cache holds one bare mirror per repository URL, so a job fetches only
// what is new since the last job instead of cloning (libgit2 1.5 has no
// shallow clone).
type Cache struct {
	dir   string
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// NewCache opens (creating) a cache directory.
func NewCache(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Cache{dir: dir, locks: map[string]*sync.Mutex{}}, nil
}

// Mirror is a bare repository mirroring one URL, held exclusively.
type Mirror struct {
	URL  string
	Path string
	repo *git2go.Repository
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
			return nil, nil, fmt.Errorf("creating the mirror of %s: %w", url, err)
		}
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // last use, for pruning
	m := &Mirror{URL: url, Path: path, repo: repo}
	return m, func() { repo.Free(); l.Unlock() }, nil
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

// Auth holds credentials and TLS trust for a remote.
type Auth struct {
	Username, Password string
	// BearerToken is sent as an Authorization header.
	BearerToken string
	// CAPEM adds trusted certificate authorities for HTTPS.
	CAPEM []byte
}

// ErrAuthentication: the server refused the credentials.
var ErrAuthentication = errors.New("authentication failed")

// callbacks builds remote callbacks that stop libgit2 from retrying refused
// credentials forever, verify TLS certificates (against CAPEM when given),
// and abort when ctx ends.
func (a *Auth) callbacks(ctx context.Context) (git2go.RemoteCallbacks, *error) {
	var failure error
	attempts := 0
	cb := git2go.RemoteCallbacks{
		CredentialsCallback: func(url, user string, allowed git2go.CredentialType) (*git2go.Credential, error) {
			attempts++
			if attempts > 2 || a == nil || a.Username == "" {
				failure = ErrAuthentication
				return nil, ErrAuthentication
			}
			if allowed&git2go.CredentialTypeUserpassPlaintext == 0 {
				failure = fmt.Errorf("%w: the server wants credentials other than a username and password", ErrAuthentication)
				return nil, failure
			}
			return git2go.NewCredentialUserpassPlaintext(a.Username, a.Password)
		},
		CertificateCheckCallback: func(cert *git2go.Certificate, valid bool, host string) error {
			if cert.Kind != git2go.CertificateX509 {
				return nil // SSH host keys are checked by the SSH transport
			}
			if valid && (a == nil || len(a.CAPEM) == 0) {
				return nil
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if a != nil && len(a.CAPEM) > 0 && !pool.AppendCertsFromPEM(a.CAPEM) {
				return errors.New("ca.crt holds no PEM certificate")
			}
			if _, err := cert.X509.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
				failure = fmt.Errorf("TLS certificate of %s: %w", host, err)
				return failure
			}
			return nil
		},
		TransferProgressCallback: func(git2go.TransferProgress) error { return ctx.Err() },
	}
	return cb, &failure
}

func (a *Auth) headers() []string {
	if a != nil && a.BearerToken != "" {
		return []string{"Authorization: Bearer " + a.BearerToken}
	}
	return nil
}

// Fetch brings the mirror up to date with every branch and tag of the
// remote, pruning what the remote deleted.
func (m *Mirror) Fetch(ctx context.Context, auth *Auth) error {
	remote, err := m.repo.Remotes.CreateAnonymous(m.URL)
	if err != nil {
		return err
	}
	defer remote.Free()
	cb, failure := auth.callbacks(ctx)
	err = remote.Fetch([]string{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}, &git2go.FetchOptions{
		RemoteCallbacks: cb,
		Prune:           git2go.FetchPruneOn,
		DownloadTags:    git2go.DownloadTagsNone,
		Headers:         auth.headers(),
	}, "")
	return m.wrap("fetching", err, *failure, ctx)
}

func (m *Mirror) wrap(op string, err, failure error, ctx context.Context) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%s %s: %w", op, m.URL, ctx.Err())
	case failure != nil:
		return fmt.Errorf("%s %s: %w", op, m.URL, failure)
	case strings.Contains(err.Error(), "401") || strings.Contains(strings.ToLower(err.Error()), "authentication"):
		return fmt.Errorf("%s %s: %w: %v", op, m.URL, ErrAuthentication, err)
	}
	return fmt.Errorf("%s %s: %w", op, m.URL, err)
}

// Ref names what to check out; the most specific field wins: commit, name,
// semver, tag, branch.
type Ref struct {
	Branch, Tag, SemVer, Name, Commit string
}

// Resolve finds the commit a ref names in the mirror. It also returns the
// revision string for status, e.g. main@sha1:<hash>.
func (m *Mirror) Resolve(ref Ref) (*git2go.Oid, string, error) {
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
		return c.Id(), label + "@sha1:" + c.Id().String(), nil
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
		return nil, "", fmt.Errorf("%s not found in %s: %w", spec, m.URL, err)
	}
	defer r.Free()
	c, err := r.Peel(git2go.ObjectCommit)
	if err != nil {
		return nil, "", err
	}
	defer c.Free()
	return c.Id(), label + "@sha1:" + c.Id().String(), nil
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
		return "", fmt.Errorf("no tag of %s matches semver %q", m.URL, rng)
	}
	return bestTag, nil
}

// Checkout writes the files of commit into dir (which must be empty or
// missing), without touching the mirror.
func (m *Mirror) Checkout(commit *git2go.Oid, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
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
	return m.repo.CheckoutTree(tree, &git2go.CheckoutOptions{
		Strategy:        git2go.CheckoutForce | git2go.CheckoutRecreateMissing | git2go.CheckoutDontUpdateIndex,
		TargetDirectory: dir,
	})
}
