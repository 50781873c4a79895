package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// --pull-request and the --pr-* flags write spec.push.pullRequest (in an
// automation, spec.git.push.pullRequest) with --export, with no cluster to
// reach: any --pr-* flag alone asks for a request, even at its zero value,
// templates are read from @FILE, and repeated flags keep their order.
func TestPullRequestExport(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	body := filepath.Join(t.TempDir(), "body.md")
	if err := os.WriteFile(body, []byte("Updates:\n{{ range .Changed.Changes }}- {{ .NewValue }}\n{{ end }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := []string{"create", "job", "bump", "-n", "apps", "--url", "https://git.example.com/fleet.git", "--set", "apps:podinfo=ghcr.io/org/podinfo:6.5.0"}
	jobYAML := func(checkout, push string) string {
		return `---
apiVersion: update.toolkit.dev/v1beta1
kind: UpdateJob
metadata:
  name: bump
  namespace: apps
spec:
  checkout:
    ref:
` + checkout + `  commit:
    author:
      email: tk-image@localhost
      name: tk-image
  push:
` + push + `  repository:
    url: https://git.example.com/fleet.git
  update:
    setters:
    - name: ghcr.io/org/podinfo
      policy: apps:podinfo
      tag: 6.5.0
`
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"automation with every flag", []string{"create", "automation", "fleet", "-n", "apps", "--url", "https://github.com/org/fleet",
			"--secret", "fleet-auth", "--branch", "main", "--author-email", "bot@example.com", "--push-option", "ci.skip=",
			"--pr-provider", "github", "--pr-api-url", "https://github.example.com/api/v3/", "--pr-secret", "forge-token",
			"--pr-base", "release", "--pr-branch-template", "image-toolkit/{{ .AutomationObject.Name }}", "--pr-title-template", "Update images",
			"--pr-body-template", "@" + body, "--pr-label", "automated", "--pr-label", "images", "--pr-reviewer", "alice",
			"--pr-reviewer", "org/platform", "--pr-assignee", "bob", "--pr-draft", "--pr-auto-merge", "squash"}, `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata:
  name: fleet
  namespace: apps
spec:
  git:
    checkout:
      ref:
        branch: main
    commit:
      author:
        email: bot@example.com
    push:
      options:
        ci.skip: ""
      pullRequest:
        apiURL: https://github.example.com/api/v3/
        assignees:
        - bob
        autoMerge: squash
        base: release
        bodyTemplate: |
          Updates:
          {{ range .Changed.Changes }}- {{ .NewValue }}
          {{ end }}
        branchTemplate: image-toolkit/{{ .AutomationObject.Name }}
        draft: true
        labels:
        - automated
        - images
        provider: github
        reviewers:
        - alice
        - org/platform
        secretRef:
          name: forge-token
        titleTemplate: Update images
    repository:
      secretRef:
        name: fleet-auth
      url: https://github.com/org/fleet
  interval: 5m0s
`},
		// README.md shows this one.
		{"the README's automation", []string{"create", "automation", "fleet", "-n", "apps", "--url", "https://github.com/org/fleet",
			"--secret", "fleet-auth", "--branch", "main", "--author-email", "bot@example.com", "--pr-label", "automated",
			"--pr-reviewer", "org/platform", "--pr-auto-merge", "squash"}, `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata:
  name: fleet
  namespace: apps
spec:
  git:
    checkout:
      ref:
        branch: main
    commit:
      author:
        email: bot@example.com
    push:
      pullRequest:
        autoMerge: squash
        labels:
        - automated
        reviewers:
        - org/platform
    repository:
      secretRef:
        name: fleet-auth
      url: https://github.com/org/fleet
  interval: 5m0s
`},
		{"automation from a GitRepository, defaults", []string{"create", "automation", "fleet", "-n", "apps", "--source", "flux-system/fleet",
			"--author-email", "bot@example.com", "--pull-request"}, `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata:
  name: fleet
  namespace: apps
spec:
  git:
    commit:
      author:
        email: bot@example.com
    push:
      pullRequest: {}
  interval: 5m0s
  sourceRef:
    kind: GitRepository
    name: fleet
    namespace: flux-system
`},
		{"job, --pull-request alone", append(slices.Clone(job), "--branch", "main", "--pull-request"),
			jobYAML("      branch: main\n", "    pullRequest: {}\n")},
		{"job, --pr-draft=false implies a request", append(slices.Clone(job), "--branch", "main", "--pr-draft=false"),
			jobYAML("      branch: main\n", "    pullRequest: {}\n")},
		{"job off a tag, into a base", append(slices.Clone(job), "--checkout-tag", "v1", "--pr-base", "main", "--pr-provider", "gitea", "--pr-auto-merge", "rebase"),
			jobYAML("      tag: v1\n", "    pullRequest:\n      autoMerge: rebase\n      base: main\n      provider: gitea\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, "", append(tt.args, "--export")...)
			if code != 0 || out != tt.want {
				t.Errorf("code %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errs, out, tt.want)
			}
		})
	}
}

// The pull request flags' mistakes are usage errors (exit 2) found before
// any API call, --export included: a request with --push-branch or
// --push-refspec (the API refuses them together), naming the flag that
// asked for the request; a forge or merge method the API does not take; an
// unreadable template file; and a request asked of --from-automation, whose
// automation alone says whether it proposes one.
func TestPullRequestUsageErrors(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	auto := []string{"create", "automation", "a", "--author-email", "a@b", "--url", "https://h/r", "--branch", "main"}
	job := []string{"create", "job", "j", "--url", "https://h/r", "--branch", "main", "--set", "a:b=x:1"}
	run := []string{"job", "run", "--url", "https://h/r", "--branch", "main", "--set", "a:b=x:1"}
	with := func(base []string, args ...string) []string { return append(slices.Clone(base), args...) }
	tests := []struct {
		args []string
		errs string
	}{
		{with(auto, "--pull-request", "--push-branch", "auto"), "--pull-request pushes to a head branch of its own (--pr-branch-template): not with --push-branch or --push-refspec"},
		{with(auto, "--pr-label", "x", "--push-refspec", "refs/heads/main:refs/heads/auto", "--export"), "--pr-label (which implies --pull-request) pushes to a head branch of its own"},
		{with(job, "--pr-draft", "--push-branch", "auto", "--export"), "--pr-draft (which implies --pull-request) pushes"},
		{with(run, "--pull-request", "--push-refspec", "refs/heads/main:refs/heads/auto"), "not with --push-branch or --push-refspec"},
		{with(auto, "--pr-provider", "phabricator", "--export"), `--pr-provider must be one of github, gitlab, gitea, bitbucket, bitbucketserver, azuredevops, gerrit, got "phabricator"`},
		{with(job, "--pull-request", "--pr-provider", "GitHub"), `--pr-provider must be one of github, gitlab, gitea, bitbucket, bitbucketserver, azuredevops, gerrit, got "GitHub"`},
		{with(run, "--pr-auto-merge", "fast-forward"), `--pr-auto-merge must be one of merge, squash, rebase, got "fast-forward"`},
		{with(job, "--pr-auto-merge", "", "--pr-provider", "x", "--export"), "--pr-provider must be one of"},
		{with(auto, "--pr-body-template", "@/does/not/exist", "--export"), "--pr-body-template: open /does/not/exist"},
		{with(run, "--pr-title-template", "@/does/not/exist"), "--pr-title-template: open /does/not/exist"},
		{[]string{"job", "run", "--from-automation", "a", "--pull-request"}, "--from-automation takes no --pull-request"},
		{[]string{"job", "run", "--from-automation", "a", "--pr-base", "main"}, "--from-automation takes no --pr-base (which implies --pull-request)"},
		{with(auto, "--pr-draft=maybe"), "invalid argument"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, "", tt.args...)
			if code != 2 || out != "" || !strings.Contains(errs, tt.errs) {
				t.Errorf("code %d, stdout %q, stderr %q; want 2, nothing, %q", code, out, errs, tt.errs)
			}
		})
	}
}

// The shell completes the flags that take a fixed value with the values the
// API takes, in each command that has them.
func TestPullRequestCompletion(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"create", "automation", "a", "--pr-provider", ""}, forgeProviders},
		{[]string{"create", "job", "j", "--pr-auto-merge", ""}, mergeMethods},
		{[]string{"job", "run", "--pr-provider", ""}, forgeProviders},
		{[]string{"job", "run", "--pr-auto-merge", ""}, mergeMethods},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, "", append([]string{"__complete"}, tt.args...)...)
			want := strings.Join(tt.want, "\n") + "\n:4\n"
			if code != 0 || !strings.HasPrefix(out, want) {
				t.Errorf("code %d, stderr %q, stdout %q; want it to start with %q", code, errs, out, want)
			}
		})
	}
}

// job run with --pull-request creates a job whose spec asks for the request
// and, once the job finished, says what it did to the request besides what
// it always prints: the line names the action (opened, updated, unchanged,
// closed), the address, the head branch and commit; "no change" is said
// only when the files hold the values (no request, or one closed), not when
// an open request already proposes them. Each ends with exit 0. The test
// plays the update-job-controller: it writes each job's final status.
func TestJobRunPullRequest(t *testing.T) {
	c := startExplainCluster(t)
	ns := "apps"
	c.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, nil)

	const (
		checkout = "main@sha1:1111111111111111111111111111111111111111"
		commit   = "abc1234def5678abc1234def5678abc1234def56"
		url      = "https://git.example.com/org/fleet/pulls/3"
	)
	result := &updatev1.UpdateResult{Files: []meta.FileResult{{Path: "app.yaml", Objects: []meta.ObjectResult{{
		ObjectID: meta.ObjectID{Kind: "Deployment", Namespace: ns, Name: "app"},
		Changes:  []meta.Change{{OldValue: "ghcr.io/org/podinfo:6.4.0", NewValue: "ghcr.io/org/podinfo:6.5.0", Setter: "apps:podinfo"}},
	}}}}}
	request := func(head string, state meta.PullRequestState, action meta.PullRequestAction, headCommit string) *meta.PullRequestStatus {
		return &meta.PullRequestStatus{URL: url, Number: 3, State: state, HeadBranch: head, HeadCommit: headCommit, Action: action}
	}
	changes := "app.yaml\n  Deployment/apps/app\n    ghcr.io/org/podinfo:6.4.0 -> ghcr.io/org/podinfo:6.5.0 (apps:podinfo)\n"
	tests := []struct {
		name   string
		flags  []string
		status func(st *updatev1.UpdateJobStatus, head string)
		want   string // after the phase line
	}{
		{"opened", []string{"--pr-label", "automated"}, func(st *updatev1.UpdateJobStatus, head string) {
			st.Phase, st.PushedCommit, st.PushedRefs, st.Result = updatev1.UpdateJobSucceeded, commit, []string{"refs/heads/" + head}, result
			st.PullRequest = request(head, meta.PullRequestOpen, meta.PullRequestOpened, commit)
		}, "checked out " + checkout + "\npushed commit " + commit + " to refs/heads/image-toolkit/apps-opened\n" +
			"pull request #3 opened: " + url + " (branch image-toolkit/apps-opened, commit abc1234)\n" + changes},
		// Only the title or description changed: nothing was pushed.
		{"updated", []string{"--pull-request"}, func(st *updatev1.UpdateJobStatus, head string) {
			st.Phase, st.Result = updatev1.UpdateJobSucceeded, result
			st.PullRequest = request(head, meta.PullRequestOpen, meta.PullRequestUpdated, commit)
		}, "checked out " + checkout + "\npull request #3 updated: " + url + " (branch image-toolkit/apps-updated, commit abc1234)\n" + changes},
		{"unchanged", []string{"--pull-request"}, func(st *updatev1.UpdateJobStatus, head string) {
			st.Phase, st.Result = updatev1.UpdateJobNoChange, result
			st.PullRequest = request(head, meta.PullRequestOpen, meta.PullRequestUnchanged, commit)
		}, "checked out " + checkout + "\npull request #3 unchanged, it already proposes these values: " + url + " (branch image-toolkit/apps-unchanged, commit abc1234)\n"},
		{"closed", []string{"--pull-request"}, func(st *updatev1.UpdateJobStatus, head string) {
			st.Phase = updatev1.UpdateJobNoChange
			st.PullRequest = request(head, meta.PullRequestClosed, meta.PullRequestClosedNow, "")
		}, "checked out " + checkout + "\nno change: every marked value already holds its policy's image\n" +
			"pull request #3 closed, the base branch already has these values: " + url + " (branch image-toolkit/apps-closed)\n"},
		// No open request and nothing to change: as without a request.
		{"no-request", []string{"--pull-request"}, func(st *updatev1.UpdateJobStatus, _ string) {
			st.Phase = updatev1.UpdateJobNoChange
		}, "checked out " + checkout + "\nno change: every marked value already holds its policy's image\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := types.NamespacedName{Namespace: ns, Name: tt.name}
			head := "image-toolkit/" + ns + "-" + tt.name
			spec := make(chan updatev1.UpdateJobSpec, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			go func() {
				spec <- playController(ctx, t, c.env.Client, key, func(st *updatev1.UpdateJobStatus) {
					st.CheckoutRevision = checkout
					tt.status(st, head)
				})
			}()
			args := append([]string{"job", "run", tt.name, "-n", ns, "--kubeconfig", c.kubeconfig, "--timeout", "20s",
				"--url", "https://git.example.com/org/fleet.git", "--branch", "main", "--set", "apps:podinfo=ghcr.io/org/podinfo:6.5.0"}, tt.flags...)
			code, out, errs := runCLI(t, "", args...)
			if code != 0 {
				t.Fatalf("code %d, stderr %q, stdout:\n%s", code, errs, out)
			}
			// Whether the job is seen before it finished is a race: what
			// follows the last phase line is not.
			last := strings.LastIndex(out, "UpdateJob "+key.String()+": ")
			_, tail, _ := strings.Cut(out[max(last, 0):], "\n")
			if last < 0 || !strings.HasPrefix(out, "UpdateJob "+key.String()+" created\n") || tail != tt.want {
				t.Errorf("stdout:\n%s\nwant after the phase line:\n%s", out, tt.want)
			}
			if s := <-spec; s.Push == nil || s.Push.PullRequest == nil {
				t.Errorf("the job was created without spec.push.pullRequest: %+v", s.Push)
			} else if tt.name == "opened" && !slices.Equal(s.Push.PullRequest.Labels, []string{"automated"}) {
				t.Errorf("spec.push.pullRequest.labels = %q, want [automated]", s.Push.PullRequest.Labels)
			}
		})
	}
}

// playController waits for the job key to exist, then finishes it as the
// update-job-controller would, with the status finish writes; it returns
// the job's spec as the API server stored it.
func playController(ctx context.Context, t *testing.T, c client.Client, key types.NamespacedName, finish func(*updatev1.UpdateJobStatus)) updatev1.UpdateJobSpec {
	for ctx.Err() == nil {
		job := &updatev1.UpdateJob{}
		if err := c.Get(ctx, key, job); err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		job.Status.Attempts = 1
		job.Status.CompletionTime = &metav1.Time{Time: time.Now()}
		finish(&job.Status)
		if job.Status.Phase == updatev1.UpdateJobSucceeded {
			conditions.MarkReady(job, conditions.SucceededReason, "done")
		} else {
			conditions.MarkReady(job, updatev1.NoChangeReason, "no change")
		}
		err := c.Status().Update(ctx, job)
		switch {
		case err == nil:
			return job.Spec
		case !apierrors.IsConflict(err):
			t.Errorf("finishing UpdateJob %s: %v", key, err)
			return job.Spec
		}
	}
	return updatev1.UpdateJobSpec{}
}
