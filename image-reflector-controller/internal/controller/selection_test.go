package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// A policy's status.lastSelection says what the filter and the policy did
// with the repository's tags (exact counts, the best five candidates, the
// scan revision they came from), also when no tag matches; the repository
// counts the tags its exclusionList dropped.
func TestLastSelectionAndExcludedCount(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	tags := []string{"latest", "1.2", "2.0.0", "a.sig", "b.sig", "app-0.9.0", "app-1.0.0", "app-1.1.0", "app-1.2.0-rc.1", "app-nightly"}
	for i := range 6 {
		tags = append(tags, fmt.Sprintf("app-1.3.%d", i))
	}
	reg.PushTags(t, "team/sel", tags)
	ns := namespace(t)

	repo := repoFor(ns, "sel", reg, "team/sel")
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)
	scan := repo.Status.LastScanResult
	if scan.TagCount != 14 || scan.ExcludedCount != 2 {
		t.Errorf("tagCount %d, excludedCount %d; want 14 and 2 (the .sig tags)", scan.TagCount, scan.ExcludedCount)
	}

	p := policyFor(ns, "app", "sel", semverChoice(">=1.0.0"))
	p.Spec.FilterTags = &imagev1.TagFilter{Pattern: `^app-(?P<v>.*)$`, Extract: "$v"}
	create(t, p)
	waitReason(t, p, conditions.SucceededReason)
	want := imagev1.TagSelection{ScanRevision: scan.Revision, Considered: 14, Filtered: 3, Unparsable: 1, OutOfRange: 2, Kept: 8,
		TopCandidates: []string{"app-1.3.5", "app-1.3.4", "app-1.3.3", "app-1.3.2", "app-1.3.1"}}
	if !equalSelection(p.Status.LastSelection, want) {
		t.Errorf("lastSelection %+v; want %+v", p.Status.LastSelection, want)
	}
	if p.Status.LatestRef.Tag != p.Status.LastSelection.Selected() {
		t.Errorf("latestRef %s is not the first candidate", p.Status.LatestRef.Tag)
	}

	// Rules that do not parse drop the breakdown made by the old ones.
	p.Spec.Policy = semverChoice(">=1 <<2")
	if err := env.Client.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	waitReason(t, p, imagev1.InvalidPolicyReason)
	if p.Status.LastSelection != nil {
		t.Errorf("lastSelection %+v kept under an invalid policy", p.Status.LastSelection)
	}

	// No match: the breakdown says why not.
	none := policyFor(ns, "none", "sel", semverChoice(">=3.0.0"))
	create(t, none)
	waitReason(t, none, imagev1.NoMatchingTagReason)
	want = imagev1.TagSelection{ScanRevision: scan.Revision, Considered: 14, Unparsable: 13, OutOfRange: 1}
	if !equalSelection(none.Status.LastSelection, want) {
		t.Errorf("no-match lastSelection %+v; want %+v", none.Status.LastSelection, want)
	}
}

func equalSelection(got *imagev1.TagSelection, want imagev1.TagSelection) bool {
	if got == nil {
		return false
	}
	return slices.Equal(got.TopCandidates, want.TopCandidates) && got.ScanRevision == want.ScanRevision &&
		got.Considered == want.Considered && got.Filtered == want.Filtered && got.Unparsable == want.Unparsable &&
		got.OutOfRange == want.OutOfRange && got.Kept == want.Kept
}

// TestNeverADowngrade proves the rule of status.heldRef: when a scan no
// longer lists latestRef's tag and the best tag left ranks lower, the
// policy keeps latestRef (Ready, reason DowngradeHeld) until a second
// consecutive complete scan lacks it too; a scan that lists it again clears
// the hold. tests/faults TestRegistryFaultsNeverDowngrade is its end-to-end
// form.
func TestNeverADowngrade(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "team/down", []string{"1.0.0", "1.1.0"})
	ns := namespace(t)
	repo := repoFor(ns, "down", reg, "team/down")
	create(t, repo)
	p := policyFor(ns, "down", "down", semverChoice(">=1.0.0"))
	create(t, p)
	waitReason(t, p, conditions.SucceededReason)
	if p.Status.LatestRef.Tag != "1.1.0" {
		t.Fatalf("latestRef %s, want 1.1.0", p.Status.LatestRef.Tag)
	}

	deleteTag(t, reg, "team/down", "1.1.0")
	requestReconcile(t, repo, "scan-1")
	waitReason(t, p, imagev1.DowngradeHeldReason)
	if p.Status.LatestRef.Tag != "1.1.0" || p.Status.HeldRef == nil || p.Status.HeldRef.MissingScans != 1 ||
		p.Status.HeldRef.Candidate != "1.0.0" {
		t.Fatalf("after one scan without 1.1.0: latestRef %s, heldRef %+v; want 1.1.0 held against 1.0.0", p.Status.LatestRef.Tag, p.Status.HeldRef)
	}

	// The tag comes back: the hold ends, nothing moved.
	reg.PushTags(t, "team/down", []string{"1.1.0"})
	requestReconcile(t, repo, "scan-2")
	waitReason(t, p, conditions.SucceededReason)
	if p.Status.LatestRef.Tag != "1.1.0" || p.Status.HeldRef != nil {
		t.Fatalf("tag back: latestRef %s, heldRef %+v", p.Status.LatestRef.Tag, p.Status.HeldRef)
	}

	// Gone from two consecutive scans: a real removal, the policy moves.
	deleteTag(t, reg, "team/down", "1.1.0")
	requestReconcile(t, repo, "scan-3")
	waitReason(t, p, imagev1.DowngradeHeldReason)
	time.Sleep(1100 * time.Millisecond) // the store keeps whole seconds
	requestReconcile(t, repo, "scan-4")
	// An identical listing changes no revision: the policy looks again on
	// its own timer; ask now instead of waiting for it.
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		var r imagev1.ImageRepository
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(repo), &r)
		return r.Status.LastHandledReconcileAt == "scan-4", err
	})
	requestReconcile(t, p, "look")
	waitReason(t, p, conditions.SucceededReason)
	if p.Status.LatestRef.Tag != "1.0.0" || p.Status.HeldRef != nil {
		t.Fatalf("after two scans without 1.1.0: latestRef %s, heldRef %+v; want 1.0.0", p.Status.LatestRef.Tag, p.Status.HeldRef)
	}
}

// deleteTag removes a tag from the registry, as its garbage collection would.
func deleteTag(t *testing.T, reg *testregistry.Registry, repo, tag string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, "http://"+reg.Host+"/v2/"+repo+"/manifests/"+tag, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE %s:%s: %s", repo, tag, resp.Status)
	}
}
