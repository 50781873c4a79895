package conditions

import (
	"errors"
	"fmt"
	"syscall"
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

// domainError is a domain package's error in its own terms.
type domainError struct {
	missing bool
	err     error
}

func (e *domainError) Error() string { return e.err.Error() }
func (e *domainError) Unwrap() error { return e.err }
func (e *domainError) Classify() (string, bool) {
	if e.missing {
		return SecretNotFoundReason, false
	}
	return InvalidSpecReason, true
}

// A domain package's error says what it means without building a Failure:
// AsFailure takes its reason and whether it stalls; the outermost one in
// the chain speaks for the object, a Failure a phase wrapped around it
// wins over it, and a full disk is StorageFull even when the domain calls
// it something else.
func TestAClassifiedErrorIsItsOwnFailure(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		reason  string
		stalled bool
	}{
		{"stalled", &domainError{err: errors.New("bad")}, InvalidSpecReason, true},
		{"retried, wrapped", fmt.Errorf("reading: %w", &domainError{missing: true, err: errors.New("gone")}), SecretNotFoundReason, false},
		{"outermost wins", &domainError{err: &domainError{missing: true, err: errors.New("gone")}}, InvalidSpecReason, true},
		{"a phase's failure wins", Retry(GitOperationFailedReason, &domainError{err: errors.New("bad")}), GitOperationFailedReason, false},
		{"full disk", &domainError{missing: true, err: fmt.Errorf("write: %w", syscall.ENOSPC)}, StorageFullReason, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := Classify(tt.err)
			if !ok {
				t.Fatalf("%v is not classified", tt.err)
			}
			if f.Reason != tt.reason || f.Stalled != tt.stalled {
				t.Errorf("got %s stalled=%v, want %s stalled=%v", f.Reason, f.Stalled, tt.reason, tt.stalled)
			}
			if f.Error() != tt.err.Error() {
				t.Errorf("message %q, want %q", f.Error(), tt.err.Error())
			}
			if got := AsFailure(tt.err); got.Reason != tt.reason {
				t.Errorf("AsFailure: %s, want %s", got.Reason, tt.reason)
			}
		})
	}
	if _, ok := Classify(errors.New("boom")); ok {
		t.Error("a plain error is classified")
	}
}
