package forge

import (
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"

	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestEveryForgeIsRegisteredOnce(t *testing.T) {
	if got, want := Providers(), []Provider{Gitea, GitHub, GitLab}; !slices.Equal(got, want) {
		t.Errorf("Providers() = %v, want %v", got, want)
	}
	// The API's enum (ForgeProviders) and the registry name the same forges.
	var api []Provider
	for _, p := range updatev1.ForgeProviders {
		api = append(api, Provider(p))
	}
	slices.Sort(api)
	if !slices.Equal(api, Providers()) {
		t.Errorf("the API's ForgeProviders %v; registered %v", api, Providers())
	}
	if got := providerList(); got != "gitea, github or gitlab" {
		t.Errorf("providerList() = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering github twice did not panic")
		}
	}()
	register(Forge{Provider: GitHub})
}

// A host is told by the forge's public hosts, else by the one forge whose
// word its name holds; a name that fits two forges is not guessed.
func TestDetectTellsTheForgeOfAHost(t *testing.T) {
	tests := []struct {
		host string
		want Provider
		err  string
	}{
		{"github.com", GitHub, ""},
		{"github.example.com", GitHub, ""},
		{"gitlab.com", GitLab, ""},
		{"git.gitlab.internal", GitLab, ""},
		{"codeberg.org", Gitea, ""},
		{"gitea.example.com", Gitea, ""},
		{"forgejo.example.org", Gitea, ""},
		{"git.example.com", "", "cannot tell which forge git.example.com is: name its provider, gitea, github or gitlab (an automation's spec.git.push.pullRequest.provider, tk-image's --pr-provider)"},
		{"gitea-mirror-of-github.example.com", "", "fits both gitea and github"},
	}
	for _, tt := range tests {
		f, err := detect(tt.host)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("detect(%q) = %v, %v; want an error with %q", tt.host, f.Provider, err, tt.err)
		case tt.err == "" && (err != nil || f.Provider != tt.want):
			t.Errorf("detect(%q) = %v, %v; want %v", tt.host, f.Provider, err, tt.want)
		}
	}
}

// Adding a forge is one entry: Resolve and New find it with nothing else
// changed.
func TestAnAddedForgeNeedsOnlyItsEntry(t *testing.T) {
	const name Provider = "example"
	errMade := errors.New("the example forge's constructor ran")
	register(Forge{Provider: name, Hosts: []string{"forge.example"}, Words: []string{"exampleforge"},
		New: func(Options, *http.Client) (Client, error) { return nil, errMade }})
	defer func() {
		registry.Lock()
		delete(registry.forges, name)
		registry.Unlock()
	}()
	ep, err := Resolve("git@forge.example:team/app.git", "", "")
	if err != nil || *ep != (Endpoint{Provider: name, APIURL: "https://forge.example/", Repository: "team/app"}) {
		t.Fatalf("Resolve = %+v, %v", ep, err)
	}
	if _, err := New(Options{Provider: name, APIURL: ep.APIURL, Repository: ep.Repository, Token: "t"}); !errors.Is(err, errMade) {
		t.Errorf("New = %v, want the entry's constructor's error", err)
	}
	if _, err := New(Options{Provider: "nope", Repository: "o/r", Token: "t"}); err == nil || !strings.Contains(err.Error(), "example, gitea, github or gitlab") {
		t.Errorf("New of an unknown provider: %v", err)
	}
}
