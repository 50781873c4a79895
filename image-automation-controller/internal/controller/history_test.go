package controller

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

func setterJob(commit string, refs map[string]meta.ImageRef, changed ...string) *updatev1.UpdateJob {
	j := &updatev1.UpdateJob{}
	j.Status.PushedCommit = commit
	for name, ref := range refs {
		j.Spec.Update.Setters = append(j.Spec.Update.Setters, updatev1.PolicySetter{Policy: "apps:" + name, ImageRef: ref})
	}
	if changed != nil {
		obj := meta.ObjectResult{}
		for _, c := range changed {
			obj.Changes = append(obj.Changes, meta.Change{Setter: c, OldValue: "x", NewValue: "y"})
		}
		j.Status.Result = &updatev1.UpdateResult{Files: []meta.FileResult{{Path: "deploy.yaml", Objects: []meta.ObjectResult{obj}}}}
	}
	return j
}

// A push is remembered with the policies its changes name (a field setter
// counts for its policy), the image written and the tag it replaced; the
// policies it left alone are not listed.
func TestPushRecordListsThePoliciesItsCommitChanged(t *testing.T) {
	before := imagev1.ObservedPolicies{"web": {Name: "r/web", Tag: "1.0.0"}, "api": {Name: "r/api", Tag: "2.0.0"}}
	job := setterJob("abc", map[string]meta.ImageRef{"web": {Name: "r/web", Tag: "1.1.0"}, "api": {Name: "r/api", Tag: "2.0.0"}},
		"apps:web:tag")
	at := metav1.Now()
	rec := pushRecord(before, job, &at)
	if rec.Commit != "abc" || !rec.Time.Equal(&at) || len(rec.Images) != 1 {
		t.Fatalf("record = %+v", rec)
	}
	if img := rec.Images[0]; img.Policy != "web" || img.Tag != "1.1.0" || img.From != "1.0.0" {
		t.Errorf("image = %+v, want web 1.0.0 → 1.1.0", img)
	}
	// A container-mode job reports files without markers: the policies
	// whose image moved are the ones listed.
	rec = pushRecord(before, setterJob("def", map[string]meta.ImageRef{"web": {Name: "r/web", Tag: "1.0.0"}, "api": {Name: "r/api", Tag: "2.1.0"}}), nil)
	if len(rec.Images) != 1 || rec.Images[0].Policy != "api" || rec.Images[0].From != "2.0.0" {
		t.Errorf("without marker changes: %+v", rec.Images)
	}
}

// The history is newest first and bounded; a job recorded twice is one
// entry; a commit changing more policies than a record lists counts them.
func TestHistoryIsBoundedNewestFirst(t *testing.T) {
	obj := &imagev1.ImageUpdateAutomation{}
	for i := range imagev1.MaxHistory + 5 {
		remember(obj, imagev1.PushRecord{Commit: fmt.Sprint(i)})
	}
	remember(obj, imagev1.PushRecord{Commit: fmt.Sprint(imagev1.MaxHistory + 4)})
	h := obj.Status.History
	if len(h) != imagev1.MaxHistory || h[0].Commit != fmt.Sprint(imagev1.MaxHistory+4) || h[1].Commit != fmt.Sprint(imagev1.MaxHistory+3) {
		t.Fatalf("history: %d entries, first %q, second %q", len(h), h[0].Commit, h[1].Commit)
	}
	refs := map[string]meta.ImageRef{}
	var changes []string
	for i := range imagev1.MaxPushedImages + 3 {
		name := fmt.Sprintf("p%02d", i)
		refs[name] = meta.ImageRef{Name: "r/" + name, Tag: "1"}
		changes = append(changes, "apps:"+name)
	}
	rec := pushRecord(nil, setterJob("c", refs, changes...), nil)
	if len(rec.Images) != imagev1.MaxPushedImages || rec.MoreImages != 3 || rec.Images[0].Policy != "p00" {
		t.Errorf("%d images listed, %d more, first %q", len(rec.Images), rec.MoreImages, rec.Images[0].Policy)
	}
}
