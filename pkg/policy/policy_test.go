package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

func semverPolicy(r string) imagev1.ImagePolicyChoice {
	return imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: r}}
}

func alpha(o string) imagev1.ImagePolicyChoice {
	return imagev1.ImagePolicyChoice{Alphabetical: &imagev1.AlphabeticalPolicy{Order: o}}
}

func numeric(o string) imagev1.ImagePolicyChoice {
	return imagev1.ImagePolicyChoice{Numerical: &imagev1.NumericalPolicy{Order: o}}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name   string
		choice imagev1.ImagePolicyChoice
		filter *imagev1.TagFilter
		tags   []string
		want   string
		noTag  *NoMatchError
	}{
		{name: "semver highest in range", choice: semverPolicy(">=1.0.0 <2.0.0"),
			tags: []string{"0.9.0", "1.0.0", "1.4.2", "1.10.0", "2.0.0", "latest"}, want: "1.10.0"},
		{name: "semver comma is and", choice: semverPolicy(">=1.0.0, <1.5.0"),
			tags: []string{"1.0.0", "1.4.2", "1.10.0"}, want: "1.4.2"},
		{name: "semver v prefix in tags and range", choice: semverPolicy("v1.x"),
			tags: []string{"v1.2.3", "v1.3.0", "v2.0.0"}, want: "v1.3.0"},
		{name: "semver leading zeros", choice: semverPolicy(">=1.0.0"),
			tags: []string{"1.02.0", "1.1.0"}, want: "1.02.0"},
		{name: "semver two-part tags skipped", choice: semverPolicy(">=1.0"),
			tags: []string{"1.9", "1.2.0", "2"}, want: "1.2.0"},
		{name: "semver prerelease excluded without prerelease range", choice: semverPolicy(">=1.0.0"),
			tags: []string{"1.0.0", "1.1.0-rc.1"}, want: "1.0.0"},
		{name: "semver prerelease included with prerelease range", choice: semverPolicy(">=1.1.0-0"),
			tags: []string{"1.0.0", "1.1.0-rc.1", "1.1.0-rc.2"}, want: "1.1.0-rc.2"},
		{name: "semver equal precedence: greatest tag", choice: semverPolicy("*"),
			tags: []string{"v1.0.0", "1.0.0", "1.0.0+build.2", "1.0.0+build.10"}, want: "v1.0.0"},
		{name: "semver equal precedence, other order", choice: semverPolicy("*"),
			tags: []string{"1.0.0+build.10", "1.0.0", "v1.0.0", "1.0.0+build.2"}, want: "v1.0.0"},
		{name: "semver nothing in range", choice: semverPolicy(">=3.0.0"),
			tags: []string{"1.0.0", "2.0.0", "latest"}, noTag: &NoMatchError{Considered: 3, Dropped: 3}},
		{name: "alphabetical asc picks greatest", choice: alpha("asc"),
			tags: []string{"RELEASE.2023-01-01", "RELEASE.2024-03-04", "RELEASE.2023-12-31"}, want: "RELEASE.2024-03-04"},
		{name: "alphabetical desc picks least", choice: alpha("desc"),
			tags: []string{"b", "a", "c"}, want: "a"},
		{name: "alphabetical is byte-wise", choice: alpha(""),
			tags: []string{"a", "B", "é"}, want: "é"},
		{name: "numerical asc", choice: numeric("asc"),
			tags: []string{"9", "10", "1.5", "latest"}, want: "10"},
		{name: "numerical desc", choice: numeric("desc"),
			tags: []string{"9", "10", "-1", "NaN", "Inf"}, want: "-1"},
		{name: "numerical equal values: greatest tag", choice: numeric("asc"),
			tags: []string{"10", "10.0", "1e1"}, want: "1e1"},
		{name: "numerical skips non-numbers", choice: numeric("asc"),
			tags: []string{"latest", "main"}, noTag: &NoMatchError{Considered: 2, Dropped: 2}},
		{name: "filter unanchored", choice: alpha("asc"),
			filter: &imagev1.TagFilter{Pattern: "rc"}, tags: []string{"1-rc", "2", "rc-0"}, want: "rc-0"},
		{name: "filter and extract numerical", choice: numeric("asc"),
			filter: &imagev1.TagFilter{Pattern: `^main-[a-f0-9]+-(?P<ts>[0-9]+)$`, Extract: "$ts"},
			tags:   []string{"main-abc123-100", "main-def456-99", "main-0a1b2c-1000", "feature-x-5000", "latest"},
			want:   "main-0a1b2c-1000"},
		{name: "extract with braces and semver", choice: semverPolicy("^1"),
			filter: &imagev1.TagFilter{Pattern: `^app-(?P<v>.*)$`, Extract: "${v}"},
			tags:   []string{"app-1.2.0", "app-1.3.0", "app-2.0.0", "1.9.0"}, want: "app-1.3.0"},
		{name: "extract ties: greatest original tag", choice: numeric("asc"),
			filter: &imagev1.TagFilter{Pattern: `^b(\d+)-`, Extract: "$1"},
			tags:   []string{"b7-x", "b7-z", "b7-y", "b3-q"}, want: "b7-z"},
		{name: "filter drops everything", choice: semverPolicy("*"),
			filter: &imagev1.TagFilter{Pattern: "^nope$"}, tags: []string{"1.0.0", "2.0.0"},
			noTag: &NoMatchError{Considered: 2, Filtered: 2}},
		{name: "no tags", choice: alpha("asc"), tags: nil, noTag: &NoMatchError{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.choice, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Select(tt.tags)
			if tt.noTag != nil {
				var nm *NoMatchError
				if !errors.As(err, &nm) || *nm != *tt.noTag {
					t.Fatalf("got %q, %v; want %+v", got, err, tt.noTag)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
			// The answer never depends on the order of the tags.
			for range 5 {
				shuffled := append([]string(nil), tt.tags...)
				rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				if again, _ := p.Select(shuffled); again != got {
					t.Fatalf("order %v gives %q, not %q", shuffled, again, got)
				}
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name   string
		choice imagev1.ImagePolicyChoice
		filter *imagev1.TagFilter
		want   string
	}{
		{"bad range", semverPolicy(">=1.0.0 <<2"), nil, "semver range"},
		{"bad regexp", alpha("asc"), &imagev1.TagFilter{Pattern: "(unclosed"}, "filterTags.pattern"},
		{"extract without pattern", alpha("asc"), &imagev1.TagFilter{Extract: "$1"}, "needs filterTags.pattern"},
		{"bad order", numeric("up"), nil, "order must be"},
		{"no policy", imagev1.ImagePolicyChoice{}, nil, "exactly one"},
		{"two policies", imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: "*"}, Numerical: &imagev1.NumericalPolicy{}}, nil, "exactly one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.choice, tt.filter)
			if err == nil || !strings.HasPrefix(err.Error(), "invalid policy: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want an invalid policy error containing %q", err, tt.want)
			}
		})
	}
}

func FuzzSelect(f *testing.F) {
	f.Add(">=1.0.0", "", "", "1.0.0\nv2.0.0\nlatest", uint8(0))
	f.Add("", `^main-(\d+)$`, "$1", "main-1\nmain-20", uint8(2))
	f.Add("", `(?P<x>.)`, "${x}${x}", "ab\nba", uint8(1))
	f.Fuzz(func(t *testing.T, rng, pattern, extract, tags string, kind uint8) {
		var choice imagev1.ImagePolicyChoice
		switch kind % 3 {
		case 0:
			choice = semverPolicy(rng)
		case 1:
			choice = alpha([]string{"asc", "desc"}[kind/3%2])
		default:
			choice = numeric([]string{"asc", "desc"}[kind/3%2])
		}
		p, err := New(choice, &imagev1.TagFilter{Pattern: pattern, Extract: extract})
		if err != nil {
			return
		}
		list := strings.Split(tags, "\n")
		got, err := p.Select(list)
		if err == nil && !contains(list, got) {
			t.Fatalf("selected %q, which is not a given tag", got)
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// benchTags are 10,000 tags of a busy repository: versions, prereleases,
// build tags and noise.
func benchTags() []string {
	tags := make([]string, 0, 10000)
	for i := range 10000 {
		switch i % 4 {
		case 0:
			tags = append(tags, fmt.Sprintf("%d.%d.%d", i/1000, i/100%10, i%100))
		case 1:
			tags = append(tags, fmt.Sprintf("v%d.%d.%d-rc.%d", i/1000, i/100%10, i%100, i%7))
		case 2:
			tags = append(tags, fmt.Sprintf("main-%07x-%d", i*7919, 1700000000+i))
		default:
			tags = append(tags, fmt.Sprintf("%d", 1700000000+i))
		}
	}
	return shuffled(tags)
}

// shuffled shuffles tags the same way every run, as registries list tags
// in no order a policy may rely on.
func shuffled(tags []string) []string {
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(tags), func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
	return tags
}

func BenchmarkSelect(b *testing.B) {
	tags := benchTags()
	cases := []struct {
		name   string
		choice imagev1.ImagePolicyChoice
		filter *imagev1.TagFilter
	}{
		{"semver", semverPolicy(">=1.0.0 <9.0.0"), nil},
		{"semver-none-in-range", semverPolicy(">=100.0.0"), nil},
		{"alphabetical", alpha("asc"), nil},
		{"numerical", numeric("asc"), nil},
		{"filter-extract-numerical", numeric("asc"), &imagev1.TagFilter{Pattern: `^main-[a-f0-9]+-(?P<ts>[0-9]+)$`, Extract: "$ts"}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p, err := New(c.choice, c.filter)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Select(tags); err != nil && c.name != "semver-none-in-range" {
					b.Fatal(err)
				}
			}
		})
	}
}

// Explain counts every tag in exactly one place, ranks the kept ones best
// first, and agrees with Select on the same policy and tags.
func TestExplain(t *testing.T) {
	tests := []struct {
		name   string
		choice imagev1.ImagePolicyChoice
		filter *imagev1.TagFilter
		tags   []string
		top    int
		want   imagev1.TagSelection
	}{
		{name: "semver: not versions, out of range, kept", choice: semverPolicy(">=1.0.0 <2.0.0"),
			tags: []string{"0.9.0", "1.0.0", "1.4.2", "1.10.0", "2.0.0", "latest", "1.2", "1.5.0-rc.1"}, top: 5,
			want: imagev1.TagSelection{Considered: 8, Unparsable: 2, OutOfRange: 3, Kept: 3,
				TopCandidates: []string{"1.10.0", "1.4.2", "1.0.0"}}},
		{name: "semver: top cuts the candidates, not the count", choice: semverPolicy("*"),
			tags: []string{"1.0.0", "3.0.0", "2.0.0", "4.0.0", "v4.0.0"}, top: 2,
			want: imagev1.TagSelection{Considered: 5, Kept: 5, TopCandidates: []string{"v4.0.0", "4.0.0"}}},
		{name: "semver: nothing in range", choice: semverPolicy(">=3.0.0"),
			tags: []string{"1.0.0", "2.0.0", "latest"}, top: 5,
			want: imagev1.TagSelection{Considered: 3, Unparsable: 1, OutOfRange: 2}},
		{name: "filter, extract and numerical", choice: numeric("asc"),
			filter: &imagev1.TagFilter{Pattern: `^main-[a-f0-9]+-(?P<ts>[0-9a-z]+)$`, Extract: "$ts"},
			tags:   []string{"main-abc123-100", "main-def456-99", "main-0a1b2c-1000", "main-0a1b2c-x", "feature-x-5000", "latest"}, top: 5,
			want: imagev1.TagSelection{Considered: 6, Filtered: 2, Unparsable: 1, Kept: 3,
				TopCandidates: []string{"main-0a1b2c-1000", "main-abc123-100", "main-def456-99"}}},
		{name: "numerical desc: equal values rank by tag", choice: numeric("desc"),
			tags: []string{"10", "10.0", "1e1", "-1", "NaN"}, top: 3,
			want: imagev1.TagSelection{Considered: 5, Unparsable: 1, Kept: 4, TopCandidates: []string{"-1", "1e1", "10.0"}}},
		{name: "alphabetical keeps every tag", choice: alpha("desc"),
			tags: []string{"b", "a", "c"}, top: 5,
			want: imagev1.TagSelection{Considered: 3, Kept: 3, TopCandidates: []string{"a", "b", "c"}}},
		{name: "top 0 counts without candidates", choice: alpha("asc"),
			tags: []string{"b", "a"}, top: 0,
			want: imagev1.TagSelection{Considered: 2, Kept: 2, TopCandidates: []string{}}},
		{name: "no tags", choice: semverPolicy("*"), top: 5,
			want: imagev1.TagSelection{TopCandidates: []string{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.choice, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			got := p.Explain(tt.tags, tt.top)
			if tt.want.TopCandidates == nil {
				tt.want.TopCandidates = []string{}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("Explain:\n got %+v\nwant %+v", got, tt.want)
			}
			agree(t, p, tt.tags, got)
		})
	}
}

// agree checks an explanation against Select on the same tags.
func agree(t *testing.T, p *Policy, tags []string, e imagev1.TagSelection) {
	t.Helper()
	if e.Filtered+e.Unparsable+e.OutOfRange+e.Kept != e.Considered || e.Considered != len(tags) {
		t.Fatalf("counts do not add up: %+v for %d tags", e, len(tags))
	}
	sel, err := p.Select(tags)
	var nm *NoMatchError
	switch {
	case err == nil:
		if e.Kept == 0 || (len(e.TopCandidates) > 0 && e.Selected() != sel) {
			t.Fatalf("Select chose %q, Explain %+v", sel, e)
		}
	case errors.As(err, &nm):
		if e.Kept != 0 || *nm != (NoMatchError{Considered: e.Considered, Filtered: e.Filtered, Dropped: e.Unparsable + e.OutOfRange}) {
			t.Fatalf("Select: %v; Explain %+v", err, e)
		}
	default:
		t.Fatal(err)
	}
}

// On many random tag sets, Explain's first candidate is Select's choice and
// its candidates are in Select's order: removing the first and selecting
// again gives the second.
func TestExplainAgreesWithSelect(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"1.0.0", "v1.0.0", "1.0.0+b1", "1.0.0+b2", "1.2.3", "1.10.0", "2.0.0-rc.1", "2.0.0", "9", "10", "1e1", "10.0",
		"-3", "latest", "main-1", "main-20", "main-x", "1.2", "v2.0.0"}
	choices := []imagev1.ImagePolicyChoice{semverPolicy(">=1.0.0 <2.0.0"), semverPolicy("*"), semverPolicy(">=2.0.0-0"),
		alpha("asc"), alpha("desc"), numeric("asc"), numeric("desc")}
	filters := []*imagev1.TagFilter{nil, {Pattern: `^main-(.*)$`, Extract: "$1"}, {Pattern: `\.`}}
	for range 300 {
		tags := make([]string, rng.IntN(8))
		for i := range tags {
			tags[i] = words[rng.IntN(len(words))]
		}
		for _, c := range choices {
			for _, f := range filters {
				p, err := New(c, f)
				if err != nil {
					t.Fatal(err)
				}
				e := p.Explain(tags, len(tags))
				agree(t, p, tags, e)
				rest := slices.Clone(tags)
				for i, want := range e.TopCandidates {
					got, err := p.Select(rest)
					if err != nil || got != want {
						t.Fatalf("%v %v over %q: candidate %d is %q, Select of the rest gives %q (%v)", c, f, tags, i, want, got, err)
					}
					rest = slices.Delete(rest, slices.Index(rest, got), slices.Index(rest, got)+1)
				}
			}
		}
	}
}

func BenchmarkExplain(b *testing.B) {
	tags := benchTags()
	p, err := New(semverPolicy(">=1.0.0 <9.0.0"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if e := p.Explain(tags, imagev1.MaxTopCandidates); e.Kept == 0 {
			b.Fatal("nothing kept")
		}
	}
}
