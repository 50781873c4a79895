package testgit

import (
	"os/exec"
	"strings"
	"testing"
)

func TestCloneOverHTTPWithAuth(t *testing.T) {
	s := New(t, Options{Username: "bot", Password: "pw"})
	work := s.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	head := strings.TrimSpace(Git(t, work.Dir, "rev-parse", "HEAD"))

	u := strings.Replace(s.RepoURL("fleet"), "http://", "http://bot:pw@", 1)
	dir := t.TempDir()
	Git(t, "", "clone", "-q", u, dir)
	if got := strings.TrimSpace(Git(t, dir, "rev-parse", "HEAD")); got != head {
		t.Errorf("cloned %s, want %s", got, head)
	}
	anon := exec.Command("git", "clone", "-q", s.RepoURL("fleet"), t.TempDir())
	anon.Env = append(anon.Environ(), "GIT_TERMINAL_PROMPT=0")
	if err := anon.Run(); err == nil {
		t.Error("cloned without credentials")
	}
}
