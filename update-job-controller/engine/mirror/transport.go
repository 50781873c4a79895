package mirror

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	git2go "github.com/libgit2/git2go/v34"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"toolkit.dev/image-toolkit/pkg/git"
)

// libgit2 1.5's own transports have no timeouts and block in socket reads
// that no callback can interrupt. So every fetch and push goes through
// transports of ours, in Go, that carry the operation's context: libgit2
// speaks the git protocol, we move its bytes. They are registered under
// schemes of their own, and an operation's anonymous remote has a URL
// like gitops-http://op-7/ naming the session that holds its context,
// credentials and real URL. The state cannot hang on the real URL: two
// caches may fetch the same URL at once with different credentials.
const (
	schemeHTTP = "gitops-http" // smart HTTP(S): stateless, a request per action
	schemeSSH  = "gitops-ssh"  // git over SSH: one session per service
	schemeFile = "gitops-file" // a repository on this machine (file://): one process per service
)

// idleTimeout bounds the wait for the server in one read, write or
// handshake; the context bounds the whole operation. git servers send
// keepalives while they compute a pack or run hooks, so a long silence
// means a dead server or network. A variable for tests.
var idleTimeout = 2 * time.Minute

var (
	registerOnce sync.Once
	registerErr  error
	// registered keeps the transports alive: a finalizer unregisters them.
	registered []*git2go.RegisteredSmartTransport

	sessions sync.Map // operation id → *session
	lastID   atomic.Uint64
)

func registerTransports() error {
	registerOnce.Do(func() {
		for _, t := range []struct {
			scheme    string
			stateless bool
			new       func() git2go.SmartSubtransport
		}{
			{schemeHTTP, true, func() git2go.SmartSubtransport { return httpTransport{} }},
			{schemeSSH, false, func() git2go.SmartSubtransport { return &sshTransport{} }},
			{schemeFile, false, func() git2go.SmartSubtransport { return &fileTransport{} }},
		} {
			r, err := git2go.NewRegisteredSmartTransport(t.scheme, t.stateless,
				func(*git2go.Remote, *git2go.Transport) (git2go.SmartSubtransport, error) { return t.new(), nil })
			if err != nil {
				registerErr = fmt.Errorf("registering the %s transport with libgit2: %w", t.scheme, err)
				return
			}
			registered = append(registered, r)
		}
	})
	return registerErr
}

// session is one fetch or push: what its transport needs, prepared before
// any network traffic so that bad credentials fail early.
type session struct {
	id        string
	remoteURL string // the URL libgit2 is given
	url       string // the repository's URL
	ep        git.Endpoint
	auth      *git.Auth
	ctx       context.Context
	idle      time.Duration
	callbacks git2go.RemoteCallbacks

	// failure is the first error of a transport: libgit2 keeps only its
	// text. Set on the goroutine running libgit2 only.
	failure error
	// stderr is what the server wrote on stderr (SSH), for messages.
	stderr git.Capped

	mu     sync.Mutex
	closer []func() // what close releases, should libgit2 not have

	// HTTP(S)
	base   *url.URL // the repository URL without credentials; a redirect of info/refs moves it
	client *http.Client
	// SSH: the client configuration, checked before any network call.
	sshConfig *ssh.ClientConfig
}

// newSession starts an operation on repoURL with auth (nil: anonymous).
// The caller must close it.
func newSession(ctx context.Context, a *git.Auth, repoURL string) (*session, error) {
	if err := registerTransports(); err != nil {
		return nil, err
	}
	if dir, local, err := localPath(repoURL); local {
		// A repository on this disk: no credentials, nothing to dial.
		if err != nil {
			return nil, fmt.Errorf("%w: %w", git.ErrInvalidCredentials, err)
		}
		return newSessionOf(ctx, &session{url: repoURL, ep: git.Endpoint{Scheme: "file", Path: dir}, auth: a, ctx: ctx}, schemeFile), nil
	}
	ep, err := git.ParseEndpoint(repoURL)
	if err != nil {
		return nil, err
	}
	// A provider's token is asked for at each fetch and push, not once
	// per job: a push long after the fetch gets one still valid.
	if a, err = a.Fresh(ctx); err != nil {
		return nil, err
	}
	s := &session{url: repoURL, ep: ep, auth: a, ctx: ctx, idle: idleTimeout}
	scheme := schemeHTTP
	if ep.Scheme == "ssh" {
		scheme = schemeSSH
		if s.sshConfig, err = a.SSHConfig(ep); err != nil {
			return nil, err
		}
		if _, err := a.Proxy(); err != nil {
			return nil, err
		}
	} else if err := s.prepareHTTP(); err != nil {
		return nil, err
	}
	return newSessionOf(ctx, s, scheme), nil
}

// newSessionOf registers s under an id of its own, for the transport of
// scheme to find it.
func newSessionOf(ctx context.Context, s *session, scheme string) *session {
	s.callbacks = git2go.RemoteCallbacks{
		// The transports end with the context; these stop libgit2's own
		// work (indexing, packing) as soon.
		TransferProgressCallback:     func(git2go.TransferProgress) error { return ctx.Err() },
		PushTransferProgressCallback: func(uint32, uint32, uint) error { return ctx.Err() },
		SidebandProgressCallback:     func(string) error { return ctx.Err() },
	}
	s.id = "op-" + strconv.FormatUint(lastID.Add(1), 10)
	s.remoteURL = scheme + "://" + s.id + "/"
	sessions.Store(s.id, s)
	return s
}

// lookup finds the session of a URL libgit2 hands a transport.
func lookup(remoteURL string) (*session, error) {
	_, rest, _ := strings.Cut(remoteURL, "://")
	id, _, _ := strings.Cut(rest, "/")
	if v, ok := sessions.Load(id); ok {
		return v.(*session), nil
	}
	return nil, fmt.Errorf("no git operation %q is running", id)
}

// onClose registers what close must release.
func (s *session) onClose(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closer = append(s.closer, f)
}

// close ends the operation, releasing connections libgit2 left open.
func (s *session) close() {
	sessions.Delete(s.id)
	s.mu.Lock()
	closer := s.closer
	s.closer = nil
	s.mu.Unlock()
	for _, f := range closer {
		f()
	}
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
}

// fail records the first error of the transports, and returns it.
func (s *session) fail(err error) error {
	if s.failure == nil {
		s.failure = err
	}
	return err
}

// ioError says why a network read, write or handshake failed: the
// context, the idle timeout, or err.
func (s *session) ioError(err error, idle bool) error {
	return git.IOError(s.ctx, err, s.host(), s.idle, idle)
}

func (s *session) host() string {
	if s.base != nil {
		return s.base.Host
	}
	return knownhosts.Normalize(s.ep.Addr())
}

// scrub makes a message of libgit2 fit for users: the real URL without
// password instead of ours, no secrets.
func (s *session) scrub(msg string) string {
	return s.auth.Scrub(strings.ReplaceAll(msg, s.remoteURL, git.Redact(s.url)))
}

// err turns the outcome of a libgit2 network call into the error for
// users, naming the operation and the remote (without password).
func (s *session) err(where string, err error) error {
	where += " " + git.Redact(s.url)
	switch {
	case err == nil:
		return nil
	case s.ctx.Err() != nil:
		return fmt.Errorf("%s: %w", where, s.ctx.Err())
	case s.failure != nil:
		return fmt.Errorf("%s: %w", where, s.failure)
	}
	msg := s.scrub(err.Error())
	if said := strings.TrimSpace(s.stderr.String()); said != "" {
		msg += " (the server said: " + s.scrub(said) + ")"
	}
	return fmt.Errorf("%s: %s", where, msg)
}
