package controller

import (
	"errors"
	"syscall"
	"testing"
	"time"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
)

// The engine's failures keep the reasons the runner's had: one map, every
// kind in it, terminal ones Stalled, rate limits retried after their
// reset; this controller's own errors pass as they are.
func TestFailureKeepsTheReasons(t *testing.T) {
	cause := errors.New("boom")
	tests := []struct {
		err     error
		reason  string
		stalled bool
	}{
		{&engine.Error{Kind: engine.KindInvalid, Terminal: true, Err: cause}, conditions.InvalidSpecReason, true},
		{&engine.Error{Kind: engine.KindGit, Err: cause}, conditions.GitOperationFailedReason, false},
		{&engine.Error{Kind: engine.KindAuthentication, Err: cause}, conditions.AuthenticationFailedReason, false},
		{&engine.Error{Kind: engine.KindUpdate, Terminal: true, Err: cause}, updatev1.UpdateFailedReason, true},
		{&engine.Error{Kind: engine.KindUpdate, Err: cause}, updatev1.UpdateFailedReason, false},
		{&engine.Error{Kind: engine.KindPullRequest, Err: cause}, updatev1.PullRequestFailedReason, false},
		{&engine.Error{Kind: engine.KindRateLimited, RetryAfter: time.Minute, Err: cause}, updatev1.RateLimitedReason, false},
		{&engine.Error{Kind: engine.KindGit, Err: syscall.ENOSPC}, conditions.StorageFullReason, false},
		{conditions.Stall(updatev1.ContainerFailedReason, cause), updatev1.ContainerFailedReason, true},
	}
	for _, tt := range tests {
		f := conditions.AsFailure(failure(tt.err))
		if f.Reason != tt.reason || f.Stalled != tt.stalled || f.Error() != tt.err.Error() {
			t.Errorf("failure(%v) = %+v, want reason %s, stalled %v", tt.err, f, tt.reason, tt.stalled)
		}
	}
	if f := conditions.AsFailure(failure(tests[6].err)); f.RetryAfter != time.Minute {
		t.Errorf("rate limit retried after %s, want 1m", f.RetryAfter)
	}
	for k := range map[engine.Kind]bool{engine.KindInvalid: true, engine.KindGit: true, engine.KindAuthentication: true,
		engine.KindUpdate: true, engine.KindPullRequest: true, engine.KindRateLimited: true} {
		if engineReasons[k] == "" {
			t.Errorf("kind %s has no reason", k)
		}
	}
	if failure(nil) != nil {
		t.Error("failure(nil) is not nil")
	}
}
