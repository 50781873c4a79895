package webhook

import (
	"context"
	"errors"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/receiver"
)

// Payloads abridged from each host's documented push event, keeping every
// field the parser reads and some it does not.
const (
	// https://docs.github.com/en/webhooks/webhook-events-and-payloads#push
	githubPush = `{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246",
	"after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","created":false,"deleted":false,"forced":false,
	"repository":{"id":186853002,"name":"fleet","full_name":"Acme/fleet","private":true,
	"html_url":"https://github.com/Acme/fleet","git_url":"git://github.com/Acme/fleet.git",
	"ssh_url":"git@github.com:Acme/fleet.git","clone_url":"https://github.com/Acme/fleet.git",
	"default_branch":"main"},"pusher":{"name":"Codertocat"},"commits":[]}`
	// https://docs.gitlab.com/user/project/integrations/webhook_events/#push-events
	gitlabPush = `{"object_kind":"push","event_name":"push","before":"95790bf891e76fee5e1747ab589903a6a1f80f22",
	"after":"da1560886d4f094c3e6c9ef40349f7d38b5d27d7","ref":"refs/heads/master","ref_protected":true,
	"user_username":"jsmith","project_id":15,"project":{"id":15,"name":"Diaspora",
	"web_url":"http://example.com/mike/diaspora","git_ssh_url":"git@example.com:mike/diaspora.git",
	"git_http_url":"http://example.com/mike/diaspora.git","namespace":"Mike",
	"path_with_namespace":"mike/diaspora","default_branch":"master"},
	"repository":{"name":"Diaspora","url":"git@example.com:mike/diaspora.git"},"commits":[],"total_commits_count":4}`
	// https://docs.gitea.com/usage/webhooks (the push event example)
	giteaPush = `{"secret":"","ref":"refs/heads/develop","before":"28e1879d029cb852e4844d9c718537df08844e03",
	"after":"bffeb74224043ba2feb48d137756c8a9331c449a","compare_url":"http://localhost:3000/gitea/webhooks/compare/28e1879d029cb852e4844d9c718537df08844e03...bffeb74224043ba2feb48d137756c8a9331c449a",
	"commits":[],"repository":{"id":140,"name":"webhooks","full_name":"gitea/webhooks",
	"html_url":"http://localhost:3000/gitea/webhooks","ssh_url":"ssh://gitea@localhost:2222/gitea/webhooks.git",
	"clone_url":"http://localhost:3000/gitea/webhooks.git","default_branch":"master"},
	"pusher":{"login":"gitea"},"sender":{"login":"gitea"}}`
)

// Each host's push event is read as the repository's URLs and the branch
// moved; pings, tag pushes, deleted branches and other events are valid
// and about nothing; payloads that are not the host's are errors.
func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		typ    string
		header map[string]string
		body   string
		want   Push
		ignore bool
		err    bool
	}{
		{"github push", imagev1.GitWebhookGitHub, map[string]string{"X-GitHub-Event": "push"}, githubPush,
			Push{Branch: "main", URLs: []string{"https://github.com/Acme/fleet.git", "git@github.com:Acme/fleet.git",
				"git://github.com/Acme/fleet.git", "https://github.com/Acme/fleet"}}, false, false},
		{"github ping", imagev1.GitWebhookGitHub, map[string]string{"X-GitHub-Event": "ping"}, `{"zen":"Keep it logically awesome.","hook_id":1}`, Push{}, true, false},
		{"github tag", imagev1.GitWebhookGitHub, map[string]string{"X-GitHub-Event": "push"}, strings.Replace(githubPush, "refs/heads/main", "refs/tags/v1", 1), Push{}, true, false},
		{"github deleted", imagev1.GitWebhookGitHub, map[string]string{"X-GitHub-Event": "push"}, strings.Replace(githubPush, `"deleted":false`, `"deleted":true`, 1), Push{}, true, false},
		{"github no repository", imagev1.GitWebhookGitHub, map[string]string{"X-GitHub-Event": "push"}, `{"ref":"refs/heads/main"}`, Push{}, false, true},
		{"github not json", imagev1.GitWebhookGitHub, map[string]string{"X-GitHub-Event": "push"}, `ref=main`, Push{}, false, true},
		{"gitlab push", imagev1.GitWebhookGitLab, nil, gitlabPush,
			Push{Branch: "master", URLs: []string{"http://example.com/mike/diaspora.git", "git@example.com:mike/diaspora.git", "http://example.com/mike/diaspora"}}, false, false},
		{"gitlab tag push", imagev1.GitWebhookGitLab, nil, strings.Replace(gitlabPush, `"object_kind":"push"`, `"object_kind":"tag_push"`, 1), Push{}, true, false},
		{"gitlab branch deleted", imagev1.GitWebhookGitLab, nil, strings.Replace(gitlabPush, "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", zeroCommit, 1), Push{}, true, false},
		{"gitlab no kind", imagev1.GitWebhookGitLab, nil, `{"ref":"refs/heads/main"}`, Push{}, false, true},
		{"gitea push", imagev1.GitWebhookGitea, map[string]string{"X-Gitea-Event": "push"}, giteaPush,
			Push{Branch: "develop", URLs: []string{"http://localhost:3000/gitea/webhooks.git", "ssh://gitea@localhost:2222/gitea/webhooks.git", "http://localhost:3000/gitea/webhooks"}}, false, false},
		{"forgejo push", imagev1.GitWebhookGitea, map[string]string{"X-Forgejo-Event": "push"}, giteaPush,
			Push{Branch: "develop", URLs: []string{"http://localhost:3000/gitea/webhooks.git", "ssh://gitea@localhost:2222/gitea/webhooks.git", "http://localhost:3000/gitea/webhooks"}}, false, false},
		{"gitea create", imagev1.GitWebhookGitea, map[string]string{"X-Gitea-Event": "create"}, giteaPush, Push{}, true, false},
		{"generic", imagev1.GitWebhookGeneric, nil, `{"repository":"ssh://git@git.example.com/org/app","branch":"refs/heads/main"}`,
			Push{Branch: "main", URLs: []string{"ssh://git@git.example.com/org/app"}}, false, false},
		{"generic any branch", imagev1.GitWebhookGenericHMAC, nil, `{"repository":"https://git.example.com/org/app.git"}`,
			Push{URLs: []string{"https://git.example.com/org/app.git"}}, false, false},
		{"generic no repository", imagev1.GitWebhookGeneric, nil, `{"branch":"main"}`, Push{}, false, true},
		{"generic not a URL", imagev1.GitWebhookGeneric, nil, `{"repository":"app"}`, Push{}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got, err := parse(tt.typ, h, []byte(tt.body))
			switch {
			case tt.ignore:
				if !errors.Is(err, errIgnore) {
					t.Fatalf("got %+v, %v; want ignored", got, err)
				}
			case tt.err:
				if err == nil || errors.Is(err, errIgnore) {
					t.Fatalf("got %+v, %v; want an error", got, err)
				}
			case err != nil:
				t.Fatal(err)
			case got.Branch != tt.want.Branch || !slices.Equal(got.URLs, tt.want.URLs):
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Each sender type is authenticated its host's way: GitHub's documented
// signature example verifies, Gitea's bare hex of the same HMAC verifies
// (under Forgejo's header name too), GitLab's token header and the generic
// bearer token are compared exactly; a missing credential is 401 and a
// wrong one 403.
func TestVerify(t *testing.T) {
	// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
	secret, body := []byte("It's a Secret to Everybody"), []byte("Hello, World!")
	const githubSig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	giteaSig := strings.TrimPrefix(githubSig, "sha256=")
	tests := []struct {
		typ    string
		header map[string]string
		status int // 0: accepted
	}{
		{imagev1.GitWebhookGitHub, map[string]string{"X-Hub-Signature-256": githubSig}, 0},
		{imagev1.GitWebhookGitHub, map[string]string{"X-Hub-Signature-256": "sha256=" + strings.Repeat("0", 64)}, 403},
		{imagev1.GitWebhookGitHub, map[string]string{"X-Hub-Signature": "sha1=x"}, 401},
		{imagev1.GitWebhookGitea, map[string]string{"X-Gitea-Signature": giteaSig}, 0},
		{imagev1.GitWebhookGitea, map[string]string{"X-Forgejo-Signature": giteaSig}, 0},
		{imagev1.GitWebhookGitea, map[string]string{"X-Gitea-Signature": githubSig}, 403},
		{imagev1.GitWebhookGitea, nil, 401},
		{imagev1.GitWebhookGitLab, map[string]string{"X-Gitlab-Token": string(secret)}, 0},
		{imagev1.GitWebhookGitLab, map[string]string{"X-Gitlab-Token": "guess"}, 403},
		{imagev1.GitWebhookGitLab, nil, 401},
		{imagev1.GitWebhookGeneric, map[string]string{"Authorization": "Bearer " + string(secret)}, 0},
		{imagev1.GitWebhookGeneric, map[string]string{"Authorization": string(secret)}, 403},
		{imagev1.GitWebhookGenericHMAC, map[string]string{"X-Signature": githubSig}, 0},
		{imagev1.GitWebhookGenericHMAC, map[string]string{"X-Signature": giteaSig}, 403},
		{"bitbucket", map[string]string{"Authorization": "Bearer " + string(secret)}, 400},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.header {
			h.Set(k, v)
		}
		err := verify(tt.typ, h, body, secret)
		var r *receiver.Refusal
		switch {
		case tt.status == 0 && err != nil:
			t.Errorf("%s %v: refused: %v", tt.typ, tt.header, err)
		case tt.status != 0 && (!errors.As(err, &r) || r.Status != tt.status):
			t.Errorf("%s %v: got %v, want status %d", tt.typ, tt.header, err, tt.status)
		}
	}
}

// verify and parse run a call of type typ through the sender table, as the
// receiver does.
func verify(typ string, h http.Header, body, token []byte) error {
	c := &receiver.Call{Hook: receiver.Hook{Type: typ}, Header: h, Body: body}
	return senders.Verify(context.Background(), c, map[string][]byte{receiver.TokenKey: token})
}

func parse(typ string, h http.Header, body []byte) (Push, error) {
	return senders.Parse(&receiver.Call{Hook: receiver.Hook{Type: typ}, Header: h, Body: body})
}

// The sender table has exactly the types GitWebhookSpec.Type's enum marker
// lets the API server accept, and each needs the token alone: a sender
// added without its enum value (or the reverse) fails here.
func TestSendersMatchTheAPIEnum(t *testing.T) {
	src, err := os.ReadFile("../../../pkg/apis/image/v1beta1/gitwebhook_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)type GitWebhookSpec struct.*?\+kubebuilder:validation:Enum=(\S+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("GitWebhookSpec has no enum marker")
	}
	api := strings.Split(string(m[1]), ";")
	slices.Sort(api)
	if table := senders.Types(); !slices.Equal(table, api) {
		t.Errorf("sender table %v, API enum %v", table, api)
	}
	for _, typ := range api {
		if keys := senders.SecretKeys(typ); !slices.Equal(keys, []string{receiver.TokenKey}) {
			t.Errorf("%s: secret keys %v", typ, keys)
		}
	}
}
