package gitsource

import (
	"errors"
	"fmt"
	"testing"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Every Problem has a reason in the one table, and a git failure is
// AuthenticationFailed only when the server (or our check of it) refused:
// both retried, since credentials and servers change unwatched.
func TestEveryProblemHasAReason(t *testing.T) {
	for p := InvalidSpec; p <= GitFailed; p++ {
		if problems[p].reason == "" {
			t.Errorf("Problem %d has no reason", p)
		}
	}
	if _, ok := problems[GitFailed+1]; ok {
		t.Error("a Problem after GitFailed: extend this test's range")
	}
	for _, tt := range []struct {
		err    error
		reason string
	}{
		{fmt.Errorf("ls-remote: %w: host key mismatch", git.ErrAuthentication), conditions.AuthenticationFailedReason},
		{errors.New("connection refused"), conditions.GitOperationFailedReason},
	} {
		f, ok := conditions.Classify(fmt.Errorf("head: %w", GitError(tt.err)))
		if !ok || f.Reason != tt.reason || f.Stalled {
			t.Errorf("%v: got %+v, want %s retried", tt.err, f, tt.reason)
		}
	}
}
