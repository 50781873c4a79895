//go:build !cgo

package main

import (
	"strings"
	"testing"
)

// A static tk-image says why it cannot update a remote repository.
func TestRemoteUpdateNeedsCgo(t *testing.T) {
	code, _, errs := runCLI(t, "", "update", "--repository", "https://example.com/org/app.git",
		"--policy", "apps:app=reg/app:1", "--author-email", "bot@example.com")
	if code != 1 || !strings.Contains(errs, "this tk-image was built without cgo; updating a remote repository (--repository) needs libgit2 1.5") {
		t.Errorf("exit %d: %s", code, errs)
	}
}
