package jobplan

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

func job(mutate func(*updatev1.UpdateJobSpec)) *updatev1.UpdateJob {
	j := &updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "job-1"},
		Spec: updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: "http://example.com/org/r.git"},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update: updatev1.UpdateSpec{Setters: []updatev1.PolicySetter{
				{Policy: "apps:podinfo", ImageRef: meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"}},
			}},
			Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "bot", Email: "bot@example.com"}},
		},
	}
	if mutate != nil {
		mutate(&j.Spec)
	}
	return j
}

// The cases are the update-job-controller's NewPlan's, which this adapter
// replaces; those about the forge and the templates are the engine's
// Check's now.
func TestFromJobSaysWhereAJobPushes(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*updatev1.UpdateJobSpec)
		want   writeback.Target
		path   string
		err    string
	}{
		{name: "defaults to the checkout branch", want: writeback.Target{Branch: "main"}},
		{name: "other push branch is forced", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "auto"}
		}, want: writeback.Target{Branch: "auto", Force: true}},
		{name: "same push branch is not forced", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "main"}
		}, want: writeback.Target{Branch: "main"}},
		{name: "refspec only", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Refspec: "+HEAD:refs/for/main"}
		}, want: writeback.Target{Extra: []writeback.RefUpdate{{Dst: "refs/for/main", Force: true}}}},
		{name: "refspec from the checkout branch, short destination", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "main", Refspec: "main:auto"}
		}, want: writeback.Target{Branch: "main", Extra: []writeback.RefUpdate{{Dst: "refs/heads/auto"}}}},
		{name: "refspec to the push branch is pushed once", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "main", Refspec: "HEAD:refs/heads/main"}
		}, want: writeback.Target{Branch: "main"}},
		{name: "path is cleaned", mutate: func(s *updatev1.UpdateJobSpec) { s.Update.Path = "./apps//prod/" },
			want: writeback.Target{Branch: "main"}, path: "apps/prod"},
		{name: "root path", mutate: func(s *updatev1.UpdateJobSpec) { s.Update.Path = "./" },
			want: writeback.Target{Branch: "main"}},
		{name: "pull request pushes no branch", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "gitea"}}
		}, want: writeback.Target{PullRequest: &writeback.PullRequest{Provider: "gitea", Base: "main", Head: "image-toolkit/apps-job-1"}}},
		{name: "push options", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Options: map[string]string{"merge_request.create": ""}}
		}, err: "push.options are not supported"},
		{name: "refspec without destination", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Refspec: "HEAD"}
		}, err: "want [+]SOURCE:DESTINATION"},
		{name: "refspec from elsewhere", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Refspec: "refs/heads/dev:refs/heads/x"}
		}, err: "the source must be HEAD or the checkout branch"},
		{name: "bad push branch", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "a..b"}
		}, err: "not a valid branch name"},
		{name: "tag without push target", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1"}
		}, err: "nothing to push to"},
		{name: "pull request with a push branch", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "x", PullRequest: &updatev1.PullRequestSpec{Provider: "gitea"}}
		}, err: "cannot be set with it"},
		{name: "pull request from a tag without base", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1"}
			s.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "gitea"}}
		}, err: "base is needed"},
		{name: "pull request with a bad base", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "gitea", Base: "a..b"}}
		}, err: "not a valid branch name"},
		{name: "setter twice", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Update.Setters = append(s.Update.Setters, s.Update.Setters[0])
		}, err: "setter apps:podinfo is listed twice"},
		{name: "no setter", mutate: func(s *updatev1.UpdateJobSpec) { s.Update.Setters = nil }, err: "update.setters is empty"},
		{name: "container and setters", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Update.Container = &updatev1.UpdateContainer{Image: "tool:1"}
		}, err: "update.container runs instead of the setters"},
		{name: "bad discovery pattern", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Update.Discover = &updatev1.DiscoverSpec{Include: []string{"["}}
		}, err: `update.discover: pattern "["`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := FromJob(job(tt.mutate))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, writeback.ErrInvalid) {
					t.Fatalf("err = %v, want a writeback.ErrInvalid error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := p.Target
			if got.Branch != tt.want.Branch || got.Force != tt.want.Force || !slices.Equal(got.Extra, tt.want.Extra) ||
				(got.PullRequest == nil) != (tt.want.PullRequest == nil) || p.Path != tt.path {
				t.Errorf("target = %+v, path %q; want %+v, path %q", got, p.Path, tt.want, tt.path)
			}
			if w := tt.want.PullRequest; w != nil && (got.PullRequest.Base != w.Base || got.PullRequest.Head != w.Head || got.PullRequest.Provider != w.Provider) {
				t.Errorf("pull request = %+v, want %+v", got.PullRequest, w)
			}
		})
	}
}

// The rest of the spec travels as it is: the checkout, the images, the
// commit, the timeout, and what an earlier attempt was about to push.
func TestFromJobCarriesTheSpec(t *testing.T) {
	j := job(func(s *updatev1.UpdateJobSpec) {
		s.Repository.Timeout = &metav1.Duration{Duration: 30 * time.Second}
		s.Commit.MessageTemplate = "update {{ .AutomationObject }}"
		s.Commit.MessageTemplateValues = map[string]string{"env": "prod"}
		s.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "gitea", BranchTemplate: "b", AutoMerge: "squash"}}
	})
	yes := true
	j.OwnerReferences = []metav1.OwnerReference{{APIVersion: imagev1.GroupVersion.String(), Kind: imagev1.ImageUpdateAutomationKind, Name: "fleet", Controller: &yes}}
	j.Status.PushingCommit = "abc"
	p, err := FromJob(j)
	if err != nil {
		t.Fatal(err)
	}
	if p.Repository != j.Spec.Repository.URL || p.Checkout.Branch != "main" || p.Timeout != 30*time.Second || p.Resume != "abc" {
		t.Errorf("plan = %+v", p)
	}
	if img := p.Update.Images["apps:podinfo"]; img != (meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"}) {
		t.Errorf("images = %+v", p.Update.Images)
	}
	c := p.Commit
	if c.AuthorName != "bot" || c.AuthorEmail != "bot@example.com" || c.Values["env"] != "prod" ||
		c.Automation != (writeback.Object{Namespace: "apps", Name: "fleet"}) {
		t.Errorf("commit = %+v", c)
	}
	// With an automation (or a template), the engine renders the head.
	if pr := p.Target.PullRequest; pr.Head != "" || pr.HeadTemplate != "b" || pr.AutoMerge != "squash" {
		t.Errorf("pull request = %+v", pr)
	}
}
