package explain

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// Text prints every part of an explanation as recorded in
// testdata/NAME.golden: each policy kind's rules and drops, a selection of
// an older scan, a repository that cannot be read, and an automation with
// every section filled, with none, and with markers complete but absent.
func TestTextIsAsRecorded(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	ts := func(s string) *metav1.Time { return &metav1.Time{Time: at(s)} }
	micro := &metav1.MicroTime{Time: at("2026-11-20T10:00:00Z")}
	ready := &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "all good"}
	ref := func(tag string) *meta.ImageRef { return &meta.ImageRef{Name: "ghcr.io/acme/web", Tag: tag} }
	scan := &imagev1.ScanResult{Revision: "sha256:0123456789abcdef0123", TagCount: 40, ExcludedCount: 3, ScanTime: metav1.Time{Time: at("2026-11-20T09:00:00Z")}}
	filter := &imagev1.TagFilter{Pattern: `^v(?P<v>.*)$`, Extract: "$v"}
	selection := func(top ...string) *imagev1.TagSelection {
		return &imagev1.TagSelection{ScanRevision: scan.Revision, Considered: 40, Filtered: 5, Unparsable: 4, OutOfRange: 3,
			BeyondLimit: 2, Kept: 26, TooNew: 1, TopCandidates: top}
	}
	policy := func(choice imagev1.ImagePolicyChoice, f *imagev1.TagFilter) *PolicyExplanation {
		return &PolicyExplanation{Policy: "default/web", Rules: describeRules(choice, f),
			Repository: repositoryFacts{Name: "default/web", Image: "ghcr.io/acme/web", LastScanResult: scan,
				ExclusionList: []string{"^sha-"}, Ready: ready},
			LastSelection: selection("1.2.0", "1.1.0"), SelectionIsCurrent: true, LatestRef: ref("1.2.0"),
			LatestRefTime: micro, PreviousRef: ref("1.1.0"), Ready: ready, choice: choice, filter: f}
	}
	semver := policy(imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}, filter)
	semver.Source = &meta.ImageSource{URL: "https://github.com/acme/web", Revision: "3a91042c0ffee",
		Dropped: []string{`org.opencontainers.image.version: "1.2.0 final" holds characters other than letters, digits and ._+~-`}}
	stale := policy(imagev1.ImagePolicyChoice{Numerical: &imagev1.NumericalPolicy{}}, nil)
	stale.Suspended, stale.SelectionIsCurrent, stale.PreviousRef = true, false, nil
	stale.LastSelection = &imagev1.TagSelection{ScanRevision: "sha256:fedcba9876543210fedc", Considered: 3, Kept: 2, TooNew: 2}
	stale.PendingRef = &imagev1.PendingRef{Tag: "1.3.0", EligibleAt: &metav1.Time{Time: at("2026-11-21T00:00:00Z")}}

	// prod follows staging, which follows dev: staging soaks 1.3.0 while
	// prod runs 1.2.0.
	devCommit, stagingCommit := "main@sha1:1111111111111111111111111111111111111111", "main@sha1:2222222222222222222222222222222222222222"
	digest := func(r *meta.ImageRef, d string) *meta.ImageRef {
		r.Digest = "sha256:" + strings.Repeat(d, 64)
		return r
	}
	promotionChoice := imagev1.ImagePolicyChoice{Promotion: &imagev1.PromotionPolicy{From: imagev1.PromotionSource{Automation: "staging"},
		HealthOf: []imagev1.HealthObjectReference{{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps-staging", Namespace: "flux-system"}},
		Soak:     &metav1.Duration{Duration: time.Hour}}}
	promoted := &PolicyExplanation{Policy: "default/web-prod", Rules: describeRules(promotionChoice, nil),
		Repository: repositoryFacts{Name: "default/web", Image: "ghcr.io/acme/web", LastScanResult: scan, Ready: ready},
		LatestRef:  digest(ref("1.2.0"), "2"), LatestRefTime: micro, Ready: ready, choice: promotionChoice,
		Chain: []ChainStage{
			{Policy: "web-dev", Image: digest(ref("1.3.0"), "3"), ImageTime: micro, Automation: "dev", Applied: digest(ref("1.3.0"), "3"),
				AppliedRevision: devCommit, AppliedTime: ts("2026-11-20T10:01:00Z"),
				Health: []imagev1.HealthStatus{{Object: "Kustomization/flux-system/apps-dev", State: "Healthy", Revision: devCommit, Reason: "ReconciliationSucceeded"}}},
			{Policy: "web-staging", Image: digest(ref("1.3.0"), "3"), ImageTime: micro, Automation: "staging", Applied: digest(ref("1.3.0"), "3"),
				AppliedRevision: stagingCommit, AppliedTime: ts("2026-11-20T10:20:00Z"),
				Health: []imagev1.HealthStatus{{Object: "Kustomization/flux-system/apps-staging", State: "Healthy", Revision: stagingCommit, Reason: "ReconciliationSucceeded"}}},
			{Policy: "web-prod", Image: digest(ref("1.2.0"), "2"), ImageTime: micro,
				Pending: &imagev1.PendingRef{Tag: "1.3.0", Image: digest(ref("1.3.0"), "3"), UpstreamRevision: stagingCommit,
					HealthSeen: ts("2026-11-20T10:25:00Z"), EligibleAt: ts("2026-11-20T11:25:00Z"), SoakLeft: &metav1.Duration{Duration: 35 * time.Minute}},
				Ready: &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: imagev1.SoakNotElapsedReason, Message: "latest image is ghcr.io/acme/web:1.2.0; soaking"}},
		}}

	one, two := 1, 2
	none := 0
	full := &AutomationExplanation{
		Automation: "default/web", Suspended: true,
		Source: sourceFacts{Describe: "GitRepository default/web", URL: "https://git.example/acme/web.git", Ref: "branch main",
			UpdatePath: "clusters/prod", Head: "main@sha1:bbbb", ObservedRevision: "main@sha1:aaaa"},
		PolicySelector: "app=web",
		Policies: []automationPolicy{
			{Policy: "default:web", LatestRef: ref("1.2.0"), Applied: ref("1.1.0"), State: "pending", Markers: &two, Files: []string{"clusters/prod/web.yaml"}},
			{Policy: "default:api", State: "no latest image"},
		},
		Schedule: &scheduleFacts{Windows: "\"0 22 * * *\" for 8h in UTC", Start: ts("2026-11-20T22:00:00Z"), End: ts("2026-11-21T06:00:00Z")},
		Discovered: []imagev1.DiscoveredImage{
			{DiscoveredImage: meta.DiscoveredImage{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/web", Tag: "1.1.0"}, Locations: 2, Policy: "onboard-web"}, Owned: true},
			{DiscoveredImage: meta.DiscoveredImage{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/tool", Tag: "main"}, Locations: 1}, Reason: "not a version"},
		},
		LastRunTime: ts("2026-11-20T11:00:00Z"), LastPushCommit: "cccc", LastPushTime: ts("2026-11-20T11:01:00Z"),
		LastPullRequest: &meta.PullRequestStatus{URL: "https://git.example/acme/web/pulls/7", Number: 7, State: meta.PullRequestOpen,
			HeadBranch: "image-updates", HeadCommit: "cccc", Action: meta.PullRequestUpdated},
		Ready:       ready,
		InFlightJob: &jobFacts{Name: "web-2", Phase: updatev1.UpdateJobPending},
		LastJob: &jobFacts{Name: "web-1", Phase: "Succeeded", Error: "deleted since", CheckoutRevision: "main@sha1:aaaa",
			PushedCommit: "cccc", PushedRefs: []string{"refs/heads/image-updates"}, CompletionTime: ts("2026-11-20T11:01:30Z"), Ready: ready,
			Changes: []meta.FileResult{{Path: "web.yaml", Objects: []meta.ObjectResult{{ObjectID: meta.ObjectID{Kind: "Deployment", Namespace: "default", Name: "web"},
				Changes: []meta.Change{{OldValue: "ghcr.io/acme/web:1.0.0", NewValue: "ghcr.io/acme/web:1.1.0", Setter: "default:web"}}}}}}},
		Markers: markerFacts{From: "UpdateJob web-1 status.result", Policies: []markerEntry{
			{Policy: "default:web", Count: &two, Files: []string{"clusters/prod/web.yaml"}},
			{Policy: "other:db", Count: &one, Problem: "the automation applies only the ImagePolicies of its own namespace, default"},
			{Policy: "default:gone"},
			{Policy: "default:api", Count: &none},
		}, Omitted: 3, WouldChange: []string{"clusters/prod/web.yaml: a -> b (default:web)"}, ScanProblems: []string{"bad.yaml: not YAML"}},
		Problems: []string{"no marker names default:api"},
	}
	scanned := &AutomationExplanation{Automation: "default/empty", Source: sourceFacts{Describe: "none", HeadError: "no source"},
		Markers: markerFacts{From: "a dry run", Complete: true, Policies: []markerEntry{{Policy: "default:api", Count: &none}}}}
	sameHead := &AutomationExplanation{Automation: "default/quiet",
		Source:   sourceFacts{Describe: "GitRepository default/quiet", Head: "main@sha1:aaaa", ObservedRevision: "main@sha1:aaaa"},
		Schedule: &scheduleFacts{Open: true, End: ts("2026-11-21T06:00:00Z")}, LastPushCommit: "dddd"}

	argo := &AutomationExplanation{Automation: "argocd/shop",
		Source: sourceFacts{Describe: "Application argocd/shop", URL: "https://git.example/acme/apps.git", Ref: "branch main", UpdatePath: "shop",
			Head: "main@sha1:aaaa", ObservedRevision: "main@sha1:aaaa", Applications: []applicationFacts{{Name: "shop", Namespace: "argocd",
				Images: []string{"ghcr.io/acme/web:1.1.0"}, Sources: []applicationSource{
					{Index: 1, Path: "shop/base", Type: "Kustomize", OverrideFile: "shop/base/.argocd-source-shop.yaml"},
					{Index: 2, Path: "shop/chart"}}}}}}

	targets := &AutomationExplanation{Automation: "argocd/shop",
		Source: sourceFacts{Describe: "2 Applications of spec.applicationSelector",
			URL:        "https://git.example/acme/apps.git (main), https://git.example/acme/stage.git (main)",
			UpdatePath: "per target: apps/web, apps/web",
			HeadError:  "not listed: the Applications are written on 2 repositories or branches, each its own target with its own jobs and commits (status.targets)",
			Targets: []targetFacts{
				{URL: "https://git.example/acme/apps.git", Branch: "main", Applications: []string{"argocd/web"}, LastPushCommit: "aaaa",
					Ready: "True Succeeded: pushed commit aaaa to main (UpdateJob shop-1)"},
				{URL: "https://git.example/acme/stage.git", Branch: "main", Applications: []string{"argocd/web-stage"},
					Ready: "False GitOperationFailed: UpdateJob shop-2 failed: push refused"},
			}}}

	for name, e := range map[string]Explanation{
		"automation-argocd":   argo,
		"automation-targets":  targets,
		"policy-semver":       semver,
		"policy-alphabetical": policy(imagev1.ImagePolicyChoice{Alphabetical: &imagev1.AlphabeticalPolicy{Order: "desc"}}, &imagev1.TagFilter{Pattern: "^main-"}),
		"policy-numerical":    stale,
		"policy-newestbuild":  policy(imagev1.ImagePolicyChoice{NewestBuild: &imagev1.NewestBuildPolicy{MaxCandidates: 50}}, nil),
		"policy-none":         &PolicyExplanation{Policy: "default/bad", Rules: describeRules(imagev1.ImagePolicyChoice{}, nil), Repository: repositoryFacts{Name: "default/gone", Error: "not found"}},
		"policy-promotion":    promoted,
		"policy-unscanned":    &PolicyExplanation{Policy: "default/new", Rules: "x", Repository: repositoryFacts{Name: "default/new", CanonicalImageName: "docker.io/library/nginx"}},
		"automation-full":     full,
		"automation-empty":    &AutomationExplanation{Automation: "default/none"},
		"automation-scanned":  scanned,
		"automation-samehead": sameHead,
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			e.Text(&b)
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != string(want) {
				t.Errorf("got\n%s\nwant\n%s", b.String(), want)
			}
		})
	}
}
