package migrate

import (
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/policy"
)

// Flux's regex+numerical recipes for Docker-style tags become the docker
// kind, and the two pick the same tag from the same list; any other
// recipe is left alone.
func TestDockerRecipe(t *testing.T) {
	tags := []string{"1.2-alpine", "1.9-alpine", "1.10-alpine", "1.10", "1.11-bookworm", "2.0-alpine", "1.27.3", "1.27.12", "1.28.0",
		"22-alpine", "23-alpine", "24", "latest", "1.12rc1-alpine"}
	tests := []struct {
		pattern, extract string
		rng, ref         string // "" when not mapped
		want             string
	}{
		{`^1\.(?P<minor>[0-9]+)-alpine$`, "$minor", ">=1 <2", "1.0-alpine", "1.10-alpine"},
		{`^1\.(\d+)-alpine$`, "${1}", ">=1 <2", "1.0-alpine", "1.10-alpine"},
		{`^1\.27\.(?P<patch>\d+)$`, "$patch", ">=1.27 <1.28", "1.27.0", "1.27.12"},
		{`^(?P<major>\d+)-alpine$`, "$major", "*", "0-alpine", "23-alpine"},
		{`^1\.(?P<minor>[0-9]+)$`, "$minor", ">=1 <2", "1.0", "1.10"},
		// Not mapped: unanchored, a bounded or optional group, two groups,
		// extract of more than the group, a number after the group, a
		// prerelease suffix, case folding.
		{`1\.(?P<minor>[0-9]+)-alpine`, "$minor", "", "", ""},
		{`^1\.(?P<minor>[0-9]{1,2})-alpine$`, "$minor", "", "", ""},
		{`^1\.(?P<minor>[0-9]*)-alpine$`, "$minor", "", "", ""},
		{`^(?P<a>\d+)\.(?P<b>\d+)$`, "$b", "", "", ""},
		{`^1\.(?P<minor>[0-9]+)-alpine$`, "v$minor", "", "", ""},
		{`^(?P<minor>[0-9]+)\.0$`, "$minor", "", "", ""},
		{`^1\.(?P<minor>[0-9]+)-rc1$`, "$minor", "", "", ""},
		{`(?i)^1\.(?P<minor>[0-9]+)-alpine$`, "$minor", "", "", ""},
		{`^main-[a-f0-9]+-(?P<ts>[0-9]+)$`, "$ts", "", "", ""},
	}
	for _, tt := range tests {
		rng, ref, ok := dockerRecipe(tt.pattern, tt.extract)
		if ok != (tt.rng != "") || rng != tt.rng || ref != tt.ref {
			t.Errorf("%s %s: %q %q %v, want %q %q", tt.pattern, tt.extract, rng, ref, ok, tt.rng, tt.ref)
			continue
		}
		if !ok {
			continue
		}
		flux, err := policy.New(imagev1.ImagePolicyChoice{Numerical: &imagev1.NumericalPolicy{Order: "asc"}},
			&imagev1.TagFilter{Pattern: tt.pattern, Extract: tt.extract})
		if err != nil {
			t.Fatal(err)
		}
		docker, err := policy.New(imagev1.ImagePolicyChoice{Docker: &imagev1.DockerPolicy{Range: rng, CompatibleWith: ref}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := flux.Select(tags)
		b, _ := docker.Select(tags)
		if a != tt.want || b != tt.want {
			t.Errorf("%s: the recipe picks %q, docker %q; want %s", tt.pattern, a, b, tt.want)
		}
	}
}
