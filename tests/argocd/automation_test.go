package argocd

import (
	"strings"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/argochain"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
)

var app = &imagev1.CrossNamespaceSourceReference{Kind: "Application", Name: "podinfo"}

// The short version, without Argo CD (part of make test): an automation
// over an Application, whose status is written as Argo CD writes it,
// commits Argo CD's override file with Argo CD's repository credentials,
// and a pushed tag becomes a second commit of it. The Application tracks
// HEAD, Argo CD's default: the commits go to the default branch.
func TestAutomationCommitsTheApplicationsOverrideFile(t *testing.T) {
	c := argochain.Start(t, argochain.Options{Apps: []string{"kustomize"}, Revision: "HEAD"})
	c.Application(t, "podinfo", "kustomize", nil)
	c.Follow(t, app, nil)
	first := c.OverrideOn(t, "podinfo", "kustomize", argochain.FirstTag, time.Minute)
	c.Push(t, "6.5.1")
	c.Scan(t)
	second := c.OverrideOn(t, "podinfo", "kustomize", "6.5.1", time.Minute)
	if first == second {
		t.Fatal("no new commit for the new tag")
	}
	if parent := strings.TrimSpace(testgit.Git(t, c.Git.BarePath("apps"), "rev-parse", second+"^")); parent != first {
		t.Errorf("the tag's commit %s follows %s, not the first override commit %s", second, parent, first)
	}
}

// The whole way with Argo CD's own application controller and repo server
// (make test-integrations): a tag pushed to the registry becomes our
// override commit, which Argo CD syncs: the Application's
// status.sync.revision is our commit and status.summary.images shows the
// new tag. The Application tracks HEAD, as Argo CD's own default.
func TestArgoCDDeploysTheAutomationsCommit(t *testing.T) {
	c := argochain.Start(t, argochain.Options{ArgoCD: true, Apps: []string{"kustomize"}, Revision: "HEAD"})
	c.Application(t, "podinfo", "kustomize", nil)
	c.Argo.WaitApplication(t, "podinfo", waitArgo, "running "+argochain.RunningTag, c.Running(c.Head(t), argochain.RunningTag))
	c.Follow(t, app, nil)
	first := c.OverrideOn(t, "podinfo", "kustomize", argochain.FirstTag, time.Minute)
	c.Argo.WaitApplication(t, "podinfo", waitArgo, "revision "+first+" running "+argochain.FirstTag, c.Running(first, argochain.FirstTag))
	c.Push(t, "6.5.1")
	c.Scan(t)
	commit := c.OverrideOn(t, "podinfo", "kustomize", "6.5.1", time.Minute)
	c.Argo.WaitApplication(t, "podinfo", waitArgo, "revision "+commit+" running 6.5.1", c.Running(commit, "6.5.1"))
}
