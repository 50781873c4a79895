package argocd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/argochain"
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

// Applications on two branches under one automation (without Argo CD,
// part of make test): the real controllers make one UpdateJob per branch,
// and each branch gets its own commit with its own Application's override
// file only; status.targets names each branch's commit.
func TestAutomationCommitsEachTargetsOverrideFile(t *testing.T) {
	c := argochain.Start(t, argochain.Options{Apps: []string{"kustomize"}})
	testgit.Git(t, c.Git.BarePath("apps"), "branch", "stage", "main")
	team := map[string]string{"team": "shop"}
	c.Application(t, "podinfo", "kustomize", team)
	c.ApplicationAt(t, "podinfo-stage", "kustomize", "stage", team)
	c.Follow(t, nil, &metav1.LabelSelector{MatchLabels: team})
	onMain := c.OverrideOn(t, "podinfo", "kustomize", argochain.FirstTag, time.Minute)
	onStage := c.OverrideOnBranch(t, "stage", "podinfo-stage", "kustomize", argochain.FirstTag, time.Minute)
	if onMain == onStage {
		t.Fatalf("one commit %s for both branches", onMain)
	}
	if err := c.OverrideAt(t, onMain, "podinfo-stage", "kustomize", argochain.FirstTag); err == nil {
		t.Errorf("main's commit %s holds the stage Application's file", onMain)
	}
	if err := c.OverrideAt(t, onStage, "podinfo", "kustomize", argochain.FirstTag); err == nil {
		t.Errorf("stage's commit %s holds the main Application's file", onStage)
	}
	a := &imagev1.ImageUpdateAutomation{}
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		if err := c.Cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: argochain.Namespace, Name: "podinfo"}, a); err != nil {
			return false, err
		}
		pushed := map[string]string{}
		for _, tg := range a.Status.Targets {
			pushed[tg.Branch] = tg.LastPushCommit
		}
		return pushed["main"] == onMain && pushed["stage"] == onStage, fmt.Errorf("status.targets %+v", a.Status.Targets)
	})
}
