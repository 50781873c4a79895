package testgit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitOK runs git and reports whether it succeeded, never prompting.
func gitOK(t *testing.T, env []string, args ...string) bool {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(append(cmd.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir()), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return err == nil
}

func TestHTTPServerAuth(t *testing.T) {
	basic := New(t, Options{Username: "bot", Password: "pw"})
	bearer := New(t, Options{BearerToken: "tok"})
	tlsSrv := New(t, Options{TLS: true})
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, tlsSrv.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(otherCA, New(t, Options{TLS: true}).CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		srv  *Server
		url  string
		args []string
		env  []string
		ok   bool
	}{
		{"basic", basic, strings.Replace(basic.RepoURL("fleet"), "http://", "http://bot:pw@", 1), nil, nil, true},
		{"basic wrong password", basic, strings.Replace(basic.RepoURL("fleet"), "http://", "http://bot:no@", 1), nil, nil, false},
		{"basic anonymous", basic, basic.RepoURL("fleet"), nil, nil, false},
		{"bearer", bearer, bearer.RepoURL("fleet"), []string{"-c", "http.extraHeader=Authorization: Bearer tok"}, nil, true},
		{"bearer wrong token", bearer, bearer.RepoURL("fleet"), []string{"-c", "http.extraHeader=Authorization: Bearer nope"}, nil, false},
		{"bearer anonymous", bearer, bearer.RepoURL("fleet"), nil, nil, false},
		{"tls with the CA", tlsSrv, tlsSrv.RepoURL("fleet"), nil, []string{"GIT_SSL_CAINFO=" + ca}, true},
		{"tls without the CA", tlsSrv, tlsSrv.RepoURL("fleet"), nil, nil, false},
		{"tls with another server's CA", tlsSrv, tlsSrv.RepoURL("fleet"), nil, []string{"GIT_SSL_CAINFO=" + otherCA}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat(tt.srv.BarePath("fleet")); err != nil {
				tt.srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
			}
			args := append(append([]string{}, tt.args...), "clone", "-q", tt.url, t.TempDir())
			if got := gitOK(t, tt.env, args...); got != tt.ok {
				t.Errorf("clone succeeded: %t, want %t", got, tt.ok)
			}
		})
	}
	if !strings.HasPrefix(tlsSrv.URL, "https://") {
		t.Errorf("TLS server URL %s", tlsSrv.URL)
	}
}

func TestSSHServer(t *testing.T) {
	s := NewSSH(t)
	work := s.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	head := strings.TrimSpace(Git(t, work.Dir, "rev-parse", "HEAD"))

	dir := t.TempDir()
	if !gitOK(t, []string{"GIT_SSH_COMMAND=" + s.GitSSHCommand(t)}, "clone", "-q", s.RepoURL("fleet"), dir) {
		t.Fatal("git clone over ssh failed")
	}
	if got := strings.TrimSpace(Git(t, dir, "rev-parse", "HEAD")); got != head {
		t.Errorf("cloned %s, want %s", got, head)
	}
	// A push goes through git-receive-pack.
	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("b: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, dir, "add", "b.yaml")
	Git(t, dir, "commit", "-q", "-m", "b")
	if !gitOK(t, []string{"GIT_SSH_COMMAND=" + s.GitSSHCommand(t)}, "-C", dir, "push", "-q", "origin", "main") {
		t.Error("git push over ssh failed")
	}

	// The host key is really checked, and only authorized keys log in.
	wrongHost := SSHCommand(t, s.ClientKey, s.WrongKnownHosts(t))
	if gitOK(t, []string{"GIT_SSH_COMMAND=" + wrongHost}, "clone", "-q", s.RepoURL("fleet"), t.TempDir()) {
		t.Error("cloned with a wrong known_hosts")
	}
	otherKey, _ := SSHKeygen(t, "")
	if gitOK(t, []string{"GIT_SSH_COMMAND=" + SSHCommand(t, otherKey, s.KnownHosts)}, "clone", "-q", s.RepoURL("fleet"), t.TempDir()) {
		t.Error("cloned with a key that is not authorized")
	}
}

func TestProxy(t *testing.T) {
	srv := New(t, Options{})
	tlsSrv := New(t, Options{TLS: true})
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, tlsSrv.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Server{srv, tlsSrv} {
		s.CreateRepo(t, "fleet", map[string]string{"a.yaml": "a: 1\n"})
		p := NewProxy(t, "pu", "pp")
		authed := strings.Replace(p.URL, "http://", "http://pu:pp@", 1)
		if !gitOK(t, []string{"GIT_SSL_CAINFO=" + ca}, "-c", "http.proxy="+authed, "clone", "-q", s.RepoURL("fleet"), t.TempDir()) {
			t.Errorf("clone of %s through the proxy failed", s.URL)
		}
		if p.Requests() == 0 {
			t.Errorf("clone of %s did not go through the proxy", s.URL)
		}
		if gitOK(t, []string{"GIT_SSL_CAINFO=" + ca}, "-c", "http.proxy="+p.URL, "clone", "-q", s.RepoURL("fleet"), t.TempDir()) {
			t.Errorf("clone of %s through the proxy without credentials succeeded", s.URL)
		}
		if p.Rejected() == 0 {
			t.Error("the proxy rejected nothing")
		}
	}
}
