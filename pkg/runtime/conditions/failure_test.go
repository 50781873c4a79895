package conditions

import (
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Record, after AsFailure, turns any error into the conditions kstatus
// reads and the failure's own time to look again: Stalled failures wait
// for a change unless they say otherwise, others are Ready=False, and a
// plain error is a retried Failed. (When a failure names no time, the
// reconciler's skeleton chooses: pkg/runtime/reconcile.)
func TestRecord(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		reason  string
		stalled bool
		requeue time.Duration
	}{
		{"stalled", Stallf(InvalidSpecReason, "bad spec"), InvalidSpecReason, true, 0},
		{"stalled, look again", Stallf(AccessDeniedReason, "not allowed").After(time.Hour), AccessDeniedReason, true, time.Hour},
		{"retry", Retryf(GitOperationFailedReason, "no route"), GitOperationFailedReason, false, 0},
		{"retry soon", Retryf(SecretNotFoundReason, "missing").After(time.Second), SecretNotFoundReason, false, time.Second},
		{"wrapped", fmt.Errorf("job: %w", Retryf(AuthenticationFailedReason, "refused")), AuthenticationFailedReason, false, 0},
		{"plain error", errors.New("boom"), FailedReason, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &object{generation: 3}
			MarkReconciling(o, ProgressingReason, "working")
			got := Record(o, AsFailure(tt.err), tt.err.Error())
			if got != tt.requeue {
				t.Errorf("requeue %s, want %s", got, tt.requeue)
			}
			ready := Get(o, ReadyCondition)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != tt.reason || ready.Message != tt.err.Error() {
				t.Fatalf("Ready = %+v, want False %s %q", ready, tt.reason, tt.err)
			}
			if IsTrue(o, StalledCondition) != tt.stalled || Get(o, ReconcilingCondition) != nil {
				t.Errorf("conditions %v", statuses(o))
			}
		})
	}
}
