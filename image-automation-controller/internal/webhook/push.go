package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/receiver"
)

// Push is what a push event is about: the repository, by every URL the
// payload gives for it (clone, SSH, web), and the branch pushed.
type Push struct {
	URLs []string
	// Branch is the branch moved; empty for a generic call that names
	// none, which is about every branch.
	Branch string
	// After is the commit the branch was moved to, when the sender says.
	After string
}

// errIgnore marks a valid call about nothing to run: a ping, a tag push,
// a deleted branch.
var errIgnore = errors.New("nothing to run")

// senders is the GitWebhook's table of senders, by spec.type (the API's
// enum, which TestSendersMatchTheAPIEnum holds it to): how each
// authenticates and reads the push it is about. Every one needs the token
// alone.
var senders = receiver.Senders[Push]{
	imagev1.GitWebhookGitHub: {Verify: receiver.SHA256("X-Hub-Signature-256"),
		Parse: func(h http.Header, body []byte) (Push, error) { return parseGitHub(h.Get("X-GitHub-Event"), body) }},
	imagev1.GitWebhookGitLab: {Verify: receiver.Token("X-Gitlab-Token"), Parse: payload(parseGitLab)},
	imagev1.GitWebhookGitea: {Verify: verifyGitea, Parse: func(h http.Header, body []byte) (Push, error) {
		event := h.Get("X-Gitea-Event")
		if event == "" {
			event = h.Get("X-Forgejo-Event")
		}
		return parseGitHub(event, body)
	}},
	imagev1.GitWebhookGeneric:     {Verify: receiver.Bearer, Parse: payload(parseGeneric)},
	imagev1.GitWebhookGenericHMAC: {Verify: receiver.SHA256("X-Signature"), Parse: payload(parseGeneric)},
}

// SecretKeys are the keys a webhook's Secret must have for its type.
func SecretKeys(typ string) []string { return senders.SecretKeys(typ) }

// payload adapts a parser of the body alone to a Sender's Parse.
func payload(parse func([]byte) (Push, error)) func(http.Header, []byte) (Push, error) {
	return func(_ http.Header, body []byte) (Push, error) { return parse(body) }
}

// verifyGitea: Gitea signs with the bare hex HMAC-SHA256 of the body;
// Forgejo sends the same value under its own name as well.
func verifyGitea(ctx context.Context, c *receiver.Call, secret map[string][]byte) error {
	header := "X-Gitea-Signature"
	if c.Header.Get(header) == "" && c.Header.Get("X-Forgejo-Signature") != "" {
		header = "X-Forgejo-Signature"
	}
	return receiver.HMAC(header, "", sha256.New)(ctx, c, secret)
}

func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("payload is not the JSON this sender sends: %w", err)
	}
	return nil
}

// zeroCommit is the "after" of a push that deleted the branch.
const zeroCommit = "0000000000000000000000000000000000000000"

// branchOf is the branch a pushed ref names; ok is false for a tag or
// anything else.
func branchOf(ref string) (string, bool) {
	b, ok := strings.CutPrefix(ref, "refs/heads/")
	return b, ok && b != ""
}

// push makes the Push of a branch ref and the repository's URLs, or
// errIgnore when the ref is not a branch or the branch was deleted.
func push(ref, after string, deleted bool, urls ...string) (Push, error) {
	b, ok := branchOf(ref)
	if !ok || deleted || after == zeroCommit {
		return Push{}, errIgnore
	}
	p := Push{Branch: b, After: after}
	for _, u := range urls {
		if u != "" {
			p.URLs = append(p.URLs, u)
		}
	}
	if len(p.URLs) == 0 {
		return Push{}, errors.New("payload names no repository URL")
	}
	return p, nil
}

// GitHub's push event
// (https://docs.github.com/en/webhooks/webhook-events-and-payloads#push):
// X-GitHub-Event push, ref refs/heads/<branch>, after, deleted, and the
// repository's clone_url, ssh_url, git_url and html_url. A ping, sent when
// the webhook is made, is accepted with nothing to do. Gitea's and
// Forgejo's push event (https://docs.gitea.com/usage/webhooks, header
// X-Gitea-Event or X-Forgejo-Event) is the same payload without deleted
// and git_url: deleting a branch is a delete event there, not a push.
func parseGitHub(event string, body []byte) (Push, error) {
	var p struct {
		Ref        string `json:"ref"`
		After      string `json:"after"`
		Deleted    bool   `json:"deleted"`
		Repository *struct {
			CloneURL string `json:"clone_url"`
			SSHURL   string `json:"ssh_url"`
			GitURL   string `json:"git_url"`
			HTMLURL  string `json:"html_url"`
		} `json:"repository"`
	}
	if err := decode(body, &p); err != nil {
		return Push{}, err
	}
	if event != "push" {
		return Push{}, errIgnore
	}
	if p.Repository == nil {
		return Push{}, errors.New("payload has no repository")
	}
	r := p.Repository
	return push(p.Ref, p.After, p.Deleted, r.CloneURL, r.SSHURL, r.GitURL, r.HTMLURL)
}

// GitLab's push event
// (https://docs.gitlab.com/user/project/integrations/webhook_events/#push-events):
// object_kind push, ref, after (zeros when the branch was deleted), and
// project.git_http_url, git_ssh_url and web_url. Tag pushes and every
// other event are accepted with nothing to do.
func parseGitLab(body []byte) (Push, error) {
	var p struct {
		ObjectKind string `json:"object_kind"`
		Ref        string `json:"ref"`
		After      string `json:"after"`
		Project    *struct {
			GitHTTPURL string `json:"git_http_url"`
			GitSSHURL  string `json:"git_ssh_url"`
			WebURL     string `json:"web_url"`
		} `json:"project"`
	}
	if err := decode(body, &p); err != nil {
		return Push{}, err
	}
	if p.ObjectKind == "" {
		return Push{}, errors.New("payload has no object_kind")
	}
	if p.ObjectKind != "push" {
		return Push{}, errIgnore
	}
	if p.Project == nil {
		return Push{}, errors.New("payload has no project")
	}
	return push(p.Ref, p.After, false, p.Project.GitHTTPURL, p.Project.GitSSHURL, p.Project.WebURL)
}

// Our own payload, for CI jobs and git servers' hooks:
// {"repository": "https://git.example.com/org/app.git", "branch": "main"};
// without a branch every automation on the repository runs.
func parseGeneric(body []byte) (Push, error) {
	var p struct {
		Repository string `json:"repository"`
		Branch     string `json:"branch"`
	}
	if err := decode(body, &p); err != nil {
		return Push{}, err
	}
	if p.Repository == "" {
		return Push{}, errors.New(`payload has no "repository"`)
	}
	if _, ok := gitsource.RepositoryKey(p.Repository); !ok {
		return Push{}, fmt.Errorf("repository %q is not a git URL", p.Repository)
	}
	return Push{URLs: []string{p.Repository}, Branch: strings.TrimPrefix(p.Branch, "refs/heads/")}, nil
}
