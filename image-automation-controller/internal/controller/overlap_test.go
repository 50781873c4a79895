package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// Automations that select the same policy take turns when they would set
// it to different values: while one's job for 1.0.0 is in flight, another
// that would set 1.0.1 makes none and says what it waits for; once that
// job has ended it makes its own, for the policy's value of then (not the
// one it saw while waiting). One that sets the same value makes its job at
// once: the two cannot set a file back and forth, and the job controller
// runs them as one commit. An automation of another policy is not held,
// nor one of the same policy pushing to another branch: only jobs writing
// one branch can set a file back and forth.
func TestOverlappingAutomationsTakeTurns(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	app := f.policy("app", map[string]string{"app": "yes"}, "1.0.0")
	f.policy("other", map[string]string{"other": "yes"}, "1.0.0")
	selecting := func(label string) func(*imagev1.ImageUpdateAutomation) {
		return func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}
		}
	}
	first := f.automation("first", selecting("app"))
	js := waitJobs(t, f.ns, 1)
	f.automation("sibling", selecting("app"))
	js = waitJobs(t, f.ns, 2) // the same value: at once
	setLatest(t, app, "1.0.1")
	second := f.automation("second", selecting("app"))
	f.automation("unrelated", selecting("other"))
	f.automation("elsewhere", func(a *imagev1.ImageUpdateAutomation) {
		selecting("app")(a)
		a.Spec.GitSpec.Push = &updatev1.PushSpec{Branch: "staging"}
	})
	waitAutomation(t, second, "waiting for the jobs of 1.0.0", func(a *imagev1.ImageUpdateAutomation) bool {
		c := conditions.Get(a, conditions.ReconcilingCondition)
		return c != nil && strings.Contains(c.Message, "waiting for UpdateJob ") && strings.Contains(c.Message, "which sets policy "+f.ns+":app too")
	})
	js = waitJobs(t, f.ns, 4) // the unrelated automation's, elsewhere's
	time.Sleep(2 * time.Second)
	for _, j := range jobs(t, f.ns) {
		if _, ok := j.View(second.UID); ok {
			t.Fatalf("second made job %s while first's was in flight", j.Name)
		}
	}

	// The policy moves on while second waits; the jobs of 1.0.0 end.
	setLatest(t, app, "1.0.2")
	for _, j := range js {
		if owner := metav1.GetControllerOf(&j).Name; owner == "first" || owner == "sibling" {
			finish(t, &j, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = f.head() })
		}
	}
	waitAutomation(t, first, "outcome recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastJob != nil })
	// second's job may be a batch that first's next job leads (both set
	// 1.0.2): its view is second's own.
	var made *updatev1.UpdateJob
	waitAutomation(t, second, "a job", func(*imagev1.ImageUpdateAutomation) bool {
		for _, j := range jobs(t, f.ns) {
			if v, ok := j.View(second.UID); ok {
				made = v
				return true
			}
			switch owner := metav1.GetControllerOf(&j).Name; {
			case (owner == "first" || owner == "sibling") && !j.Status.Phase.Finished():
				// first may take the next turn, for 1.0.2: end it too.
				finish(t, &j, updatev1.UpdateJobSucceeded, nil)
			}
		}
		return false
	})
	if s := made.Spec.Update.Setters; len(s) != 1 || s[0].Tag != "1.0.2" {
		t.Errorf("second's job sets %+v, want app at 1.0.2", s)
	}
}

// Jobs share a target when they push to one branch of one repository,
// however its URL is spelled; pull requests write their own branch.
func TestSameTarget(t *testing.T) {
	job := func(url, checkout string, push *updatev1.PushSpec) *updatev1.UpdateJobSpec {
		return &updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: url},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: checkout}},
			Push:       push,
		}
	}
	main := job("https://git.example.com/org/fleet.git", "main", nil)
	for _, tc := range []struct {
		name  string
		other *updatev1.UpdateJobSpec
		want  bool
	}{
		{"same URL and branch", job("https://git.example.com/org/fleet.git", "main", nil), true},
		{"another spelling", job("git@git.example.com:org/fleet", "main", nil), true},
		{"push branch named", job("https://git.example.com/org/fleet", "dev", &updatev1.PushSpec{Branch: "main"}), true},
		{"another branch", job("https://git.example.com/org/fleet.git", "staging", nil), false},
		{"pushed elsewhere", job("https://git.example.com/org/fleet.git", "main", &updatev1.PushSpec{Branch: "staging"}), false},
		{"another repository", job("https://git.example.com/org/other.git", "main", nil), false},
		{"a pull request", job("https://git.example.com/org/fleet.git", "main", &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{}}), false},
		{"a local path", job("/srv/git/fleet.git", "main", nil), false},
	} {
		if got := sameTarget(main, tc.other); got != tc.want {
			t.Errorf("%s: sameTarget = %v, want %v", tc.name, got, tc.want)
		}
	}
	local := job("/srv/git/fleet.git", "main", nil)
	if !sameTarget(local, job("/srv/git/fleet.git", "main", nil)) {
		t.Error("one local path: sameTarget = false, want true")
	}
}
