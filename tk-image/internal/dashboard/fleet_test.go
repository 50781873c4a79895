package dashboard

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

var now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func ready(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: conditions.ReadyCondition, Status: status, Reason: reason, Message: msg}
}

func automationWith(mut func(*imagev1.ImageUpdateAutomation)) *imagev1.ImageUpdateAutomation {
	a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "fleet", UID: "a-uid"}}
	a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: "https://bot:secret@github.com/org/fleet.git"}
	a.Spec.GitSpec.Checkout = &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}}
	a.Status.Conditions = []metav1.Condition{ready(metav1.ConditionTrue, conditions.SucceededReason, "pushed commit abc")}
	a.Status.ObservedPolicies = imagev1.ObservedPolicies{"podinfo": {Name: "ghcr.io/org/podinfo", Tag: "1.0.0"}}
	if mut != nil {
		mut(a)
	}
	return a
}

func policyWith(tag string, mut func(*imagev1.ImagePolicy)) imagev1.ImagePolicy {
	p := imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "podinfo"}}
	p.Spec.ImageRepositoryRef.Name = "podinfo"
	p.Status.LatestRef = &meta.ImageRef{Name: "ghcr.io/org/podinfo", Tag: tag}
	p.Status.Conditions = []metav1.Condition{ready(metav1.ConditionTrue, conditions.SucceededReason, "chose "+tag)}
	if mut != nil {
		mut(&p)
	}
	return p
}

// The Fleet page files each automation under one state, most urgent
// first, with the reason an operator acts on.
func TestFleetRowState(t *testing.T) {
	running := updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "fleet-1",
		OwnerReferences: []metav1.OwnerReference{{UID: "a-uid", Controller: ptr(true), Name: "fleet", Kind: "ImageUpdateAutomation"}}}}
	running.Status.Phase = updatev1.UpdateJobRunning
	// A batch another automation leads, carrying this one's update.
	batch := updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-1",
		OwnerReferences: []metav1.OwnerReference{{UID: "web-uid", Controller: ptr(true), Name: "web", Kind: "ImageUpdateAutomation"}}}}
	batch.Spec.Members = []updatev1.UpdateJobMember{{Automation: "fleet", UID: "a-uid"}}
	batch.Status.Phase = updatev1.UpdateJobRunning
	finished := *batch.DeepCopy()
	finished.Status.Phase = updatev1.UpdateJobSucceeded
	tests := []struct {
		name       string
		automation *imagev1.ImageUpdateAutomation
		policy     imagev1.ImagePolicy
		jobs       []updatev1.UpdateJob
		kind       StateKind
		reason     string
		detail     string
	}{
		{"applied newest is up to date", automationWith(nil), policyWith("1.0.0", nil), nil, StateUpToDate, "up to date", "pushed commit abc"},
		{"suspended wins over everything", automationWith(func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Suspend = true
			a.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, "GitOperationFailed", "boom")}
		}), policyWith("1.0.0", nil), nil, StateSuspended, "suspended", ""},
		{"Ready=False fails with its reason", automationWith(func(a *imagev1.ImageUpdateAutomation) {
			a.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, "AuthenticationFailed", "bad password")}
		}), policyWith("1.0.0", nil), nil, StateFailing, "AuthenticationFailed", "bad password"},
		{"a failing policy fails the automation", automationWith(nil), policyWith("1.0.0", func(p *imagev1.ImagePolicy) {
			p.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, imagev1.NoMatchingTagReason, "no tag matches")}
		}), nil, StateFailing, imagev1.NoMatchingTagReason, "ImagePolicy podinfo: no tag matches"},
		{"a job in flight is running", automationWith(nil), policyWith("1.1.0", nil), []updatev1.UpdateJob{running}, StateRunning, "UpdateJob Running", ""},
		{"a batch in flight that carries its update is running", automationWith(nil), policyWith("1.1.0", nil), []updatev1.UpdateJob{batch},
			StateRunning, "UpdateJob Running", "UpdateJob web-1 is running"},
		{"a finished batch that carried its update is not running", automationWith(nil), policyWith("1.1.0", nil), []updatev1.UpdateJob{finished},
			StatePending, "next run", ""},
		{"a newer tag not applied waits for the next run", automationWith(nil), policyWith("1.1.0", nil), nil, StatePending, "next run", "not applied yet: podinfo 1.0.0 → 1.1.0"},
		{"outside an update window waits for the window", automationWith(func(a *imagev1.ImageUpdateAutomation) {
			a.Status.Conditions = []metav1.Condition{ready(metav1.ConditionTrue, imagev1.OutsideUpdateWindowReason, "next window at 22:00")}
		}), policyWith("1.1.0", nil), nil, StatePending, "update window", "next window at 22:00"},
		{"a minimum age shows the time left", automationWith(nil), policyWith("1.0.0", func(p *imagev1.ImagePolicy) {
			p.Status.PendingRef = &imagev1.PendingRef{Tag: "1.2.0", EligibleAt: new(metav1.NewTime(now.Add(90 * time.Minute)))}
		}), nil, StatePending, "minimum age", "podinfo 1.2.0 is old enough in 1h30m (at 2026-11-26T13:30:00Z)"},
		{"an open pull request waits to be merged", automationWith(func(a *imagev1.ImageUpdateAutomation) {
			a.Status.LastPullRequest = &meta.PullRequestStatus{URL: "https://github.com/org/fleet/pull/7", Number: 7, State: meta.PullRequestOpen}
		}), policyWith("1.0.0", nil), nil, StatePending, "pull request open", "pull request #7 waits to be merged: https://github.com/org/fleet/pull/7"},
		{"policies still choosing are a wait, with the minimum age's time left", automationWith(func(a *imagev1.ImageUpdateAutomation) {
			a.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, conditions.DependencyNotReadyReason, "no policy has a latest image yet")}
		}), policyWith("", func(p *imagev1.ImagePolicy) {
			p.Status.LatestRef = nil
			p.Status.PendingRef = &imagev1.PendingRef{Tag: "1.2.0", EligibleAt: new(metav1.NewTime(now.Add(2 * time.Hour)))}
			p.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, imagev1.MinimumAgeNotReachedReason, "too young")}
		}), nil, StatePending, "minimum age", "podinfo 1.2.0 is old enough in 2h (at 2026-11-26T14:00:00Z)"},
		{"policies without a choice are a wait", automationWith(func(a *imagev1.ImageUpdateAutomation) {
			a.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, conditions.DependencyNotReadyReason, "no policy has a latest image yet")}
		}), policyWith("", func(p *imagev1.ImagePolicy) { p.Status.LatestRef = nil }), nil, StatePending, "waiting for policies", "no policy has a latest image yet"},
		{"a held downgrade is pending", automationWith(nil), policyWith("1.0.0", func(p *imagev1.ImagePolicy) {
			p.Status.HeldRef = &imagev1.HeldRef{Tag: "1.0.0", Candidate: "0.9.0", MissingScans: 1}
		}), nil, StatePending, "downgrade held", ""},
		{"a promotion waiting for upstream health is pending, not failing", automationWith(func(a *imagev1.ImageUpdateAutomation) {
			a.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, conditions.DependencyNotReadyReason, "no policy has a latest image yet")}
		}), policyWith("", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy.Promotion = &imagev1.PromotionPolicy{}
			p.Status.LatestRef = nil
			p.Status.PendingRef = &imagev1.PendingRef{Tag: "1.2.0", UpstreamRevision: "main@sha1:0123456789abcdef"}
			p.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, imagev1.UpstreamNotHealthyReason, "apps-dev is Degraded")}
		}), nil, StatePending, "promotion waiting", "podinfo 1.2.0 from 0123456789 waits for the upstream to run it healthy"},
		{"a promotion soaking is pending with the soak left", automationWith(nil), policyWith("1.0.0", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy.Promotion = &imagev1.PromotionPolicy{}
			p.Status.PendingRef = &imagev1.PendingRef{Tag: "1.2.0", EligibleAt: new(metav1.NewTime(now.Add(20 * time.Minute))),
				HealthSeen: new(metav1.NewTime(now.Add(-40 * time.Minute))), SoakLeft: &metav1.Duration{Duration: 20 * time.Minute}}
			p.Status.Conditions = []metav1.Condition{ready(metav1.ConditionTrue, imagev1.SoakNotElapsedReason, "soaking")}
		}), nil, StatePending, "promotion waiting", "podinfo 1.2.0 ran healthy upstream since 2026-11-26T11:20:00Z; soak left 20m0s"},
		{"a better tag that did not verify is pending", automationWith(nil), policyWith("1.0.0", func(p *imagev1.ImagePolicy) {
			p.Status.UnverifiedRef = &imagev1.UnverifiedRef{Tag: "1.1.0", Reason: "NoSignature"}
			p.Status.Conditions = []metav1.Condition{ready(metav1.ConditionTrue, imagev1.SignatureVerificationFailedReason, "1.1.0 is not signed")}
		}), nil, StatePending, "signature unverified", "podinfo stays 1.0.0: the better 1.1.0 (NoSignature) did not verify"},
		{"no candidate verifying fails", automationWith(nil), policyWith("", func(p *imagev1.ImagePolicy) {
			p.Status.LatestRef = nil
			p.Status.Conditions = []metav1.Condition{ready(metav1.ConditionFalse, imagev1.NoVerifiedCandidateReason, "none of 3 verified")}
		}), nil, StateFailing, imagev1.NoVerifiedCandidateReason, "ImagePolicy podinfo: none of 3 verified"},
		{"not reconciled yet is pending", automationWith(func(a *imagev1.ImageUpdateAutomation) { a.Status.Conditions = nil }),
			policyWith("1.0.0", nil), nil, StatePending, "not reconciled yet", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := fleetRow(tt.automation, newNamespaceObjects([]imagev1.ImagePolicy{tt.policy}, tt.jobs), now)
			if row.State.Kind != tt.kind || row.State.Reason != tt.reason {
				t.Fatalf("state = %s (%s), want %s (%s): %s", row.State.Kind, row.State.Reason, tt.kind, tt.reason, row.State.Detail)
			}
			if tt.detail != "" && row.State.Detail != tt.detail {
				t.Errorf("detail = %q, want %q", row.State.Detail, tt.detail)
			}
		})
	}
}

// A row names the repository without its credentials, links the last
// commit on the forge, and reads the address of a Flux GitRepository
// source from the automation's last job.
func TestFleetRowSourceAndCommit(t *testing.T) {
	a := automationWith(func(a *imagev1.ImageUpdateAutomation) { a.Status.LastPushCommit = "0123456789abcdef" })
	row := fleetRow(a, newNamespaceObjects([]imagev1.ImagePolicy{policyWith("1.0.0", nil)}, nil), now)
	if row.Source != "https://github.com/org/fleet.git" || row.Branch != "main" {
		t.Errorf("source %q branch %q", row.Source, row.Branch)
	}
	if row.CommitURL != "https://github.com/org/fleet/commit/0123456789abcdef" {
		t.Errorf("commit URL %q", row.CommitURL)
	}
	flux := automationWith(func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Repository = nil
		a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: "fleet", Namespace: "flux-system"}
		a.Status.LastJob = &imagev1.UpdateJobReference{Name: "fleet-1", UID: types.UID("job-uid")}
		a.Status.LastPushCommit = "abc"
	})
	job := updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "fleet-1", UID: "job-uid"}}
	job.Spec.Repository.URL = "ssh://git@gitlab.example.com/org/fleet.git"
	row = fleetRow(flux, newNamespaceObjects(nil, []updatev1.UpdateJob{job}), now)
	if row.Source != "GitRepository flux-system/fleet" || row.CommitURL != "https://gitlab.example.com/org/fleet/-/commit/abc" {
		t.Errorf("source %q commit URL %q", row.Source, row.CommitURL)
	}
	// Another source kind is named as itself.
	flux.Spec.SourceRef.Kind = "Repository"
	if row = fleetRow(flux, newNamespaceObjects(nil, nil), now); row.Source != "Repository flux-system/fleet" {
		t.Errorf("source %q, want the reference's kind", row.Source)
	}
}

func TestTimeLeft(t *testing.T) {
	tests := []struct {
		name string
		in   time.Duration
		want string
	}{
		{"hours and minutes", 90*time.Minute + 20*time.Second, "1h30m"},
		{"minutes", 5*time.Minute + 31*time.Second, "6m"},
		{"seconds under a minute", 42 * time.Second, "42s"},
		{"past is due", -time.Second, "0s (due now)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TimeLeft(now.Add(tt.in), now); got != tt.want {
				t.Errorf("TimeLeft(%s) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFleetFilterMatches(t *testing.T) {
	row := fleetRow(automationWith(nil), newNamespaceObjects([]imagev1.ImagePolicy{policyWith("1.1.0", nil)}, nil), now)
	tests := []struct {
		name   string
		filter FleetFilter
		want   bool
	}{
		{"no filter", FleetFilter{}, true},
		{"its namespace", FleetFilter{Namespace: "apps"}, true},
		{"another namespace", FleetFilter{Namespace: "other"}, false},
		{"its state", FleetFilter{State: "pending"}, true},
		{"another state", FleetFilter{State: "failing"}, false},
		{"search by image, any case", FleetFilter{Search: "PODINFO"}, true},
		{"search by newest tag", FleetFilter{Search: "1.1.0"}, true},
		{"search by repository", FleetFilter{Search: "org/fleet"}, true},
		{"search matching nothing", FleetFilter{Search: "nginx"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.filter.Match(row); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLocalPathKeepsReturnsOnThisServer(t *testing.T) {
	for in, want := range map[string]string{"/?state=failing": "/?state=failing", "//evil.example/": "/", "https://evil.example/": "/", "": "/", "/\\evil": "/"} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Hosts are localhost, addresses and the names the operator gave (an
// Ingress's, any case, with or without the root dot); any other name, as a
// DNS-rebound one, is refused.
func TestAllowedHost(t *testing.T) {
	names := []string{"Images.Example.com"}
	for host, want := range map[string]bool{
		"localhost:9880": true, "app.localhost:9880": true, "127.0.0.1:9880": true, "[::1]:9880": true, "10.0.0.5": true,
		"images.example.com": true, "IMAGES.example.com.:443": true,
		"evil.example:9880": false, "localhost.evil.example": false, "": false, "x.images.example.com": false,
	} {
		r := &http.Request{Host: host}
		if got := allowedHost(r, names); got != want {
			t.Errorf("allowedHost(%q) = %v, want %v", host, got, want)
		}
	}
	if allowedHost(&http.Request{Host: "images.example.com"}, nil) {
		t.Error("a name was allowed without --allowed-host")
	}
}

// An action returns to the page as a person opened it: a live update's
// partial=1 is not part of the address.
func TestBackToDropsPartial(t *testing.T) {
	for in, want := range map[string]string{
		"/?namespace=apps&partial=1":      "/?namespace=apps",
		"/automations/apps/web?partial=1": "/automations/apps/web",
		"/?state=failing":                 "/?state=failing",
	} {
		u, _ := url.Parse(in)
		if got := backTo(u); got != want {
			t.Errorf("backTo(%s) = %s, want %s", in, got, want)
		}
	}
}
