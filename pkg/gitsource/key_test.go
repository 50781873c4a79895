package gitsource

import "testing"

// Every URL spelling of one repository has one key, and different
// repositories have different keys.
func TestRepositoryKey(t *testing.T) {
	same := []string{
		"https://git.example.com/org/app.git",
		"https://Git.Example.com/Org/App",
		"http://git.example.com:3000/org/app/",
		"ssh://git@git.example.com:2222/org/app.git",
		"git@git.example.com:org/app.git",
		"https://user:token@git.example.com/org/app.git",
	}
	for _, u := range same {
		k, ok := RepositoryKey(u)
		if !ok || k != "git.example.com/org/app" {
			t.Errorf("RepositoryKey(%q) = %q, %v; want git.example.com/org/app", u, k, ok)
		}
	}
	for _, u := range []string{"https://git.example.com/org/app2", "https://git.example.com/other/app", "https://example.com/org/app", "https://git.example.com/gitlab/org/app"} {
		if k, _ := RepositoryKey(u); k == "git.example.com/org/app" {
			t.Errorf("RepositoryKey(%q) = %q, the key of another repository", u, k)
		}
	}
	for _, u := range []string{"", "app", "/srv/git/app.git", "https://git.example.com/", "git@host"} {
		if k, ok := RepositoryKey(u); ok {
			t.Errorf("RepositoryKey(%q) = %q, want no key", u, k)
		}
	}
}
