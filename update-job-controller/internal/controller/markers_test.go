package controller

import (
	"reflect"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// A job records in status.result the markers it found per policy, also
// when it changes nothing: a marker naming a policy it has no setter for is
// flagged unknown, and a setter no marker names is listed as unmarked.
func TestJobRecordsMarkers(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	srv.CreateRepo(t, "markers", map[string]string{
		"deploy/app.yaml":   updated,
		"deploy/typo.yaml":  "image: nginx:1 # {\"$imagepolicy\": \"apps:ngnix\"}\n",
		"outside/skip.yaml": "image: nginx:1 # {\"$imagepolicy\": \"apps:outside\"}\n",
	})
	j := newJob(ns, "markers", srv.RepoURL("markers"), func(j *updatev1.UpdateJob) {
		j.Spec.Update.Setters = append(j.Spec.Update.Setters, updatev1.PolicySetter{Policy: "apps:redis", ImageRef: meta.ImageRef{Name: "redis", Tag: "7"}})
	})
	create(t, j)
	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobNoChange {
		t.Fatalf("phase %s: %+v", got.Status.Phase, got.Status.Conditions)
	}
	want := &updatev1.UpdateResult{
		Markers: []updatev1.PolicyMarkers{
			{Policy: "apps:ngnix", Count: 1, Files: []string{"typo.yaml"}, Lines: []int{1}, Unknown: true},
			{Policy: "apps:podinfo", Count: 1, Files: []string{"app.yaml"}, Lines: []int{11}},
		},
		UnmarkedPolicies: []string{"apps:redis"},
	}
	if !reflect.DeepEqual(got.Status.Result, want) {
		t.Errorf("result %+v\nwant %+v", got.Status.Result, want)
	}
}
