//go:build cgo

package main

import (
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/testing/testgerrit"
)

// With --pull-request --pr-provider gerrit (against the Gerrit stand-in:
// a real git server with Gerrit's receive checks, and its REST API), the
// update is pushed for review: tk-image says it opened change 1 on the
// stream's topic, says so in Gerrit's words, leaves it unchanged when run
// again, and a new tag is the change's next patch set.
func TestRemoteUpdateProposesAGerritChange(t *testing.T) {
	g := testgerrit.New(t, "team/fleet", map[string]string{"deploy/app.yaml": remoteDeployment})
	t.Setenv("TK_GIT_USER", testgerrit.Username)
	t.Setenv("TK_GIT_PASSWORD", testgerrit.Password)
	args := func(tag string) []string {
		return []string{"update", "--repository", g.GitURL, "--path", "deploy",
			"--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:" + tag, "--author-email", "bot@example.com",
			"--git-username-env", "TK_GIT_USER", "--git-password-env", "TK_GIT_PASSWORD",
			"--pull-request", "--pr-provider", "gerrit", "--pr-api-url", g.APIURL}
	}
	code, out, errs := runCLI(t, "", args("6.5.0")...)
	if code != 0 || !strings.Contains(out, "change #1 opened: "+strings.TrimSuffix(g.APIURL, "a/")+"c/team/fleet/+/1 (topic image-toolkit/main, commit ") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	// A run in the same second would make the very same commit.
	for first := time.Now().Unix(); time.Now().Unix() == first; {
		time.Sleep(20 * time.Millisecond)
	}
	if code, out, errs = runCLI(t, "", args("6.5.0")...); code != 0 || !strings.Contains(out, "change #1 unchanged") {
		t.Errorf("again: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs = runCLI(t, "", args("6.6.0")...); code != 0 || !strings.Contains(out, "change #1 updated") {
		t.Errorf("a new tag: exit %d\n%s\n%s", code, out, errs)
	}
	if changes := g.Changes(t); len(changes) != 1 || len(changes[0].PatchSets) != 2 {
		t.Errorf("changes %+v, want one with two patch sets", changes)
	}
}
