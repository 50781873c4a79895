package controller

import (
	"net/http"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// A head that only the automations' own jobs moved since the last run is
// no change; one commit no job made, anywhere in between, is.
func TestMovedByJobs(t *testing.T) {
	// jobs: commit → the revision its job made it on.
	jobs := map[string]string{
		"c1": "main@sha1:c0",
		"c2": "main@sha1:c1",
		"c3": "main@sha1:p2", // made on p2, a person's commit
		"c4": "other@sha1:c3",
		"c5": "main@sha1:c5", // a resumed job: the head it found
	}
	parentOf := func(c string) (string, bool) { b, ok := jobs[c]; return b, ok }
	for _, tc := range []struct {
		name       string
		from, head string
		want       bool
	}{
		{"one commit of a job", "main@sha1:c0", "main@sha1:c1", true},
		{"a chain of the jobs' commits", "main@sha1:c0", "main@sha1:c2", true},
		{"a person's commit under the jobs'", "main@sha1:c1", "main@sha1:c3", false},
		{"a head no job pushed", "main@sha1:c2", "main@sha1:p9", false},
		{"the last run's revision is not on the chain", "main@sha1:zz", "main@sha1:c2", false},
		{"another branch's parent", "main@sha1:c3", "main@sha1:c4", false},
		{"a resumed job's revision is no parent", "main@sha1:c4", "main@sha1:c5", false},
		{"another branch's head", "main@sha1:c0", "dev@sha1:c1", false},
		{"no revision recorded", "", "main@sha1:c1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := movedByJobs(tc.from, tc.head, parentOf); got != tc.want {
				t.Errorf("movedByJobs(%q, %q) = %v, want %v", tc.from, tc.head, got, tc.want)
			}
		})
	}
	// A chain longer than the bound is a change.
	long := map[string]string{}
	prev := "x0"
	for i := 1; i <= maxOwnCommits+1; i++ {
		c := "x" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		long[c] = "main@sha1:" + prev
		prev = c
	}
	if movedByJobs("main@sha1:x0", "main@sha1:"+prev, func(c string) (string, bool) { b, ok := long[c]; return b, ok }) {
		t.Error("a chain past maxOwnCommits counted as the jobs' own")
	}
}

// land plays a job's runner: it pushes files to main as a commit made on
// base, records the job Succeeded with it, and returns the commit.
func (f *fixture) land(job *updatev1.UpdateJob, base string, files map[string]string) string {
	f.t.Helper()
	c := f.work.Commit("by "+job.Name, files)
	f.work.Push()
	finish(f.t, job, updatev1.UpdateJobSucceeded, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision, j.Status.PushedCommit, j.Status.PushedRefs = base, c, []string{"refs/heads/main"}
	})
	return c
}

// Against the API server: another automation's job moved the branch after
// this automation's push, and a run finds nothing to do and records the
// new head; a person's commit after it is a change again.
func TestHeadMovedOnlyByJobsMakesNoJob(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.1.0")
	first := f.head()
	path := func(p string) func(*imagev1.ImageUpdateAutomation) {
		return func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: p}
		}
	}
	a := f.automation("a", path("./apps"))
	ja := waitJobs(t, f.ns, 1)[0]
	pa := f.land(&ja, first, map[string]string{"apps/app.yaml": "image: ghcr.io/org/app:1.1.0\n"})
	waitAutomation(t, a, "a's push recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastPushCommit == pa })

	f.automation("b", path("./other"))
	jb := unfinished(t, waitJobs(t, f.ns, 2))
	pb := f.land(&jb, "main@sha1:"+pa, map[string]string{"other/app.yaml": "image: ghcr.io/org/app:1.1.0\n"})

	a = request(t, a, "after-b")
	if n := len(jobs(t, f.ns)); n != 2 {
		t.Errorf("%d jobs after a head only b's job moved, want 2", n)
	}
	if a.Status.ObservedSourceRevision != "main@sha1:"+pb {
		t.Errorf("observedSourceRevision %q, want b's commit %s", a.Status.ObservedSourceRevision, pb)
	}

	f.commit("by hand")
	request(t, a, "after-person")
	waitJobs(t, f.ns, 3)
}

// A GitWebhook call about a commit an UpdateJob of the namespace pushed
// asks no automation to run (a monorepo's grouped commit would otherwise
// ask every automation of the branch); a call about a person's commit
// does, as before.
func TestGitPushOfAJobsCommitRequestsNoRun(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	const token = "gitlab-t0ken"
	w := gitWebhook(t, f.ns, imagev1.GitWebhookGitLab, token)
	auth := map[string]string{"X-Gitlab-Token": token}
	f.policy("app", nil, "1.1.0")
	first := f.head()
	a := f.automation("a", func(a *imagev1.ImageUpdateAutomation) { a.Labels = map[string]string{"hook": "yes"} })
	ja := waitJobs(t, f.ns, 1)[0]
	pa := f.land(&ja, first, map[string]string{"apps/app.yaml": "image: ghcr.io/org/app:1.1.0\n"})
	waitAutomation(t, a, "push recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastPushCommit == pa })
	payload := func(after string) string {
		return `{"object_kind":"push","ref":"refs/heads/main","after":"` + after + `","project":{"git_http_url":"` + f.git.RepoURL("fleet") + `"}}`
	}

	if got := post(t, w.Status.WebhookPath, payload(pa), auth); got != http.StatusAccepted {
		t.Fatalf("push of the job's commit: %d, want 202", got)
	}
	// The call's work runs after the answer; a request would show at once.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if annotated(t, a) {
			t.Fatal("a push of the job's own commit requested a run")
		}
	}

	by := f.commit("by hand")
	if got := post(t, w.Status.WebhookPath, payload(by), auth); got != http.StatusAccepted {
		t.Fatalf("push of a person's commit: %d, want 202", got)
	}
	waitJobs(t, f.ns, 2)
}
