package registryaccess

import (
	"errors"
	"fmt"
	"testing"

	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// A provider that does not serve the registry and an identity the
// controller may not use stall the ImageRepository; any other credential
// problem is AuthenticationFailed and retried.
func TestAnAccessErrorSaysWhatItMeans(t *testing.T) {
	for _, tt := range []struct {
		err     error
		reason  string
		stalled bool
	}{
		{&Error{Err: fmt.Errorf("ecr: %w", cloudauth.ErrProviderMismatch)}, conditions.ProviderMismatchReason, true},
		{&Error{Err: cloudauth.ErrWorkloadIdentityDisabled}, conditions.WorkloadIdentityNotEnabledReason, true},
		{AuthFailed(errors.New("reading Secret pull: not found")), conditions.AuthenticationFailedReason, false},
	} {
		f := conditions.AsFailure(fmt.Errorf("scan: %w", tt.err))
		if f.Reason != tt.reason || f.Stalled != tt.stalled {
			t.Errorf("%v: got %s stalled=%v, want %s stalled=%v", tt.err, f.Reason, f.Stalled, tt.reason, tt.stalled)
		}
	}
}
