package testgit

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sshd is Debian's OpenSSH server (package openssh-server); it must be
// started by its absolute path, since it re-executes itself.
const sshd = "/usr/sbin/sshd"

// SSHServer is OpenSSH's sshd on a loopback port, run as a child process of
// the test, serving the bare repositories under Root with git-upload-pack
// and git-receive-pack. It logs in the user running the test with
// ClientKey only.
type SSHServer struct {
	Repos
	// Addr is 127.0.0.1:port.
	Addr string
	// User is the login name in RepoURL: the user running the test.
	User string
	// ClientKey is an unencrypted ed25519 private key (OpenSSH format)
	// that the server accepts.
	ClientKey []byte
	// KnownHosts names the server's real host key in known_hosts format
	// ("[127.0.0.1]:port ssh-ed25519 ...").
	KnownHosts []byte

	dir     string
	mu      sync.Mutex
	logs    bytes.Buffer
	keyFile string
}

// NewSSH starts sshd, stopped at the end of the test. It skips the test
// when sshd is not installed.
func NewSSH(t testing.TB) *SSHServer {
	t.Helper()
	if _, err := os.Stat(sshd); err != nil {
		t.Skipf("%s is not installed (Debian package openssh-server; make deps): %v", sshd, err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &SSHServer{Repos: Repos{Root: filepath.Join(dir, "repos")}, User: u.Username, dir: dir,
		keyFile: filepath.Join(dir, "authorized_keys")}
	if err := os.Mkdir(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	hostPub := sshKeygen(t, filepath.Join(dir, "host_ed25519"), "")
	clientPub := sshKeygen(t, filepath.Join(dir, "client_ed25519"), "")
	if s.ClientKey, err = os.ReadFile(filepath.Join(dir, "client_ed25519")); err != nil {
		t.Fatal(err)
	}
	s.Authorize(t, clientPub)
	if os.Geteuid() == 0 {
		// sshd running as root wants its privilege separation directory,
		// which only the Debian service unit creates.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// A port picked by the kernel may be taken again before sshd binds
	// it: retry with a new one.
	for attempt := 0; ; attempt++ {
		if err := s.start(t); err == nil {
			break
		} else if attempt == 2 {
			t.Fatalf("starting sshd: %v\n%s", err, s.Logs())
		}
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	s.KnownHosts = []byte(fmt.Sprintf("[127.0.0.1]:%s %s\n", port, hostPub))
	return s
}

// start runs sshd on a free port and waits until it accepts connections.
func (s *SSHServer) start(t testing.TB) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.Addr = l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(s.Addr)

	// StrictModes stays on. It refuses an AuthorizedKeysFile under a
	// world-writable directory such as /tmp, so the keys come from
	// AuthorizedKeysCommand instead, whose program (cat) is root's.
	config := strings.Join([]string{
		"ListenAddress 127.0.0.1",
		"Port " + port,
		"HostKey " + filepath.Join(s.dir, "host_ed25519"),
		"PidFile " + filepath.Join(s.dir, "sshd.pid"),
		"StrictModes yes",
		"UsePAM no",
		"AuthenticationMethods publickey",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"AllowUsers " + s.User,
		"AuthorizedKeysFile none",
		"AuthorizedKeysCommand /usr/bin/cat " + s.keyFile,
		"AuthorizedKeysCommandUser " + s.User,
		"AllowTcpForwarding no",
		"AllowAgentForwarding no",
		"X11Forwarding no",
		"PermitTTY no",
		"PrintMotd no",
		"LogLevel VERBOSE",
		"",
	}, "\n")
	cfg := filepath.Join(s.dir, "sshd_config")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		return err
	}
	// -D: stay in the foreground as our child; -e: log to stderr.
	cmd := exec.Command(sshd, "-D", "-e", "-f", cfg)
	cmd.Stdout, cmd.Stderr = s.logWriter(), s.logWriter()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("sshd exited: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
			c.Close()
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("sshd log:\n%s", s.Logs())
				}
			})
			return nil
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("sshd did not listen on %s", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Logs returns what sshd logged so far.
func (s *SSHServer) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

type lockedWriter struct{ s *SSHServer }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.logs.Write(b)
}

func (s *SSHServer) logWriter() lockedWriter { return lockedWriter{s} }

// Authorize adds a public key (authorized_keys format) that may log in.
func (s *SSHServer) Authorize(t testing.TB, publicKey string) {
	t.Helper()
	f, err := os.OpenFile(s.keyFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, strings.TrimSpace(publicKey)); err != nil {
		t.Fatal(err)
	}
}

// RepoURL is the clone URL of a repository:
// ssh://user@127.0.0.1:port/abs/path/name.git.
func (s *SSHServer) RepoURL(name string) string {
	return "ssh://" + s.User + "@" + s.Addr + s.BarePath(name)
}

// Port is the port sshd listens on.
func (s *SSHServer) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// WrongKnownHosts returns known_hosts naming this server with another
// ed25519 key than its real one.
func (s *SSHServer) WrongKnownHosts(t testing.TB) []byte {
	t.Helper()
	pub := sshKeygen(t, filepath.Join(t.TempDir(), "other_ed25519"), "")
	return []byte(fmt.Sprintf("[127.0.0.1]:%d %s\n", s.Port(), pub))
}

// GitSSHCommand is a GIT_SSH_COMMAND for the git command line to reach the
// server with ClientKey and KnownHosts, e.g. to check what a test pushed.
func (s *SSHServer) GitSSHCommand(t testing.TB) string {
	t.Helper()
	return SSHCommand(t, s.ClientKey, s.KnownHosts)
}

// SSHCommand is a GIT_SSH_COMMAND using only the given private key and
// known_hosts, failing rather than asking anything.
func SSHCommand(t testing.TB, privateKey, knownHosts []byte) string {
	t.Helper()
	dir := t.TempDir()
	key, known := filepath.Join(dir, "id"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(key, privateKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(known, knownHosts, 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("ssh -i %s -o IdentitiesOnly=yes -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o BatchMode=yes", key, known)
}

// sshKeygen writes a new ed25519 key pair to path and path.pub and returns
// the public key line. passphrase may be empty.
func sshKeygen(t testing.TB, path, passphrase string) string {
	t.Helper()
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "testgit", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen (Debian package openssh-client): %v\n%s", err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(pub))
}

// SSHKeygen writes a new ed25519 key pair with ssh-keygen, encrypted with
// passphrase when it is not empty, and returns the private key and the
// public key line.
func SSHKeygen(t testing.TB, passphrase string) (private []byte, public string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "id_ed25519")
	public = sshKeygen(t, path, passphrase)
	private, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return private, public
}
