//go:build cgo

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/testing/testgitea"
)

const remoteDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
`

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func show(t *testing.T, bare, rev string) string {
	t.Helper()
	return testgit.Git(t, bare, "show", rev)
}

// Over HTTPS with basic authentication from the environment and the
// server's CA from a file: clone, update, commit and push to the branch;
// run again, nothing changes. Without the CA the certificate is refused:
// TLS is verified by default.
func TestRemoteUpdateOverHTTPS(t *testing.T) {
	srv := testgit.New(t, testgit.Options{TLS: true, Username: "bot", Password: "s3cret-token"})
	srv.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": remoteDeployment, "README.md": "fleet\n"})
	t.Setenv("TK_GIT_USER", "bot")
	t.Setenv("TK_GIT_PASSWORD", "s3cret-token")
	ca := writeFile(t, "ca.pem", srv.CAPEM)
	args := []string{"update", "--repository", srv.RepoURL("fleet"), "--path", "deploy",
		"--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0", "--author-email", "bot@example.com",
		"--git-username-env", "TK_GIT_USER", "--git-password-env", "TK_GIT_PASSWORD"}

	code, _, errs := runCLI(t, "", args...)
	if code != 1 || !strings.Contains(errs, "certificate") || strings.Contains(errs, "s3cret-token") {
		t.Fatalf("without the CA: exit %d, %s", code, errs)
	}

	args = append(args, "--git-ca-file", ca)
	code, out, errs := runCLI(t, "", args...)
	if code != 0 || !strings.Contains(out, "ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0") ||
		!strings.Contains(out, "to refs/heads/main") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if app := show(t, srv.BarePath("fleet"), "main:deploy/app.yaml"); !strings.Contains(app, "podinfo:6.5.0") {
		t.Errorf("main:deploy/app.yaml\n%s", app)
	}
	if author := testgit.Git(t, srv.BarePath("fleet"), "log", "-1", "--format=%an <%ae>", "main"); strings.TrimSpace(author) != "tk-image <bot@example.com>" {
		t.Errorf("author %q", author)
	}
	// Files are named from the repository's root, in what tk-image prints
	// and in the commit, as git names them: not app.yaml under --path.
	if msg := testgit.Git(t, srv.BarePath("fleet"), "log", "-1", "--format=%B", "main"); !strings.Contains(msg, "deploy/app.yaml") ||
		!strings.HasPrefix(out, "deploy/app.yaml\n") {
		t.Errorf("the commit message and the output name the file from --path, not the repository's root:\n%s\n%s", msg, out)
	}

	code, out, errs = runCLI(t, "", args...)
	if code != 0 || !strings.Contains(out, "no changes") || strings.Contains(out, "pushed") {
		t.Errorf("again: exit %d\n%s\n%s", code, out, errs)
	}
}

// Over SSH with a key file and known_hosts: the change goes to another
// branch (rewritten from the checkout, as Flux does) and is signed; a
// server whose host key known_hosts does not list is refused. --dry-run
// clones and updates but commits nothing.
func TestRemoteUpdateOverSSH(t *testing.T) {
	srv := testgit.NewSSH(t)
	srv.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": remoteDeployment})
	key := writeFile(t, "id_ed25519", srv.ClientKey)
	signing, _ := testgit.SSHKeygen(t, "")
	signingKey := writeFile(t, "signing", signing)
	base := []string{"update", "--repository", srv.RepoURL("fleet"), "--path", "deploy",
		"--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0", "--author-email", "bot@example.com",
		"--ssh-key", key}
	mainBefore := testgit.Git(t, srv.BarePath("fleet"), "rev-parse", "main")

	code, _, errs := runCLI(t, "", append(base, "--known-hosts", writeFile(t, "wrong", srv.WrongKnownHosts(t)))...)
	if code != 1 || !strings.Contains(errs, "authentication") {
		t.Fatalf("a host key known_hosts does not list: exit %d, %s", code, errs)
	}

	hosts := writeFile(t, "known_hosts", srv.KnownHosts)
	code, out, errs := runCLI(t, "", append(base, "--known-hosts", hosts, "--dry-run")...)
	if code != 0 || !strings.Contains(out, "-> ghcr.io/stefanprodan/podinfo:6.5.0") || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
	}
	if after := testgit.Git(t, srv.BarePath("fleet"), "rev-parse", "main"); after != mainBefore {
		t.Fatal("the dry run moved main")
	}

	code, out, errs = runCLI(t, "", append(base, "--known-hosts", hosts, "--push-branch", "image-updates",
		"--signing-key", signingKey, "--signing-key-type", "ssh")...)
	if code != 0 || !strings.Contains(out, "to refs/heads/image-updates") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if app := show(t, srv.BarePath("fleet"), "image-updates:deploy/app.yaml"); !strings.Contains(app, "podinfo:6.5.0") {
		t.Errorf("image-updates:deploy/app.yaml\n%s", app)
	}
	if commit := testgit.Git(t, srv.BarePath("fleet"), "cat-file", "commit", "image-updates"); !strings.Contains(commit, "BEGIN SSH SIGNATURE") {
		t.Errorf("the commit is not signed:\n%s", commit)
	}
	if after := testgit.Git(t, srv.BarePath("fleet"), "rev-parse", "main"); after != mainBefore {
		t.Error("main moved")
	}
}

// What cannot work is refused before any network call, as a usage error.
func TestRemoteUpdateUsage(t *testing.T) {
	policy := []string{"--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0"}
	tests := []struct {
		args []string
		errs string
	}{
		{[]string{"--branch", "dev"}, "need --repository"},
		{[]string{"--repository", "https://example.com/o/r.git"}, "--repository needs --author-email"},
		{[]string{"--repository", "https://example.com/o/r.git", "--author-email", "a@b", "--push-branch", "a..b"}, "not a valid branch name"},
		{[]string{"--repository", "https://example.com/o/r.git", "--author-email", "a@b", "--push-refspec", "dev:x"}, "the source must be HEAD"},
		{[]string{"--repository", "https://example.com/o/r.git", "--author-email", "a@b", "--pr-secret", "s"}, "--forge-token-env"},
		{[]string{"--repository", "https://example.com/o/r.git", "--author-email", "a@b", "--pull-request"}, "cannot tell which forge example.com is"},
		{[]string{"--repository", "https://example.com/o/r.git", "--author-email", "a@b", "--git-password-env", "TK_NOT_SET_ANYWHERE"}, "TK_NOT_SET_ANYWHERE"},
		{[]string{"--repository", "ssh://git@example.com/o/r.git", "--author-email", "a@b", "--known-hosts", "/does/not/exist"}, "--known-hosts"},
		{[]string{"--repository", "ssh://git@example.com/o/r.git", "--author-email", "a@b", "--known-hosts", "/dev/null"}, "needs an identity"},
	}
	for _, tt := range tests {
		code, _, errs := runCLI(t, "", append(append([]string{"update"}, policy...), tt.args...)...)
		if code != 2 || !strings.Contains(errs, tt.errs) {
			t.Errorf("%v: exit %d, %s; want 2 and %q", tt.args, code, errs, tt.errs)
		}
	}
}

// With --pull-request against a real Gitea, the change is proposed: the
// request is opened once, and a run with the same values leaves it as it
// is. The forge token comes from the environment.
func TestRemoteUpdateProposesAPullRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := testgitea.Start(ctx, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	url, err := srv.CreateRepo(ctx, "fleet", map[string]string{"deploy/app.yaml": remoteDeployment})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TK_GIT_USER", srv.Admin)
	t.Setenv("TK_GIT_PASSWORD", srv.Password)
	t.Setenv("TK_FORGE_TOKEN", srv.Token)
	args := []string{"update", "--repository", url, "--path", "deploy",
		"--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0", "--author-email", "bot@example.com",
		"--git-username-env", "TK_GIT_USER", "--git-password-env", "TK_GIT_PASSWORD",
		"--pull-request", "--pr-provider", "gitea", "--forge-token-env", "TK_FORGE_TOKEN"}
	code, out, errs := runCLI(t, "", args...)
	if code != 0 || !strings.Contains(out, "pull request #1 opened") || !strings.Contains(out, "image-toolkit/main") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "", args...)
	if code != 0 || !strings.Contains(out, "pull request #1 unchanged") {
		t.Errorf("again: exit %d\n%s\n%s", code, out, errs)
	}
	// -o json names the request as an UpdateJob's status.pullRequest does.
	code, out, errs = runCLI(t, "", append(args, "-o", "json")...)
	var res struct {
		PullRequest map[string]any `json:"pullRequest"`
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
		t.Fatalf("-o json: exit %d, %v\n%s\n%s", code, err, out, errs)
	}
	if pr := res.PullRequest; pr["number"] != float64(1) || pr["action"] != "unchanged" || pr["state"] != "open" || pr["headBranch"] != "image-toolkit/main" {
		t.Errorf("-o json: pullRequest %v; want number 1, action unchanged, state open, headBranch image-toolkit/main", pr)
	}
	if prs, err := srv.ListPulls(ctx, "fleet", "all"); err != nil || len(prs) != 1 {
		t.Errorf("requests %+v, %v; want exactly one", prs, err)
	}
}
