// Package pullrequest's forges test proves the pull request flow end to
// end, through the three controller binaries, on the forges that cannot
// run here: Bitbucket Cloud (provider bitbucket), Bitbucket Data Center
// (bitbucketserver) and Azure DevOps (azuredevops) are a hosted service or
// licensed products with no build a test can start on loopback. Each is
// replaced by a stand-in (tests/internal/forgestandin): a stateful HTTP
// server that speaks the forge's REST API as the vendor's public
// documentation describes it, and refuses, in the forge's error shape,
// any path, parameter, body or credential the forge would not take. The
// git side is real: the chain's git server (git http-backend) holds each
// forge's fleet repository under the path the forge serves it at, the job
// pushes its head branch there, and the stand-in reads its branches from
// it.
package pullrequest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	gcrname "github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/forgestandin"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// forgeCase is one forge's part in TestForgePullRequests.
type forgeCase struct {
	// name is the forge's provider, and names its objects.
	name string
	// repoPath is where the fleet repository is on the git server, as the
	// forge serves its repositories; gitURL is its clone URL there.
	repoPath string
	gitURL   func(server string) string
	// start starts the stand-in for the repository.
	start func(t testing.TB, cfg forgestandin.Config) *forgestandin.Server
	// username and token are the forge Secret's (pullRequest.secretRef);
	// the stand-in takes exactly these.
	username, token string
	// reviewers (known to the stand-in), labels and autoMerge are the
	// automation's spec; wantAutoMerge is the forge's strategy for it.
	reviewers     []string
	labels        []string
	autoMerge     string
	wantAutoMerge string
	// closed is the forge's state of a closed request.
	closed string
	// refusal is what the forge says of a token it does not take.
	refusal string
}

const azureSelf = "d6245f20-2af8-44f4-9451-8107cb2767db"

var forgeCases = []forgeCase{
	{
		// Bitbucket Cloud: repositories are WORKSPACE/REPO; an Atlassian
		// API token goes with the account's email by basic authentication.
		// Its pull requests have no labels and no auto-merge: none asked.
		name: "bitbucket", repoPath: "acme/fleet",
		gitURL: func(s string) string { return s + "/acme/fleet.git" },
		start: func(t testing.TB, cfg forgestandin.Config) *forgestandin.Server {
			return forgestandin.NewBitbucket(t, "acme", "fleet", cfg)
		},
		username: "imagebot@example.com", token: "ATATT3xFfGF0bitbucket-api-token",
		reviewers: []string{"557058:3f2a6c1e-8d4b-4a5e-9c1f-2b3a4c5d6e7f", "{b1e2c3d4-0000-4a5b-9c8d-1e2f3a4b5c6d}"},
		closed:    "DECLINED", refusal: "Token is invalid, expired, or not supported for this endpoint.",
	},
	{
		// Bitbucket Data Center: https://HOST/scm/KEY/slug.git; an HTTP
		// access token is a bearer token; auto-merge with a strategy id.
		// No labels on Data Center's pull requests.
		name: "bitbucketserver", repoPath: "scm/OPS/fleet",
		gitURL: func(s string) string { return s + "/scm/OPS/fleet.git" },
		start: func(t testing.TB, cfg forgestandin.Config) *forgestandin.Server {
			return forgestandin.NewBitbucketServer(t, "OPS", "fleet", cfg)
		},
		token:     "BBDC-NzQ3MzE1NjU4OTk6standin-token",
		reviewers: []string{"jdoe"}, autoMerge: "squash", wantAutoMerge: "squash",
		closed: "DECLINED", refusal: "Authentication failed. Please check your credentials and try again.",
	},
	{
		// Azure DevOps: https://dev.azure.com/ORG/PROJECT/_git/REPO,
		// without .git (git http-backend finds REPO.git as a forge finds
		// its repository); a personal access token by basic
		// authentication; labels are tags; auto-merge is auto-complete.
		name: "azuredevops", repoPath: "acme/platform/_git/fleet",
		gitURL: func(s string) string { return s + "/acme/platform/_git/fleet" },
		start: func(t testing.TB, cfg forgestandin.Config) *forgestandin.Server {
			return forgestandin.NewAzureDevOps(t, "acme", "platform", "fleet", azureSelf, cfg)
		},
		username: "imagebot", token: "7kq3stpat0ken4zure5valuex2mplezzzzzzzzzzzzzzzzzzzzzz",
		reviewers: []string{"0b7a5f3e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}, labels: []string{"image-update"},
		autoMerge: "squash", wantAutoMerge: "squash",
		closed: "abandoned", refusal: "TF400813: The user '' is not authorized to access this resource.",
	},
}

// forgeRun is one forge's flow on the shared chain.
type forgeRun struct {
	forgeCase
	t     *testing.T
	ctx   context.Context
	chain *chain.Env
	img   v1.Image
	// image is the repository the forge's policy follows at the local
	// registry: each forge has its own, so the three flows run at once.
	image string
	bare  string
	clone *testgit.Clone
	forge *forgestandin.Server
	repo  *imagev1.ImageRepository
	auto  *imagev1.ImageUpdateAutomation
	head  string
	// seeded are the requests made before the automation: another
	// stream's open request, and this stream's old declined one.
	seeded []forgestandin.Pull
}

// One chain (registry, control plane, the three controller binaries, the
// git server) and, for each forge, a fleet repository on the git server,
// a stand-in for its API and an automation proposing to it: a pushed tag
// opens exactly one request from the stream's head branch into main, with
// the rendered title and body, reviewers, and labels and auto-merge where
// the forge has them, the head branch being main plus one commit; a
// second tag updates the same request in place; the automation and job
// statuses report the request's URL and number as the stand-in gave them;
// when main gets the change by hand, the request is closed (declined,
// abandoned) with a comment; a token the forge refuses fails a job as
// AuthenticationFailed in the forge's words, pushing nothing. The forges'
// flows run in parallel.
func TestForgePullRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	// Not deferred: the parallel subtests run after this function returns,
	// and the cleanups after they end.
	t.Cleanup(cancel)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c, err := chain.StartWith(ctx, t.TempDir(), localenv.BinDir(root), nil, func(s string) { t.Log(s) }, chain.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := c.Apply(ctx, c.CredentialsSecret("git-credentials")); err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, fc := range forgeCases {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			r := &forgeRun{forgeCase: fc, t: t, ctx: ctx, chain: c, img: img}
			r.setUp()
			r.lifecycle()
			r.refusedToken()
		})
	}
}

// setUp creates the fleet repository, starts the stand-in with the seeded
// requests, applies the forge's objects and waits for the automation's
// first run, which finds nothing to change.
func (r *forgeRun) setUp() {
	t := r.t
	r.image = r.chain.RegistryHost + "/" + r.name + "/podinfo"
	r.pushTag("6.3.0")
	r.clone = r.chain.Git.CreateRepo(t, r.repoPath, map[string]string{
		chain.ManifestPath: r.manifest("6.3.0"),
		"README.md":        "# fleet\n",
	})
	r.bare = r.chain.Git.BarePath(r.repoPath)
	r.head = "image-toolkit/default-fleet-" + r.name
	r.forge = r.start(t, forgestandin.Config{
		Username: r.username, Token: r.token, Branch: r.branch,
		Users: append([]string{"someone-else"}, r.reviewers...),
	})
	t.Cleanup(func() {
		// Anything the stand-in refused is something the forge would
		// have refused: the flow must make none.
		if refused := r.forge.Refusals(); len(refused) > 0 {
			t.Errorf("the %s stand-in refused %d requests:\n%s\ncalls:\n%s", r.name, len(refused),
				strings.Join(refused, "\n"), strings.Join(r.forge.Calls(), "\n"))
		}
	})
	openState, oldState := "OPEN", "DECLINED"
	if r.name == "azuredevops" {
		openState, oldState = "active", "abandoned"
	}
	r.seeded = []forgestandin.Pull{
		r.forge.Seed(forgestandin.Pull{Title: "Docs", Body: "by a person", Head: "docs/readme", Base: "main", State: openState}),
		r.forge.Seed(forgestandin.Pull{Title: "Update podinfo to 6.2.0", Body: "an old proposal", Head: r.head, Base: "main", State: oldState}),
	}

	list := func(v []string) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	pr := fmt.Sprintf(`      pullRequest:
        provider: %s
        apiURL: %s
        secretRef:
          name: forge-%s
        reviewers: %s
`, r.name, r.forge.URL, r.name, list(r.reviewers))
	if len(r.labels) > 0 {
		pr += "        labels: " + list(r.labels) + "\n"
	}
	if r.autoMerge != "" {
		pr += "        autoMerge: " + r.autoMerge + "\n"
	}
	secret := fmt.Sprintf("  token: %q\n", r.token)
	if r.username != "" {
		secret += fmt.Sprintf("  username: %q\n", r.username)
	}
	objects := fmt.Sprintf(`apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata:
  name: podinfo-%[1]s
spec:
  image: %[2]s
  insecure: true
  interval: 5m
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: podinfo-%[1]s
  labels:
    forge: %[1]s
spec:
  imageRepositoryRef:
    name: podinfo-%[1]s
  policy:
    semver:
      range: ">=6.0.0 <7.0.0"
---
apiVersion: v1
kind: Secret
metadata:
  name: forge-%[1]s
stringData:
%[3]s---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata:
  name: fleet-%[1]s
spec:
  interval: 5m
  git:
    repository:
      url: %[4]s
      secretRef:
        name: git-credentials
    checkout:
      ref:
        branch: main
    commit:
      author:
        name: imagebot
        email: imagebot@example.com
    push:
%[5]s  update:
    path: ./clusters/prod
    strategy: Setters
  policySelector:
    matchLabels:
      forge: %[1]s
`, r.name, r.image, secret, r.gitURL(r.chain.Git.URL), pr)
	if err := r.chain.Apply(r.ctx, objects); err != nil {
		t.Fatal(err)
	}
	r.repo = &imagev1.ImageRepository{}
	r.repo.Name, r.repo.Namespace = "podinfo-"+r.name, "default"
	r.auto = &imagev1.ImageUpdateAutomation{}
	r.auto.Name, r.auto.Namespace = "fleet-"+r.name, "default"
	r.waitAutomation("the first run", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.Phase == updatev1.UpdateJobNoChange
	})
}

func (r *forgeRun) lifecycle() {
	t := r.t
	mainBefore := r.gitHead("main")

	// A tag opens one request from the stream's head branch into main.
	// What the request holds is read once the job has finished: the
	// forge's calls after the request exists (Data Center's auto-merge,
	// Azure DevOps' auto-complete) come after it is first seen.
	r.pushTagAndScan("6.3.1")
	opened := r.waitOpen("Update podinfo-" + r.name + " to 6.3.1")
	r.waitStatus(opened, meta.PullRequestOpened, meta.PullRequestOpen)
	pr := r.pull(opened.Number)
	if pr.Head != r.head || pr.Base != "main" || pr.Draft || !pr.Open() {
		t.Errorf("request %+v, want open from %s into main, not a draft", pr, r.head)
	}
	row := fmt.Sprintf("| clusters/prod/podinfo.yaml | Deployment/podinfo | `%s:6.3.0` | `%s:6.3.1` |", r.image, r.image)
	if !strings.Contains(pr.Body, row) || !strings.Contains(pr.Body, "ImageUpdateAutomation default/fleet-"+r.name) {
		t.Errorf("body lacks %q:\n%s", row, pr.Body)
	}
	if !equal(pr.Reviewers, r.reviewers) || !equal(pr.Labels, r.labels) {
		t.Errorf("reviewers %q, labels %q; want %q, %q", pr.Reviewers, pr.Labels, r.reviewers, r.labels)
	}
	if pr.AutoMerge != r.wantAutoMerge {
		t.Errorf("auto-merge %q, want %q", pr.AutoMerge, r.wantAutoMerge)
	}
	if r.name == "azuredevops" && pr.AutoMergeSetBy != azureSelf {
		t.Errorf("auto-complete set by %q, want the token's identity %s", pr.AutoMergeSetBy, azureSelf)
	}
	if r.gitHead("main") != mainBefore {
		t.Error("main moved: the job pushed to the base")
	}
	r.headIsMainPlusOne("6.3.1")

	// A second tag: the same request, its branch rebuilt and its title
	// and body edited in place.
	r.pushTagAndScan("6.3.2")
	updated := r.waitOpen("Update podinfo-" + r.name + " to 6.3.2")
	if updated.Number != pr.Number || updated.URL != pr.URL {
		t.Fatalf("request #%d %s, want #%d %s updated in place", updated.Number, updated.URL, pr.Number, pr.URL)
	}
	r.waitStatus(updated, meta.PullRequestUpdated, meta.PullRequestOpen)
	again := r.pull(pr.Number)
	if !strings.Contains(again.Body, "`"+r.image+":6.3.2`") || again.Edits != pr.Edits+1 {
		t.Errorf("after %d edits (was %d), body:\n%s", again.Edits, pr.Edits, again.Body)
	}
	// An update changes the title and body only: the reviewers, labels
	// and auto-merge asked for at the opening stay. (Bitbucket's PUT
	// replaces the reviewers: an update must send them again.)
	if !equal(again.Reviewers, r.reviewers) || !equal(again.Labels, r.labels) || again.AutoMerge != r.wantAutoMerge {
		t.Errorf("after the update: reviewers %q, labels %q, auto-merge %q; want %q, %q, %q as opened",
			again.Reviewers, again.Labels, again.AutoMerge, r.reviewers, r.labels, r.wantAutoMerge)
	}
	r.headIsMainPlusOne("6.3.2")

	// main gets the change by hand: the request is closed with a comment.
	r.clone.Commit("podinfo 6.3.2 by hand", map[string]string{chain.ManifestPath: r.manifest("6.3.2")})
	r.clone.Push()
	if err := r.chain.RequestReconcile(r.ctx, r.auto); err != nil {
		t.Fatal(err)
	}
	closing := r.waitPull(pr.Number, "closed", func(p forgestandin.Pull) bool { return p.State == r.closed })
	r.waitStatus(closing, meta.PullRequestClosedNow, meta.PullRequestClosed)
	closed := r.pull(pr.Number)
	if len(closed.Comments) != 1 || !strings.Contains(closed.Comments[0], "already has these image updates") {
		t.Errorf("comments %q, want one saying main has the updates", closed.Comments)
	}

	// The other requests were left alone.
	pulls := r.forge.Pulls()
	for i, seeded := range r.seeded {
		if got := pulls[i]; got.State != seeded.State || got.Title != seeded.Title || len(got.Comments) != 0 {
			t.Errorf("the request made before, %+v, became %+v", seeded, got)
		}
	}
	if len(pulls) != len(r.seeded)+1 {
		t.Errorf("%d requests, want %d: %+v", len(pulls), len(r.seeded)+1, pulls)
	}
	t.Logf("the %s stand-in served:\n%s", r.name, strings.Join(r.forge.Calls(), "\n"))
}

// refusedToken runs a job whose forge takes another token than the
// Secret's: a second stand-in of the forge, on the same repository. The
// job fails as AuthenticationFailed with the forge's own words, read from
// its error shape, before anything is pushed; the token appears in no
// status or event.
func (r *forgeRun) refusedToken() {
	t := r.t
	other := r.start(t, forgestandin.Config{Username: r.username, Token: "not-" + r.token, Branch: r.branch})
	job := "refused-" + r.name
	yaml := fmt.Sprintf(`apiVersion: update.toolkit.dev/v1beta1
kind: UpdateJob
metadata:
  name: %s
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
    - policy: default:podinfo-%s
      name: %s
      tag: 6.3.9
  commit:
    author:
      email: bot@example.com
  push:
    pullRequest:
      provider: %s
      apiURL: %s
      secretRef:
        name: forge-%s
  backoffLimit: 0
`, job, r.gitURL(r.chain.Git.URL), r.name, r.image, r.name, other.URL, r.name)
	if err := r.chain.Apply(r.ctx, yaml); err != nil {
		t.Fatal(err)
	}
	j := &updatev1.UpdateJob{}
	r.wait("job "+job+" failed", func() bool {
		err := r.chain.Cluster.Client.Get(r.ctx, client.ObjectKey{Namespace: "default", Name: job}, j)
		return err == nil && j.Status.Phase == updatev1.UpdateJobFailed
	})
	status := dump(j.Status)
	if c := j.Status.Conditions; len(c) == 0 || c[0].Reason != "AuthenticationFailed" || !strings.Contains(c[0].Message, r.refusal) {
		t.Errorf("job status %s\nwant AuthenticationFailed quoting %q", status, r.refusal)
	} else {
		t.Logf("%s: %s", c[0].Reason, c[0].Message)
	}
	if refused := other.Refusals(); len(refused) == 0 || len(other.Pulls()) != 0 {
		t.Errorf("the stand-in refused %q and has %d requests; want the token refused, nothing opened", refused, len(other.Pulls()))
	}
	if h := r.gitHead("image-toolkit/default-" + job); h != "" {
		t.Errorf("the head branch was pushed (%s) though the forge refused the token", h)
	}
	out, err := r.chain.Cluster.KubectlCmd(r.ctx, "get", "events,updatejobs,imageupdateautomations", "-n", "default", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(string(out), r.token) || strings.Contains(status, r.token) {
		t.Errorf("the forge token appears in the objects or events")
	}
}

// manifest is the fleet's deployment at tag, marked for the forge's policy.
func (r *forgeRun) manifest(tag string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: default
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: %s:%s # {"$imagepolicy": "default:podinfo-%s"}
`, r.image, tag, r.name)
}

func (r *forgeRun) pushTag(tag string) {
	r.t.Helper()
	ref, err := gcrname.NewTag(r.image+":"+tag, gcrname.Insecure)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := remote.Write(ref, r.img, remote.WithContext(r.ctx)); err != nil {
		r.t.Fatal(err)
	}
}

// pushTagAndScan pushes a tag and asks for a scan, as a registry webhook
// would.
func (r *forgeRun) pushTagAndScan(tag string) {
	r.t.Helper()
	r.pushTag(tag)
	if err := r.chain.RequestReconcile(r.ctx, r.repo); err != nil {
		r.t.Fatal(err)
	}
}

// branch is a branch's commit in the fleet repository on the git server.
func (r *forgeRun) branch(name string) (string, bool) {
	out, err := chain.Git(r.bare, "rev-parse", "--verify", "-q", "refs/heads/"+name)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(out), true
}

func (r *forgeRun) gitHead(name string) string {
	c, _ := r.branch(name)
	return c
}

func (r *forgeRun) git(args ...string) string {
	r.t.Helper()
	out, err := chain.Git(r.bare, args...)
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// headIsMainPlusOne checks the head branch is main plus one commit, which
// sets the image to the tag.
func (r *forgeRun) headIsMainPlusOne(tag string) {
	r.t.Helper()
	ahead, behind := r.git("rev-list", "--count", "main.."+r.head), r.git("rev-list", "--count", r.head+"..main")
	if ahead != "1" || behind != "0" {
		r.t.Errorf("%s is %s commits ahead of main and %s behind, want 1 and 0", r.head, ahead, behind)
	}
	// The one commit changes the one marked line, to the tag.
	diff := r.git("diff", "main", r.head)
	if !strings.Contains(diff, "\n+        image: "+r.image+":"+tag+" # ") || strings.Count(diff, "\n+ ") != 1 || strings.Count(diff, "\n- ") != 1 {
		r.t.Errorf("%s changes main by:\n%s\nwant the image set to %s", r.head, diff, tag)
	}
}

// open are the stand-in's open requests from the stream's head branch.
func (r *forgeRun) open() []forgestandin.Pull {
	var out []forgestandin.Pull
	for _, p := range r.forge.Pulls() {
		if p.Open() && p.Head == r.head {
			out = append(out, p)
		}
	}
	return out
}

// waitOpen waits until the stream's open request has the title, checks it
// is the only one, and returns it.
func (r *forgeRun) waitOpen(title string) forgestandin.Pull {
	r.t.Helper()
	var open []forgestandin.Pull
	r.wait("an open request titled "+title, func() bool {
		open = r.open()
		return len(open) > 0 && open[len(open)-1].Title == title
	})
	if len(open) != 1 {
		r.t.Fatalf("%d open requests from %s, want 1: %+v", len(open), r.head, open)
	}
	return open[0]
}

// pull is the stand-in's request numbered n.
func (r *forgeRun) pull(n int) forgestandin.Pull {
	r.t.Helper()
	pulls := r.forge.Pulls()
	if n < 1 || n > len(pulls) {
		r.t.Fatalf("no request #%d", n)
	}
	return pulls[n-1]
}

func (r *forgeRun) waitPull(number int, what string, cond func(forgestandin.Pull) bool) forgestandin.Pull {
	r.t.Helper()
	var p forgestandin.Pull
	r.wait(fmt.Sprintf("request #%d %s", number, what), func() bool {
		pulls := r.forge.Pulls()
		if number < 1 || number > len(pulls) {
			return false
		}
		p = pulls[number-1]
		return cond(p)
	})
	return p
}

// waitStatus waits until the automation's status reports the request as
// the stand-in has it, with the head branch's commit on the git server,
// and checks the job's status says the same.
func (r *forgeRun) waitStatus(pr forgestandin.Pull, action meta.PullRequestAction, state meta.PullRequestState) {
	r.t.Helper()
	commit := r.gitHead(r.head)
	a := r.waitAutomation(fmt.Sprintf("lastPullRequest #%d %s", pr.Number, action), func(a *imagev1.ImageUpdateAutomation) bool {
		lp := a.Status.LastPullRequest
		return lp != nil && lp.Number == pr.Number && lp.Action == action
	})
	want := meta.PullRequestStatus{URL: pr.URL, Number: pr.Number, State: state, HeadBranch: r.head, HeadCommit: commit, Action: action}
	if action == meta.PullRequestClosedNow {
		// A closed request's commit is the one the forge last knew of:
		// Bitbucket Cloud names it by its 12-digit abbreviation.
		want.HeadCommit = a.Status.LastPullRequest.HeadCommit
		if !strings.HasPrefix(commit, want.HeadCommit) || len(want.HeadCommit) < 12 {
			r.t.Errorf("closed request's head commit %q, want (a prefix of) %s", want.HeadCommit, commit)
		}
	}
	if got := *a.Status.LastPullRequest; got != want {
		r.t.Errorf("lastPullRequest %+v\nwant %+v", got, want)
	}
	job := &updatev1.UpdateJob{}
	if err := r.chain.Cluster.Client.Get(r.ctx, client.ObjectKey{Namespace: "default", Name: a.Status.LastJob.Name}, job); err != nil {
		r.t.Fatal(err)
	}
	if got := job.Status.PullRequest; got == nil || *got != want {
		r.t.Errorf("UpdateJob %s status.pullRequest %+v\nwant %+v", job.Name, got, want)
	}
}

func (r *forgeRun) waitAutomation(what string, cond func(*imagev1.ImageUpdateAutomation) bool) *imagev1.ImageUpdateAutomation {
	r.t.Helper()
	var err error
	r.wait(what, func() bool {
		err = r.chain.Cluster.Client.Get(r.ctx, client.ObjectKeyFromObject(r.auto), r.auto)
		return err == nil && cond(r.auto)
	})
	return r.auto
}

// wait polls cond for up to a minute; on time out it fails the test with
// what the automation, its jobs, the stand-in and the job controller say.
func (r *forgeRun) wait(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			r.t.Fatalf("%s: waiting for %s\nautomation status: %s\njobs:\n%s\nstand-in calls:\n%s\nrefused:\n%s\nupdate-job-controller log:\n%s",
				r.name, what, dump(r.auto.Status), r.jobs(), strings.Join(r.forge.Calls(), "\n"),
				strings.Join(r.forge.Refusals(), "\n"), r.jobLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *forgeRun) jobs() string {
	list := &updatev1.UpdateJobList{}
	if err := r.chain.Cluster.Client.List(r.ctx, list, client.InNamespace("default")); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, j := range list.Items {
		if strings.Contains(j.Name, r.name) || j.Spec.Repository.URL == r.gitURL(r.chain.Git.URL) {
			fmt.Fprintf(&b, "%s: %s\n", j.Name, dump(j.Status))
		}
	}
	return b.String()
}

// jobLog is the update-job-controller's log lines about this forge's
// automation (the three flows share the controller).
func (r *forgeRun) jobLog() string {
	var b strings.Builder
	for _, line := range strings.Split(r.chain.Procs["update-job-controller"].Log(), "\n") {
		if strings.Contains(line, "fleet-"+r.name) || strings.Contains(line, r.repoPath) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func equal(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}
