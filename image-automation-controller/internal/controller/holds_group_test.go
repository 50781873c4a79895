package controller

import (
	"context"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// A value a job left with its promotion group's held member is recorded
// as HeldWithGroup, naming the member; it neither ends on its own nor is
// released to the next job: its member's hold ends it.
func TestAGroupHoldLastsAsLongAsItsMembers(t *testing.T) {
	person := updatev1.Hold{HoldKey: updatev1.HoldKey{Path: "deploy/app.yaml", Setter: "apps:podinfo", Commit: "c0ffee"}, Line: 10, Value: "podinfo:6.4.0"}
	withGroup := updatev1.Hold{HoldKey: updatev1.HoldKey{Path: "deploy/app.yaml", Setter: "apps:sidecar"}, Line: 12, Value: "sidecar:1.1.0", HeldWith: "apps:podinfo"}
	obj := &imagev1.ImageUpdateAutomation{}
	obj.Namespace = "apps"
	obj.Status.Holds = []imagev1.AutomationHold{{Hold: person, Policy: "podinfo", Reason: imagev1.HeldByPersonReason}}
	job := &updatev1.UpdateJob{}
	job.Spec.Update.Holds = &updatev1.HoldSpec{}
	job.Status.Result = &updatev1.UpdateResult{Holds: []updatev1.Hold{person, withGroup}}
	recordHolds(context.Background(), nil, obj, job, &tally{})
	if len(obj.Status.Holds) != 2 {
		t.Fatalf("holds %+v", obj.Status.Holds)
	}
	g := obj.Status.Holds[1]
	if g.Reason != imagev1.HeldWithGroupReason || g.Policy != "sidecar" || g.HeldWith != "apps:podinfo" {
		t.Errorf("the group's hold %+v", g)
	}
	if spec := holdSpec(&obj.Status); len(spec.Released) != 0 || releasing(&obj.Status) {
		t.Errorf("released %+v (releasing %v): a lasting hold is released", spec.Released, releasing(&obj.Status))
	}
}
