package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
)

// A moved branch head is a reason to run again: a person may have edited
// the files. But on a busy branch most moves are the automations' own: a
// monorepo's thousand automations land in a few grouped commits, and every
// automation whose job landed in the first would otherwise see the later
// ones as a change and make a job that finds nothing to do (a thousand
// extra jobs per tag, the API server's whole load). A commit one of the
// namespace's jobs pushed to the branch cannot undo what another automation
// applied: automations that set a shared policy take turns and set the
// same value, and each job changes only its own markers. So a head that
// only the jobs moved since the last run counts as the head the last run
// saw. Any commit no job pushed (a person's, another namespace's), or a
// chain longer than maxOwnCommits, is a change as before.

// jobCommitIndex indexes the UpdateJobs that push to their checkout branch
// by the commit they pushed or are pushing.
const jobCommitIndex = ".status.commit"

// maxOwnCommits bounds the walk from the head back to the last run's
// revision.
const maxOwnCommits = 32

func jobCommits(o client.Object) []string {
	j, ok := o.(*updatev1.UpdateJob)
	if !ok || j.Status.CheckoutRevision == "" || !canShortCircuit(j.Spec.Checkout.Reference, j.Spec.Push) {
		return nil
	}
	var out []string
	for _, c := range []string{j.Status.PushingCommit, j.Status.PushedCommit} {
		if c != "" && (len(out) == 0 || out[0] != c) {
			out = append(out, c)
		}
	}
	return out
}

// parentFunc returns the revision a job of the branch made commit on, and
// whether one did.
type parentFunc func(commit string) (string, bool)

// movedByJobs reports whether every commit from revision from (excluded)
// to head (included), both <branch>@sha1:<hash>, was pushed by a job,
// walking parents through parentOf.
func movedByJobs(from, head string, parentOf parentFunc) bool {
	branch, want, ok := git.ParseRevision(from)
	if !ok {
		return false
	}
	headBranch, cur, ok := git.ParseRevision(head)
	if !ok || headBranch != branch {
		return false
	}
	for range maxOwnCommits {
		base, ok := parentOf(cur)
		if !ok {
			return false
		}
		b, parent, ok := git.ParseRevision(base)
		// A job resumed after its push records the head it found, not
		// its commit's parent: no chain through it.
		if !ok || b != branch || parent == cur {
			return false
		}
		if parent == want {
			return true
		}
		cur = parent
	}
	return false
}

// jobParents reads, from the cache, the revision the namespace's jobs that
// push to target (pushTarget) made each commit on.
func (r *ImageUpdateAutomationReconciler) jobParents(ctx context.Context, namespace, target string) parentFunc {
	return func(commit string) (string, bool) {
		jobs := r.jobsWithCommit(ctx, namespace, commit)
		for i := range jobs {
			if t, ok := pushTarget(&jobs[i].Spec); ok && t == target {
				return jobs[i].Status.CheckoutRevision, true
			}
		}
		return "", false
	}
}

// jobsWithCommit are the namespace's jobs that pushed (or are pushing)
// commit to the branch they check out, read only from the cache; none
// when the cache cannot say.
func (r *ImageUpdateAutomationReconciler) jobsWithCommit(ctx context.Context, namespace, commit string) []updatev1.UpdateJob {
	list := &updatev1.UpdateJobList{}
	if err := r.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{jobCommitIndex: commit},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return list.Items
}

// headTarget is what pushTarget says of the jobs an automation reading src
// makes, when they push to the branch they check out.
func headTarget(src *source) string {
	spec := updatev1.UpdateJobSpec{Repository: src.Repository, Checkout: updatev1.GitCheckoutSpec{Reference: src.Ref}}
	t, _ := pushTarget(&spec)
	return t
}

// PushedByJob reports whether one of the namespace's UpdateJobs pushed (or
// is pushing) commit to the branch it checks out: the GitWebhook receiver
// asks, so that a push of the automations' own commit requests no runs.
func (r *ImageUpdateAutomationReconciler) PushedByJob(ctx context.Context, namespace, commit string) bool {
	return len(r.jobsWithCommit(ctx, namespace, commit)) > 0
}
