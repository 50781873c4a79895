package events

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
)

const sha = "0123456789abcdef0123456789abcdef01234567"

func result(pairs ...string) *updatev1.UpdateResult {
	var ch []meta.Change
	for i := 0; i+1 < len(pairs); i += 2 {
		ch = append(ch, meta.Change{OldValue: pairs[i], NewValue: pairs[i+1], Setter: "ns:app"})
	}
	return &updatev1.UpdateResult{Files: []meta.FileResult{
		{Path: "a.yaml", Objects: []meta.ObjectResult{{ObjectID: meta.ObjectID{Kind: "Deployment", Name: "a"}, Changes: ch}}},
		// The same change in another file is listed once.
		{Path: "b.yaml", Objects: []meta.ObjectResult{{ObjectID: meta.ObjectID{Kind: "Deployment", Name: "b"}, Changes: ch[:1]}}},
	}}
}

// An UpdateJob's events say what it did, in Flux's keys where Flux has
// them: the pushed commit and its revision (else the revision it started
// from), its pull request, and each replaced value once, the list bounded.
func TestUpdateJobMetadata(t *testing.T) {
	var many []string
	var manyWant []string
	for i := range maxChanges + 3 {
		many = append(many, fmt.Sprintf("app:1.%d", i), fmt.Sprintf("app:2.%d", i))
		if i < maxChanges {
			manyWant = append(manyWant, fmt.Sprintf("app:1.%d → app:2.%d", i, i))
		}
	}
	// Where the job pushed is its plan's answer: the spec says it.
	spec := func(push *updatev1.PushSpec) updatev1.UpdateJobSpec {
		return updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: "https://git.example.com/fleet"},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update:     updatev1.UpdateSpec{Setters: []updatev1.PolicySetter{{Policy: "ns:app", ImageRef: meta.ImageRef{Name: "reg/app", Tag: "1.2.0"}}}},
			Push:       push,
		}
	}
	branch := spec(&updatev1.PushSpec{Branch: "main", Refspec: "HEAD:refs/heads/release"})
	request := spec(&updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "gitea"}})
	tests := []struct {
		name   string
		spec   updatev1.UpdateJobSpec
		status updatev1.UpdateJobStatus
		want   map[string]string
	}{
		{"pushed", branch, updatev1.UpdateJobStatus{
			CheckoutRevision: "main@sha1:ffff", PushedCommit: sha, PushedRefs: []string{"refs/heads/main", "refs/heads/release"},
			Result: result("reg/app:1.0.0", "reg/app:1.2.0", "1.0.0", "1.2.0"),
		}, map[string]string{
			MetaCommit: sha, MetaRevision: "main@sha1:" + sha,
			MetaChanges: "reg/app:1.0.0 → reg/app:1.2.0\n1.0.0 → 1.2.0",
		}},
		{"refspec only", spec(&updatev1.PushSpec{Refspec: "HEAD:refs/for/main"}), updatev1.UpdateJobStatus{
			PushedCommit: sha, PushedRefs: []string{"refs/for/main"},
		}, map[string]string{MetaCommit: sha, MetaRevision: "refs/for/main@sha1:" + sha}},
		{"pull request", request, updatev1.UpdateJobStatus{
			PushedCommit: sha,
			PullRequest:  &meta.PullRequestStatus{URL: "https://git.example.com/fleet/pulls/3", Number: 3, HeadBranch: "image-updates", Action: meta.PullRequestOpened},
		}, map[string]string{
			MetaCommit: sha, MetaRevision: "image-updates@sha1:" + sha, MetaPullRequest: "https://git.example.com/fleet/pulls/3",
		}},
		{"closed request, nothing pushed", request, updatev1.UpdateJobStatus{
			CheckoutRevision: "main@sha1:" + sha,
			PullRequest:      &meta.PullRequestStatus{URL: "https://git.example.com/fleet/pulls/3", Action: meta.PullRequestClosedNow},
		}, map[string]string{MetaRevision: "main@sha1:" + sha, MetaPullRequest: "https://git.example.com/fleet/pulls/3"}},
		{"many changes", branch, updatev1.UpdateJobStatus{Result: result(many...)},
			map[string]string{MetaChanges: strings.Join(append(manyWant, "and 3 more"), "\n")}},
		{"nothing known", updatev1.UpdateJobSpec{}, updatev1.UpdateJobStatus{}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := UpdateJobMetadata(&updatev1.UpdateJob{Spec: tt.spec, Status: tt.status})
			if !maps.Equal(got, tt.want) {
				t.Errorf("metadata\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// formatRevision stands in for git.FormatRevision; they must agree.
func TestFormatRevisionIsGits(t *testing.T) {
	for _, hash := range []string{sha, strings.Repeat("ab", 32)} {
		if got, want := formatRevision("main", hash), git.FormatRevision("main", hash); got != want {
			t.Errorf("formatRevision = %q, git.FormatRevision = %q", got, want)
		}
	}
}
