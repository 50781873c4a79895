package gitops

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	git2go "github.com/libgit2/git2go/v34"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"toolkit.dev/image-toolkit/pkg/gitssh"
)

// sshTransport runs git-upload-pack or git-receive-pack over SSH for
// libgit2. It is stateful: listing the refs and then fetching or pushing
// is one conversation with one remote process.
type sshTransport struct {
	s      *session
	conn   net.Conn
	client *ssh.Client
	watch  *watchdog
	stream *sshStream
	stop   func() bool // stops closing conn when the context ends
}

func (t *sshTransport) Action(remoteURL string, action git2go.SmartServiceAction) (git2go.SmartSubtransportStream, error) {
	s, err := lookup(remoteURL)
	if err != nil {
		return nil, err
	}
	var service string
	ls := false
	switch action {
	case git2go.SmartServiceActionUploadpackLs:
		service, ls = "git-upload-pack", true
	case git2go.SmartServiceActionUploadpack:
		service = "git-upload-pack"
	case git2go.SmartServiceActionReceivepackLs:
		service, ls = "git-receive-pack", true
	case git2go.SmartServiceActionReceivepack:
		service = "git-receive-pack"
	default:
		return nil, s.fail(fmt.Errorf("unknown git service action %d", action))
	}
	if !ls {
		// The conversation the listing started goes on.
		if t.stream == nil || t.stream.service != service {
			return nil, s.fail(fmt.Errorf("libgit2 asked for %s before listing the refs", service))
		}
		return t.stream, nil
	}
	t.closeStream()
	if t.client == nil {
		t.s = s
		if err := t.connect(); err != nil {
			return nil, s.fail(err)
		}
	}
	st, err := t.start(service)
	if err != nil {
		return nil, s.fail(err)
	}
	t.stream = st
	return st, nil
}

// connect dials the server (through the proxy, if any), checks its host
// key and logs in.
func (t *sshTransport) connect() error {
	s := t.s
	addr := net.JoinHostPort(s.ep.host, s.ep.port)
	var conn net.Conn
	var err error
	if s.proxy != nil {
		conn, err = dialProxy(s, addr)
	} else {
		conn, err = (&net.Dialer{Timeout: dialTimeout}).DialContext(s.ctx, "tcp", addr)
	}
	if err != nil {
		return s.ioError(fmt.Errorf("connecting to %s: %w", addr, err), false)
	}
	t.conn = conn
	// Closing the connection ends every read and write, and the handshake.
	t.stop = context.AfterFunc(s.ctx, func() { conn.Close() })
	t.watch = newWatchdog(s.idle, func() { conn.Close() })
	s.onClose(func() { _ = t.Close() })

	user := s.ep.user
	if user == "" && s.auth != nil {
		user = s.auth.Username
	}
	if user == "" {
		user = "git"
	}
	var auth []ssh.AuthMethod
	if s.signer != nil {
		auth = append(auth, ssh.PublicKeys(s.signer))
	}
	cfg := &ssh.ClientConfig{
		User: user,
		Auth: auth,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if err := checkHostKey(s.hostKeys, s.ep.host, s.ep.port, key); err != nil {
				return hostKeyError{err}
			}
			return nil
		},
		HostKeyAlgorithms: s.hostAlgos,
		ClientVersion:     "SSH-2.0-image-toolkit",
	}
	t.watch.arm()
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	t.watch.disarm()
	if err != nil {
		_ = t.Close()
		var hostErr hostKeyError
		switch {
		case s.ctx.Err() != nil || t.watch.fired.Load():
			return s.ioError(err, t.watch.fired.Load())
		case errors.As(err, &hostErr):
			return hostErr.error
		case strings.Contains(err.Error(), "unable to authenticate") && s.signer == nil:
			return fmt.Errorf("%w: the server wants an SSH key and the credentials have no identity", ErrAuthentication)
		case strings.Contains(err.Error(), "unable to authenticate"):
			return fmt.Errorf("%w: the server refused the %s key %s for user %q", ErrAuthentication,
				s.signer.PublicKey().Type(), ssh.FingerprintSHA256(s.signer.PublicKey()), user)
		}
		return fmt.Errorf("SSH handshake with %s: %w", addr, err)
	}
	t.client = ssh.NewClient(c, chans, reqs)
	return nil
}

// hostKeyError comes back from the handshake as our host key check said.
type hostKeyError struct{ error }

func (e hostKeyError) Unwrap() error { return e.error }

// start runs service on the repository, as git does: the path in single
// quotes, for the remote user's shell.
func (t *sshTransport) start(service string) (*sshStream, error) {
	s := t.s
	t.watch.arm()
	defer t.watch.disarm()
	sess, err := t.client.NewSession()
	if err != nil {
		return nil, s.ioError(fmt.Errorf("opening an SSH session: %w", err), t.watch.fired.Load())
	}
	st := &sshStream{t: t, service: service, sess: sess}
	if st.stdin, err = sess.StdinPipe(); err == nil {
		st.stdout, err = sess.StdoutPipe()
	}
	if err != nil {
		sess.Close()
		return nil, err
	}
	sess.Stderr = &s.stderr
	if err := sess.Start(service + " " + gitssh.ShellQuote(s.ep.path)); err != nil {
		sess.Close()
		return nil, s.ioError(fmt.Errorf("starting %s: %w", service, err), t.watch.fired.Load())
	}
	return st, nil
}

func (t *sshTransport) closeStream() {
	if t.stream != nil {
		t.stream.sess.Close()
		t.stream = nil
	}
}

func (t *sshTransport) Close() error {
	t.closeStream()
	if t.client != nil {
		t.client.Close()
		t.client = nil
	}
	if t.conn != nil {
		t.stop()
		t.conn.Close()
		t.conn = nil
	}
	return nil
}

func (t *sshTransport) Free() { _ = t.Close() }

// sshStream is the remote process's stdin and stdout.
type sshStream struct {
	t       *sshTransport
	service string
	sess    *ssh.Session
	stdin   io.WriteCloser
	stdout  io.Reader
	ended   bool // stdout ended: the process is done
}

func (st *sshStream) Read(p []byte) (int, error) {
	w := st.t.watch
	w.arm()
	n, err := st.stdout.Read(p)
	w.disarm()
	switch {
	case err == io.EOF && (w.fired.Load() || st.t.s.ctx.Err() != nil):
		// Closing the connection ends the channel as if the server had.
		return 0, st.t.s.fail(st.t.s.ioError(err, w.fired.Load()))
	case err == io.EOF:
		st.ended = true
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	case err != nil && n == 0:
		return 0, st.t.s.fail(st.t.s.ioError(fmt.Errorf("reading from %s: %w", st.service, err), w.fired.Load()))
	}
	return n, nil
}

func (st *sshStream) Write(p []byte) (int, error) {
	if st.ended {
		// libgit2 says goodbye with a flush even to a process that has
		// finished; there is no one left to read it.
		return len(p), nil
	}
	w := st.t.watch
	w.arm()
	n, err := st.stdin.Write(p)
	w.disarm()
	if err != nil {
		return n, st.t.s.fail(st.t.s.ioError(fmt.Errorf("writing to %s: %w", st.service, err), w.fired.Load()))
	}
	return n, nil
}

// Free leaves the session to the transport: libgit2 frees the stream of
// the listing before it asks again for the same conversation.
func (st *sshStream) Free() {}

// dialProxy opens a tunnel to addr through the session's HTTP proxy with
// CONNECT.
func dialProxy(s *session, addr string) (net.Conn, error) {
	p := s.proxy
	proxyAddr := p.Host
	if p.Port() == "" {
		proxyAddr = net.JoinHostPort(p.Hostname(), map[string]string{"http": "80", "https": "443"}[p.Scheme])
	}
	conn, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(s.ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", p.Redacted(), err)
	}
	stop := context.AfterFunc(s.ctx, func() { conn.Close() })
	defer stop()
	w := newWatchdog(s.idle, func() { conn.Close() })
	w.arm()
	defer w.disarm()
	fail := func(err error) (net.Conn, error) {
		conn.Close()
		return nil, s.ioError(err, w.fired.Load())
	}
	if p.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: p.Hostname(), RootCAs: s.pool, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(s.ctx); err != nil {
			return fail(fmt.Errorf("proxy %s: %w", p.Redacted(), err))
		}
		conn = tc
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if p.User != nil {
		pass, _ := p.User.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.User.Username()+":"+pass)))
	}
	if err := req.Write(conn); err != nil {
		return fail(fmt.Errorf("proxy %s: %w", p.Redacted(), err))
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(fmt.Errorf("proxy %s: %w", p.Redacted(), err))
	}
	// The body of a refusal is not read: the connection is closed.
	if err := proxyRefused(resp, p); err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("proxy %s refused a tunnel to %s: HTTP %s", p.Redacted(), addr, resp.Status))
	}
	// The server speaks first: its banner may be read already.
	return &bufferedConn{Conn: conn, r: br}, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func knownhostsName(host, port string) string {
	return knownhosts.Normalize(net.JoinHostPort(host, port))
}
