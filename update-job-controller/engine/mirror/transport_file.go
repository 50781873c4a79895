package mirror

import (
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"

	git2go "github.com/libgit2/git2go/v34"
)

// localPath is the repository directory of a file:// URL; ok is false for
// any other address. The path must be absolute, so that it can never be
// read as an option of git's.
func localPath(repoURL string) (dir string, ok bool, err error) {
	if !strings.HasPrefix(strings.ToLower(repoURL), "file://") {
		return "", false, nil
	}
	u, err := url.Parse(repoURL)
	if err != nil || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) || u.User != nil || u.RawQuery != "" {
		return "", true, fmt.Errorf("%q is not a file:// URL of an absolute path on this machine (file:///srv/git/fleet.git)", repoURL)
	}
	return filepath.Clean(u.Path), true, nil
}

// fileTransport runs git-upload-pack or git-receive-pack on a repository of
// this machine's disk (a file:// URL), as git does for such a remote, so
// that a local repository is fetched and pushed by the same conversation
// as a remote one (the push's report, the hooks). It is stateful like SSH:
// listing the refs and then fetching or pushing is one process. The
// process ends with the operation's context.
type fileTransport struct {
	stream *fileStream
}

func (t *fileTransport) Action(remoteURL string, action git2go.SmartServiceAction) (git2go.SmartSubtransportStream, error) {
	s, err := lookup(remoteURL)
	if err != nil {
		return nil, err
	}
	service, ls, err := serviceOf(action)
	if err != nil {
		return nil, s.fail(err)
	}
	if !ls {
		if t.stream == nil || t.stream.service != service {
			return nil, s.fail(fmt.Errorf("libgit2 asked for %s before listing the refs", service))
		}
		return t.stream, nil
	}
	t.closeStream()
	// git-upload-pack is a program of git's own, run by name: no shell.
	cmd := exec.CommandContext(s.ctx, service, s.ep.Path)
	cmd.Stderr = &s.stderr
	st := &fileStream{service: service, cmd: cmd}
	if st.stdin, err = cmd.StdinPipe(); err == nil {
		st.stdout, err = cmd.StdoutPipe()
	}
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		return nil, s.fail(fmt.Errorf("starting %s on %s: %w", service, s.ep.Path, err))
	}
	s.onClose(t.closeStream)
	t.stream = st
	return st, nil
}

func (t *fileTransport) closeStream() {
	if t.stream != nil {
		t.stream.close()
		t.stream = nil
	}
}

func (t *fileTransport) Close() error { t.closeStream(); return nil }

func (t *fileTransport) Free() { t.closeStream() }

// fileStream is the local process's stdin and stdout.
type fileStream struct {
	service string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdout  io.Reader
	ended   bool
	closed  bool
}

func (st *fileStream) Read(p []byte) (int, error) {
	n, err := st.stdout.Read(p)
	if err == io.EOF {
		st.ended = true
	}
	return n, err
}

func (st *fileStream) Write(p []byte) (int, error) {
	if st.ended {
		// As over SSH: libgit2's last flush may come after the process
		// finished.
		return len(p), nil
	}
	return st.stdin.Write(p)
}

// Free leaves the process to the transport, as sshStream does.
func (st *fileStream) Free() {}

func (st *fileStream) close() {
	if st.closed {
		return
	}
	st.closed = true
	_ = st.stdin.Close()
	_ = st.cmd.Wait()
}
