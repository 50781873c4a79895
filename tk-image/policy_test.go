package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/tests/testkit/testregistry"
)

func TestPolicyEvalStdin(t *testing.T) {
	tags := "  1.0.0\n\nv1.4.2  \n2.0.0\nlatest\nmain-abc-100\nmain-def-99\n"
	tests := []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"--semver", ">=1.0.0 <2.0.0"}, 0, "v1.4.2\n", ""},
		{[]string{"--alphabetical", "desc"}, 0, "1.0.0\n", ""},
		{[]string{"--numerical", "asc", "--filter-pattern", `^main-[a-f0-9]+-(?P<ts>\d+)$`, "--filter-extract", "$ts"}, 0, "main-abc-100\n", ""},
		{[]string{"--semver", ">=3.0.0"}, 1, "", "6 tags considered, 0 dropped by the filter, 6 by the policy"},
		{[]string{"--semver", ">=1 <<2"}, 2, "", "invalid policy"},
		{[]string{"--numerical", "asc", "--filter-pattern", "("}, 2, "", "filterTags.pattern"},
		{[]string{"--semver", "*", "--alphabetical", "asc"}, 2, "", "exactly one of"},
		{[]string{}, 2, "", "exactly one of"},
		{[]string{"--semver", "*", "--docker-config", "x"}, 2, "", "--docker-config needs --image"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, tags, append([]string{"policy", "eval"}, tt.args...)...)
			if code != tt.code || out != tt.out || !strings.Contains(errs, tt.errs) {
				t.Errorf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, tt.code, tt.out, tt.errs)
			}
		})
	}
}

func TestPolicyEvalImage(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Username: "bot", Password: "s3cret", PageSize: 2})
	reg.PushTags(t, "team/app", []string{"1.0.0", "1.1.0", "1.2.0-rc.1", "2.0.0", "latest"})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), reg.DockerConfigJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "policy", "eval", "--image", reg.Repo("team/app"), "--docker-config", dir, "--semver", "1.x")
	if code != 0 || out != "1.1.0\n" {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errs)
	}

	// Anonymous access to a private registry fails with the registry's word.
	code, _, errs = runCLI(t, "", "policy", "eval", "--image", reg.Repo("team/app"), "--semver", "1.x")
	if code != 1 || !strings.Contains(errs, "UNAUTHORIZED") {
		t.Errorf("anonymous: code %d, stderr %q", code, errs)
	}
}

// policy eval with times, from a --tag-times file: a minimum age by first
// sighting or build time picks the best tag old enough and says on stderr
// which one comes next and when when none is; --newest-build orders by
// build time; bad files and flags are usage errors (exit 2).
func TestPolicyEvalTimes(t *testing.T) {
	dir := t.TempDir()
	times := filepath.Join(dir, "times.txt")
	content := `# tag  first seen  built
1.0.0  2026-11-01T00:00:00Z  2026-10-31T00:00:00Z
1.1.0  2026-11-20T00:00:00Z  2026-11-10T00:00:00Z

1.2.0  2026-11-22T00:00:00Z  -
latest 2026-11-22T06:00:00Z  2026-11-22T05:00:00Z
`
	if err := os.WriteFile(times, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("1.0.0 yesterday\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := "--now=2026-11-23T00:00:00Z"
	tests := []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"--semver", "*", "--tag-times", times, now}, 0, "1.2.0\n", ""},
		{[]string{"--semver", "*", "--minimum-age", "48h", "--tag-times", times, now}, 0, "1.1.0\n", ""},
		// Exactly old enough is old enough.
		{[]string{"--semver", "*", "--minimum-age", "72h", "--tag-times", times, now}, 0, "1.1.0\n", ""},
		{[]string{"--semver", "*", "--minimum-age", "73h", "--tag-times", times, now}, 0, "1.0.0\n", ""},
		// 1.1.0 was built 13 days ago; 1.2.0 has no build time: its
		// first sighting counts.
		{[]string{"--semver", "*", "--minimum-age", "72h", "--age-source", "created", "--tag-times", times, now}, 0, "1.1.0\n", ""},
		{[]string{"--semver", "*", "--minimum-age", "30d", "--tag-times", times, now}, 2, "", "invalid argument"},
		{[]string{"--semver", "*", "--minimum-age", "720h", "--tag-times", times, now}, 1, "",
			"none of the 3 matching tags is older than the minimum age 720h0m0s; 1.0.0 will be at 2026-12-01T00:00:00Z"},
		{[]string{"--newest-build", "--tag-times", times, now}, 0, "latest\n", ""},
		{[]string{"--newest-build", "--minimum-age", "24h", "--age-source", "created", "--tag-times", times, now}, 0, "1.2.0\n", ""},
		{[]string{"--newest-build", "--max-candidates", "1", "--tag-times", times, now}, 0, "latest\n", ""},
		{[]string{"--semver", "*", "--minimum-age", "1h"}, 2, "", "need --tag-times"},
		{[]string{"--newest-build"}, 2, "", "need --tag-times"},
		{[]string{"--newest-build", "--semver", "*", "--tag-times", times}, 2, "", "exactly one of"},
		{[]string{"--semver", "*", "--minimum-age", "1h", "--age-source", "pushed", "--tag-times", times}, 2, "", "--age-source"},
		{[]string{"--semver", "*", "--minimum-age", "1h", "--tag-times", bad}, 2, "", "line 1"},
		{[]string{"--semver", "*", "--minimum-age", "1h", "--tag-times", filepath.Join(dir, "missing")}, 2, "", "--tag-times"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, "", append([]string{"policy", "eval"}, tt.args...)...)
			if code != tt.code || out != tt.out || !strings.Contains(errs, tt.errs) {
				t.Errorf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, tt.code, tt.out, tt.errs)
			}
		})
	}

	// --explain says what the minimum age held back and what comes next.
	code, out, _ := runCLI(t, "", "policy", "eval", "--semver", "*", "--minimum-age", "48h", "--tag-times", times, now, "--explain")
	want := `Considered:     4 tags
Not a version:  1 (a version needs all three numbers, e.g. 1.2.0)
Out of range:   0 outside "*"
Kept:           3
Too new:        1 ranking higher, younger than the minimum age
Best first:     1.1.0, 1.0.0
Selected:       1.1.0
Pending:        1.2.0 at 2026-11-24T00:00:00Z (minimum age 48h0m0s)
`
	if code != 0 || out != want {
		t.Errorf("code %d, explain:\n%s\nwant:\n%s", code, out, want)
	}
}
