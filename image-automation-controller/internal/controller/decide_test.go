package controller

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/selection"
)

// The automation's decision table, without an API server: each case is
// one situation a run can find itself in, and what the run must do.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	const interval = 10 * time.Minute
	head := "main@sha1:aaa"
	app1 := meta.ImageRef{Name: "ghcr.io/org/app", Tag: "1"}
	app2 := meta.ImageRef{Name: "ghcr.io/org/app", Tag: "2"}
	src := gitsource.Source{Repository: updatev1.GitRepositorySpec{URL: "https://git.example.com/fleet.git"}, Ref: updatev1.GitRepositoryRef{Branch: "main"}}
	sel := func(refs ...meta.ImageRef) *selection.Selection {
		s := &selection.Selection{Setters: []updatev1.PolicySetter{}, Observed: imagev1.ObservedPolicies{}}
		for _, r := range refs {
			s.Setters = append(s.Setters, updatev1.PolicySetter{Policy: "ns:app", ImageRef: meta.ImageRef{Name: r.Name, Tag: r.Tag}})
			s.Observed["app"] = r
		}
		return s
	}
	closed, err := windowAt(&imagev1.UpdateSchedule{Windows: []imagev1.UpdateWindow{{Cron: "0 2 * * *", Duration: metav1.Duration{Duration: time.Hour}}}}, now)
	if err != nil || closed.open {
		t.Fatalf("window %+v, %v", closed, err)
	}
	// applied is the status of a run that applied app at tag 1 on head, a
	// minute ago.
	applied := func() imagev1.ImageUpdateAutomationStatus {
		return imagev1.ImageUpdateAutomationStatus{
			ObservedGeneration: 1, ObservedSourceRevision: head, ObservedPolicies: imagev1.ObservedPolicies{"app": app1},
			LastAutomationRunTime: &metav1.Time{Time: now.Add(-time.Minute)},
		}
	}
	base := func() inputs {
		return inputs{Namespace: "ns", Generation: 1, Window: windowState{open: true}, Source: src, Selection: sel(app2), Head: head}
	}
	// lastJob is a finished job made from the inputs in.
	lastJob := func(spec *imagev1.ImageUpdateAutomationSpec, in inputs, phase updatev1.UpdateJobPhase) *updatev1.UpdateJob {
		j := &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: "fleet-1", Annotations: map[string]string{
			InputsAnnotation: inputsHash(jobSpec(in.Namespace, spec, in.Source, in.Selection.Setters, &updatev1.HoldSpec{}), in.Head, in.Generation)}}}
		j.Status.Phase = phase
		return j
	}
	tests := []struct {
		name   string
		spec   func(*imagev1.ImageUpdateAutomationSpec)
		status func(*imagev1.ImageUpdateAutomationStatus)
		in     func(*imagev1.ImageUpdateAutomationSpec, *inputs)
		// want is the action, the requeue, and the condition set or
		// failure recorded as STATUS/REASON: message, or "" for none.
		act     action
		requeue time.Duration
		cond    string
		outcome string
	}{
		{
			name: "a job in flight is the run: it is adopted and waited for",
			in: func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) {
				in.InFlight = &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: "fleet-9"}}
			},
			act:     adoptJob,
			cond:    "Unknown/Progressing: waiting for UpdateJob fleet-9 to finish",
			requeue: 0,
		},
		{
			name:    "no policy to apply and no discovery fails as DependencyNotReady and looks again after the interval",
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Selection = sel() },
			act:     wait,
			requeue: interval,
			cond:    "False/DependencyNotReady: no ImagePolicy in namespace ns matches spec.policySelector and has a latest image yet",
		},
		{
			name: "a chart following a policy the automation does not apply fails as DependencyNotReady, naming both",
			spec: func(s *imagev1.ImageUpdateAutomationSpec) {
				s.Update = &imagev1.UpdateStrategy{Charts: []imagev1.ChartUpdate{{ArgoCDChart: meta.ArgoCDChart{Application: "guestbook"}, Policy: "chart"}}}
			},
			act:     wait,
			requeue: interval,
			cond:    "False/DependencyNotReady: spec.update.charts: Application guestbook follows policy ns:chart, which is not among this automation's policies with a latest image (spec.policySelector)",
		},
		{
			name: "a file value following a policy the automation does not apply fails as DependencyNotReady, naming both",
			spec: func(s *imagev1.ImageUpdateAutomationSpec) {
				s.Update = &imagev1.UpdateStrategy{Files: []meta.FileUpdate{{Path: "task.json", Pointer: "/image", Policy: "ns:chart:tag"}}}
			},
			act:     wait,
			requeue: interval,
			cond:    "False/DependencyNotReady: spec.update.files: task.json /image follows policy ns:chart:tag, which is not among this automation's policies with a latest image (spec.policySelector)",
		},
		{
			name: "a file value following an applied policy makes the job",
			spec: func(s *imagev1.ImageUpdateAutomationSpec) {
				s.Update = &imagev1.UpdateStrategy{Files: []meta.FileUpdate{{Path: "task.json", Pointer: "/image", Policy: "ns:app:tag"}}}
			},
			act:     makeJob,
			requeue: interval,
		},
		{
			name: "a chart following an applied policy makes the job",
			spec: func(s *imagev1.ImageUpdateAutomationSpec) {
				s.Update = &imagev1.UpdateStrategy{Charts: []imagev1.ChartUpdate{{ArgoCDChart: meta.ArgoCDChart{Application: "guestbook"}, Policy: "app"}}}
			},
			act:     makeJob,
			requeue: interval,
		},
		{
			name:    "with discovery, no policy yet still makes a job: it is the job that discovers",
			spec:    func(s *imagev1.ImageUpdateAutomationSpec) { s.Discover = &imagev1.DiscoverSpec{} },
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Selection = sel() },
			act:     makeJob,
			requeue: interval,
		},
		{
			name: "the same inputs as a failed last job wait for the interval",
			in: func(spec *imagev1.ImageUpdateAutomationSpec, in *inputs) {
				in.Last = lastJob(spec, *in, updatev1.UpdateJobFailed)
			},
			act:     wait,
			requeue: interval - time.Minute,
		},
		{
			name:   "the same inputs run again once an interval has passed",
			status: func(s *imagev1.ImageUpdateAutomationStatus) { s.LastAutomationRunTime.Time = now.Add(-interval) },
			in: func(spec *imagev1.ImageUpdateAutomationSpec, in *inputs) {
				in.Last = lastJob(spec, *in, updatev1.UpdateJobFailed)
			},
			act:     makeJob,
			requeue: interval,
		},
		{
			name: "the same inputs run again on a reconcile request",
			in: func(spec *imagev1.ImageUpdateAutomationSpec, in *inputs) {
				in.Last, in.Requested = lastJob(spec, *in, updatev1.UpdateJobFailed), true
			},
			act:     makeJob,
			requeue: interval,
		},
		{
			name:    "nothing changed short-circuits: no job, Ready says so, and the run counts as skipped",
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Selection = sel(app1) },
			act:     skipRun,
			requeue: interval,
			cond:    "True/Succeeded: nothing changed since the last run: main@sha1:aaa and 1 policies as they were",
			outcome: OutcomeSkipped,
		},
		{
			name: "nothing changed but a hold that ended makes a job, which overrides the held value",
			status: func(s *imagev1.ImageUpdateAutomationStatus) {
				s.Holds = []imagev1.AutomationHold{{Hold: updatev1.Hold{HoldKey: updatev1.HoldKey{Path: "a.yaml", Setter: "ns:app", Commit: "c1"}}, Reason: imagev1.HoldReleasedReason}}
			},
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Selection = sel(app1) },
			act:     makeJob,
			requeue: interval,
		},
		{
			name: "nothing changed and a hold that lasts: the short-circuit holds",
			status: func(s *imagev1.ImageUpdateAutomationStatus) {
				s.Holds = []imagev1.AutomationHold{{Hold: updatev1.Hold{HoldKey: updatev1.HoldKey{Path: "a.yaml", Setter: "ns:app", Commit: "c1"}}, Reason: imagev1.HeldByPersonReason}}
			},
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Selection = sel(app1) },
			act:     skipRun,
			requeue: interval,
			cond:    "True/Succeeded: nothing changed",
			outcome: OutcomeSkipped,
		},
		{
			name: "nothing changed after the job just recorded keeps that job's outcome as the message",
			in: func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) {
				in.Selection, in.Recorded = sel(app1), true
			},
			act:     wait,
			requeue: interval,
		},
		{
			name: "a moved branch head is a change",
			in: func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) {
				in.Selection, in.Head = sel(app1), "main@sha1:bbb"
			},
			act:     makeJob,
			requeue: interval,
		},
		{
			name:    "a changed spec is a change",
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Selection, in.Generation = sel(app1), 2 },
			act:     makeJob,
			requeue: interval,
		},
		{
			name:    "a push to another branch never short-circuits: drift there is invisible",
			spec:    func(s *imagev1.ImageUpdateAutomationSpec) { s.GitSpec.Push = &updatev1.PushSpec{Branch: "auto"} },
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Selection = sel(app1) },
			act:     makeJob,
			requeue: interval,
		},
		{
			name:    "a change outside the window waits and says what waits",
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Window = closed },
			act:     wait,
			requeue: interval,
			cond: "True/OutsideUpdateWindow: ImagePolicies app (2) changed since the last run; no UpdateJob outside the update windows: " +
				"the next opens at 2026-11-24T02:00:00Z until 2026-11-24T03:00:00Z (\"0 2 * * *\" for 1h in UTC)",
		},
		{
			name:    "a first run outside the window says nothing was applied yet",
			status:  func(s *imagev1.ImageUpdateAutomationStatus) { *s = imagev1.ImageUpdateAutomationStatus{} },
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Window = closed },
			act:     wait,
			requeue: interval,
			cond:    "True/OutsideUpdateWindow: no run has applied ImagePolicies app (2) yet; no UpdateJob outside the update windows",
		},
		{
			name: "outside the window a failed last job stays failed, and says when its retry may run",
			status: func(s *imagev1.ImageUpdateAutomationStatus) {
				s.LastJob = &imagev1.UpdateJobReference{Name: "fleet-1", Phase: updatev1.UpdateJobFailed}
				s.Conditions = []metav1.Condition{{Type: conditions.ReadyCondition, Status: metav1.ConditionFalse,
					Reason: conditions.AuthenticationFailedReason, Message: "UpdateJob fleet-1 failed: refused"}}
			},
			in:      func(_ *imagev1.ImageUpdateAutomationSpec, in *inputs) { in.Window = closed },
			act:     wait,
			requeue: interval,
			cond:    "False/AuthenticationFailed: UpdateJob fleet-1 failed: refused" + waitSuffix + "2026-11-24T02:00:00Z",
		},
		{
			name:    "a change inside the window makes a job",
			act:     makeJob,
			requeue: interval,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &imagev1.ImageUpdateAutomationSpec{Interval: metav1.Duration{Duration: interval}}
			if tt.spec != nil {
				tt.spec(spec)
			}
			status := applied()
			if tt.status != nil {
				tt.status(&status)
			}
			in := base()
			if tt.in != nil {
				tt.in(spec, &in)
			}
			d := decide(spec, &status, in, now)
			if d.act != tt.act || d.requeue != tt.requeue || d.outcome != tt.outcome {
				t.Errorf("action %d after %s counting %q, want %d after %s counting %q", d.act, d.requeue, d.outcome, tt.act, tt.requeue, tt.outcome)
			}
			if got := condOf(d); !strings.HasPrefix(got, tt.cond) || (tt.cond == "") != (got == "") {
				t.Errorf("condition %q, want %q", got, tt.cond)
			}
			if d.act == makeJob {
				want := jobSpec(in.Namespace, spec, in.Source, in.Selection.Setters, holdSpec(&status))
				if d.hash != inputsHash(want, in.Head, in.Generation) || len(d.job.Update.Setters) != len(in.Selection.Setters) {
					t.Errorf("job %+v with hash %s, not the one of its inputs", d.job, d.hash)
				}
				if h := d.job.Update.Holds; h == nil || len(h.Released) != len(holdSpec(&status).Released) {
					t.Errorf("job holds %+v, want those the status released", h)
				}
			}
		})
	}
}

// condOf is the condition a decision sets or the failure it records.
func condOf(d decision) string {
	switch {
	case d.fail != nil && d.mark != nil:
		return "both a condition and a failure"
	case d.fail != nil:
		return "False/" + d.fail.Reason + ": " + d.fail.Error()
	case d.mark != nil && d.mark.progress:
		return "Unknown/" + d.mark.reason + ": " + d.mark.message
	case d.mark != nil:
		return "True/" + d.mark.reason + ": " + d.mark.message
	}
	return ""
}

// Whether a run may make its job, from the namespace's jobs: the turn
// taking that keeps overlapping automations from setting a file back and
// forth (tests/faults TestOverlapNoFlipFlop), and the adoption that keeps
// a job from being made twice (TestKillAutomationController).
func TestTakeTurn(t *testing.T) {
	const me, other = types.UID("me"), types.UID("other")
	// spec sets each policy to tag 1, or to the tag after its name
	// (app@2).
	spec := func(branch string, policies ...string) updatev1.UpdateJobSpec {
		s := updatev1.UpdateJobSpec{Repository: updatev1.GitRepositorySpec{URL: "https://git.example.com/fleet.git"},
			Checkout: updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: branch}}}
		for _, p := range policies {
			p, tag, ok := strings.Cut(p, "@")
			if !ok {
				tag = "1"
			}
			s.Update.Setters = append(s.Update.Setters, updatev1.PolicySetter{Policy: "ns:" + p, ImageRef: meta.ImageRef{Name: "img", Tag: tag}})
		}
		return s
	}
	job := func(name string, owner types.UID, phase updatev1.UpdateJobPhase, run int, s updatev1.UpdateJobSpec) updatev1.UpdateJob {
		ctl := true
		j := updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{RunAnnotation: strconv.Itoa(run)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: imagev1.GroupVersion.String(), Kind: imagev1.ImageUpdateAutomationKind,
				Name: string(owner) + "-auto", UID: owner, Controller: &ctl}}}, Spec: s}
		j.Status.Phase = phase
		return j
	}
	mine := spec("main", "app")
	tests := []struct {
		name string
		jobs []updatev1.UpdateJob
		// want is own:NAME, busy:JOB, or run:N (the next job's number).
		want string
	}{
		{"with no job the run makes the first", nil, "run:1"},
		{"its own job in flight is the run, made before a restart or a lost write",
			[]updatev1.UpdateJob{job("a-1", me, updatev1.UpdateJobRunning, 1, mine)}, "own:a-1"},
		{"the run number follows its own finished jobs",
			[]updatev1.UpdateJob{job("a-1", me, updatev1.UpdateJobFailed, 1, mine), job("a-3", me, updatev1.UpdateJobSucceeded, 3, mine)}, "run:4"},
		{"another automation's job in flight setting the same policy to another value on the same branch makes the run wait",
			[]updatev1.UpdateJob{job("b-1", other, updatev1.UpdateJobRunning, 1, spec("main", "app@0"))}, "busy:b-1"},
		{"the same, the other job not claimed yet",
			[]updatev1.UpdateJob{job("b-1", other, "", 1, spec("main", "web", "app@0"))}, "busy:b-1"},
		{"another automation's job in flight setting the same policy to the same value runs at once: the two share a commit",
			[]updatev1.UpdateJob{job("b-1", other, updatev1.UpdateJobRunning, 1, spec("main", "app"))}, "run:1"},
		{"another automation's job in flight on another branch runs at once",
			[]updatev1.UpdateJob{job("b-1", other, updatev1.UpdateJobRunning, 1, spec("prod", "app"))}, "run:1"},
		{"another automation's job in flight setting other policies runs at once",
			[]updatev1.UpdateJob{job("b-1", other, updatev1.UpdateJobPending, 1, spec("main", "web"))}, "run:1"},
		{"another automation's finished job is no turn to wait for",
			[]updatev1.UpdateJob{job("b-1", other, updatev1.UpdateJobSucceeded, 1, spec("main", "app"))}, "run:1"},
		{"its own job in flight wins over a busy policy",
			[]updatev1.UpdateJob{job("b-1", other, updatev1.UpdateJobRunning, 1, spec("main", "app@0")), job("a-2", me, updatev1.UpdateJobPending, 2, mine)}, "own:a-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := weighTurn(me, &mine, tt.jobs)
			got := "run:" + strconv.Itoa(turn.run+1)
			switch {
			case turn.own != nil:
				got = "own:" + turn.own.Name
			case turn.busy != nil:
				got = "busy:" + turn.busy.job
			}
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			for _, j := range tt.jobs {
				if !turn.taken[j.Name] {
					t.Errorf("name %s not taken", j.Name)
				}
			}
		})
	}
}

// A run that read a policy before another automation's newer job for it
// ran and ended makes no job for the older value: it reads again.
func TestMovedPolicyRunsAgain(t *testing.T) {
	pol := imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}}
	pol.Status.LatestRef = &meta.ImageRef{Name: "img", Tag: "2"}
	var busy *policyBusyError
	if err := moved([]updatev1.PolicySetter{{Policy: "ns:app", ImageRef: meta.ImageRef{Name: "img", Tag: "1"}}}, []imagev1.ImagePolicy{pol}); !errors.As(err, &busy) || !busy.moved {
		t.Errorf("a policy that moved: %v", err)
	}
	if err := moved([]updatev1.PolicySetter{{Policy: "ns:gone", ImageRef: meta.ImageRef{Name: "img", Tag: "1"}}}, []imagev1.ImagePolicy{pol}); err == nil {
		t.Error("a policy that is gone was taken as unchanged")
	}
	if err := moved([]updatev1.PolicySetter{{Policy: "ns:app", ImageRef: meta.ImageRef{Name: "img", Tag: "2"}}}, []imagev1.ImagePolicy{pol}); err != nil {
		t.Errorf("an unchanged policy: %v", err)
	}
}
