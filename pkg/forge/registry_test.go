package forge

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// withForges registers fs for the test, and removes them after it.
func withForges(t *testing.T, fs ...Forge) {
	t.Helper()
	for _, f := range fs {
		Register(f)
	}
	t.Cleanup(func() {
		registry.Lock()
		defer registry.Unlock()
		for _, f := range fs {
			delete(registry.forges, f.Provider)
		}
	})
}

// Adding a forge is one entry: Resolve and New find it with nothing else
// changed, and messages that list the forges name it.
func TestAnAddedForgeNeedsOnlyItsEntry(t *testing.T) {
	const name Provider = "example"
	errMade := errors.New("the example forge's constructor ran")
	withForges(t, Forge{Provider: name, Hosts: []string{"forge.example"}, Words: []string{"exampleforge"},
		New: func(Options, *http.Client) (Client, error) { return nil, errMade }})
	ep, err := Resolve("git@forge.example:team/app.git", "", "")
	if err != nil || *ep != (Endpoint{Provider: name, APIURL: "https://forge.example/", Repository: "team/app"}) {
		t.Fatalf("Resolve = %+v, %v", ep, err)
	}
	if _, err := New(Options{Provider: name, APIURL: ep.APIURL, Repository: ep.Repository, Token: "t"}); !errors.Is(err, errMade) {
		t.Errorf("New = %v, want the entry's constructor's error", err)
	}
	if _, err := New(Options{Provider: "nope", Repository: "o/r", Token: "t"}); err == nil || !strings.Contains(err.Error(), `unknown forge provider "nope": want example`) {
		t.Errorf("New of an unknown provider: %v", err)
	}
}

func TestRegisteringAProviderTwicePanics(t *testing.T) {
	withForges(t, Forge{Provider: "once"})
	defer func() {
		if recover() == nil {
			t.Error("registering a provider twice did not panic")
		}
	}()
	Register(Forge{Provider: "once"})
}

// A host is told by a forge's public hosts, else by the one forge whose
// word its name holds; a name that fits two forges, or none, is not
// guessed, and the error lists the providers to name.
func TestDetectByHostThenWord(t *testing.T) {
	withForges(t,
		Forge{Provider: "alpha", Hosts: []string{"alpha.example"}, Words: []string{"alpha"}},
		Forge{Provider: "beta", Hosts: []string{"code.example"}, Words: []string{"beta"}})
	for _, tt := range []struct {
		host string
		want Provider
		err  string
	}{
		{"alpha.example", "alpha", ""},
		{"code.example", "beta", ""},
		{"git.alpha.internal", "alpha", ""},
		{"beta-git.example.org", "beta", ""},
		{"git.example.com", "", "cannot tell which forge git.example.com is: name its provider, alpha or beta"},
		{"alpha-mirror-of-beta.example.com", "", "fits both alpha and beta"},
	} {
		f, err := detect(tt.host)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("detect(%q) = %v, %v; want an error with %q", tt.host, f.Provider, err, tt.err)
		case tt.err == "" && (err != nil || f.Provider != tt.want):
			t.Errorf("detect(%q) = %v, %v; want %v", tt.host, f.Provider, err, tt.want)
		}
	}
}

// A commit's page is the registered forge's, by provider or host; a forge
// without commit pages, or a host no forge tells, gets no link.
func TestCommitURLIsTheForgesPage(t *testing.T) {
	withForges(t,
		Forge{Provider: "pages", Hosts: []string{"code.example"}, CommitPage: "/c/"},
		Forge{Provider: "bare", Hosts: []string{"bare.example"}},
		Forge{Provider: "moved", Hosts: []string{"git.moved.example"}, CommitPage: "/commits/",
			Web: func(host, path string) (string, string) { return "web.moved.example", "repos/" + path }})
	for _, tt := range []struct {
		address  string
		provider Provider
		want     string
	}{
		{"https://u:p@code.example/team/app.git", "", "https://code.example/team/app/c/a%2Fb"},
		{"git@code.example:team/app.git", "", "https://code.example/team/app/c/a%2Fb"},
		{"http://127.0.0.1:3000/team/app.git", "pages", "http://127.0.0.1:3000/team/app/c/a%2Fb"},
		{"https://bare.example/team/app.git", "", ""},
		{"https://elsewhere.example/team/app.git", "", ""},
		{"/srv/git/app.git", "pages", ""},
		{"ssh://git@git.moved.example:7999/team/app.git", "", "https://web.moved.example/repos/team/app/commits/a%2Fb"},
	} {
		if got := CommitURL(tt.address, tt.provider, "a/b"); got != tt.want {
			t.Errorf("CommitURL(%q, %q) = %q, want %q", tt.address, tt.provider, got, tt.want)
		}
	}
}

// A repository on this machine's disk has no host: its forge is the one
// the plan names, its repository the path's last two parts.
func TestResolveOfALocalRepository(t *testing.T) {
	withForges(t, Forge{Provider: "local"})
	ep, err := Resolve("file:///srv/git/team/fleet.git", "local", "file:///srv/reviews")
	if err != nil || *ep != (Endpoint{Provider: "local", APIURL: "file:///srv/reviews", Repository: "team/fleet"}) {
		t.Errorf("Resolve = %+v, %v", ep, err)
	}
	for _, tt := range []struct{ url, provider, api, err string }{
		{"file:///srv/git/team/fleet.git", "", "", "has no host to tell its forge by: name its provider, local"},
		{"file:///srv/git/team/fleet.git", "nope", "", `unknown forge provider "nope"`},
		{"file:///fleet.git", "local", "", "cannot read the repository's owner and name"},
		{"file:///srv/git/team/fleet.git", "local", "ftp://x", "is not an http(s) or file URL"},
	} {
		if _, err := Resolve(tt.url, Provider(tt.provider), tt.api); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("Resolve(%q, %q, %q) = %v, want %q", tt.url, tt.provider, tt.api, err, tt.err)
		}
	}
}
