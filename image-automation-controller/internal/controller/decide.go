package controller

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/schedule"
	"toolkit.dev/image-toolkit/pkg/selection"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// inputs is what the phases before the decision read for one run of an
// automation: everything decide needs, so that it asks nothing itself.
type inputs struct {
	// Namespace and Generation are the automation's.
	Namespace  string
	Generation int64
	// Requested is true when the run handles a reconcile request.
	Requested bool
	Window    windowState
	Source    gitsource.Source
	Selection *selection.Selection
	// InFlight is the automation's job that has not finished, if any.
	InFlight *updatev1.UpdateJob
	// Last is its newest finished job; Recorded is true when this run
	// recorded it in the status.
	Last     *updatev1.UpdateJob
	Recorded bool
	// Head is the checkout branch's head, when the checkout is a branch.
	Head string
}

// action is what a decision asks of the phases after it.
type action int

const (
	// wait: nothing to do now but what the decision says; look again
	// after its requeue.
	wait action = iota
	// adoptJob: the job in flight is the run; wait for it to end.
	adoptJob
	// skipRun: nothing changed since the last run, so it makes no job and
	// counts as skipped.
	skipRun
	// makeJob: make the run's UpdateJob.
	makeJob
)

// mark is a condition a decision sets that is not a failure: Ready=True,
// or Reconciling while work is under way. Failures go through the
// skeleton's one failure path instead.
type mark struct {
	progress        bool
	reason, message string
}

func (m *mark) apply(obj *imagev1.ImageUpdateAutomation) {
	switch {
	case m == nil:
	case m.progress:
		conditions.MarkReconciling(obj, m.reason, "%s", m.message)
	default:
		conditions.MarkReady(obj, m.reason, "%s", m.message)
	}
}

func markProgress(format string, args ...any) *mark {
	return &mark{progress: true, reason: conditions.ProgressingReason, message: fmt.Sprintf(format, args...)}
}

func markReady(reason, format string, args ...any) *mark {
	return &mark{reason: reason, message: fmt.Sprintf(format, args...)}
}

// decision is what one run of an automation decided.
type decision struct {
	act action
	// requeue is when to look again; zero: when something changes.
	requeue time.Duration
	// mark is the condition to set; fail, a failure to record instead,
	// retried after requeue.
	mark *mark
	fail *conditions.Failure
	// outcome is what to count in runs_total once the status is written.
	outcome string
	// job and hash are the UpdateJob to make and the hash of its inputs.
	job  updatev1.UpdateJobSpec
	hash string
}

// decide says what one run of an automation does, given its spec and
// status (with the last finished job recorded) and what the phases before
// it read. It is the automation's whole decision table, and pure: no
// client, no clock but now, no I/O.
func decide(spec *imagev1.ImageUpdateAutomationSpec, status *imagev1.ImageUpdateAutomationStatus, in inputs, now time.Time) decision {
	interval := spec.Interval.Duration
	if in.InFlight != nil {
		return decision{act: adoptJob, mark: markProgress("waiting for UpdateJob %s to finish", in.InFlight.Name)}
	}
	sel := in.Selection
	if len(sel.Setters) == 0 && spec.Discover == nil {
		return decision{requeue: interval, fail: failure(conditions.DependencyNotReadyReason,
			"no ImagePolicy in namespace %s matches spec.policySelector and has a latest image yet", in.Namespace)}
	}
	job := jobSpec(in.Namespace, spec, in.Source, sel.Setters, holdSpec(status))
	if c := unappliedChart(job.Update); c != nil {
		return decision{requeue: interval, fail: failure(conditions.DependencyNotReadyReason,
			"spec.update.charts: Application %s follows policy %s, which is not among this automation's policies with a latest image (spec.policySelector)",
			c.Application, c.Policy)}
	}
	if f := unappliedFile(job.Update); f != nil {
		return decision{requeue: interval, fail: failure(conditions.DependencyNotReadyReason,
			"spec.update.files: %s %s follows policy %s, which is not among this automation's policies with a latest image (spec.policySelector)",
			f.Path, f.Pointer, f.Policy)}
	}
	hash := inputsHash(job, in.Head, in.Generation)
	next, due := dueIn(status, interval, in.Requested, now)
	// The last run had these very inputs (it failed, or pushed somewhere
	// the head does not show): run again only when an interval has passed
	// or a reconcile is requested.
	if in.Last != nil && in.Last.Annotations[InputsAnnotation] == hash && !due {
		return decision{requeue: next}
	}
	if canShortCircuit(in.Source.Ref, spec.GitSpec.Push) && status.ObservedGeneration == in.Generation &&
		in.Head == status.ObservedSourceRevision && maps.Equal(sel.Observed, status.ObservedPolicies) && sameOverrides(in.Last, job) && !releasing(status) {
		if in.Recorded {
			// The run that just ended is the last one; its outcome
			// stays the message.
			return decision{requeue: interval}
		}
		return decision{act: skipRun, requeue: interval, outcome: OutcomeSkipped, mark: markReady(conditions.SucceededReason,
			"nothing changed since the last run: %s and %d policies as they were", in.Head, len(sel.Setters))}
	}
	if !in.Window.open {
		// No job outside the windows, whatever asked for the run (the
		// interval, a reconcile request, a git push, a policy): the
		// status says what waits and for when, and the window's edge
		// brings the run back when it opens.
		d := outsideWindow(status, in.Window, pendingChanges(status, in.Generation, sel.Observed, in.Head))
		d.requeue = interval
		return d
	}
	return decision{act: makeJob, requeue: interval, job: job, hash: hash}
}

// unappliedChart is the first chart whose policy the job has no image
// for: the job could not write it, so the run says so instead of making
// a job that fails.
func unappliedChart(u updatev1.UpdateSpec) *updatev1.ChartUpdate {
	for i, c := range u.Charts {
		if !applies(u, c.Policy) {
			return &u.Charts[i]
		}
	}
	return nil
}

// unappliedFile is the first of update.files whose policy (a marker's
// value, its field left out) the job has no image for.
func unappliedFile(u updatev1.UpdateSpec) *meta.FileUpdate {
	for i, f := range u.Files {
		if m, ok := setters.ParseMarkerValue(f.Policy); !ok || !applies(u, m.Policy) {
			return &u.Files[i]
		}
	}
	return nil
}

// applies reports whether the job has an image for the policy key.
func applies(u updatev1.UpdateSpec, key string) bool {
	return slices.ContainsFunc(u.Setters, func(s updatev1.PolicySetter) bool { return s.Policy == key })
}

// dueIn says whether a run is due now (requested, the first, or an
// interval after the last), and else how long until it is.
func dueIn(status *imagev1.ImageUpdateAutomationStatus, interval time.Duration, requested bool, now time.Time) (time.Duration, bool) {
	if requested || status.LastAutomationRunTime == nil {
		return interval, true
	}
	next := status.LastAutomationRunTime.Add(interval).Sub(now)
	return next, next <= 0
}

// failure is a failure worth retrying with exactly this reason.
func failure(reason, format string, args ...any) *conditions.Failure {
	return &conditions.Failure{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// windowState is where the automation stands in its update windows.
type windowState struct {
	sched *schedule.Schedule
	span  schedule.Span
	// open is true without a schedule.
	open bool
	// wake is how long until the window opens or closes; 0 without a
	// schedule.
	wake time.Duration
}

// nextWindow is status.nextWindow: the window open now, or the next.
func (w windowState) nextWindow() *imagev1.UpdateWindowStatus {
	if w.sched == nil {
		return nil
	}
	return &imagev1.UpdateWindowStatus{Start: metav1.NewTime(w.span.Start), End: metav1.NewTime(w.span.End)}
}

// windowAt reads spec.schedule at now. A schedule that does not parse, or
// never opens, is Stalled: waiting cannot fix it.
func windowAt(spec *imagev1.UpdateSchedule, now time.Time) (windowState, error) {
	sched, err := schedule.OfAutomation(spec)
	if err != nil {
		return windowState{}, conditions.Stallf(imagev1.InvalidScheduleReason, "spec.schedule: %s", err)
	}
	if sched == nil {
		return windowState{open: true}, nil
	}
	span, open, ok := sched.At(now)
	if !ok {
		return windowState{}, conditions.Stallf(imagev1.InvalidScheduleReason,
			"spec.schedule: no window opens within five years (%s)", sched.Describe())
	}
	edge := span.Start
	if open {
		edge = span.End
	}
	// Never zero: a zero RequeueAfter would mean no requeue at all.
	return windowState{sched: sched, span: span, open: open, wake: max(edge.Sub(now), time.Millisecond)}, nil
}

// waitSuffix ends a failed job's message while the retry waits for a
// window, so that it is replaced rather than repeated on every run.
const waitSuffix = "; the next UpdateJob waits for the update window opening at "

// outsideWindow says that a run found changes but no window is open. A
// failed last job stays Ready=False with its reason (a failure must not
// look healthy while the fix waits for a window); otherwise Ready=True,
// since waiting is what the automation was told to do.
func outsideWindow(status *imagev1.ImageUpdateAutomationStatus, win windowState, pending string) decision {
	opens := win.span.Start.UTC().Format(time.RFC3339)
	c := apimeta.FindStatusCondition(status.Conditions, conditions.ReadyCondition)
	if c != nil && c.Status == metav1.ConditionFalse && status.LastJob != nil && status.LastJob.Phase == updatev1.UpdateJobFailed {
		base, _, _ := strings.Cut(c.Message, waitSuffix)
		return decision{fail: &conditions.Failure{Reason: c.Reason, Err: errors.New(base + waitSuffix + opens)}}
	}
	return decision{mark: markReady(imagev1.OutsideUpdateWindowReason,
		"%s; no UpdateJob outside the update windows: the next opens at %s until %s (%s)",
		pending, opens, win.span.End.UTC().Format(time.RFC3339), win.sched.Describe())}
}

// pendingChanges says what a run outside the windows found changed since
// the last recorded run.
func pendingChanges(status *imagev1.ImageUpdateAutomationStatus, generation int64, observed imagev1.ObservedPolicies, head string) string {
	var changed []string
	for name, ref := range observed {
		if prev, ok := status.ObservedPolicies[name]; !ok || prev != ref {
			changed = append(changed, name+" ("+orDigest(ref)+")")
		}
	}
	slices.Sort(changed)
	const maxListed = 5
	if n := len(changed); n > maxListed {
		changed = append(changed[:maxListed], fmt.Sprintf("%d more", n-maxListed))
	}
	if len(status.ObservedPolicies) == 0 && status.ObservedSourceRevision == "" {
		return "no run has applied ImagePolicies " + strings.Join(changed, ", ") + " yet"
	}
	var parts []string
	if len(changed) > 0 {
		parts = append(parts, "ImagePolicies "+strings.Join(changed, ", "))
	}
	if head != "" && status.ObservedSourceRevision != "" && head != status.ObservedSourceRevision {
		parts = append(parts, "the branch head ("+head+")")
	}
	if g := status.ObservedGeneration; g != 0 && g != generation {
		parts = append(parts, "the spec")
	}
	if len(parts) == 0 {
		// Another push branch or a refspec: drift there is invisible,
		// so a run is made every interval.
		return "a run is due"
	}
	return strings.Join(parts, " and ") + " changed since the last run"
}

func orDigest(ref meta.ImageRef) string {
	if ref.Tag != "" {
		return ref.Tag
	}
	return ref.Digest
}

// sameOverrides reports whether the last job wrote the override files
// this run would: the Applications an automation writes (which ones are
// selected, the images they run) change without the head or a policy
// changing.
func sameOverrides(last *updatev1.UpdateJob, job updatev1.UpdateJobSpec) bool {
	if len(job.Update.ArgoCD) == 0 {
		return last == nil || len(last.Spec.Update.ArgoCD) == 0
	}
	return last != nil && equality.Semantic.DeepEqual(last.Spec.Update.ArgoCD, job.Update.ArgoCD)
}
