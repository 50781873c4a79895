package controller

import (
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// In PR mode the change reaches the branch through a person's merge: the
// first branch commit found carrying every image the request proposed
// (a merge or squash commit) is the one rollback judges, and it stays
// the judged one; the request's head commit never is.
func TestRollbackJudgesTheCommitThatMergedTheRequest(t *testing.T) {
	const (
		head   = "1111111111111111111111111111111111111111"
		before = "2222222222222222222222222222222222222222"
		merge  = "3333333333333333333333333333333333333333"
		later  = "4444444444444444444444444444444444444444"
	)
	web := func(tag string) meta.ImageRef { return meta.ImageRef{Name: "r/web", Tag: tag} }
	obj := &imagev1.ImageUpdateAutomation{}
	obj.Status.History = []imagev1.PushRecord{{Commit: head, PullRequest: 7,
		Images: []imagev1.PushedImage{{Policy: "web", ImageRef: web("1.1.0"), From: "1.0.0"}}}}
	noChange := func(rev string, tag string) *updatev1.UpdateJob {
		j := setterJob("", map[string]meta.ImageRef{"web": web(tag)})
		j.Status.Phase, j.Status.CheckoutRevision = updatev1.UpdateJobNoChange, "main@sha1:"+rev
		return j
	}

	// Open, the request has reached nothing, not even at its head commit.
	obj.Status.AppliedRevision = "main@sha1:" + head
	if last, _ := lastOwnCommit(obj); last != nil {
		t.Fatalf("an open request is judged: %+v", last)
	}
	// A job that wants other images says nothing about the request.
	merged(obj, noChange(before, "1.0.0"))
	if m := obj.Status.History[0].Merged; m != "" {
		t.Fatalf("merged at %s, where the branch has the old image", m)
	}
	// The branch carries the request's image: that commit is judged.
	merged(obj, noChange(merge, "1.1.0"))
	obj.Status.AppliedRevision = "main@sha1:" + merge
	if last, c := lastOwnCommit(obj); last == nil || c != merge {
		t.Fatalf("judged %q, want the merge commit %s", c, merge)
	}
	// A person's later commit on top does not move what was judged, and
	// the automation stops judging, as in push mode.
	merged(obj, noChange(later, "1.1.0"))
	obj.Status.AppliedRevision = "main@sha1:" + later
	if m := obj.Status.History[0].Merged; m != merge {
		t.Fatalf("merged moved to %s", m)
	}
	if last, _ := lastOwnCommit(obj); last != nil {
		t.Fatalf("a person's commit on top is judged")
	}
	// The revert is held at the merge commit.
	obj.Status.AppliedRevision = "main@sha1:" + merge
	last, c := lastOwnCommit(obj)
	if n := holdRolledBack(obj, last, c, "broke", obj.CreationTimestamp.Time); n != 1 || obj.Status.Holds[0].Commit != merge ||
		obj.Status.Holds[0].Value != web("1.0.0").String() {
		t.Fatalf("holds %+v", obj.Status.Holds)
	}
}
