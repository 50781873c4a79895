package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// groupPlans are n plans over apps/app-N, each its own automation.
func groupPlans(url string, n int) []writeback.Plan {
	var plans []writeback.Plan
	for i := range n {
		plans = append(plans, plan(url, func(p *writeback.Plan) {
			p.Path = fmt.Sprintf("apps/app-%d", i)
			p.Commit.Automation = writeback.Object{Namespace: "apps", Name: fmt.Sprintf("app-%d", i)}
		}))
	}
	return plans
}

func groupRepo(t *testing.T, srv *testgit.Server, name string, n int) *testgit.Clone {
	files := map[string]string{"README.md": "a\n"}
	for i := range n {
		files[fmt.Sprintf("apps/app-%d/deploy.yaml", i)] = deployment
	}
	return srv.CreateRepo(t, name, files)
}

// Three automations' plans on one branch are one checkout, one commit and
// one push: the commit's message holds each automation's own message, and
// each outcome names the shared commit. A plan whose path is missing fails
// alone; the others land.
func TestRunGroupMakesOneCommit(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	groupRepo(t, srv, "mono", 3)
	plans := append(groupPlans(srv.RepoURL("mono"), 3), plan(srv.RepoURL("mono"), func(p *writeback.Plan) {
		p.Path = "apps/gone"
		p.Commit.Automation = writeback.Object{Namespace: "apps", Name: "gone"}
	}))
	var pushes []Push
	e := New(Settings{WorkDir: t.TempDir(), Hooks: Hooks{
		BeforePush: func(_ context.Context, p Push) error { pushes = append(pushes, p); return nil },
	}}, Credentials{}, newCache(t))
	outs := e.RunGroup(context.Background(), plans)

	if len(pushes) != 1 || !slices.Equal(pushes[0].Plans, []int{0, 1, 2}) {
		t.Fatalf("pushes %+v, want one carrying plans 0, 1, 2", pushes)
	}
	for i, o := range outs[:3] {
		if o.Err != nil || o.Commit != pushes[0].Commit || !strings.Contains(o.Message, fmt.Sprintf("(apps/app-%d)", i)) {
			t.Errorf("plan %d: %+v, want the shared commit and its own message", i, o)
		}
	}
	if outs[3].Err == nil || !strings.Contains(outs[3].Err.Error(), "does not exist") || outs[3].Commit != "" {
		t.Errorf("plan 3 (missing path): %+v, want its own failure", outs[3])
	}
	bare := srv.BarePath("mono")
	if n := strings.Count(testgit.Git(t, bare, "log", "--format=%ae", "main"), "bot@"); n != 1 {
		t.Fatalf("%d commits of ours, want 1", n)
	}
	msg := testgit.Git(t, bare, "log", "-1", "--format=%B", "main")
	if !strings.HasPrefix(msg, "Update images of 3 automations on main\n") {
		t.Errorf("message:\n%s", msg)
	}
	for i := range 3 {
		if !strings.Contains(msg, fmt.Sprintf("Update images (apps/app-%d)\n\n- File: apps/app-%d/deploy.yaml\n  - Object: Deployment/podinfo", i, i)) {
			t.Errorf("message does not list app-%d's changes:\n%s", i, msg)
		}
		if got := testgit.Git(t, bare, "show", fmt.Sprintf("main:apps/app-%d/deploy.yaml", i)); !strings.Contains(got, "podinfo:6.5.0") {
			t.Errorf("app-%d not updated:\n%s", i, got)
		}
	}
}

// Two automations overlap: one over apps/, one over apps/app-1, both
// setting the same value. The first plan changes app-1's file in the
// group's checkout before the second runs; the second still reports that
// change as its own, and the shared commit as its commit, since the
// commit changed its file (it reported no change before).
func TestRunGroupOverlappingPlansBothChange(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	groupRepo(t, srv, "overlap", 2)
	url := srv.RepoURL("overlap")
	plans := []writeback.Plan{
		plan(url, func(p *writeback.Plan) {
			p.Path = "apps"
			p.Commit.Automation = writeback.Object{Namespace: "apps", Name: "all"}
		}),
		plan(url, func(p *writeback.Plan) {
			p.Path = "apps/app-1"
			p.Commit.Automation = writeback.Object{Namespace: "apps", Name: "app-1"}
		}),
	}
	outs := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).RunGroup(context.Background(), plans)
	for i, o := range outs {
		if o.Err != nil || o.Commit == "" || o.Changes == nil || len(o.Changes.Files) == 0 {
			t.Errorf("plan %d: %+v, want the shared commit and its changes", i, o)
		}
	}
	if outs[0].Commit != outs[1].Commit {
		t.Errorf("commits %s and %s, want one", outs[0].Commit, outs[1].Commit)
	}
	if got := outs[1].Changes.Files; len(got) != 1 || got[0].Path != "deploy.yaml" {
		t.Errorf("plan 1 changed %+v, want its deploy.yaml", got)
	}
	msg := testgit.Git(t, srv.BarePath("overlap"), "log", "-1", "--format=%B", "main")
	if !strings.HasPrefix(msg, "Update images of 2 automations on main\n") || !strings.Contains(msg, "(apps/app-1)") {
		t.Errorf("message:\n%s", msg)
	}
}

// A group of one plan makes the commit a plain run makes: the plan's own
// message, nothing around it.
func TestRunGroupOfOneIsARun(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	groupRepo(t, srv, "one", 1)
	outs := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).RunGroup(context.Background(), groupPlans(srv.RepoURL("one"), 1))
	if outs[0].Err != nil || outs[0].Commit == "" {
		t.Fatalf("%+v", outs[0])
	}
	if msg := testgit.Git(t, srv.BarePath("one"), "log", "-1", "--format=%B", "main"); !strings.HasPrefix(msg, "Update images (apps/app-0)\n") {
		t.Errorf("message:\n%s", msg)
	}
}

// Someone pushes between the group's fetch and its push: the group starts
// again on their commit and still makes one commit; a plan already
// holding its values is no change, and one whose earlier push landed
// (Resume) is reported with that commit and takes no part.
func TestRunGroupRetriesAndResumes(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := groupRepo(t, srv, "race", 3)
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t))
	first := e.RunGroup(context.Background(), groupPlans(srv.RepoURL("race"), 1))
	if first[0].Commit == "" {
		t.Fatalf("first run: %+v", first[0])
	}
	pushes := 0
	e = New(Settings{WorkDir: t.TempDir(), Hooks: Hooks{BeforePush: func(context.Context, Push) error {
		pushes++
		if pushes == 1 {
			testgit.Git(t, clone.Dir, "pull", "-q", "--ff-only", "origin", "main")
			clone.Commit("someone else", map[string]string{"README.md": "b\n"})
			clone.Push()
		}
		return nil
	}}}, Credentials{}, newCache(t))
	plans := groupPlans(srv.RepoURL("race"), 3)
	plans[0].Resume = first[0].Commit
	outs := e.RunGroup(context.Background(), plans)
	if outs[0].Commit != first[0].Commit || outs[0].Err != nil {
		t.Errorf("plan 0 (landed before): %+v", outs[0])
	}
	if pushes != 2 || outs[1].Commit == "" || outs[1].Commit != outs[2].Commit || outs[1].Retries != 1 {
		t.Errorf("pushes %d, plans 1 and 2: %+v / %+v, want one commit after one retry", pushes, outs[1], outs[2])
	}
	if n := strings.Count(testgit.Git(t, srv.BarePath("race"), "log", "--format=%ae", "main"), "bot@"); n != 2 {
		t.Errorf("%d commits of ours, want 2", n)
	}
}

// Plans resumed from one commit (a batch job's status.pushingCommit) are
// done only if the commit changed files under their paths: one it carries
// nothing of runs again, and lands its change in a commit of its own.
func TestRunGroupResumesOnlyThePlansTheCommitCarries(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	groupRepo(t, srv, "carries", 2)
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t))
	first := e.RunGroup(context.Background(), groupPlans(srv.RepoURL("carries"), 1))
	if first[0].Commit == "" {
		t.Fatalf("first run: %+v", first[0])
	}
	plans := groupPlans(srv.RepoURL("carries"), 2)
	for i := range plans {
		plans[i].Resume = first[0].Commit
	}
	outs := e.RunGroup(context.Background(), plans)
	if outs[0].Err != nil || outs[0].Commit != first[0].Commit {
		t.Errorf("plan 0 (carried): %+v, want the commit it resumed from", outs[0])
	}
	if outs[1].Err != nil || outs[1].Commit == "" || outs[1].Commit == first[0].Commit {
		t.Errorf("plan 1 (not carried): %+v, want a commit of its own", outs[1])
	}
	if got := testgit.Git(t, srv.BarePath("carries"), "show", "main:apps/app-1/deploy.yaml"); !strings.Contains(got, "podinfo:6.5.0") {
		t.Errorf("app-1 not updated:\n%s", got)
	}
}

// Plans that do not share a GroupKey are refused, each with its reason,
// and take no part.
func TestRunGroupRefusesOtherTargets(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	groupRepo(t, srv, "keys", 2)
	plans := groupPlans(srv.RepoURL("keys"), 2)
	plans[1].Target.Branch = "other"
	outs := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).RunGroup(context.Background(), plans)
	if outs[0].Err != nil || outs[0].Commit == "" {
		t.Errorf("plan 0: %+v", outs[0])
	}
	if outs[1].Err == nil || outs[1].Commit != "" {
		t.Errorf("plan 1: %+v, want a refusal", outs[1])
	}
}
