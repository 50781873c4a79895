package pullrequest

import (
	"context"
	"strings"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testgerrit"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// The chart's pull request sample on Gerrit, through the three
// controllers. Gerrit cannot run here: the fleet repository's git server
// gets Gerrit's receive checks in its hooks and a REST stand-in written
// from Gerrit's documentation (pkg/testing/testgerrit), and the sample
// names provider gerrit with that API. A pushed tag opens a change on
// refs/for/main with the stream's topic and the sample's hashtag, main
// untouched; the next tag is the change's second patch set with the same
// Change-Id, never a second change.
func TestGerritChangeGetsAPatchSetPerTag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root, c := startChain(ctx, t, chain.Options{})
	user, password := c.GitCredentials()
	g := testgerrit.Attach(t, c.Git.BarePath("fleet"), "fleet", testgerrit.Options{Username: user, Password: password})
	samples, err := c.Samples(root, "imageupdateautomation-pullrequest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(samples, "provider: gitea\n") {
		t.Fatal("the pull request sample no longer names provider gitea")
	}
	samples = strings.Replace(samples, "provider: gitea\n", "provider: gerrit\n        apiURL: "+g.APIURL+"\n", 1)
	e := settle(ctx, t, c, samples)
	main := c.Head("main")

	e.pushTag("6.4.0")
	first := e.waitAutomation("change 1", func(a *imagev1.ImageUpdateAutomation) bool {
		pr := a.Status.LastPullRequest
		return pr != nil && pr.Number == 1 && pr.Action == meta.PullRequestOpened
	}).Status.LastPullRequest.DeepCopy()
	changes := g.Changes(t)
	if len(changes) != 1 || len(changes[0].PatchSets) != 1 || changes[0].Topic != head ||
		changes[0].PatchSets[0].Ref != "refs/for/main%topic="+head+",hashtag=image-update" || changes[0].PatchSets[0].Commit != first.HeadCommit {
		t.Fatalf("changes after 6.4.0: %+v, want one with one patch set at %s", changes, first.HeadCommit)
	}
	if !strings.HasSuffix(first.URL, "/c/fleet/+/1") {
		t.Errorf("the automation reports the change at %q", first.URL)
	}
	if got := e.manifest(first.HeadCommit); !strings.Contains(got, ":6.4.0") {
		t.Errorf("patch set 1 has the manifest\n%s", got)
	}

	e.pushTag("6.5.0")
	second := e.waitAutomation("patch set 2", func(a *imagev1.ImageUpdateAutomation) bool {
		pr := a.Status.LastPullRequest
		return pr != nil && pr.Number == 1 && pr.Action == meta.PullRequestUpdated && pr.HeadCommit != first.HeadCommit
	}).Status.LastPullRequest
	changes = g.Changes(t)
	if len(changes) != 1 || len(changes[0].PatchSets) != 2 || changes[0].PatchSets[1].Commit != second.HeadCommit {
		t.Fatalf("changes after 6.5.0: %+v, want the one change with a second patch set at %s", changes, second.HeadCommit)
	}
	for _, ps := range changes[0].PatchSets {
		msg, err := c.FleetGit("log", "-1", "--format=%B", ps.Commit)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(strings.TrimSpace(msg), "Change-Id: "+changes[0].ChangeID) {
			t.Errorf("patch set %d's message does not end in the change's Change-Id %s:\n%s", ps.Number, changes[0].ChangeID, msg)
		}
	}
	if got := e.manifest(second.HeadCommit); !strings.Contains(got, ":6.5.0") {
		t.Errorf("patch set 2 has the manifest\n%s", got)
	}
	if now := c.Head("main"); now != main {
		t.Errorf("main moved from %s to %s: a review must not push to it", main, now)
	}
}
