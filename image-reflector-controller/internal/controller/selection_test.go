package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testregistry"
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
	ns := env.Namespace(t)

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
