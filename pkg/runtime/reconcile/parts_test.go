package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// A kind whose phase runs parts (an automation's targets): each part's
// failure takes the one failure path on the part's view, the others go
// on, and the phase's sum of them ends the reconcile without telling
// OnFailure twice.
func TestPartsFailOnTheOneFailurePath(t *testing.T) {
	stall := conditions.Stallf(conditions.InvalidSpecReason, "branch %s is not a branch", "v1")
	retry := conditions.Retryf(conditions.AuthenticationFailedReason, "token s3cr3t refused").Redacting("s3cr3t")
	tests := []struct {
		name        string
		parts       []error // each part's one phase returns this
		wantErr     bool    // returned to controller-runtime for backoff
		wantStalled bool
		wantReady   string
		wantTold    []string // OnFailure: part name and reason
		wantRequeue time.Duration
	}{
		{
			name:        "a stalled part stays stalled while the other runs",
			parts:       []error{stall, nil},
			wantStalled: true,
			wantReady:   "False/InvalidSpec",
			wantTold:    []string{"p0 InvalidSpec"},
			wantRequeue: time.Minute, // the part that ran asked for it
		},
		{
			name:        "a retryable part makes the sum retried",
			parts:       []error{stall, retry},
			wantReady:   "False/InvalidSpec",
			wantTold:    []string{"p0 InvalidSpec", "p1 AuthenticationFailed"},
			wantRequeue: 5 * time.Second, // the kind's retry
		},
		{
			name:      "an unclassified part error goes to the backoff",
			parts:     []error{nil, errors.New("etcdserver: leader changed")},
			wantErr:   true,
			wantReady: "False/Failed",
			wantTold:  []string{"p1 Failed"},
		},
		{
			name:        "parts that run leave the phase to say how it went",
			parts:       []error{nil, nil},
			wantRequeue: time.Minute,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var told []string
			var k *Kind[*imagev1.ImagePolicy, state]
			runParts := func(ctx context.Context, s *policyScope) (Result, error) {
				var failed []PartResult
				var requeue time.Duration
				for i, err := range tt.parts {
					view := s.Obj.DeepCopy()
					view.Name = "p" + string(rune('0'+i))
					res := k.RunPart(ctx, s.Part(view, state{}), []Phase[*imagev1.ImagePolicy, state]{
						phase("part", Result{RequeueAfter: time.Minute}, err),
					})
					requeue = Shortest(requeue, res.RequeueAfter)
					if res.Failure != nil {
						failed = append(failed, res)
						if strings.Contains(res.Message, "s3cr3t") {
							t.Errorf("part message %q shows the secret", res.Message)
						}
						if c := conditions.Get(view, conditions.ReadyCondition); c == nil || c.Reason != res.Failure.Reason {
							t.Errorf("part %s: Ready %+v, want the failure recorded on its view", view.Name, c)
						}
					}
				}
				if len(failed) > 0 {
					return Continue, PartsFailed(failed, "some parts failed", requeue)
				}
				return StopAfter(requeue), nil
			}
			k = &Kind[*imagev1.ImagePolicy, state]{
				Phases: []Phase[*imagev1.ImagePolicy, state]{{Name: "parts", Run: runParts}},
				Retry:  func(*policyScope, *conditions.Failure) time.Duration { return 5 * time.Second },
				OnFailure: func(_ context.Context, s *policyScope, f *conditions.Failure, _ string) {
					told = append(told, s.Obj.Name+" "+f.Reason)
				},
			}
			s := &policyScope{Obj: &imagev1.ImagePolicy{}}
			res, err := k.runPhases(context.Background(), s)
			if (err != nil) != tt.wantErr {
				t.Errorf("error %v, want one: %v", err, tt.wantErr)
			}
			if strings.Join(told, ",") != strings.Join(tt.wantTold, ",") {
				t.Errorf("OnFailure told %q, want %q (each part once, never the sum)", told, tt.wantTold)
			}
			got := ""
			if c := conditions.Get(s.Obj, conditions.ReadyCondition); c != nil {
				got = string(c.Status) + "/" + c.Reason
			}
			if got != tt.wantReady {
				t.Errorf("Ready %q, want %q", got, tt.wantReady)
			}
			if stalled := conditions.IsTrue(s.Obj, conditions.StalledCondition); stalled != tt.wantStalled {
				t.Errorf("Stalled %v, want %v", stalled, tt.wantStalled)
			}
			if !tt.wantErr && res.RequeueAfter != tt.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tt.wantRequeue)
			}
		})
	}
}

// A part's phases do not write: the reconcile writes the object once, with
// what the phase running the parts copied into it.
func TestAPartCannotWrite(t *testing.T) {
	s := &policyScope{Obj: &imagev1.ImagePolicy{}}
	if err := s.Part(s.Obj.DeepCopy(), state{}).Patch(context.Background()); err == nil {
		t.Error("a part's Patch succeeded")
	}
}
