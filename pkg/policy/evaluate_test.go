package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// fakeTimes are tag times from maps; it counts the build-time lookups, the
// registry requests a controller would make.
type fakeTimes struct {
	seen, created map[string]time.Time
	fail          map[string]bool
	lookups       []string
}

func (f *fakeTimes) Seen(tag string) (time.Time, bool) {
	t, ok := f.seen[tag]
	return t, ok
}

func (f *fakeTimes) Created(_ context.Context, tag string) (time.Time, bool, error) {
	f.lookups = append(f.lookups, tag)
	if f.fail[tag] {
		return time.Time{}, false, errors.New("registry down")
	}
	t, ok := f.created[tag]
	return t, ok, nil
}

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return now.Add(-d) }

func newestBuild(n int) imagev1.ImagePolicyChoice {
	return imagev1.ImagePolicyChoice{NewestBuild: &imagev1.NewestBuildPolicy{MaxCandidates: n}}
}

// Evaluate picks the best candidate old enough (by first sighting or build
// time), names the tag a minimum age holds back and when it will be chosen,
// keeps the current choice whatever its age, orders newestBuild by build
// time within its candidate limit, and asks for build times only of the
// candidates that decide the answer.
func TestEvaluate(t *testing.T) {
	h := time.Hour
	seen := map[string]time.Time{"1.0.0": ago(100 * h), "1.1.0": ago(30 * h), "1.2.0": ago(5 * h), "1.3.0": ago(1 * h), "latest": ago(h)}
	tests := []struct {
		name    string
		choice  imagev1.ImagePolicyChoice
		filter  *imagev1.TagFilter
		opts    Options
		times   fakeTimes
		want    string   // the tag chosen; "" when none
		top     []string // status.lastSelection.topCandidates
		pending *Pending
		tooNew  int
		lookups []string // build times asked for, in order
		err     error    // the error's type
	}{
		{name: "no minimum age: the best", choice: semverPolicy("1.x"), opts: Options{},
			times: fakeTimes{seen: seen}, want: "1.3.0", top: []string{"1.3.0", "1.2.0", "1.1.0", "1.0.0"}},
		{name: "seen: best tag old enough, next one pending", choice: semverPolicy("1.x"), opts: Options{MinimumAge: 24 * h},
			times: fakeTimes{seen: seen}, want: "1.1.0", top: []string{"1.1.0", "1.0.0"}, tooNew: 2,
			pending: &Pending{"1.2.0", ago(5 * h).Add(24 * h)}},
		{name: "seen: a tag exactly at the minimum age is eligible", choice: semverPolicy("1.x"), opts: Options{MinimumAge: 5 * h},
			times: fakeTimes{seen: seen}, want: "1.2.0", top: []string{"1.2.0", "1.1.0", "1.0.0"}, tooNew: 1,
			pending: &Pending{"1.3.0", ago(h).Add(5 * h)}},
		{name: "seen: pending is the first to ripen, not the best", choice: semverPolicy("1.x"), opts: Options{MinimumAge: 24 * h},
			times: fakeTimes{seen: map[string]time.Time{"1.0.0": ago(100 * h), "1.2.0": ago(20 * h), "1.3.0": ago(2 * h)}},
			want:  "1.0.0", top: []string{"1.0.0"}, tooNew: 3, pending: &Pending{"1.2.0", ago(20 * h).Add(24 * h)}},
		{name: "seen: the current choice stays eligible", choice: semverPolicy("1.x"), opts: Options{MinimumAge: 24 * h, Keep: "1.2.0"},
			times: fakeTimes{seen: seen}, want: "1.2.0", top: []string{"1.2.0", "1.1.0", "1.0.0"}, tooNew: 1,
			pending: &Pending{"1.3.0", ago(h).Add(24 * h)}},
		{name: "seen: nothing old enough", choice: semverPolicy("1.x"), opts: Options{MinimumAge: 200 * h},
			times: fakeTimes{seen: seen}, tooNew: 4, pending: &Pending{"1.0.0", ago(100 * h).Add(200 * h)}, err: &TooNewError{}},
		{name: "seen: a tag without a time is never old enough", choice: semverPolicy("1.x"), opts: Options{MinimumAge: h},
			times: fakeTimes{seen: map[string]time.Time{"1.0.0": ago(2 * h)}}, want: "1.0.0", top: []string{"1.0.0"}, tooNew: 3},
		{name: "created: walks down from the best until one is old enough", choice: semverPolicy("1.x"),
			opts:  Options{MinimumAge: 24 * h, Source: imagev1.AgeCreated},
			times: fakeTimes{seen: seen, created: map[string]time.Time{"1.0.0": ago(500 * h), "1.1.0": ago(300 * h), "1.2.0": ago(30 * h), "1.3.0": ago(2 * h)}},
			want:  "1.2.0", top: []string{"1.2.0", "1.1.0", "1.0.0"}, tooNew: 1, pending: &Pending{"1.3.0", ago(2 * h).Add(24 * h)},
			lookups: []string{"1.3.0", "1.2.0"}},
		{name: "created: an image without a plausible build time ages from its first sighting", choice: semverPolicy("1.x"),
			opts:  Options{MinimumAge: 24 * h, Source: imagev1.AgeCreated},
			times: fakeTimes{seen: seen, created: map[string]time.Time{"1.3.0": time.Unix(0, 0), "1.2.0": ago(400 * h)}},
			want:  "1.2.0", top: []string{"1.2.0", "1.1.0", "1.0.0"}, tooNew: 1, pending: &Pending{"1.3.0", ago(h).Add(24 * h)},
			lookups: []string{"1.3.0", "1.2.0"}},
		{name: "created: a failed lookup fails the evaluation", choice: semverPolicy("1.x"),
			opts:  Options{MinimumAge: 24 * h, Source: imagev1.AgeCreated},
			times: fakeTimes{seen: seen, fail: map[string]bool{"1.3.0": true}}, lookups: []string{"1.3.0"}, err: &LookupError{}},
		{name: "newestBuild: newest build wins over the greater tag", choice: newestBuild(10),
			filter: &imagev1.TagFilter{Pattern: `^1\.`},
			times:  fakeTimes{seen: seen, created: map[string]time.Time{"1.0.0": ago(3 * h), "1.1.0": ago(50 * h), "1.2.0": ago(40 * h), "1.3.0": ago(30 * h)}},
			want:   "1.0.0", top: []string{"1.0.0", "1.3.0", "1.2.0", "1.1.0"},
			lookups: []string{"1.3.0", "1.2.0", "1.1.0", "1.0.0"}},
		{name: "newestBuild: only the most recently seen candidates", choice: newestBuild(2),
			times: fakeTimes{seen: seen, created: map[string]time.Time{"1.0.0": ago(1 * h), "1.3.0": ago(30 * h), "latest": ago(20 * h)}},
			want:  "latest", top: []string{"latest", "1.3.0"},
			lookups: []string{"latest", "1.3.0"}},
		{name: "newestBuild with minimum age by build time", choice: newestBuild(10),
			opts:  Options{MinimumAge: 10 * h, Source: imagev1.AgeCreated},
			times: fakeTimes{seen: seen, created: map[string]time.Time{"1.0.0": ago(3 * h), "1.1.0": ago(50 * h), "1.2.0": ago(40 * h), "1.3.0": ago(30 * h), "latest": ago(9 * h)}},
			want:  "1.3.0", top: []string{"1.3.0", "1.2.0", "1.1.0"}, tooNew: 2, pending: &Pending{"latest", ago(9 * h).Add(10 * h)}},
		{name: "no candidate: NoMatchError before any lookup", choice: semverPolicy(">=5.0.0"),
			opts: Options{MinimumAge: h, Source: imagev1.AgeCreated}, times: fakeTimes{seen: seen}, err: &NoMatchError{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.choice, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			tags := []string{"latest", "1.3.0", "1.0.0", "1.2.0", "1.1.0"}
			o := tc.opts
			o.Now, o.Top, o.Times = now, 5, &tc.times
			res, err := p.Evaluate(context.Background(), tags, o)
			if tc.err != nil {
				if err == nil || fmt.Sprintf("%T", err) != fmt.Sprintf("%T", tc.err) {
					t.Fatalf("error %v; want a %T", err, tc.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			sel := res.Selection
			if sel.Selected() != tc.want || !slices.Equal(sel.TopCandidates, tc.top) {
				t.Errorf("selected %q, top %v; want %q, %v", sel.Selected(), sel.TopCandidates, tc.want, tc.top)
			}
			if sel.TooNew != tc.tooNew {
				t.Errorf("tooNew %d; want %d", sel.TooNew, tc.tooNew)
			}
			if (res.Pending == nil) != (tc.pending == nil) || (res.Pending != nil && *res.Pending != *tc.pending) {
				t.Errorf("pending %+v; want %+v", res.Pending, tc.pending)
			}
			if tc.lookups != nil && !slices.Equal(tc.times.lookups, tc.lookups) {
				t.Errorf("build times looked up %v; want %v", tc.times.lookups, tc.lookups)
			}
			if sel.Filtered+sel.Unparsable+sel.OutOfRange+sel.BeyondLimit+sel.Kept != sel.Considered {
				t.Errorf("counts do not add up: %+v", sel)
			}
		})
	}
}

// Evaluate without time is Explain, and newestBuild needs times: Select
// refuses it rather than order by anything else.
func TestEvaluateWithoutTimes(t *testing.T) {
	p, _ := New(semverPolicy("*"), nil)
	tags := []string{"1.0.0", "2.0.0", "x"}
	res, err := p.Evaluate(context.Background(), tags, Options{Top: 5})
	if err != nil || !equalSel(res.Selection, p.Explain(tags, 5)) {
		t.Errorf("Evaluate %+v, %v; Explain %+v", res.Selection, err, p.Explain(tags, 5))
	}
	nb, _ := New(newestBuild(0), nil)
	if _, err := nb.Select(tags); err == nil {
		t.Error("Select ordered newestBuild without build times")
	}
	if _, err := nb.Evaluate(context.Background(), tags, Options{}); err == nil {
		t.Error("Evaluate ordered newestBuild without build times")
	}
	if _, err := New(newestBuild(1001), nil); err == nil {
		t.Error("maxCandidates 1001 accepted")
	}
}

func equalSel(a, b imagev1.TagSelection) bool {
	return slices.Equal(a.TopCandidates, b.TopCandidates) && a.Considered == b.Considered && a.Kept == b.Kept &&
		a.Unparsable == b.Unparsable && a.OutOfRange == b.OutOfRange && a.Filtered == b.Filtered
}

// A thousand-tag repository with a minimum age by build time asks for the
// build times of the candidates younger than the minimum age and the first
// old enough one, not of every tag; newestBuild asks for its maxCandidates.
func TestEvaluateLookupCount(t *testing.T) {
	tags := make([]string, 1000)
	seen, created := map[string]time.Time{}, map[string]time.Time{}
	for i := range tags {
		tags[i] = fmt.Sprintf("1.0.%d", i)
		seen[tags[i]] = ago(time.Duration(1000-i) * time.Hour)
		created[tags[i]] = seen[tags[i]].Add(-time.Minute)
	}
	p, _ := New(semverPolicy("*"), nil)
	times := &fakeTimes{seen: seen, created: created}
	res, err := p.Evaluate(context.Background(), tags, Options{MinimumAge: 3 * 24 * time.Hour, Source: imagev1.AgeCreated, Now: now, Times: times, Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	// Tags 1.0.929 to 1.0.999 were built less than 72 h ago.
	if got := res.Selection.Selected(); got != "1.0.928" || len(times.lookups) != 72 {
		t.Errorf("selected %s after %d lookups; want 1.0.928 after 72", got, len(times.lookups))
	}
	nb, _ := New(newestBuild(0), nil)
	times.lookups = nil
	if res, err := nb.Evaluate(context.Background(), tags, Options{Now: now, Times: times, Top: 5}); err != nil ||
		res.Selection.Selected() != "1.0.999" || len(times.lookups) != imagev1.DefaultMaxCandidates || res.Selection.BeyondLimit != 900 {
		t.Errorf("newestBuild: %+v, %v after %d lookups", res.Selection, err, len(times.lookups))
	}
}

// benchTimes are tag times from maps that record nothing, so that
// BenchmarkEvaluate measures Evaluate itself.
type benchTimes struct{ seen, created map[string]time.Time }

func (b benchTimes) Seen(tag string) (time.Time, bool) {
	t, ok := b.seen[tag]
	return t, ok
}

func (b benchTimes) Created(_ context.Context, tag string) (time.Time, bool, error) {
	t, ok := b.created[tag]
	return t, ok, nil
}

// BenchmarkEvaluate measures the paths that need tag times: a minimum age by
// first sighting and by build time (the newest tags too new, so it walks
// past them), and newestBuild.
func BenchmarkEvaluate(b *testing.B) {
	tags := benchTags()
	times := benchTimes{seen: map[string]time.Time{}, created: map[string]time.Time{}}
	for i, tag := range tags {
		times.seen[tag] = ago(time.Duration(i) * time.Minute)
		times.created[tag] = ago(time.Duration(len(tags)-i) * time.Minute)
	}
	cases := []struct {
		name   string
		choice imagev1.ImagePolicyChoice
		o      Options
	}{
		{"minimum-age-seen", semverPolicy(">=1.0.0 <9.0.0"), Options{MinimumAge: 48 * time.Hour, Source: imagev1.AgeSeen}},
		{"minimum-age-created", semverPolicy(">=1.0.0 <9.0.0"), Options{MinimumAge: 48 * time.Hour, Source: imagev1.AgeCreated}},
		{"newest-build", newestBuild(100), Options{}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p, err := New(c.choice, nil)
			if err != nil {
				b.Fatal(err)
			}
			c.o.Now, c.o.Times, c.o.Top = now, times, imagev1.MaxTopCandidates
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Evaluate(context.Background(), tags, c.o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
