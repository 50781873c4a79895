package controller

import (
	"reflect"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// With several targets, each target's job is told only its own released
// holds, and its report replaces only its own: a hold on one repository
// is neither released nor dropped by another's run.
func TestHoldsStayWithTheirTarget(t *testing.T) {
	held := func(path, target string) imagev1.AutomationHold {
		return imagev1.AutomationHold{Hold: updatev1.Hold{HoldKey: updatev1.HoldKey{Path: path, Setter: "ns:app", Commit: "c-" + target}}, Target: target}
	}
	a1, b1 := held("apps/.argocd-source-a.yaml", "a@main"), held("apps/.argocd-source-a.yaml", "b@main")
	all := []imagev1.AutomationHold{a1, b1}
	if got := targetHolds(all, "a@main"); !reflect.DeepEqual(got, []imagev1.AutomationHold{a1}) {
		t.Errorf("a's holds %+v", got)
	}
	// a's job reports a new hold and no longer the old one.
	a2 := held("apps/other.yaml", "")
	got := withTargetHolds(all, "a@main", []imagev1.AutomationHold{a2})
	a2.Target = "a@main"
	if want := []imagev1.AutomationHold{b1, a2}; !reflect.DeepEqual(got, want) {
		t.Errorf("after a's run: %+v, want %+v", got, want)
	}
}
