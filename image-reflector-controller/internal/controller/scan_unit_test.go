package controller

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

func TestParseImage(t *testing.T) {
	tests := []struct {
		image, canonical, err string
	}{
		{image: "nginx", canonical: "index.docker.io/library/nginx"},
		{image: "docker.io/fluxcd/flux", canonical: "index.docker.io/fluxcd/flux"},
		{image: "ghcr.io/stefanprodan/podinfo", canonical: "ghcr.io/stefanprodan/podinfo"},
		{image: "registry.local:5000/team/app", canonical: "registry.local:5000/team/app"},
		{image: "nginx:1.25", err: "no tag or digest"},
		{image: "ghcr.io/org/app@sha256:" + strings.Repeat("a", 64), err: "no tag or digest"},
		{image: "https://ghcr.io/org/app", err: "has a scheme"},
		{image: "oci://ghcr.io/org/charts/app", err: "give ghcr.io/org/charts/app"},
		{image: "Upper/Case", err: "not a repository reference"},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			repo, err := parseImage(&imagev1.ImageRepository{Spec: imagev1.ImageRepositorySpec{Image: tt.image}})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || repo.Name() != tt.canonical {
				t.Fatalf("got %q, %v; want %q", repo.Name(), err, tt.canonical)
			}
		})
	}
}

func TestFilterRevisionLatest(t *testing.T) {
	exclude := []*regexp.Regexp{regexp.MustCompile(`^.*\.sig$`), regexp.MustCompile(`^tmp-`)}
	got, excluded := filterTags([]string{"v2", "sha256-x.sig", "tmp-1", "v10", "v1"}, exclude)
	if !slices.Equal(got, []string{"v1", "v10", "v2"}) || excluded != 2 {
		t.Errorf("filterTags = %v, %d excluded", got, excluded)
	}
	// The revision depends on the set, not the order the registry gave.
	ab, _ := filterTags([]string{"a", "b"}, nil)
	ba, _ := filterTags([]string{"b", "a"}, nil)
	if revision(ab) != revision(ba) {
		t.Error("revision depends on tag order")
	}
	if revision([]string{"a"}) == revision([]string{"a", "b"}) {
		t.Error("revision ignores a new tag")
	}
	if l := latestTags([]string{"1", "2", "3"}, 2); !slices.Equal(l, []string{"3", "2"}) {
		t.Errorf("latestTags = %v", l)
	}
	if _, err := compileExclusions([]string{"("}); err == nil {
		t.Error("a bad exclusion regexp compiled")
	}
}

// The image page's recent tags are the tags first seen last, newest first,
// ties by descending string order, capped, with build times only where the
// store knows them; the tags the first scan listed are left out, unless
// their build time is known, since they were all first seen at once.
func TestRecentTagsAreTheLastFirstSeen(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	built := t0.Add(-time.Hour)
	e := store.Entry{
		Tags: []string{"1.0.0", "1.1.0", "1.2.0", "2.0.0", "2.1.0", "2.2.0", "2.3.0"},
		Times: []store.Times{
			{Seen: t0}, {Seen: t0, Created: built}, {Seen: t0.Add(2 * time.Hour), Created: built}, {Seen: t0},
			{Seen: t0.Add(time.Hour)}, {Seen: t0.Add(time.Hour)}, {Seen: t0.Add(time.Hour)},
		},
	}
	names := func(tt []imagev1.TagTimes) []string {
		var out []string
		for _, g := range tt {
			out = append(out, g.Tag)
		}
		return out
	}
	got := recentTags(e, 3)
	if want := []string{"1.2.0", "2.3.0", "2.2.0"}; !slices.Equal(names(got), want) {
		t.Fatalf("recent tags = %v, want %v", names(got), want)
	}
	if got[0].Created == nil || !got[0].Created.Time.Equal(built) || got[1].Created != nil {
		t.Errorf("build times = %v, %v; want %v, none", got[0].Created, got[1].Created, built)
	}
	if !got[1].FirstSeen.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("first seen of 2.3.0 = %v", got[1].FirstSeen)
	}
	// With room for all: 1.0.0 and 2.0.0 came with the first scan and
	// have no build time; 1.1.0 came with it too, but its build time is
	// known.
	if got, want := names(recentTags(e, 10)), []string{"1.2.0", "2.3.0", "2.2.0", "2.1.0", "1.1.0"}; !slices.Equal(got, want) {
		t.Errorf("with room for 10: %v, want %v", got, want)
	}
	first := store.Entry{Tags: []string{"1.0.0", "1.1.0"}, Times: []store.Times{{Seen: t0}, {Seen: t0}}}
	if r := recentTags(first, 3); r != nil {
		t.Errorf("after the first scan alone: %v, want none", r)
	}
	if r := recentTags(store.Entry{Tags: []string{"a"}}, 3); r != nil {
		t.Errorf("an entry without times gave %v", r)
	}
}

// A policy writes nothing while its repository waits for its first
// reconcile, and the repository's first Ready, of any status, wakes it.
func TestPolicyWaitsForTheFirstScan(t *testing.T) {
	ready := func(status metav1.ConditionStatus) []metav1.Condition {
		return []metav1.Condition{{Type: conditions.ReadyCondition, Status: status, Reason: "R"}}
	}
	repo := func(conds []metav1.Condition, suspend bool) *imagev1.ImageRepository {
		r := &imagev1.ImageRepository{}
		r.Status.Conditions, r.Spec.Suspend = conds, suspend
		return r
	}
	policy := func(conds []metav1.Condition) *imagev1.ImagePolicy {
		p := &imagev1.ImagePolicy{}
		p.Status.Conditions = conds
		return p
	}
	for _, tt := range []struct {
		name   string
		policy *imagev1.ImagePolicy
		repo   *imagev1.ImageRepository
		wait   bool
	}{
		{"a new policy, a repository not reconciled yet", policy(nil), repo(nil, false), true},
		{"the repository failed its first scan", policy(nil), repo(ready(metav1.ConditionFalse), false), false},
		{"the repository is suspended: never reconciled", policy(nil), repo(nil, true), false},
		{"the policy already says something", policy(ready(metav1.ConditionFalse)), repo(nil, false), false},
	} {
		if got := waitsForFirstScan(tt.policy, tt.repo); got != tt.wait {
			t.Errorf("%s: waits %v, want %v", tt.name, got, tt.wait)
		}
	}
	for _, tt := range []struct {
		name     string
		old, new []metav1.Condition
		pass     bool
	}{
		{"first Ready, False", nil, ready(metav1.ConditionFalse), true},
		{"first Ready, True", nil, ready(metav1.ConditionTrue), true},
		{"False to True", ready(metav1.ConditionFalse), ready(metav1.ConditionTrue), true},
		{"no change", ready(metav1.ConditionTrue), ready(metav1.ConditionTrue), false},
	} {
		e := event.UpdateEvent{ObjectOld: repo(tt.old, false), ObjectNew: repo(tt.new, false)}
		if got := (scanChanged{}).Update(e); got != tt.pass {
			t.Errorf("%s: passed %v, want %v", tt.name, got, tt.pass)
		}
	}
}

// A tag is held until two different scans lack it, however often the
// policy is reconciled in between: the hold read back from the API server
// has lost its scan time's fraction of a second, and the same scan seen
// again after that round trip must not count as a second one (CI saw
// latestRef move after one listing).
func TestHeldTagCountsEachScanOnce(t *testing.T) {
	first := time.Date(2026, 12, 2, 10, 0, 7, 300_000_000, time.UTC)
	h := missedScan(nil, "6.4.0", first)
	roundTrip := func(h *imagev1.HeldRef) *imagev1.HeldRef {
		raw, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var back imagev1.HeldRef
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		return &back
	}
	for range 3 {
		h = missedScan(roundTrip(h), "6.4.0", first)
	}
	if h.MissingScans != 1 {
		t.Fatalf("one scan, seen four times with reads from the API between: %d missing scans, want 1", h.MissingScans)
	}
	h = missedScan(roundTrip(h), "6.4.0", first.Add(time.Second))
	if h.MissingScans != 2 {
		t.Errorf("a second scan a second later: %d missing scans, want 2", h.MissingScans)
	}
	if h = missedScan(h, "6.5.0", first.Add(2*time.Second)); h.MissingScans != 1 || h.Tag != "6.5.0" {
		t.Errorf("another latest tag starts its own count: %+v", h)
	}
}
