package engine

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/forge"
)

// A forge's refusal is retried, as a token or permission may be fixed
// meanwhile, and a rate limit after its reset; only a feature the forge
// does not have ends the run for good, since only the plan can change.
func TestForgeRefusalsAreRetriedButMissingFeatures(t *testing.T) {
	tests := []struct {
		err      error
		kind     Kind
		terminal bool
		after    time.Duration
	}{
		{&forge.Error{Provider: "bitbucket", StatusCode: http.StatusUnauthorized}, KindAuthentication, false, 0},
		{&forge.Error{Provider: "bitbucket", StatusCode: http.StatusTooManyRequests, RetryAfter: time.Minute}, KindRateLimited, false, time.Minute},
		{&forge.Error{Provider: "bitbucket", StatusCode: http.StatusConflict}, KindPullRequest, false, 0},
		{fmt.Errorf("bitbucket: no labels: %w", forge.ErrUnsupported), KindInvalid, true, 0},
		{errors.New("connection reset"), KindPullRequest, false, 0},
	}
	for _, tt := range tests {
		e := forgeFailure("creating the pull request", tt.err)
		if e.Kind != tt.kind || e.Terminal != tt.terminal || e.RetryAfter != tt.after {
			t.Errorf("%v: %+v, want %s terminal=%v after %s", tt.err, e, tt.kind, tt.terminal, tt.after)
		}
	}
}
