package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testregistry"
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
