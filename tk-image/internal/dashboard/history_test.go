package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// The chart puts each policy in its own lane, sorted, its points left to
// right in commit order, evenly spaced and ending at the right edge;
// the newest point of a lane is always labelled, older ones where the
// newer label leaves room.
func TestVersionChartLanesAndLabels(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	push := func(at time.Duration, imgs ...imagev1.PushedImage) HistoryRow {
		return HistoryRow{Time: t0.Add(at), Commit: "c" + at.String(), Images: imgs}
	}
	img := func(policy, tag string) imagev1.PushedImage {
		return imagev1.PushedImage{Policy: policy, ImageRef: meta.ImageRef{Name: "r/" + policy, Tag: tag}}
	}
	// Newest first, as status.history keeps it: a push long ago, then
	// three within a day.
	history := []HistoryRow{
		push(30*24*time.Hour, img("web", "1.3.0")),
		push(30*24*time.Hour-10*time.Minute, img("web", "1.2.1")),
		push(29*24*time.Hour, img("web", "1.2.0"), img("api", "2.0.0")),
		push(0, img("web", "1.1.0")),
	}
	c := versionChart(history)
	if c == nil || len(c.Lanes) != 2 || c.Lanes[0].Policy != "api" || c.Lanes[1].Policy != "web" {
		t.Fatalf("lanes = %+v", c)
	}
	web := c.Lanes[1].Points
	if len(web) != 4 || web[3].X != c.PlotRight || web[0].X != c.PlotLeft {
		t.Fatalf("web points = %+v", web)
	}
	for k := 1; k < len(web); k++ {
		if gap := web[k].X - web[k-1].X; gap != maxStep {
			t.Errorf("points %d and %d are %d apart, want %d: commits are placed in order, not by time", k-1, k, gap, maxStep)
		}
	}
	if !c.From.Equal(t0) || !c.To.Equal(t0.Add(30*24*time.Hour)) {
		t.Errorf("axis %v to %v, want the oldest and newest commits", c.From, c.To)
	}
	if !web[3].Label || !web[2].Label || !web[1].Label || !web[0].Label {
		t.Errorf("labels = %v %v %v %v, want all four (80 apart)", web[0].Label, web[1].Label, web[2].Label, web[3].Label)
	}
	if c.Lanes[1].Y <= c.Lanes[0].Y || c.AxisY() <= c.Lanes[1].Y {
		t.Errorf("lanes at %d, %d; axis at %d", c.Lanes[0].Y, c.Lanes[1].Y, c.AxisY())
	}
	// Twenty commits fill the axis; the newest is labelled, and labels
	// leave labelGap between them.
	var twenty []HistoryRow
	for i := 19; i >= 0; i-- {
		twenty = append(twenty, push(time.Duration(i)*time.Minute, img("web", fmt.Sprintf("1.%d.0", i))))
	}
	pts := versionChart(twenty).Lanes[0].Points
	if pts[len(pts)-1].Tag != "1.19.0" || !pts[len(pts)-1].Label || pts[len(pts)-2].Label {
		t.Errorf("the newest point is not the labelled one: %+v", pts[len(pts)-2:])
	}
	last := -1
	for _, p := range pts {
		if p.Label {
			if last >= 0 && p.X-last < labelGap {
				t.Errorf("labels at %d and %d overlap", last, p.X)
			}
			last = p.X
		}
	}
	// One push sits at the right end.
	if one := versionChart([]HistoryRow{push(0, img("web", "1.0.0"))}); one.Lanes[0].Points[0].X != one.PlotRight || !one.Lanes[0].Points[0].Label {
		t.Errorf("one push: at x=%d, want %d", one.Lanes[0].Points[0].X, one.PlotRight)
	}
	if versionChart(nil) != nil {
		t.Error("an empty history drew a chart")
	}
	var many []imagev1.PushedImage
	for _, p := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"} {
		many = append(many, img(p, "1"))
	}
	if c := versionChart([]HistoryRow{push(0, many...)}); len(c.Lanes) != maxLanes || c.MoreLanes != 2 {
		t.Errorf("14 policies: %d lanes, %d more", len(c.Lanes), c.MoreLanes)
	}
}

// The automation page shows what each commit wrote, as a chart and a table
// with links to the commits, and the image page the tags first seen last
// with their times.
func TestPagesShowHistoryAndRecentTags(t *testing.T) {
	ns := env.Namespace(t)
	t0 := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
	t1 := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	automation(t, ns, "app", func(a *imagev1.ImageUpdateAutomation) {
		a.Status.History = []imagev1.PushRecord{
			{Commit: strings.Repeat("b", 40), Time: t1, Images: []imagev1.PushedImage{
				{Policy: "web", ImageRef: meta.ImageRef{Name: "ghcr.io/org/web", Tag: "1.1.0"}, From: "1.0.0"}}},
			{Commit: strings.Repeat("a", 40), Time: t0, PullRequest: 7, Images: []imagev1.PushedImage{
				{Policy: "web", ImageRef: meta.ImageRef{Name: "ghcr.io/org/web", Tag: "1.0.0"}}}},
		}
	})
	repo := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: imagev1.ImageRepositorySpec{Image: "ghcr.io/org/web", Interval: metav1.Duration{Duration: time.Hour}}}
	ctx := context.Background()
	if err := env.Client.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	repo.Status.LastScanResult = &imagev1.ScanResult{TagCount: 2, ScanTime: t1, RecentTags: []imagev1.TagTimes{
		{Tag: "1.1.0", FirstSeen: t1, Created: &t0}, {Tag: "1.0.0", FirstSeen: t0}}}
	if err := env.Client.Status().Update(ctx, repo); err != nil {
		t.Fatal(err)
	}
	base := serve(t, env.Config, Options{})
	code, body := get(t, base+"/automations/"+ns+"/app")
	if code != http.StatusOK {
		t.Fatalf("automation page: %d\n%s", code, body)
	}
	for _, want := range []string{
		`<svg viewBox=`, `class="lane-name" x="8"`, `>1.1.0</text>`, `>1.0.0</text>`,
		`href="https://github.com/org/fleet/commit/` + strings.Repeat("b", 40) + `"`,
		`<span class="tag">1.0.0</span> → <span class="tag">1.1.0</span>`, `PR #7`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("automation page lacks %q", want)
		}
	}
	code, body = get(t, base+"/images/"+ns+"/web")
	if code != http.StatusOK {
		t.Fatalf("image page: %d\n%s", code, body)
	}
	for _, want := range []string{
		`<time datetime="` + t1.UTC().Format(time.RFC3339) + `">`,     // 1.1.0 first seen
		`<td><time datetime="` + t0.UTC().Format(time.RFC3339) + `">`, // 1.1.0 built
		`not looked up`, // 1.0.0's build time
	} {
		if !strings.Contains(body, want) {
			t.Errorf("image page lacks %q", want)
		}
	}
	if i, j := strings.Index(body, ">1.1.0</span>"), strings.Index(body, ">1.0.0</span>"); i < 0 || j < i {
		t.Errorf("recent tags not newest first (1.1.0 at %d, 1.0.0 at %d)", i, j)
	}
}

// The webhooks page shows each receiver's calls as its status counts
// them, the reason of the last refusal escaped like every other text.
func TestWebhooksPageCountsCalls(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	w := &imagev1.GitWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "push"},
		Spec: imagev1.GitWebhookSpec{Type: imagev1.GitWebhookGeneric, SecretRef: meta.LocalObjectReference{Name: "token"}}}
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	w.Status.Calls = &imagev1.WebhookCalls{Accepted: 4, Refused: 1, LastAccepted: &metav1.Time{Time: time.Now().Add(-time.Minute)},
		LastRefused: &metav1.Time{Time: time.Now().Add(-2 * time.Minute)}, LastRefusedReason: hostile}
	if err := env.Client.Status().Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	base := serve(t, env.Config, Options{})
	code, body := get(t, base+"/webhooks?namespace="+ns)
	if code != http.StatusOK {
		t.Fatalf("webhooks page: %d\n%s", code, body)
	}
	for _, want := range []string{"4 accepted, 1 refused", "last accepted 1m", "last refused 2m", "&lt;script&gt;alert("} {
		if !strings.Contains(body, want) {
			t.Errorf("webhooks page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Error("the refusal reason's markup got through")
	}
}

// The timeline merges pushes (from → to), a revert, a hold and events,
// newest first, and leaves out the events that repeat a push.
func TestTimelineMergesPushesRevertsHoldsAndEvents(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(m) * time.Minute)) }
	a := &imagev1.ImageUpdateAutomation{}
	a.Status.Rollback = &imagev1.RollbackStatus{Commit: "r1", PushedAt: ptr(at(30)), Reason: imagev1.RolledBackReason, Message: "Kustomization apps failed"}
	since := at(20)
	a.Status.Holds = []imagev1.AutomationHold{{Reason: imagev1.HeldByPersonReason}}
	a.Status.Holds[0].Path, a.Status.Holds[0].Value, a.Status.Holds[0].Author, a.Status.Holds[0].Since = "apps/web.yaml", "1.2.0", "ana", &since
	history := []HistoryRow{
		{Time: at(10).Time, Commit: "c2", Images: []imagev1.PushedImage{{Policy: "web", ImageRef: meta.ImageRef{Tag: "1.3.0"}, From: "1.2.0"}}},
		{Time: at(0).Time, Commit: "c1", PullRequest: 7, Images: []imagev1.PushedImage{{Policy: "web", ImageRef: meta.ImageRef{Tag: "1.2.0"}}}},
	}
	events := []EventRow{
		{Type: "Normal", Reason: "Pushed", Message: "UpdateJob pushed c2", Last: at(10).Time, Count: 1},
		{Type: "Warning", Reason: "AuthenticationFailed", Message: "401", Last: at(40).Time, Count: 3},
	}
	got := timelineOf(a, history, events)
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, e.Kind)
	}
	if want := []string{"warning", "revert", "hold", "commit", "pull request"}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	if got[3].Text != "web 1.2.0 → 1.3.0" || got[4].PullRequest != 7 || got[0].Text != "AuthenticationFailed: 401 (×3)" || !strings.Contains(got[2].Text, "ana held apps/web.yaml at 1.2.0") {
		t.Errorf("entries %+v", got)
	}
}
