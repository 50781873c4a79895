package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// With push.pullRequest the job's commit goes to the request's head branch,
// not the base: the automation records the request (status.lastPullRequest,
// Ready naming its URL), keeps the base's head as the revision it saw, and
// so makes no job while the base and the policies stay as they were (an open,
// up-to-date request costs nothing); a commit on the base makes a job again.
func TestPullRequestRecordedAndShortCircuit(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.1.0")
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{
			Provider: "gitea", TitleTemplate: "Bump {{ len .Changed.Changes }}",
		}}
	})
	base := f.head()
	job := waitJobs(t, f.ns, 1)[0]
	if pr := job.Spec.Push.PullRequest; pr == nil || pr.TitleTemplate != "Bump {{ len .Changed.Changes }}" {
		t.Fatalf("job push %+v", job.Spec.Push)
	}
	pr := &meta.PullRequestStatus{URL: "http://forge/o/fleet/pulls/7", Number: 7, State: meta.PullRequestOpen,
		HeadBranch: "image-toolkit/" + f.ns + "-fleet", HeadCommit: strings.Repeat("b", 40), Action: meta.PullRequestOpened}
	finish(t, &job, updatev1.UpdateJobSucceeded, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision = base
		j.Status.PushedCommit = pr.HeadCommit
		j.Status.PushedRefs = []string{"refs/heads/" + pr.HeadBranch}
		j.Status.PullRequest = pr
	})
	a = waitAutomation(t, a, "request recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastPullRequest != nil
	})
	if *a.Status.LastPullRequest != *pr || a.Status.ObservedSourceRevision != base {
		t.Errorf("lastPullRequest %+v, observedSourceRevision %s (want the base's head %s)",
			a.Status.LastPullRequest, a.Status.ObservedSourceRevision, base)
	}
	if c := ready(a); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "opened pull request #7") ||
		!strings.Contains(c.Message, pr.URL) {
		t.Errorf("Ready %+v", c)
	}

	a = request(t, a, "nothing-new")
	if n := len(jobs(t, f.ns)); n != 1 {
		t.Errorf("%d jobs while the request is up to date, want 1", n)
	}
	if c := ready(a); !strings.Contains(c.Message, "nothing changed") {
		t.Errorf("Ready %+v", c)
	}

	f.commit("someone else's change on main")
	request(t, a, "base-moved")
	waitJobs(t, f.ns, 2)
}

// A bad pull request template makes the automation Stalled before any job.
func TestPullRequestTemplateStalls(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.1.0")
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{BranchTemplate: "{{ .Updated }}"}}
	})
	a = waitAutomation(t, a, "stalled", func(a *imagev1.ImageUpdateAutomation) bool {
		c := ready(a)
		return c.Reason == imagev1.InvalidMessageTemplateReason
	})
	if c := ready(a); !strings.Contains(c.Message, "spec.git.push.pullRequest.branchTemplate") {
		t.Errorf("Ready %+v", c)
	}
	if n := len(jobs(t, f.ns)); n != 0 {
		t.Errorf("%d jobs, want none", n)
	}
}
