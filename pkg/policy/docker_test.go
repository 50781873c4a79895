package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/policy/policytest"
)

func dockerPolicy(rng, compatibleWith string) imagev1.ImagePolicyChoice {
	return imagev1.ImagePolicyChoice{Docker: &imagev1.DockerPolicy{Range: rng, CompatibleWith: compatibleWith}}
}

// parseDocker reads the tag shapes official images publish, and refuses
// what is no version.
func TestParseDocker(t *testing.T) {
	tests := map[string]struct {
		nums   []uint64
		pre    string
		build  uint64
		suffix string
	}{
		"22":                   {nums: []uint64{22}},
		"1.27":                 {nums: []uint64{1, 27}},
		"16.4.0":               {nums: []uint64{16, 4, 0}},
		"1.2.3.4":              {nums: []uint64{1, 2, 3, 4}},
		"v1.2":                 {nums: []uint64{1, 2}},
		"V1.2":                 {nums: []uint64{1, 2}},
		"2024.01.15":           {nums: []uint64{2024, 1, 15}},
		"7.4-alpine":           {nums: []uint64{7, 4}, suffix: "alpine"},
		"3.12-slim-bookworm":   {nums: []uint64{3, 12}, suffix: "slim-bookworm"},
		"1.23-alpine3.20":      {nums: []uint64{1, 23}, suffix: "alpine3.20"},
		"1.2-dev":              {nums: []uint64{1, 2}, suffix: "dev"},
		"17rc1":                {nums: []uint64{17}, pre: "rc.1"},
		"18beta1-bookworm":     {nums: []uint64{18}, pre: "beta.1", suffix: "bookworm"},
		"1.25rc1-alpine":       {nums: []uint64{1, 25}, pre: "rc.1", suffix: "alpine"},
		"3.14.0a1":             {nums: []uint64{3, 14, 0}, pre: "a.1"},
		"7.4-rc2-alpine":       {nums: []uint64{7, 4}, pre: "rc.2", suffix: "alpine"},
		"3.14-rc-slim":         {nums: []uint64{3, 14}, pre: "rc", suffix: "slim"},
		"8.0-M02":              {nums: []uint64{8, 0}, pre: "m.2"},
		"1.0-RC.3":             {nums: []uint64{1, 0}, pre: "rc.3"},
		"20240115-1":           {nums: []uint64{20240115}, build: 2},
		"1.2.3-0-debian":       {nums: []uint64{1, 2, 3}, build: 1, suffix: "debian"},
		"1.24-windows_ltsc":    {nums: []uint64{1, 24}, suffix: "windows_ltsc"},
		"17rc1-rc2":            {nums: []uint64{17}, pre: "rc.1", suffix: "rc2"},
		"018":                  {nums: []uint64{18}},
		"1.2.3.4-1.2.3.4-five": {nums: []uint64{1, 2, 3, 4}, suffix: "1.2.3.4-five"},
	}
	for tag, tt := range tests {
		v, ok := parseDocker(tag)
		if !ok {
			t.Errorf("%s: not a version", tag)
			continue
		}
		if !slices.Equal(v.nums[:v.parts], tt.nums) || semverPrerelease(v.pre) != tt.pre || v.build != tt.build || v.suffix != tt.suffix {
			t.Errorf("%s: %+v", tag, v)
		}
	}
	for _, tag := range []string{"", "latest", "alpine", "v", "1.", ".1", "1..2", "1.2.3.4.5", "1.2-", "1.2--alpine",
		"1.2-alpine-", "1.2foo", "1.2a", "4f2a9c1", "sha-4f2a9c1", "3a91042", "4a12345", "7b00000", "tip-20250614", "2025.7.0.dev202506140236",
		"1.2_3", "1.2-al+pine", "99999999999999999999", "1.2-" + strings.Repeat("x", 256)} {
		if v, ok := parseDocker(tag); ok {
			t.Errorf("%q: read as %+v", tag, v)
		}
	}
}

// Versions order by their numbers, a missing number below any, then a
// prerelease below its release, then by build number.
func TestDockerCompare(t *testing.T) {
	ascending := []string{"1", "1.0", "1.0.0", "1.2rc1", "1.2rc2", "1.2rc10", "1.2", "1.2-0", "1.2-1", "1.2-10",
		"1.9", "1.10", "2", "20240115", "20240115-1", "20240115-2", "20240116"}
	for i := 1; i < len(ascending); i++ {
		a, _ := parseDocker(ascending[i-1])
		b, ok := parseDocker(ascending[i])
		if !ok || a.compare(b) >= 0 || b.compare(a) <= 0 {
			t.Errorf("%s does not order below %s", ascending[i-1], ascending[i])
		}
	}
	a, _ := parseDocker("v1.2-alpine")
	b, _ := parseDocker("1.2-bookworm")
	if a.compare(b) != 0 {
		t.Error("v1.2-alpine and 1.2-bookworm: versions differ")
	}
}

// The vectors of official images: each case's policy picks its answer
// through Select and Explain alike, and the tags that must never win are
// not even candidates. The same vectors run through discover, tk-image
// policy eval and the reflector.
func TestDockerOfficialImages(t *testing.T) {
	for _, img := range policytest.OfficialImages() {
		for _, c := range img.Cases {
			t.Run(c.Name(img), func(t *testing.T) {
				p, err := New(dockerPolicy(c.Range, c.CompatibleWith()), nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(img.Tags, c.Want) {
					t.Fatalf("want %s is not one of the tags", c.Want)
				}
				if got, err := p.Select(img.Tags); got != c.Want || err != nil {
					t.Errorf("Select = %q, %v; want %s", got, err, c.Want)
				}
				all := p.explain(img.Tags, -1)
				if len(all.TopCandidates) == 0 || all.TopCandidates[0] != c.Want {
					t.Errorf("Explain ranks %v", all.TopCandidates)
				}
				for _, never := range c.Never {
					if !slices.Contains(img.Tags, never) {
						t.Errorf("never %s is not one of the tags", never)
					}
					if slices.Contains(all.TopCandidates, never) {
						t.Errorf("%s is a candidate", never)
					}
				}
			})
		}
	}
}

// The example: semver skips 1.37, two numbers; docker does not,
// and with a reference keeps its shape.
func TestDockerAgainstSemver(t *testing.T) {
	tags := []string{"1.36", "1.36.1", "1.37", "1.35.0"}
	for _, tt := range []struct {
		choice imagev1.ImagePolicyChoice
		want   string
	}{
		{semverPolicy(">=1.36"), "1.36.1"},
		{dockerPolicy(">=1.36", ""), "1.37"},
		{dockerPolicy(">=1.36", "1.36.1"), "1.36.1"},
		{dockerPolicy(">=1.36", "1.36"), "1.37"},
		{dockerPolicy(">=1.37.0-0", "1.36"), "1.37"},
	} {
		p, err := New(tt.choice, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := p.Select(tags); got != tt.want {
			t.Errorf("%+v: %s, want %s", tt.choice, got, tt.want)
		}
	}
}

// Prereleases are candidates only for a range that names one, as semver's,
// and then order below their release; explain counts another shape as
// not a version and a prerelease outside the range as out of range.
func TestDockerPrereleases(t *testing.T) {
	tags := []string{"17rc1", "17beta3", "16", "17rc1-alpine", "latest"}
	p, _ := New(dockerPolicy(">=16", "16"), nil)
	e := p.Explain(tags, 5)
	if want := []string{"16"}; !slices.Equal(e.TopCandidates, want) || e.Unparsable != 2 || e.OutOfRange != 2 {
		t.Errorf("release range: %+v", e)
	}
	p, _ = New(dockerPolicy(">=17.0.0-0", "16"), nil)
	if e := p.Explain(append(tags, "17"), 5); !slices.Equal(e.TopCandidates, []string{"17", "17rc1", "17beta3"}) {
		t.Errorf("prerelease range: %+v", e)
	}
}

// New refuses a bad range or a reference that is no Docker-style version.
func TestDockerRejects(t *testing.T) {
	for _, c := range []imagev1.ImagePolicyChoice{dockerPolicy("not a range", ""), dockerPolicy(">=1", "latest"), dockerPolicy(">=1", "1.2-")} {
		if _, err := New(c, nil); err == nil || !strings.HasPrefix(err.Error(), "invalid policy: docker") {
			t.Errorf("%+v: %v", c.Docker, err)
		}
	}
}

// The parser never panics, and what it reads it reads consistently: a
// version equals itself, and a tag it accepts is accepted again with a v.
func FuzzParseDocker(f *testing.F) {
	for _, s := range []string{"22", "1.27", "7.4-alpine", "3.12-slim-bookworm", "17rc1", "7.4-rc2-alpine", "20240115-1",
		"2024.01.15", "v1.2.3.4", "1.2-", "8.0-M02", "1.2.3-0-debian", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		v, ok := parseDocker(tag)
		if !ok {
			return
		}
		if v.parts < 1 || v.parts > 4 {
			t.Fatalf("%q: %d parts", tag, v.parts)
		}
		if v.compare(v) != 0 {
			t.Fatalf("%q does not equal itself", tag)
		}
		if v.suffix != "" && !strings.HasSuffix(tag, "-"+v.suffix) {
			t.Fatalf("%q: suffix %q", tag, v.suffix)
		}
		if tag[0] != 'v' && tag[0] != 'V' && len(tag) < maxVersionLen {
			w, ok := parseDocker("v" + tag)
			if !ok || w.compare(v) != 0 || w.suffix != v.suffix {
				t.Fatalf("v%s reads as %+v, %s as %+v", tag, w, tag, v)
			}
		}
		_ = v.semver()
	})
}

// dockerBenchTags are 10,000 tags of an official image's shape: 1 to 3
// numbers, each with its variants (-alpine, -bookworm, -slim-bookworm),
// release candidates, and the usual noise (latest, alpine, SHAs).
func dockerBenchTags() []string {
	variants := []string{"", "-alpine", "-bookworm", "-slim-bookworm", "-alpine3.20"}
	tags := make([]string, 0, 10000)
	for i := 0; len(tags) < 10000; i++ {
		major, minor, patch := 10+i/400, i/20%20, i%20
		var v string
		switch i % 4 {
		case 0:
			v = fmt.Sprintf("%d", major)
		case 1:
			v = fmt.Sprintf("%d.%d", major, minor)
		case 2:
			v = fmt.Sprintf("%d.%d.%d", major, minor, patch)
		default:
			v = fmt.Sprintf("%d.%drc%d", major, minor, patch)
		}
		for _, s := range variants {
			tags = append(tags, v+s)
		}
		if i%50 == 0 {
			tags = append(tags, "latest", "alpine", fmt.Sprintf("sha-%07x", i*7919))
		}
	}
	return shuffled(tags[:10000])
}

// BenchmarkDockerEval: the docker kind over 10,000 Docker-style tags, as
// tk-image policy eval and the reflector run it (Evaluate with the top
// candidates, which is Explain's walk), and Select alone; semver over the
// same tags for comparison.
func BenchmarkDockerEval(b *testing.B) {
	tags := dockerBenchTags()
	cases := []struct {
		name   string
		choice imagev1.ImagePolicyChoice
	}{
		{"docker-suffix", dockerPolicy(">=12.3 <30", "12.3-alpine")},
		{"docker-shapeless", dockerPolicy(">=12", "")},
		{"semver", semverPolicy(">=12.0.0")},
	}
	for _, c := range cases {
		p, err := New(c.choice, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/evaluate", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Evaluate(context.Background(), tags, Options{Top: imagev1.MaxTopCandidates}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/select", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Select(tags); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A tag that looks like a short commit is no version, so it cannot win
// over a release under a range that admits prereleases: read by the
// prerelease rule, 3a91042 would be 3 with prerelease a91042, above 2.0.0.
func TestCommitTagsAreNoVersions(t *testing.T) {
	p, err := New(dockerPolicy(">=1.0.0-0", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Select([]string{"1.0.0", "2.0.0", "3a91042", "4a12345"}); got != "2.0.0" || err != nil {
		t.Errorf("Select = %q, %v; want 2.0.0", got, err)
	}
	for tag, want := range map[string]bool{"3a91042": true, "4f2a9c1e": true, "1234567": false, "3a1": false,
		"3A91042": false, "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef": true, "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef0": false} {
		if CommitLike(tag) != want {
			t.Errorf("CommitLike(%q) = %v, want %v", tag, !want, want)
		}
	}
}
