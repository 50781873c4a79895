package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/policy/policytest"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// The docker policy through the reconcilers: each official image's tags
// pushed to a real registry and scanned, one ImagePolicy per case of the
// vectors pkg/policy, discover and tk-image policy eval check too; each
// picks the case's answer, and no tag that must never win is among its
// candidates.
func TestDockerPolicyOfficialImages(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	ns := namespace(t)
	type pending struct {
		p   *imagev1.ImagePolicy
		c   policytest.Case
		img policytest.Image
	}
	var policies []pending
	for i, img := range policytest.OfficialImages() {
		repoName := fmt.Sprintf("official-%d", i)
		path := "official/" + strings.ReplaceAll(img.Image[strings.LastIndexByte(img.Image, '/')+1:], ":", "-")
		reg.PushTags(t, path, img.Tags)
		create(t, repoFor(ns, repoName, reg, path))
		for j, c := range img.Cases {
			p := policyFor(ns, fmt.Sprintf("%s-%d", repoName, j), repoName, imagev1.ImagePolicyChoice{
				Docker: &imagev1.DockerPolicy{Range: c.Range, CompatibleWith: c.CompatibleWith()}})
			create(t, p)
			policies = append(policies, pending{p, c, img})
		}
	}
	for _, pc := range policies {
		waitReason(t, pc.p, conditions.SucceededReason)
		name := pc.c.Name(pc.img)
		if got := pc.p.Status.LatestRef.Tag; got != pc.c.Want {
			t.Errorf("%s: latestRef %s, want %s", name, got, pc.c.Want)
		}
		sel := pc.p.Status.LastSelection
		if sel == nil || sel.Considered != len(pc.img.Tags) {
			t.Errorf("%s: lastSelection %+v", name, sel)
			continue
		}
		for _, never := range pc.c.Never {
			if slices.Contains(sel.TopCandidates, never) {
				t.Errorf("%s: %s is a candidate: %v", name, never, sel.TopCandidates)
			}
		}
	}
}
