package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgerrit"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// gerritPlan proposes apps:podinfo at tag on the Gerrit stand-in's
// project, with a hashtag and a reviewer.
func gerritPlan(g *testgerrit.Server, tag string, mutate func(*writeback.PullRequest)) writeback.Plan {
	return plan(g.GitURL, func(p *writeback.Plan) {
		p.Path = "deploy"
		p.Update.Images["apps:podinfo"] = meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: tag}
		pr := &writeback.PullRequest{Provider: "gerrit", APIURL: g.APIURL, Base: "main",
			Labels: []string{"image-update"}, Reviewers: []string{"alice"}}
		if mutate != nil {
			mutate(pr)
		}
		p.Target = writeback.Target{PullRequest: pr}
		p.Commit.Automation = writeback.Object{Namespace: "apps", Name: "fleet"}
	})
}

// On Gerrit an update stream is one change: the first update is pushed to
// refs/for/main with the stream's topic, hashtag and reviewer and opens a
// change; the same update again pushes nothing; a new tag is a second
// patch set of the same change, keeping its Change-Id; once main has the
// values the change is abandoned with a comment, and the next tag opens a
// new change (Gerrit refuses a push for a closed change). The stand-in's
// hooks refuse any commit without a Change-Id, so each push proves the
// trailer is where Gerrit reads it.
func TestGerritKeepsOneChangePerStream(t *testing.T) {
	ctx := context.Background()
	g := testgerrit.New(t, "team/fleet", map[string]string{"deploy/app.yaml": deployment})
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{Git: &git.Auth{Username: testgerrit.Username, Password: testgerrit.Password}}, newCache(t))
	bare := g.Git.BarePath("team/fleet")
	mainBefore := strings.TrimSpace(testgit.Git(t, bare, "rev-parse", "main"))
	const topicRef = "refs/for/main%topic=image-toolkit/apps-fleet,hashtag=image-update,r=alice"

	out, err := e.Run(ctx, gerritPlan(g, "6.5.0", nil))
	if err != nil {
		t.Fatal(err)
	}
	pr := out.PullRequest
	if pr == nil || pr.Action != meta.PullRequestOpened || pr.Number != 1 || !strings.HasSuffix(pr.URL, "/c/team/fleet/+/1") || pr.HeadCommit != out.Commit {
		t.Fatalf("first run: pull request %+v (commit %s), want change 1 opened at the run's commit", pr, out.Commit)
	}
	changes := g.Changes(t)
	if len(changes) != 1 || len(changes[0].PatchSets) != 1 || changes[0].PatchSets[0].Ref != topicRef ||
		changes[0].Topic != "image-toolkit/apps-fleet" || changes[0].Reviewers[0] != "alice" || changes[0].Hashtags[0] != "image-update" {
		t.Fatalf("changes after the first run: %+v, want one of one patch set pushed to %s", changes, topicRef)
	}
	id := changes[0].ChangeID
	if msg := testgit.Git(t, bare, "log", "-1", "--format=%B", out.Commit); !strings.HasSuffix(strings.TrimSpace(msg), "Change-Id: "+id) || !strings.Contains(msg, "6.5.0") {
		t.Errorf("commit message %q does not end in its Change-Id trailer", msg)
	}
	if refs := testgit.Git(t, bare, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, "refs/for/") || !strings.Contains(refs, "refs/changes/01/1/1") ||
		strings.Contains(refs, "image-toolkit/") || strings.TrimSpace(testgit.Git(t, bare, "rev-parse", "main")) != mainBefore {
		t.Errorf("refs after the push:\n%s want main unchanged, refs/changes/01/1/1 and no head branch or refs/for ref", refs)
	}

	// A commit made in the same second would be the very same commit,
	// which Gerrit refuses as "no new changes": the second run commits in
	// a later second, so only samePatchSet keeps it from a new patch set.
	for first := time.Now().Unix(); time.Now().Unix() == first; {
		time.Sleep(20 * time.Millisecond)
	}
	again, err := e.Run(ctx, gerritPlan(g, "6.5.0", nil))
	if err != nil || again.PullRequest == nil || again.PullRequest.Action != meta.PullRequestUnchanged || again.Commit != "" {
		t.Fatalf("the same update again: %+v (commit %q), %v; want the change unchanged and nothing pushed", again.PullRequest, again.Commit, err)
	}
	if n := len(g.Changes(t)[0].PatchSets); n != 1 {
		t.Errorf("%d patch sets after the same update, want 1", n)
	}

	next, err := e.Run(ctx, gerritPlan(g, "6.6.0", nil))
	if err != nil || next.PullRequest == nil || next.PullRequest.Action != meta.PullRequestUpdated || next.PullRequest.Number != 1 {
		t.Fatalf("a new tag: %+v, %v; want change 1 updated", next.PullRequest, err)
	}
	changes = g.Changes(t)
	if len(changes) != 1 || changes[0].ChangeID != id || len(changes[0].PatchSets) != 2 || changes[0].PatchSets[1].Commit != next.Commit {
		t.Fatalf("changes after a new tag: %+v, want change %s with a second patch set %s", changes, id, next.Commit)
	}
	if parent := strings.TrimSpace(testgit.Git(t, bare, "rev-parse", next.Commit+"^")); parent != mainBefore {
		t.Errorf("patch set 2 is on %s, want main %s", parent, mainBefore)
	}

	g.Clone.Commit("6.6.0 by hand", map[string]string{"deploy/app.yaml": strings.Replace(deployment, "6.4.0", "6.6.0", 1)})
	g.Clone.Push()
	closed, err := e.Run(ctx, gerritPlan(g, "6.6.0", nil))
	if err != nil || closed.PullRequest == nil || closed.PullRequest.Action != meta.PullRequestClosedNow {
		t.Fatalf("main has the values: %+v, %v; want the change abandoned", closed.PullRequest, err)
	}
	if c := g.Changes(t)[0]; c.Status != "ABANDONED" || c.AbandonMessage != CloseComment {
		t.Errorf("change after main got the values: %s with %q", c.Status, c.AbandonMessage)
	}

	reopened, err := e.Run(ctx, gerritPlan(g, "6.7.0", nil))
	if err != nil || reopened.PullRequest == nil || reopened.PullRequest.Action != meta.PullRequestOpened || reopened.PullRequest.Number != 2 {
		t.Fatalf("a tag after the abandon: %+v, %v; want change 2 opened", reopened.PullRequest, err)
	}
	if changes = g.Changes(t); len(changes) != 2 || changes[1].ChangeID == id {
		t.Errorf("changes: %+v, want a second change with a new Change-Id", changes)
	}
}

// What a Gerrit push cannot carry is refused before anything is pushed,
// as a spec to change (terminal, InvalidSpec): auto-merge, assignees, and
// a reviewer that would break the ref's options.
func TestGerritRefusesWhatItsPushCannotCarry(t *testing.T) {
	g := testgerrit.New(t, "team/fleet", map[string]string{"deploy/app.yaml": deployment})
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{Git: &git.Auth{Username: testgerrit.Username, Password: testgerrit.Password}}, newCache(t))
	for _, c := range []struct {
		name   string
		mutate func(*writeback.PullRequest)
		want   string
	}{
		{"auto-merge", func(pr *writeback.PullRequest) { pr.AutoMerge = "squash" }, "--pr-auto-merge"},
		{"assignees", func(pr *writeback.PullRequest) { pr.Assignees = []string{"bob"} }, "--pr-assignee"},
		{"a comma in a reviewer", func(pr *writeback.PullRequest) { pr.Reviewers = []string{"alice,bob"} }, "cannot hold ','"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Run(context.Background(), gerritPlan(g, "6.5.0", c.mutate))
			var ee *Error
			if !errors.As(err, &ee) || ee.Kind != KindInvalid || !ee.Terminal || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want a terminal KindInvalid naming %q", err, c.want)
			}
		})
	}
	if changes := g.Changes(t); len(changes) != 0 {
		t.Errorf("refused plans pushed %+v", changes)
	}
}
