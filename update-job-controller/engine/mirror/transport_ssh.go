package mirror

import (
	"context"
	"fmt"
	"io"
	"net"

	git2go "github.com/libgit2/git2go/v34"
	"golang.org/x/crypto/ssh"

	"toolkit.dev/image-toolkit/pkg/git"
)

// sshTransport runs git-upload-pack or git-receive-pack over SSH for
// libgit2. It is stateful: listing the refs and then fetching or pushing
// is one conversation with one remote process.
type sshTransport struct {
	s      *session
	conn   net.Conn
	client *ssh.Client
	watch  *git.Watchdog
	stream *sshStream
	stop   func() bool // stops closing conn when the context ends
}

func (t *sshTransport) Action(remoteURL string, action git2go.SmartServiceAction) (git2go.SmartSubtransportStream, error) {
	s, err := lookup(remoteURL)
	if err != nil {
		return nil, err
	}
	service, ls, err := serviceOf(action)
	if err != nil {
		return nil, s.fail(err)
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

// serviceOf is the git program a stateful transport runs for action, and
// whether the action is its listing of refs (the start of a conversation)
// rather than the rest of one.
func serviceOf(action git2go.SmartServiceAction) (service string, ls bool, err error) {
	switch action {
	case git2go.SmartServiceActionUploadpackLs:
		return "git-upload-pack", true, nil
	case git2go.SmartServiceActionUploadpack:
		return "git-upload-pack", false, nil
	case git2go.SmartServiceActionReceivepackLs:
		return "git-receive-pack", true, nil
	case git2go.SmartServiceActionReceivepack:
		return "git-receive-pack", false, nil
	}
	return "", false, fmt.Errorf("unknown git service action %d", action)
}

// connect dials the server (through the proxy, if any), checks its host
// key and logs in.
func (t *sshTransport) connect() error {
	s := t.s
	addr := s.ep.Addr()
	conn, err := s.auth.Dial(s.ctx, addr, s.idle)
	if err != nil {
		return err
	}
	t.conn = conn
	// Closing the connection ends every read and write, and the handshake.
	t.stop = context.AfterFunc(s.ctx, func() { conn.Close() })
	t.watch = git.NewWatchdog(s.idle, func() { conn.Close() })
	s.onClose(func() { _ = t.Close() })

	t.watch.Arm()
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, s.sshConfig)
	t.watch.Disarm()
	if err != nil {
		_ = t.Close()
		if s.ctx.Err() != nil || t.watch.Fired() {
			return s.ioError(err, t.watch.Fired())
		}
		return s.auth.HandshakeError(err, s.sshConfig, addr)
	}
	t.client = ssh.NewClient(c, chans, reqs)
	return nil
}

// start runs service on the repository, as git does: the path in single
// quotes, for the remote user's shell.
func (t *sshTransport) start(service string) (*sshStream, error) {
	s := t.s
	t.watch.Arm()
	defer t.watch.Disarm()
	sess, err := t.client.NewSession()
	if err != nil {
		return nil, s.ioError(fmt.Errorf("opening an SSH session: %w", err), t.watch.Fired())
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
	if err := sess.Start(service + " " + git.ShellQuote(s.ep.Path)); err != nil {
		sess.Close()
		return nil, s.ioError(fmt.Errorf("starting %s: %w", service, err), t.watch.Fired())
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
	w.Arm()
	n, err := st.stdout.Read(p)
	w.Disarm()
	switch {
	case err == io.EOF && (w.Fired() || st.t.s.ctx.Err() != nil):
		// Closing the connection ends the channel as if the server had.
		return 0, st.t.s.fail(st.t.s.ioError(err, w.Fired()))
	case err == io.EOF:
		st.ended = true
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	case err != nil && n == 0:
		return 0, st.t.s.fail(st.t.s.ioError(fmt.Errorf("reading from %s: %w", st.service, err), w.Fired()))
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
	w.Arm()
	n, err := st.stdin.Write(p)
	w.Disarm()
	if err != nil {
		return n, st.t.s.fail(st.t.s.ioError(fmt.Errorf("writing to %s: %w", st.service, err), w.Fired()))
	}
	return n, nil
}

// Free leaves the session to the transport: libgit2 frees the stream of
// the listing before it asks again for the same conversation.
func (st *sshStream) Free() {}
