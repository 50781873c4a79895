package gitops

import (
	"strings"
	"testing"
)

func TestLibGit2Version(t *testing.T) {
	v := LibGit2Version()
	// git2go v34 is written for libgit2 1.5; the transports we use must be
	// compiled in, or clones fail at run time with confusing errors.
	for _, want := range []string{"libgit2 1.5.", "https: true", "ssh: true", "threads: true"} {
		if !strings.Contains(v, want) {
			t.Errorf("%q does not contain %q", v, want)
		}
	}
}
