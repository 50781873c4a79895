package v1beta1

import (
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

func batch() *UpdateJob {
	yes := true
	return &UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Name: "app-a-1234", Namespace: "apps",
			Annotations: map[string]string{"inputs": "a", "run": "3", "other": "kept"},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "image.toolkit.dev/v1beta1", Kind: "ImageUpdateAutomation", Name: "app-a", UID: "uid-a", Controller: &yes},
				{APIVersion: "image.toolkit.dev/v1beta1", Kind: "ImageUpdateAutomation", Name: "app-b", UID: "uid-b"},
			}},
		Spec: UpdateJobSpec{
			Checkout: GitCheckoutSpec{Reference: GitRepositoryRef{Branch: "main"}},
			Update: UpdateSpec{Path: "apps/a", Setters: []PolicySetter{{Policy: "apps:podinfo",
				ImageRef: meta.ImageRef{Name: "podinfo", Tag: "6.4.0"}}}},
			Commit: CommitSpec{Author: CommitUser{Email: "bot@example.com"}, MessageTemplate: "a's"},
			Members: []UpdateJobMember{{Automation: "app-b", UID: "uid-b",
				Annotations:     map[string]string{"inputs": "b", "run": "7"},
				Update:          UpdateSpec{Path: "apps/b", Setters: []PolicySetter{{Policy: "apps:podinfo", ImageRef: meta.ImageRef{Name: "podinfo", Tag: "6.4.0"}}}},
				MessageTemplate: "b's"}},
		},
	}
}

// The controller's view is the job without its members; a member's is its
// own update, message, annotations and controller, on the job's checkout.
func TestViewIsEachAutomationsOwnJob(t *testing.T) {
	j := batch()
	lead, ok := j.View("uid-a")
	if !ok || lead.Spec.Update.Path != "apps/a" || lead.Spec.Members != nil || lead.Spec.Commit.MessageTemplate != "a's" {
		t.Fatalf("leader's view: %v %+v", ok, lead.Spec)
	}
	b, ok := j.View("uid-b")
	if !ok {
		t.Fatal("no view of a member")
	}
	if got := metav1.GetControllerOf(b); got == nil || got.UID != "uid-b" || got.Name != "app-b" || got.Kind != "ImageUpdateAutomation" {
		t.Errorf("member's view controlled by %+v", got)
	}
	if len(b.OwnerReferences) != 1 {
		t.Errorf("member's view owned by %d objects", len(b.OwnerReferences))
	}
	if b.Spec.Update.Path != "apps/b" || b.Spec.Commit.MessageTemplate != "b's" || b.Spec.Checkout.Reference.Branch != "main" ||
		b.Spec.Commit.Author.Email != "bot@example.com" || b.Spec.Members != nil {
		t.Errorf("member's view spec %+v", b.Spec)
	}
	if b.Annotations["inputs"] != "b" || b.Annotations["run"] != "7" || b.Annotations["other"] != "kept" {
		t.Errorf("member's view annotations %v", b.Annotations)
	}
	if j.Annotations["inputs"] != "a" || j.Spec.Update.Path != "apps/a" {
		t.Error("a view changed the job")
	}
	if _, ok := j.View("uid-c"); ok {
		t.Error("a view for an automation the job does not carry")
	}
	if got := j.Automations(); len(got) != 2 || got[0] != "uid-a" || got[1] != "uid-b" {
		t.Errorf("Automations() = %v", got)
	}
	if vs := j.Views(); len(vs) != 2 || vs[1].Spec.Update.Path != "apps/b" {
		t.Errorf("Views() = %d views", len(vs))
	}
}

// A member's outcome written through its view reads back from the job: a
// member the commit carries has the job's commit and refs, one whose
// update failed has its own failure, while the job stays the leader's.
func TestMemberOutcomeRoundTrips(t *testing.T) {
	j := batch()
	j.Status.Phase, j.Status.PushedCommit, j.Status.PushedRefs = UpdateJobRunning, "", nil
	b, _ := j.View("uid-b")
	if b.Status.Phase != UpdateJobRunning {
		t.Errorf("a running batch's member is %q", b.Status.Phase)
	}
	b.Status.Phase, b.Status.PushedCommit = UpdateJobSucceeded, "abc"
	b.Status.Result = &UpdateResult{UnmarkedPolicies: []string{"apps:x"}}
	apimeta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "pushed abc"})
	j.SetMember(b)
	j.SetMember(b) // once per member
	j.Status.Phase, j.Status.PushedCommit, j.Status.PushedRefs = UpdateJobSucceeded, "abc", []string{"refs/heads/main"}
	if len(j.Status.Members) != 1 {
		t.Fatalf("status.members = %+v", j.Status.Members)
	}
	got, _ := j.View("uid-b")
	if got.Status.Phase != UpdateJobSucceeded || got.Status.PushedCommit != "abc" || len(got.Status.PushedRefs) != 1 ||
		got.Status.Result == nil || got.Status.Result.UnmarkedPolicies[0] != "apps:x" {
		t.Errorf("member's view after its outcome: %+v", got.Status)
	}

	b.Status.Phase, b.Status.PushedCommit, b.Status.Result = UpdateJobFailed, "", nil
	apimeta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "UpdateFailed", Message: "bad yaml"})
	j.SetMember(b)
	got, _ = j.View("uid-b")
	c := apimeta.FindStatusCondition(got.Status.Conditions, "Ready")
	if got.Status.Phase != UpdateJobFailed || got.Status.PushedCommit != "" || got.Status.PushedRefs != nil ||
		c == nil || c.Status != metav1.ConditionFalse || c.Reason != "UpdateFailed" || c.Message != "bad yaml" {
		t.Errorf("failed member's view: %+v", got.Status)
	}
	if lead, _ := j.View("uid-a"); lead.Status.Phase != UpdateJobSucceeded || lead.Status.Members != nil {
		t.Errorf("leader's view: %+v", lead.Status)
	}
}

// A batch that ended before any update ran (no status.members) ended each
// member as it ended: Failed, with the job's conditions.
func TestMemberOfABatchThatNeverRanFailed(t *testing.T) {
	j := batch()
	j.Status.Phase = UpdateJobFailed
	j.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "SecretNotFound", Message: "no secret"}}
	b, _ := j.View(types.UID("uid-b"))
	if b.Status.Phase != UpdateJobFailed || apimeta.FindStatusCondition(b.Status.Conditions, "Ready").Reason != "SecretNotFound" {
		t.Errorf("member of a failed batch: %+v", b.Status)
	}
}
