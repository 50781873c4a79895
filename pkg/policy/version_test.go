package policy

import (
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
)

// The hand lexer agrees with semver.NewVersion on every tag NewVersion
// reads with three numbers, and rejects everything else.
func FuzzParseVersionMatchesSemver(f *testing.F) {
	for _, s := range []string{"1.2.3", "v1.2.3", "01.002.3", "1.2", "1.2.3-rc.1+build.5", "1.2.3-01", "1.2.3-",
		"1.2.3+", "1.2.3.4", "v", "18446744073709551616.0.0", "1.2.3-a..b", "1.2.3-x-y+z--", "1.2.3+01", "V1.2.3", " 1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		got, ok := parseVersion(tag)
		want, err := semver.NewVersion(tag)
		threeParts := err == nil && strings.Count(strings.SplitN(strings.SplitN(strings.TrimPrefix(tag, "v"), "-", 2)[0], "+", 2)[0], ".") == 2
		if ok != threeParts {
			t.Fatalf("parseVersion(%q) ok=%v; NewVersion err=%v", tag, ok, err)
		}
		if ok && (got.Compare(want) != 0 || got.Metadata() != want.Metadata() || got.Prerelease() != want.Prerelease()) {
			t.Fatalf("parseVersion(%q) = %v, NewVersion = %v", tag, got, want)
		}
	})
}
