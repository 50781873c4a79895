package forges

import (
	"slices"
	"strings"
	"testing"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/forge"
)

// The built-in forges are registered once, however often Register is
// called, and are the API's enum (ForgeProviders): what a CRD accepts is
// what the controllers can open requests on.
func TestTheBuiltInForgesAreTheAPIsEnum(t *testing.T) {
	Register()
	if got, want := forge.Providers(), []forge.Provider{AzureDevOps, Bitbucket, BitbucketServer, Gerrit, Gitea, GitHub, GitLab}; !slices.Equal(got, want) {
		t.Errorf("Providers() = %v, want %v", got, want)
	}
	var api []forge.Provider
	for _, p := range updatev1.ForgeProviders {
		api = append(api, forge.Provider(p))
	}
	slices.Sort(api)
	if !slices.Equal(api, forge.Providers()) {
		t.Errorf("the API's ForgeProviders %v; registered %v", api, forge.Providers())
	}
}

// A host is told by the forge's public hosts, else by the one forge whose
// word its name holds; a name that fits two forges is not guessed.
func TestTheBuiltInForgesTellTheirHosts(t *testing.T) {
	tests := []struct {
		host string
		want forge.Provider
		err  string
	}{
		{"github.com", GitHub, ""},
		{"github.example.com", GitHub, ""},
		{"gitlab.com", GitLab, ""},
		{"git.gitlab.internal", GitLab, ""},
		{"codeberg.org", Gitea, ""},
		{"gitea.example.com", Gitea, ""},
		{"forgejo.example.org", Gitea, ""},
		{"git.example.com", "", "cannot tell which forge git.example.com is: name its provider, azuredevops, bitbucket, bitbucketserver, gerrit, gitea, github or gitlab (an automation's spec.git.push.pullRequest.provider, tk-image's --pr-provider)"},
		{"gitea-mirror-of-github.example.com", "", "fits both gitea and github"},
		{"bitbucket.org", Bitbucket, ""},
		{"bitbucket.example.com", BitbucketServer, ""},
		{"gerrit.example.com", Gerrit, ""},
		{"android-review.googlesource.com", Gerrit, ""},
	}
	for _, tt := range tests {
		ep, err := forge.Resolve("https://"+tt.host+"/org/app.git", "", "")
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: %+v, %v; want an error with %q", tt.host, ep, err, tt.err)
		case tt.err == "" && (err != nil || ep.Provider != tt.want):
			t.Errorf("%s: %+v, %v; want %v", tt.host, ep, err, tt.want)
		}
	}
}

// Resolve tells the forge from the host, derives its API (api.github.com,
// /api/v3/ for GitHub Enterprise, the host's root for GitLab and Gitea,
// https for ssh remotes, http for http remotes) and reads the repository
// path, and refuses what it cannot tell.
func TestResolveTellsTheBuiltInForges(t *testing.T) {
	tests := []struct {
		url, provider, api string
		want               forge.Endpoint
		err                string
	}{
		{url: "https://github.com/org/app.git", want: endpoint(GitHub, "https://api.github.com/", "org/app")},
		{url: "ssh://git@github.com/org/app", want: endpoint(GitHub, "https://api.github.com/", "org/app")},
		{url: "https://github.example.com/org/app", want: endpoint(GitHub, "https://github.example.com/api/v3/", "org/app")},
		{url: "https://gitlab.com/group/sub/app.git", want: endpoint(GitLab, "https://gitlab.com/", "group/sub/app")},
		{url: "ssh://git@gitlab.example.com:2222/group/app.git", want: endpoint(GitLab, "https://gitlab.example.com/", "group/app")},
		{url: "git@github.com:org/app.git", want: endpoint(GitHub, "https://api.github.com/", "org/app")},
		{url: "git@gitlab.example.com:group/sub/app.git", want: endpoint(GitLab, "https://gitlab.example.com/", "group/sub/app")},
		{url: "codeberg.org:org/app", want: endpoint(Gitea, "https://codeberg.org/", "org/app")},
		{url: "https://codeberg.org/me/app", want: endpoint(Gitea, "https://codeberg.org/", "me/app")},
		{url: "http://127.0.0.1:3000/me/app.git", provider: "gitea", want: endpoint(Gitea, "http://127.0.0.1:3000/", "me/app")},
		{url: "https://git.example.com/gitlab/group/app.git", provider: "gitlab", api: "https://git.example.com/gitlab",
			want: endpoint(GitLab, "https://git.example.com/gitlab/", "group/app")},
		{url: "https://git.example.com/org/app", err: "cannot tell which forge git.example.com is"},
		{url: "https://github.com/org", err: "cannot read the repository's owner and name"},
		{url: "https://github.com/a/b/c", err: "cannot read the repository's owner and name"},
		{url: "https://git.example.com/org/app", provider: "gitea", api: "ftp://x", err: "is not an http(s) URL"},
		{url: "https://user:s3cret@git.example.com/x", provider: "gitea", err: "xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			got, err := forge.Resolve(tt.url, forge.Provider(tt.provider), tt.api)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != tt.want {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func endpoint(p forge.Provider, apiURL, repo string) forge.Endpoint {
	return forge.Endpoint{Provider: p, APIURL: apiURL, Repository: repo}
}

// The built-in forges link a commit's page as each spells it, from the
// host or the pull request provider; a server that is no forge gets no
// link, rather than one that would 404.
func TestTheBuiltInForgesLinkCommits(t *testing.T) {
	Register()
	tests := []struct{ name, address, forge, want string }{
		{"https drops credentials and .git", "https://u:p@github.com/org/repo.git", "", "https://github.com/org/repo/commit/c1"},
		{"scp-like SSH becomes https", "git@github.com:org/repo.git", "", "https://github.com/org/repo/commit/c1"},
		{"ssh URL drops the port", "ssh://git@gitea.example.com:2222/org/repo", "", "https://gitea.example.com/org/repo/commit/c1"},
		{"GitLab has its own path", "https://gitlab.com/group/sub/repo.git", "", "https://gitlab.com/group/sub/repo/-/commit/c1"},
		{"a plain git server has no commit pages", "http://127.0.0.1:8080/fleet.git", "", ""},
		{"the pull request provider names the forge", "http://127.0.0.1:3000/org/fleet.git", "gitea", "http://127.0.0.1:3000/org/fleet/commit/c1"},
		{"a self-managed GitLab by its provider", "https://code.example.com/group/repo.git", "gitlab", "https://code.example.com/group/repo/-/commit/c1"},
		{"a local path has no page", "/srv/git/repo.git", "", ""},
		{"file URLs have no page", "file:///srv/git/repo.git", "", ""},
		{"Bitbucket Cloud", "git@bitbucket.org:team/fleet.git", "", "https://bitbucket.org/team/fleet/commits/c1"},
		{"Bitbucket Data Center serves git under scm/", "https://bitbucket.example.com/scm/OPS/fleet.git", "", "https://bitbucket.example.com/projects/OPS/repos/fleet/commits/c1"},
		{"Bitbucket Data Center under a context path", "https://git.example.com/bb/scm/OPS/fleet.git", "bitbucketserver", "https://git.example.com/bb/projects/OPS/repos/fleet/commits/c1"},
		{"Bitbucket Data Center over ssh, a personal repository", "ssh://git@bitbucket.example.com:7999/~jdoe/fleet.git", "", "https://bitbucket.example.com/users/jdoe/repos/fleet/commits/c1"},
		{"Azure DevOps", "https://acme@dev.azure.com/acme/ops/_git/fleet", "", "https://dev.azure.com/acme/ops/_git/fleet/commit/c1"},
		{"Azure DevOps over ssh", "git@ssh.dev.azure.com:v3/acme/ops/fleet", "", "https://dev.azure.com/acme/ops/_git/fleet/commit/c1"},
		{"Azure DevOps at visualstudio.com", "https://acme.visualstudio.com/ops/_git/fleet", "", "https://acme.visualstudio.com/ops/_git/fleet/commit/c1"},
		{"Gerrit has no commit pages of its own", "https://gerrit.example.com/a/fleet", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := forge.CommitURL(tt.address, forge.Provider(tt.forge), "c1"); got != tt.want {
				t.Errorf("CommitURL(%q) = %q, want %q", tt.address, got, tt.want)
			}
		})
	}
}

// A source repository's compare page, as each built-in forge spells it,
// from the host alone; Gerrit and plain git servers have none.
func TestTheBuiltInForgesCompareCommits(t *testing.T) {
	Register()
	for _, tt := range []struct{ address, want string }{
		{"https://github.com/acme/api", "https://github.com/acme/api/compare/aaa...bbb"},
		{"https://gitlab.com/group/sub/api", "https://gitlab.com/group/sub/api/-/compare/aaa...bbb"},
		{"https://codeberg.org/acme/api", "https://codeberg.org/acme/api/compare/aaa...bbb"},
		{"https://bitbucket.org/acme/api", "https://bitbucket.org/acme/api/branches/compare/bbb%0Daaa"},
		{"https://dev.azure.com/acme/ops/_git/api", "https://dev.azure.com/acme/ops/_git/api/branchCompare?baseVersion=GCaaa&targetVersion=GCbbb"},
		{"https://gerrit.example.com/api", ""},
		{"http://127.0.0.1:8080/api", ""},
	} {
		if got := forge.CompareURL(tt.address, "", "aaa", "bbb"); got != tt.want {
			t.Errorf("CompareURL(%q) = %q, want %q", tt.address, got, tt.want)
		}
	}
}
