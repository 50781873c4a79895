package mirror

import (
	"strings"
	"testing"
)

func TestLibGit2Version(t *testing.T) {
	v := LibGit2Version()
	// git2go v34 is written for libgit2 1.5, and needs threads.
	for _, want := range []string{"libgit2 1.5.", "threads: true"} {
		if !strings.Contains(v, want) {
			t.Errorf("%q does not contain %q", v, want)
		}
	}
}
