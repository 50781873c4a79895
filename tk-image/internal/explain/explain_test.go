package explain

import (
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/selection"
)

// explain reads an automation's update windows with the controller's code
// at the time it runs: closed with the next opening (in the schedule's
// zone, printed in UTC), open until the close, or why the schedule does
// not work.
func TestExplainSchedule(t *testing.T) {
	berlin := &imagev1.UpdateSchedule{TimeZone: "Europe/Berlin", Windows: []imagev1.UpdateWindow{
		{Cron: "0 22 * * MON-FRI", Duration: metav1.Duration{Duration: 8 * time.Hour}},
	}}
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	tests := []struct {
		name string
		spec *imagev1.UpdateSchedule
		now  time.Time
		want string
	}{
		{"closed on a Saturday", berlin, at("2026-11-28T12:00:00Z"),
			"Update windows:  \"0 22 * * MON-FRI\" for 8h in Europe/Berlin\n" +
				"  Now:           closed: no UpdateJob until the next window, 2026-11-30T21:00:00Z to 2026-12-01T05:00:00Z (a job already running is left to finish)\n"},
		{"open on a Friday night", berlin, at("2026-11-27T23:00:00Z"),
			"Update windows:  \"0 22 * * MON-FRI\" for 8h in Europe/Berlin\n" +
				"  Now:           open until 2026-11-28T05:00:00Z: changes get an UpdateJob\n"},
		{"a bad zone", &imagev1.UpdateSchedule{TimeZone: "Europe/Atlantis", Windows: berlin.Windows}, at("2026-11-28T12:00:00Z"),
			"  Now:  invalid: time zone \"Europe/Atlantis\" is not an IANA time zone name (such as Europe/Berlin or UTC)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
			writeSchedule(tw, explainSchedule(tt.spec, tt.now))
			if err := tw.Flush(); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
	if explainSchedule(nil, time.Now()) != nil {
		t.Error("an automation without a schedule has schedule facts")
	}
}

// The discovered images of an automation are explained one per line: the
// policy that follows each, made by the automation or the namespace's
// own, or why none does.
func TestExplainDiscovered(t *testing.T) {
	e := &AutomationExplanation{Automation: "default/onboard", Discovered: []imagev1.DiscoveredImage{
		{DiscoveredImage: meta.DiscoveredImage{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/web", Tag: "1.1.0"}, Locations: 2, Policy: "onboard-web"}, Owned: true},
		{DiscoveredImage: meta.DiscoveredImage{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/api", Tag: "1.0.1"}, Locations: 1, Policy: "api-ours"}},
		{DiscoveredImage: meta.DiscoveredImage{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/tool", Tag: "main"}, Locations: 1}, Reason: "tag \"main\" has no order (not a version, date or number)"},
	}}
	var b strings.Builder
	e.Text(&b)
	for _, want := range []string{
		"Discovered images:\t3 (spec.discover)",
		"ghcr.io/acme/web:1.1.0\t2 locations, ImagePolicy onboard-web (made by the automation)",
		"ghcr.io/acme/api:1.0.1\t1 locations, ImagePolicy api-ours (the namespace's own)",
		"ghcr.io/acme/tool:main\t1 locations, not followed: tag \"main\" has no order (not a version, date or number)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("explanation lacks %q:\n%s", want, b.String())
		}
	}
}

// A marker in apps of a policy that apps does not select, but apps/redis's
// automation does, is that automation's: apps reports no problem for it
// and names who applies it; a marker no automation selects stays a
// problem.
func TestMarkersAnotherAutomationSelectsAreNotProblems(t *testing.T) {
	policy := func(name, lane string) imagev1.ImagePolicy {
		p := imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, Labels: map[string]string{"lane": lane}}}
		p.Status.LatestRef = &meta.ImageRef{Name: "ghcr.io/org/" + name, Tag: "1.0.0"}
		return p
	}
	policies := []imagev1.ImagePolicy{policy("web", "web"), policy("redis", "redis"), policy("orphan", "none")}
	auto := func(name, lane string) imagev1.ImageUpdateAutomation {
		return imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, UID: types.UID(name)},
			Spec: imagev1.ImageUpdateAutomationSpec{PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"lane": lane}}}}
	}
	apps, redis := auto("apps", "web"), auto("redis", "redis")
	sel, err := selection.Selector(&apps)
	if err != nil {
		t.Fatal(err)
	}
	chosen := selection.Of(&apps, sel, policies)
	e := &AutomationExplanation{Automation: "apps/apps", Policies: []automationPolicy{{Policy: "apps:web", LatestRef: policies[0].Status.LatestRef}}}
	one := 1
	e.Markers = markerFacts{Complete: true, Policies: []markerEntry{{Policy: "apps:web", Count: &one}, {Policy: "apps:redis", Count: &one}, {Policy: "apps:orphan", Count: &one}}}
	e.judge(&apps, chosen, elsewhereOf(&apps, chosen, policies, []imagev1.ImageUpdateAutomation{apps, redis}))
	if len(e.Problems) != 1 || !strings.Contains(e.Problems[0], "apps:orphan") {
		t.Errorf("problems %q, want only the orphan's marker", e.Problems)
	}
	for _, en := range e.Markers.Policies {
		if en.Policy == "apps:redis" && (en.Problem != "" || en.AppliedBy != "redis") {
			t.Errorf("redis's marker: problem %q, applied by %q; want none, and redis", en.Problem, en.AppliedBy)
		}
	}
}
