package git

import "testing"

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/srv/git/fleet.git": `'/srv/git/fleet.git'`,
		"/it's.git":          `'/it'\''s.git'`,
		"/wow!.git":          `'/wow'\!'.git'`,
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
