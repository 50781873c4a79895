package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	ctrl "sigs.k8s.io/controller-runtime"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

type state struct{ ran []string }

type policyScope = Scope[*imagev1.ImagePolicy, state]

func phase(name string, res Result, err error) Phase[*imagev1.ImagePolicy, state] {
	return Phase[*imagev1.ImagePolicy, state]{Name: name, Run: func(_ context.Context, s *policyScope) (Result, error) {
		s.State.ran = append(s.State.ran, name)
		return res, err
	}}
}

// The phase list and the one failure path need no API server: they only
// read and write the object in hand.
func TestPhasesRunInOrderUntilOneStopsOrFails(t *testing.T) {
	secretErr := conditions.Retry(conditions.AuthenticationFailedReason, errors.New("token s3cr3t-token refused")).
		Redacting("s3cr3t-token")
	tests := []struct {
		name        string
		phases      []Phase[*imagev1.ImagePolicy, state]
		retry       time.Duration
		wantRan     string
		wantRequeue time.Duration
		wantErr     bool
		wantReady   string // Ready's status and reason, "" for none
		wantStalled bool
		wantMessage string
	}{
		{
			name:        "all phases run and the shortest requeue wins",
			phases:      []Phase[*imagev1.ImagePolicy, state]{phase("a", Result{RequeueAfter: time.Minute}, nil), phase("b", Continue, nil), phase("c", Result{RequeueAfter: time.Second}, nil)},
			wantRan:     "a,b,c",
			wantRequeue: time.Second,
		},
		{
			name:        "a stop ends the list and keeps its requeue",
			phases:      []Phase[*imagev1.ImagePolicy, state]{phase("a", StopAfter(time.Hour), nil), phase("b", Continue, nil)},
			wantRan:     "a",
			wantRequeue: time.Hour,
		},
		{
			name:        "a stalled failure ends the list, is Stalled, and is not retried",
			phases:      []Phase[*imagev1.ImagePolicy, state]{phase("a", Result{RequeueAfter: time.Minute}, nil), phase("b", Continue, conditions.Stallf(conditions.InvalidSpecReason, "bad spec")), phase("c", Continue, nil)},
			retry:       time.Second,
			wantRan:     "a,b",
			wantReady:   "False/InvalidSpec",
			wantStalled: true,
			wantMessage: "bad spec",
		},
		{
			name:        "a retryable failure without a time of its own takes the kind's retry",
			phases:      []Phase[*imagev1.ImagePolicy, state]{phase("a", Continue, conditions.Retryf(conditions.GitOperationFailedReason, "server hung up"))},
			retry:       7 * time.Second,
			wantRan:     "a",
			wantRequeue: 7 * time.Second,
			wantReady:   "False/GitOperationFailed",
			wantMessage: "server hung up",
		},
		{
			name:        "a failure's own retry time wins over the kind's",
			phases:      []Phase[*imagev1.ImagePolicy, state]{phase("a", Continue, conditions.Retryf(conditions.FailedReason, "later").After(3*time.Second))},
			retry:       time.Minute,
			wantRan:     "a",
			wantRequeue: 3 * time.Second,
			wantReady:   "False/Failed",
		},
		{
			name:        "an unclassified error is recorded as Failed and returned for backoff",
			phases:      []Phase[*imagev1.ImagePolicy, state]{phase("a", Continue, errors.New("etcdserver: leader changed"))},
			wantRan:     "a",
			wantErr:     true,
			wantReady:   "False/Failed",
			wantMessage: "leader changed",
		},
		{
			name:        "the secrets a failure names never reach the condition",
			phases:      []Phase[*imagev1.ImagePolicy, state]{phase("a", Continue, secretErr)},
			wantRan:     "a",
			wantReady:   "False/AuthenticationFailed",
			wantMessage: "token *** refused",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var failures, failedIn []string
			k := &Kind[*imagev1.ImagePolicy, state]{
				Phases: tt.phases,
				Retry:  func(*policyScope, *conditions.Failure) time.Duration { return tt.retry },
				OnFailure: func(_ context.Context, s *policyScope, f *conditions.Failure, msg string) {
					failures = append(failures, f.Reason+": "+msg)
					failedIn = append(failedIn, s.Phase)
				},
			}
			s := &policyScope{Obj: &imagev1.ImagePolicy{}}
			res, err := k.runPhases(context.Background(), s)
			if got := strings.Join(s.State.ran, ","); got != tt.wantRan {
				t.Errorf("ran %q, want %q", got, tt.wantRan)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("error %v, want error: %v", err, tt.wantErr)
			}
			if res.RequeueAfter != tt.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tt.wantRequeue)
			}
			ready := conditions.Get(s.Obj, conditions.ReadyCondition)
			got := ""
			if ready != nil {
				got = string(ready.Status) + "/" + ready.Reason
			}
			if got != tt.wantReady {
				t.Errorf("Ready %q, want %q", got, tt.wantReady)
			}
			if stalled := conditions.IsTrue(s.Obj, conditions.StalledCondition); stalled != tt.wantStalled {
				t.Errorf("Stalled %v, want %v", stalled, tt.wantStalled)
			}
			if ready != nil && !strings.Contains(ready.Message, tt.wantMessage) {
				t.Errorf("message %q, want it to contain %q", ready.Message, tt.wantMessage)
			}
			if ready != nil && strings.Contains(ready.Message, "s3cr3t") {
				t.Errorf("message %q shows the secret", ready.Message)
			}
			if (tt.wantReady != "") != (len(failures) == 1) {
				t.Errorf("OnFailure told %v", failures)
			}
			// OnFailure knows the phase that failed: the last one run.
			if ran := s.State.ran; len(failedIn) == 1 && failedIn[0] != ran[len(ran)-1] {
				t.Errorf("OnFailure told the failure was in phase %q, want %q", failedIn[0], ran[len(ran)-1])
			}
		})
	}
}

// At --log-level=trace (logr's V(2)) each phase says what it took, the
// failed one too, so that where a reconcile's time goes can be read from
// the logs; below trace nothing is written.
func TestPhasesSayWhatTheyTookAtTrace(t *testing.T) {
	for _, verbosity := range []int{0, 2} {
		var lines []string
		log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: verbosity})
		k := &Kind[*imagev1.ImagePolicy, state]{
			Phases: []Phase[*imagev1.ImagePolicy, state]{phase("read", Continue, nil), phase("decide", Continue, conditions.Stallf(conditions.InvalidSpecReason, "bad spec"))},
			Retry:  func(*policyScope, *conditions.Failure) time.Duration { return time.Second },
		}
		_, _ = k.runPhases(ctrl.LoggerInto(context.Background(), log), &policyScope{Obj: &imagev1.ImagePolicy{}})
		if verbosity < 2 {
			if len(lines) != 0 {
				t.Errorf("below trace, logged %q", lines)
			}
			continue
		}
		if len(lines) != 2 || !strings.Contains(lines[0], `"phase"="read"`) || !strings.Contains(lines[0], `"failed"=false`) ||
			!strings.Contains(lines[1], `"phase"="decide"`) || !strings.Contains(lines[1], `"failed"=true`) || !strings.Contains(lines[1], `"took"=`) {
			t.Errorf("at trace, logged %q; want a line per phase with its time, the second failed", lines)
		}
	}
}
