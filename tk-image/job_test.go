package main

import (
	"testing"

	"k8s.io/utils/ptr"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// The line job run prints for each phase: one for a job no runner has
// claimed, whether the controller has seen it (Pending) or not; the
// attempt of a running one against its backoff limit (3 by default); the
// phase of a finished one.
func TestPhaseLine(t *testing.T) {
	tests := []struct {
		phase    updatev1.UpdateJobPhase
		attempts int32
		backoff  *int32
		want     string
	}{
		{"", 0, nil, "created, waiting for an update-job-controller"},
		{updatev1.UpdateJobPending, 0, nil, "created, waiting for an update-job-controller"},
		{updatev1.UpdateJobRunning, 1, nil, "Running (attempt 1 of 4)"},
		{updatev1.UpdateJobRunning, 1, ptr.To[int32](0), "Running (attempt 1 of 1)"},
		{updatev1.UpdateJobSucceeded, 1, nil, "Succeeded"},
		{updatev1.UpdateJobNoChange, 1, nil, "NoChange"},
	}
	for _, tt := range tests {
		job := &updatev1.UpdateJob{}
		job.Spec.BackoffLimit = tt.backoff
		job.Status.Phase, job.Status.Attempts = tt.phase, tt.attempts
		if got := phaseLine(job); got != tt.want {
			t.Errorf("phase %q, attempt %d: %q, want %q", tt.phase, tt.attempts, got, tt.want)
		}
	}
}
