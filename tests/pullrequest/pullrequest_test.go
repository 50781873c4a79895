// Package pullrequest proves the pull request flow end to end on a real
// forge: a Gitea built from the module proxy (`make testenv`) holds the
// fleet repository, and the chain (registry, control plane, the three
// controller binaries) proposes updates to it with the chart's pull request
// sample. GitHub and GitLab cannot run here; their API calls are tested in
// update-job-controller/forges against exchanges written from their
// documentation. Bitbucket Cloud, Bitbucket Data Center and Azure DevOps
// cannot run here either: forges_test.go runs the flow through the
// controllers against stand-ins of their APIs.
package pullrequest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgitea"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// The automation of the chart's pull request sample, and its stream.
const (
	automation = "fleet-review"
	head       = "image-toolkit/default-fleet-review"
)

// Env is the chain on Gitea with the pull request sample applied and
// settled (6.3.0 everywhere, nothing to propose).
type Env struct {
	*chain.Env
	t    testing.TB
	ctx  context.Context
	repo *imagev1.ImageRepository
	auto *imagev1.ImageUpdateAutomation
}

// Start starts the chain on Gitea and applies the samples.
func Start(ctx context.Context, t testing.TB) *Env {
	t.Helper()
	root, c := startChain(ctx, t, chain.Options{Gitea: true})
	if _, err := c.Gitea.CreateLabel(ctx, "fleet", "image-update", "#00aabb"); err != nil {
		t.Fatal(err)
	}
	samples, err := c.Samples(root, "imageupdateautomation-pullrequest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return settle(ctx, t, c, samples)
}

// startChain starts the chain with opts at 6.3.0, stopped at the end of
// the test, and returns the repository's root.
func startChain(ctx context.Context, t testing.TB, opts chain.Options) (string, *chain.Env) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := localenv.BinDir(root)
	if opts.Gitea {
		if _, err := testgitea.Binary(bin); err != nil {
			t.Fatalf("%v: run `make testenv` (or hack/tools.sh gitea) first", err)
		}
	}
	c, err := chain.StartWith(ctx, t.TempDir(), bin, []string{"6.3.0"}, func(s string) { t.Log(s) }, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return root, c
}

// settle applies the samples and waits until the first job found nothing
// to change (6.3.0 everywhere).
func settle(ctx context.Context, t testing.TB, c *chain.Env, samples string) *Env {
	t.Helper()
	e := &Env{Env: c, t: t, ctx: ctx}
	if err := c.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}
	e.repo = &imagev1.ImageRepository{}
	e.repo.Name, e.repo.Namespace = "podinfo", "default"
	e.auto = &imagev1.ImageUpdateAutomation{}
	e.auto.Name, e.auto.Namespace = automation, "default"
	e.waitAutomation("the first run", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.Phase == updatev1.UpdateJobNoChange
	})
	return e
}

func (e *Env) waitAutomation(what string, cond func(*imagev1.ImageUpdateAutomation) bool) *imagev1.ImageUpdateAutomation {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := e.Cluster.Client.Get(e.ctx, client.ObjectKeyFromObject(e.auto), e.auto)
		if err == nil && cond(e.auto) {
			return e.auto
		}
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			e.t.Fatalf("waiting for %s: %v\nstatus: %s\njobs:\n%s\nupdate-job-controller log:\n%s",
				what, err, dump(e.auto.Status), e.jobs(), e.Procs["update-job-controller"].Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *Env) jobs() string {
	list := &updatev1.UpdateJobList{}
	if err := e.Cluster.Client.List(e.ctx, list, client.InNamespace("default")); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, j := range list.Items {
		fmt.Fprintf(&b, "%s: %s\n", j.Name, dump(j.Status))
	}
	return b.String()
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// pushTag pushes a tag and asks for a scan, as a registry webhook would.
func (e *Env) pushTag(tag string) {
	e.t.Helper()
	if err := e.PushTag(e.ctx, tag); err != nil {
		e.t.Fatal(err)
	}
	if err := e.RequestReconcile(e.ctx, e.repo); err != nil {
		e.t.Fatal(err)
	}
}

// open waits until the one open request has the title, and returns it.
func (e *Env) open(title string) testgitea.Pull {
	e.t.Helper()
	var prs []testgitea.Pull
	testenv.Eventually(e.t, 2*time.Minute, func() (bool, error) {
		var err error
		prs, err = e.Pulls(e.ctx, "open")
		return err == nil && len(prs) > 0 && prs[0].Title == title, err
	})
	if len(prs) != 1 {
		e.t.Fatalf("%d open requests, want 1: %+v", len(prs), prs)
	}
	return prs[0]
}

// headIsBasePlusOne checks the head branch is the base's head plus one
// commit: never behind the base, no pile of commits.
func (e *Env) headIsBasePlusOne() {
	e.t.Helper()
	out, err := e.FleetGit("rev-list", "--count", "main.."+head)
	if err != nil {
		e.t.Fatal(err)
	}
	behind, err := e.FleetGit("rev-list", "--count", head+"..main")
	if err != nil {
		e.t.Fatal(err)
	}
	if strings.TrimSpace(out) != "1" || strings.TrimSpace(behind) != "0" {
		e.t.Errorf("%s is %s commits ahead of main and %s behind, want 1 and 0", head, strings.TrimSpace(out), strings.TrimSpace(behind))
	}
}

// forgeCalls is the update-job-controller's count of forge API calls.
func (e *Env) forgeCalls() float64 {
	e.t.Helper()
	text, err := e.Procs["update-job-controller"].Metrics(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "imagetoolkit_updatejob_forge_requests_total{") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				e.t.Fatal(err)
			}
			total += v
		}
	}
	return total
}

func (e *Env) manifest(ref string) string {
	e.t.Helper()
	out, err := e.FleetGit("show", ref+":"+chain.ManifestPath)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// The whole life of an update stream on Gitea: a pushed tag opens a
// request (title, body, labels, branch, one-commit diff) without touching
// main; a second tag updates the same request (one request, one commit);
// a commit on main rebases it; merged through the API, the next reconcile
// finds nothing to do and the next tag opens a new request; when main gets
// the change by hand, the open request is closed with a comment.
func TestPullRequestLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e := Start(ctx, t)
	img := e.RegistryHost + "/" + chain.Image
	mainBefore := e.Head("main")

	e.pushTag("6.3.1")
	pr := e.open("Update podinfo to 6.3.1")
	if pr.Head.Ref != head || pr.Base.Ref != "main" || len(pr.Labels) != 1 || pr.Labels[0].Name != "image-update" {
		t.Errorf("request %+v", pr)
	}
	row := fmt.Sprintf("| clusters/prod/podinfo.yaml | Deployment/podinfo | `%s:6.3.0` | `%s:6.3.1` |", img, img)
	if !strings.Contains(pr.Body, row) || !strings.Contains(pr.Body, "ImageUpdateAutomation default/"+automation) {
		t.Errorf("body lacks %q:\n%s", row, pr.Body)
	}
	if e.Head("main") != mainBefore {
		t.Error("main moved: the job pushed to the base")
	}
	e.headIsBasePlusOne()
	diff, err := e.FleetGit("diff", "main", head)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(diff, "+        image: "+img+":6.3.1") || strings.Count(diff, "\n+ ") != 1 {
		t.Errorf("diff:\n%s", diff)
	}
	a := e.waitAutomation("the request recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastPullRequest != nil && a.Status.LastPullRequest.Number == pr.Number
	})
	if lp := a.Status.LastPullRequest; lp.URL != pr.HTMLURL || lp.Action != meta.PullRequestOpened ||
		lp.HeadBranch != head || lp.HeadCommit != pr.Head.SHA {
		t.Errorf("lastPullRequest %+v, request %s head %s", lp, pr.HTMLURL, pr.Head.SHA)
	}

	// A second tag: the same request, rebuilt, retitled; at most 3 API
	// calls (find, edit).
	calls := e.forgeCalls()
	e.pushTag("6.3.2")
	again := e.open("Update podinfo to 6.3.2")
	if again.Number != pr.Number {
		t.Errorf("request #%d, want #%d updated", again.Number, pr.Number)
	}
	e.waitAutomation("the update recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastPullRequest.HeadCommit == again.Head.SHA
	})
	if n := e.forgeCalls() - calls; n > 3 {
		t.Errorf("updating the request took %v API calls, want at most 3", n)
	}
	e.headIsBasePlusOne()
	if m := e.manifest(head); !strings.Contains(m, img+":6.3.2") {
		t.Errorf("head manifest:\n%s", m)
	}

	// Someone commits to main: the request is rebuilt on the new base.
	if _, err := e.Commit(map[string]string{"README.md": "# fleet\n\nReviewed.\n"}, "docs"); err != nil {
		t.Fatal(err)
	}
	if err := e.RequestReconcile(ctx, e.auto); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, error) {
		out, err := e.FleetGit("rev-list", "--count", head+"..main")
		return strings.TrimSpace(out) == "0", err
	})
	e.headIsBasePlusOne()

	// Merged by a reviewer: nothing left to propose.
	if err := e.Gitea.MergePull(ctx, "fleet", pr.Number, "merge"); err != nil {
		t.Fatal(err)
	}
	if err := e.RequestReconcile(ctx, e.auto); err != nil {
		t.Fatal(err)
	}
	merged := e.Head("main")
	e.waitAutomation("a run after the merge", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.ObservedSourceRevision == "main@sha1:"+merged && a.Status.LastJob.Phase == updatev1.UpdateJobNoChange
	})
	if open, err := e.Pulls(ctx, "open"); err != nil || len(open) != 0 {
		t.Errorf("open requests after the merge: %+v, %v", open, err)
	}

	// The next tag opens a new request.
	e.pushTag("6.3.3")
	next := e.open("Update podinfo to 6.3.3")
	if next.Number == pr.Number {
		t.Errorf("the merged request #%d was reused", pr.Number)
	}

	// main gets the change by hand: the request is closed with a comment.
	m := strings.ReplaceAll(e.manifest("main"), img+":6.3.2 # {\"$imagepolicy\": \"default:podinfo\"}", img+":6.3.3 # {\"$imagepolicy\": \"default:podinfo\"}")
	if _, err := e.Commit(map[string]string{chain.ManifestPath: m}, "podinfo 6.3.3 by hand"); err != nil {
		t.Fatal(err)
	}
	if err := e.RequestReconcile(ctx, e.auto); err != nil {
		t.Fatal(err)
	}
	closed, err := e.Gitea.WaitPull(ctx, "fleet", next.Number, func(p *testgitea.Pull) bool { return p.State == "closed" })
	if err != nil {
		t.Fatal(err)
	}
	if closed.Merged {
		t.Error("the request was merged, want closed")
	}
	comments, err := e.Gitea.Comments(ctx, "fleet", next.Number)
	if err != nil || len(comments) != 1 || !strings.Contains(comments[0].Body, "already has these image updates") {
		t.Errorf("comments %+v, %v", comments, err)
	}
	a = e.waitAutomation("the close recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastPullRequest.Action == meta.PullRequestClosedNow
	})
	if a.Status.LastPullRequest.Number != next.Number || a.Status.LastPullRequest.State != meta.PullRequestClosed {
		t.Errorf("lastPullRequest %+v", a.Status.LastPullRequest)
	}
}

// A token the forge refuses fails the job as AuthenticationFailed with
// what the forge said, before anything is pushed, and the token appears in
// no condition or event. The job is an ad-hoc one, whose stream is its own
// head branch image-toolkit/<namespace>-<job>.
func TestPullRequestRefusedToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := Start(ctx, t)
	const token = "not-a-gitea-token-4f2a9c"
	job := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: forge-token
stringData:
  token: %s
---
apiVersion: update.toolkit.dev/v1beta1
kind: UpdateJob
metadata:
  name: bad-token
spec:
  repository:
    url: %s
    secretRef:
      name: git-credentials
  checkout:
    ref:
      branch: main
  update:
    setters:
    - policy: default:podinfo
      name: %s/%s
      tag: 6.3.9
  commit:
    author:
      email: bot@example.com
  push:
    pullRequest:
      provider: gitea
      secretRef:
        name: forge-token
  backoffLimit: 0
`, token, e.RepoURL, e.RegistryHost, chain.Image)
	if err := e.Apply(ctx, job); err != nil {
		t.Fatal(err)
	}
	j := &updatev1.UpdateJob{}
	testenv.Eventually(t, 2*time.Minute, func() (bool, error) {
		err := e.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "bad-token"}, j)
		return j.Status.Phase == updatev1.UpdateJobFailed, err
	})
	status := dump(j.Status)
	if c := j.Status.Conditions; len(c) == 0 || c[0].Reason != "AuthenticationFailed" || !strings.Contains(c[0].Message, "401") {
		t.Errorf("status %s", status)
	}
	out, err := e.Cluster.KubectlCmd(ctx, "get", "events", "-n", "default", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "bad-token") || strings.Contains(string(out), token) || strings.Contains(status, token) {
		t.Errorf("the token leaked, or no event names the job:\nstatus %s\nevents %s", status, out)
	}
	if h := e.Head("image-toolkit/default-bad-token"); h != "" {
		t.Errorf("the head branch was pushed (%s) though the forge refused the token", h)
	}
}
