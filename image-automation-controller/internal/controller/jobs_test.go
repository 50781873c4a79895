package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/selection"
)

func TestJobName(t *testing.T) {
	in := inputsHash(updatev1.UpdateJobSpec{}, "main@sha1:abc", 1)
	if jobName("fleet", in, 0) != jobName("fleet", in, 0) {
		t.Error("job names are not deterministic")
	}
	if jobName("fleet", in, 0) == jobName("fleet", in, 1) {
		t.Error("a retry gets the same name")
	}
	for _, name := range []string{
		strings.Repeat("a", 253),
		strings.Repeat("a", 241) + ".b" + strings.Repeat("c", 10),
		strings.Repeat("a", 241) + "-b" + strings.Repeat("c", 10),
	} {
		got := jobName(name, in, 0)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("jobName(%d chars) = %q: %v", len(name), got, errs)
		}
	}
}

func TestInputsHash(t *testing.T) {
	spec := updatev1.UpdateJobSpec{Update: updatev1.UpdateSpec{Setters: []updatev1.PolicySetter{{Policy: "ns:app", ImageRef: meta.ImageRef{Name: "app", Tag: "1"}}}}}
	base := inputsHash(spec, "main@sha1:a", 1)
	other := spec.DeepCopy()
	other.Update.Setters[0].Tag = "2"
	for name, h := range map[string]string{
		"head":       inputsHash(spec, "main@sha1:b", 1),
		"generation": inputsHash(spec, "main@sha1:a", 2),
		"setters":    inputsHash(*other, "main@sha1:a", 1),
	} {
		if h == base {
			t.Errorf("a change of %s keeps the inputs hash", name)
		}
	}
}

func TestRevisionAfterPush(t *testing.T) {
	sha1 := strings.Repeat("a", 40)
	sha256 := strings.Repeat("b", 64)
	job := func(push *updatev1.PushSpec, pushed string) *updatev1.UpdateJob {
		return &updatev1.UpdateJob{
			Spec:   updatev1.UpdateJobSpec{Checkout: updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}}, Push: push},
			Status: updatev1.UpdateJobStatus{CheckoutRevision: "main@sha1:" + strings.Repeat("c", 40), PushedCommit: pushed},
		}
	}
	tests := []struct {
		name string
		job  *updatev1.UpdateJob
		want string
	}{
		{"same branch", job(nil, sha1), "main@sha1:" + sha1},
		{"same branch named", job(&updatev1.PushSpec{Branch: "main"}, sha1), "main@sha1:" + sha1},
		{"sha256", job(nil, sha256), "main@sha256:" + sha256},
		{"other branch", job(&updatev1.PushSpec{Branch: "auto"}, sha1), "main@sha1:" + strings.Repeat("c", 40)},
		// The commit went to the refspec's destination only: the checkout
		// branch's head is still the one checked out.
		{"refspec to another branch", job(&updatev1.PushSpec{Refspec: "HEAD:refs/heads/release"}, sha1), "main@sha1:" + strings.Repeat("c", 40)},
	}
	for _, tt := range tests {
		if got := revisionAfterPush(tt.job); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// status.appliedRevision, which promotions trust, names only a commit of
// the checkout branch whose files hold the job's images: the pushed commit
// when it went to that branch, the head a job found up to date, never the
// base of a pull request still open or a head another branch's push did
// not change.
func TestAppliedRevision(t *testing.T) {
	pushed, head := strings.Repeat("a", 40), "main@sha1:"+strings.Repeat("c", 40)
	job := func(phase updatev1.UpdateJobPhase, push *updatev1.PushSpec, commit string, pr *meta.PullRequestStatus) *updatev1.UpdateJob {
		return &updatev1.UpdateJob{
			Spec:   updatev1.UpdateJobSpec{Checkout: updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}}, Push: push},
			Status: updatev1.UpdateJobStatus{Phase: phase, CheckoutRevision: head, PushedCommit: commit, PullRequest: pr},
		}
	}
	tests := []struct {
		name string
		job  *updatev1.UpdateJob
		want string
	}{
		{"pushed to the branch", job(updatev1.UpdateJobSucceeded, nil, pushed, nil), "main@sha1:" + pushed},
		{"found up to date", job(updatev1.UpdateJobNoChange, nil, "", nil), head},
		{"pushed to another branch", job(updatev1.UpdateJobSucceeded, &updatev1.PushSpec{Branch: "auto"}, pushed, nil), ""},
		{"pull request opened", job(updatev1.UpdateJobSucceeded, &updatev1.PushSpec{Branch: "auto"}, pushed,
			&meta.PullRequestStatus{Action: meta.PullRequestOpened, Number: 1}), ""},
		{"pull request up to date", job(updatev1.UpdateJobNoChange, &updatev1.PushSpec{Branch: "auto"}, "",
			&meta.PullRequestStatus{Action: meta.PullRequestUnchanged, Number: 1}), ""},
		{"pull request closed: the base has the change", job(updatev1.UpdateJobNoChange, &updatev1.PushSpec{Branch: "auto"}, "",
			&meta.PullRequestStatus{Action: meta.PullRequestClosedNow, Number: 1}), head},
	}
	for _, tt := range tests {
		if got := appliedRevision(tt.job); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestChangeTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	sel := &selection.Selection{
		Setters: []updatev1.PolicySetter{
			{Policy: "ns:same", ImageRef: meta.ImageRef{Name: "a", Tag: "1"}},
			{Policy: "ns:new-tag", ImageRef: meta.ImageRef{Name: "b", Tag: "2"}},
			{Policy: "ns:no-time", ImageRef: meta.ImageRef{Name: "c", Tag: "2"}},
			{Policy: "ns:first", ImageRef: meta.ImageRef{Name: "d", Tag: "1"}},
		},
		Times: map[string]time.Time{"ns:same": t0, "ns:new-tag": t0, "ns:first": t0},
	}
	last := imagev1.ObservedPolicies{"same": {Name: "a", Tag: "1"}, "new-tag": {Name: "b", Tag: "1"}, "no-time": {Name: "c", Tag: "1"}}
	got := changeTimes(sel, last)
	if len(got) != 2 || !got["ns:new-tag"].Equal(t0) || !got["ns:first"].Equal(t0) {
		t.Errorf("changeTimes = %v", got)
	}
}
