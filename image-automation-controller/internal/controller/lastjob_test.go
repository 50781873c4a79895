package controller

import (
	"slices"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// The automation copies from its finished job's markers the policies it
// applied that no marker names and the policies markers name that it had
// no value for, into status.lastJob, where they outlive the job; at most
// MaxLastJobPolicies of each.
func TestLastJobRecordsMarkerFindings(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	a := f.automation("fleet", nil)
	job := waitJobs(t, f.ns, 1)[0]
	head := f.head()
	var unmarked []string
	for i := range imagev1.MaxLastJobPolicies + 3 {
		unmarked = append(unmarked, f.ns+":p"+string(rune('a'+i)))
	}
	finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision = head
		j.Status.Result = &updatev1.UpdateResult{
			Markers: []updatev1.PolicyMarkers{
				{Policy: f.ns + ":ap", Count: 2, Files: []string{"apps/app.yaml"}, Unknown: true},
				{Policy: "other:app", Count: 1, Files: []string{"apps/app.yaml"}, Unknown: true},
				{Policy: f.ns + ":app", Count: 1, Files: []string{"apps/app.yaml"}},
			},
			UnmarkedPolicies: unmarked,
		}
	})
	a = waitAutomation(t, a, "job recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.UID == job.UID
	})
	if got := a.Status.LastJob.UnknownPolicies; !slices.Equal(got, []string{f.ns + ":ap", "other:app"}) {
		t.Errorf("lastJob.unknownPolicies %v", got)
	}
	if got := a.Status.LastJob.UnmarkedPolicies; !slices.Equal(got, unmarked[:imagev1.MaxLastJobPolicies]) {
		t.Errorf("lastJob.unmarkedPolicies %v", got)
	}
}
