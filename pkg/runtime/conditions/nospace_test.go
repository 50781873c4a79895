package conditions

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// TestRetryFullDisk proves that a retryable failure caused by a full file
// system (ENOSPC or EDQUOT in the chain, or libgit2's message for them) is
// reported as StorageFull whatever reason the step gave, and that other
// failures keep their reason.
func TestRetryFullDisk(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"ENOSPC wrapped", fmt.Errorf("storing tags: %w", &fs.PathError{Op: "write", Path: "/data/x.tags", Err: syscall.ENOSPC}), StorageFullReason},
		{"EDQUOT", fmt.Errorf("x: %w", syscall.EDQUOT), StorageFullReason},
		{"libgit2 message", errors.New("fetching: failed to write pack: No space left on device"), StorageFullReason},
		{"other error", errors.New("fetching: connection refused"), GitOperationFailedReason},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Retry(GitOperationFailedReason, tt.err).Reason; got != tt.want {
				t.Errorf("reason %s, want %s", got, tt.want)
			}
		})
	}
	if NoSpace(nil) {
		t.Error("NoSpace(nil)")
	}
}
