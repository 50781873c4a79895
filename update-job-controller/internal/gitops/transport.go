package gitops

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	git2go "github.com/libgit2/git2go/v34"
	"golang.org/x/crypto/ssh"
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
)

// idleTimeout bounds the wait for the server in one read, write or
// handshake; the context bounds the whole operation. git servers send
// keepalives while they compute a pack or run hooks, so a long silence
// means a dead server or network. A variable for tests.
var idleTimeout = 2 * time.Minute

// dialTimeout bounds a TCP connect when the context allows longer.
const dialTimeout = 30 * time.Second

// userAgent starts with git/, which some servers require of smart HTTP
// clients.
const userAgent = "git/2.0 (image-toolkit)"

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
	ep        endpoint
	auth      *Auth
	ctx       context.Context
	idle      time.Duration
	callbacks git2go.RemoteCallbacks

	// failure is the first error of a transport: libgit2 keeps only its
	// text. Set on the goroutine running libgit2 only.
	failure error
	// stderr is what the server wrote on stderr (SSH), for messages.
	stderr capped

	mu     sync.Mutex
	closer []func() // what close releases, should libgit2 not have

	// HTTP(S)
	base   *url.URL // the repository URL without credentials; a redirect of info/refs moves it
	client *http.Client
	// SSH
	signer    ssh.Signer // nil: no identity, the server will refuse us
	hostKeys  ssh.HostKeyCallback
	hostAlgos []string
	proxy     *url.URL
	pool      *x509.CertPool
}

// session starts an operation on repoURL. The caller must close it.
func (a *Auth) session(ctx context.Context, repoURL string) (*session, error) {
	if err := registerTransports(); err != nil {
		return nil, err
	}
	ep, err := parseEndpoint(repoURL)
	if err != nil {
		return nil, err
	}
	s := &session{url: repoURL, ep: ep, auth: a, ctx: ctx, idle: idleTimeout}
	if s.pool, err = a.certPool(); err != nil {
		return nil, err
	}
	if a != nil && a.ProxyURL != "" {
		if s.proxy, err = url.Parse(a.ProxyURL); err != nil || (s.proxy.Scheme != "http" && s.proxy.Scheme != "https") {
			return nil, fmt.Errorf("%w: the proxy URL is not like http://host:port", ErrInvalidCredentials)
		}
	}
	scheme := schemeHTTP
	if ep.scheme == "ssh" {
		scheme = schemeSSH
		if a == nil || len(a.KnownHosts) == 0 {
			return nil, fmt.Errorf("%w: an ssh URL needs known_hosts", ErrInvalidCredentials)
		}
		if s.hostKeys, err = parseKnownHosts(a.KnownHosts); err != nil {
			return nil, err
		}
		s.hostAlgos = hostKeyAlgorithms(s.hostKeys, ep.host, ep.port)
		if len(a.Identity) > 0 {
			if s.signer, err = a.sshKey(); err != nil {
				return nil, err
			}
		}
	} else if err := s.prepareHTTP(); err != nil {
		return nil, err
	}
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
	return s, nil
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
	switch {
	case s.ctx.Err() != nil:
		return s.ctx.Err()
	case idle:
		return fmt.Errorf("%s sent nothing for %s: %w", s.host(), s.idle, os.ErrDeadlineExceeded)
	}
	return err
}

func (s *session) host() string {
	if s.base != nil {
		return s.base.Host
	}
	return knownhostsName(s.ep.host, s.ep.port)
}

// scrub makes a message of libgit2 fit for users: the real URL without
// password instead of ours, no secrets.
func (s *session) scrub(msg string) string {
	msg = strings.ReplaceAll(msg, s.remoteURL, redact(s.url))
	if a := s.auth; a != nil {
		secrets := []string{a.Password, a.BearerToken, a.IdentityPassword}
		if u, err := url.Parse(a.ProxyURL); err == nil && u.User != nil {
			p, _ := u.User.Password()
			secrets = append(secrets, p)
		}
		for _, secret := range secrets {
			if len(secret) >= 3 {
				msg = strings.ReplaceAll(msg, secret, "xxxxx")
			}
		}
	}
	return msg
}

// err turns the outcome of a libgit2 network call into the error for
// users, naming the operation and the remote (without password).
func (s *session) err(where string, err error) error {
	where += " " + redact(s.url)
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

// watchdog ends a connection that stays silent too long while we wait
// on it: arm before a blocking call, disarm after.
type watchdog struct {
	d     time.Duration
	t     *time.Timer
	fired atomic.Bool
}

func newWatchdog(d time.Duration, fire func()) *watchdog {
	w := &watchdog{d: d}
	w.t = time.AfterFunc(d, func() { w.fired.Store(true); fire() })
	w.t.Stop()
	return w
}

func (w *watchdog) arm()    { w.t.Reset(w.d) }
func (w *watchdog) disarm() { w.t.Stop() }

// capped keeps the first 4 KiB written to it.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capped) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := 4096 - c.buf.Len(); room > 0 {
		c.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
