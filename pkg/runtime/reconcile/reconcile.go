// Package reconcile is the one shape of every reconciler in image-toolkit.
// A kind declares what is particular to it — how to make an empty object,
// whether it is suspended, its finalizer, and its work as a list of named
// phases — and Kind[T, S] does the rest the same way for all of them:
//
//  1. get the object (gone: forget its metrics);
//  2. on deletion, run the kind's Finalize and remove the finalizer (see
//     Kind.AddFinalizer);
//  3. record suspend, and stop while suspended;
//  4. take a new reconcile request (meta.ReconcileRequestStatus);
//  5. run the phases in order until one stops or fails;
//  6. write the status once, through patch.Helper, whatever happened (a
//     phase may write earlier with Scope.Patch, or hand over what its own
//     guarded writes stored with Scope.Stored), unless a phase waits on
//     another object's first result (Wait);
//  7. only after the write, run the kind's AfterPatch (work that must not
//     happen twice when the write conflicts and the reconcile runs again).
//
// It follows source-controller's list of sub-reconcilers and cluster-api's
// phases: a phase is a short function with a name, reading and writing the
// object and a per-reconcile state S the kind defines, so each decision can
// be read (and tested) on its own.
//
// Every failure takes one path to the conditions: a phase returns an error;
// the skeleton records it with conditions.Record (Stalled for a failure
// retrying cannot fix, else Ready=False with the failure's reason), redacts
// the secrets the failure names, tells the kind's OnFailure (events,
// metrics) and computes when to look again. No phase marks a failure
// itself. An error that is not a *conditions.Failure (an API server error,
// say) is recorded with reason Failed and also returned to
// controller-runtime, whose rate limiter backs off. A phase that runs
// parts of the object on their own (an automation's targets) runs each
// with RunPart, on the same path, and returns their sum (PartsFailed).
package reconcile

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
)

// Object is what the skeleton reconciles: an API object with status
// conditions.
type Object interface {
	client.Object
	conditions.Setter
}

// Scope is one reconcile of one object: what every phase reads and writes.
type Scope[T Object, S any] struct {
	Obj T
	// Requested is true when this reconcile handles a reconcile request
	// (the reconcile.toolkit.dev/requestedAt annotation) not handled
	// before.
	Requested bool
	// Start is when the reconcile began.
	Start time.Time
	// State is the kind's own, shared by its phases.
	State S
	// Phase is the name of the phase running, or of the one that failed
	// when OnFailure is told: a failure's bookkeeping can depend on the
	// step it hit (a failed scan is counted, a refused credential is not).
	Phase string

	patcher *patch.Helper
	client  client.Client
	lock    bool
	// refused is the error of a mid-reconcile write the server refused
	// under the optimistic lock: the reconcile ends with nothing more
	// written.
	refused error
	// waiting: a phase returned Wait, and nothing is written.
	waiting bool
}

// Patch writes the object's changes so far, e.g. a claim that must be on
// the server before slow work starts, and takes a new snapshot: the final
// write then sends only what changed after it.
//
// With the kind's OptimisticLock, a write that fails ends the reconcile
// as a conflicting final write does: the object in hand holds changes the
// server did not take (a claim it may give to another replica), and
// writing them later, with a failure beside them, could record a step
// that never ran. A conflict runs the reconcile again at once; any other
// error goes to controller-runtime's backoff. Nothing is recorded.
func (s *Scope[T, S]) Patch(ctx context.Context) error {
	if s.patcher == nil {
		return errors.New("a part's phases do not write the object: the reconcile writes it once")
	}
	if err := s.patcher.Patch(ctx, s.Obj, s.options()...); err != nil {
		if s.lock {
			s.refused = err
		}
		return err
	}
	s.patcher = patch.NewHelper(s.Obj, s.client)
	return nil
}

// Stored hands the scope obj as the server now holds it, written by the
// kind's own guarded writes (an UpdateJob's claim, renewed and recorded
// while its attempt runs): obj becomes the scope's object, and the final
// write sends only what changes after this.
func (s *Scope[T, S]) Stored(obj T) {
	s.Obj = obj
	s.patcher = patch.NewHelper(obj, s.client)
}

func (s *Scope[T, S]) options() []patch.Option {
	if s.lock {
		return []patch.Option{patch.WithOptimisticLock()}
	}
	return nil
}

// Result is what a phase asks of the rest of the reconcile.
type Result struct {
	// RequeueAfter asks to look again within this long; the shortest
	// asked for by any phase wins. Zero asks nothing.
	RequeueAfter time.Duration
	// Stop ends the list: the phases after this one have nothing to do.
	Stop bool
	// wait: see Wait.
	wait bool
}

// Continue lets the next phase run.
var Continue = Result{}

// Stop ends the phase list without asking to look again.
var Stop = Result{Stop: true}

// StopAfter ends the phase list and asks to look again after d.
func StopAfter(d time.Duration) Result { return Result{Stop: true, RequeueAfter: d} }

// Wait ends the phase list and writes nothing this reconcile changed: the
// object waits on another that its controller has not reconciled yet,
// whose first result wakes it through a watch, and a status saying
// "waiting" would be written only to be replaced at once. On a cold start
// of 10,000 ImagePolicies that was 10,000 writes of DependencyNotReady.
// It asks to look again after d all the same, in case no watch event
// comes. Whatever the preamble changed (a finalizer, a reconcile request
// taken) is left for the next reconcile too.
func Wait(d time.Duration) Result { return Result{Stop: true, RequeueAfter: d, wait: true} }

// Phase is one named step of a kind's reconcile.
type Phase[T Object, S any] struct {
	Name string
	Run  func(ctx context.Context, s *Scope[T, S]) (Result, error)
}

// Kind is a reconciler of one API kind built from phases.
type Kind[T Object, S any] struct {
	// Name is the kind's name, as in metrics.
	Name    string
	Client  client.Client
	Metrics *metrics.Recorder
	// New returns an empty object of the kind.
	New func() T
	// Suspended reports spec.suspend; nil: the kind cannot be suspended.
	Suspended func(T) bool
	// Request is the object's reconcile request status; nil: the kind
	// takes no reconcile requests.
	Request func(T) *meta.ReconcileRequestStatus
	// RequestHandled, when set, is told of each new reconcile request
	// taken (webhook receivers measure their latency so).
	RequestHandled func(namespace, name, value string)
	// Finalizer, when set, is removed from an object being deleted once
	// Finalize ran. With AddFinalizer it is added to every object (a
	// metadata write of its own on each object's first reconcile);
	// without, the kind only releases the objects an earlier version of it
	// finalized, and cleans up after deleted objects in Forget.
	Finalizer    string
	AddFinalizer bool
	Finalize     func(ctx context.Context, obj T) error
	// Forget is told of an object that is gone, besides its metrics.
	Forget func(key client.ObjectKey)
	// Phases are the kind's work, in order.
	Phases []Phase[T, S]
	// OptimisticLock makes the status write fail on a conflict, and the
	// reconcile then runs again from fresh state (for kinds whose
	// outcomes must not be recorded twice).
	OptimisticLock bool
	// Retry is when to look again after a failure worth retrying that
	// names no time itself; nil or zero leaves it to the rate limiter's
	// next attempt only for errors that are not Failures.
	Retry func(s *Scope[T, S], f *conditions.Failure) time.Duration
	// OnFailure is told of each failure recorded, e.g. to emit a Warning
	// event or count it.
	OnFailure func(ctx context.Context, s *Scope[T, S], f *conditions.Failure, msg string)
	// AfterPatch runs once the status is written, with the phases'
	// outcome: counting and clean-up that must not run twice.
	AfterPatch func(ctx context.Context, s *Scope[T, S]) error
}

// Reconcile implements reconcile.Reconciler.
func (k *Kind[T, S]) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	start := time.Now()
	obj := k.New()
	if err := k.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			k.Metrics.Forget(k.Name, req.Namespace, req.Name)
			if k.Forget != nil {
				k.Forget(req.NamespacedName)
			}
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer k.Metrics.RecordDuration(k.Name, start)
	s := &Scope[T, S]{Obj: obj, Start: start, client: k.Client, lock: k.OptimisticLock}
	s.patcher = patch.NewHelper(obj, k.Client)

	defer func() {
		if s.refused != nil || s.waiting {
			return
		}
		obj := s.Obj // Stored may have replaced it
		began := time.Now()
		err := s.patcher.Patch(ctx, obj, s.options()...)
		if trace := ctrl.LoggerFrom(ctx).V(2); trace.Enabled() {
			trace.Info("status written", "took", time.Since(began).String(), "reconcile", time.Since(start).String())
		}
		if err != nil {
			if k.OptimisticLock && apierrors.IsConflict(err) {
				// Run again from fresh state; nothing was recorded.
				result, retErr = ctrl.Result{RequeueAfter: ConflictRetry}, nil
				return
			}
			retErr = errors.Join(retErr, err)
			return
		}
		k.Metrics.RecordReady(k.Name, obj)
		if k.AfterPatch != nil {
			retErr = errors.Join(retErr, k.AfterPatch(ctx, s))
		}
	}()

	if !obj.GetDeletionTimestamp().IsZero() {
		if k.Finalizer == "" || !controllerutil.ContainsFinalizer(obj, k.Finalizer) {
			return ctrl.Result{}, nil
		}
		if k.Finalize != nil {
			if err := k.Finalize(ctx, obj); err != nil {
				return ctrl.Result{}, err
			}
		}
		controllerutil.RemoveFinalizer(obj, k.Finalizer)
		return ctrl.Result{}, nil
	}
	if k.Finalizer != "" && k.AddFinalizer {
		controllerutil.AddFinalizer(obj, k.Finalizer)
	}
	if k.Suspended != nil {
		suspended := k.Suspended(obj)
		k.Metrics.RecordSuspend(k.Name, obj, suspended)
		if suspended {
			return ctrl.Result{}, nil
		}
	}
	k.takeRequest(s)
	return k.runPhases(ctx, s)
}

func (k *Kind[T, S]) takeRequest(s *Scope[T, S]) {
	if k.Request == nil {
		return
	}
	st := k.Request(s.Obj)
	v, ok := meta.ReconcileAnnotationValue(s.Obj.GetAnnotations())
	if !ok || v == st.LastHandledReconcileAt {
		return
	}
	st.SetLastHandledReconcileRequest(v)
	s.Requested = true
	if k.RequestHandled != nil {
		k.RequestHandled(s.Obj.GetNamespace(), s.Obj.GetName(), v)
	}
}

// runPhases runs the phases in order; the first error goes to the one
// failure path and ends the list.
func (k *Kind[T, S]) runPhases(ctx context.Context, s *Scope[T, S]) (ctrl.Result, error) {
	var requeue time.Duration
	// --log-level=trace says what each phase took: where a reconcile's
	// time goes, without a profiler.
	trace := ctrl.LoggerFrom(ctx).V(2)
	for _, p := range k.Phases {
		s.Phase = p.Name
		began := time.Now()
		res, err := p.Run(ctx, s)
		if trace.Enabled() {
			trace.Info("phase done", "phase", p.Name, "took", time.Since(began).String(), "failed", err != nil)
		}
		requeue = Shortest(requeue, res.RequeueAfter)
		if s.refused != nil {
			return refusedWrite(s.refused)
		}
		if err != nil {
			return k.fail(ctx, s, err, requeue)
		}
		if res.Stop {
			s.waiting = res.wait
			break
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// ConflictRetry is how soon a reconcile whose write conflicted runs
// again: its cache was behind a write of another process (or of its own
// group), which the cache has within milliseconds. It is a plain delay,
// not the workqueue's rate limiter, whose 10 retries a second for all
// objects together held up a thousand jobs claimed by one group (1,008
// conflicts in BenchmarkMonorepoAutomations/1000), and whose backoff
// treats a conflict as a failure.
const ConflictRetry = 100 * time.Millisecond

// refusedWrite ends a reconcile whose mid-reconcile write the server
// refused under the optimistic lock (Scope.Patch).
func refusedWrite(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: ConflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// fail is the one way from an error to the conditions: it records the
// failure (redacted), tells OnFailure, and returns when to look again.
func (k *Kind[T, S]) fail(ctx context.Context, s *Scope[T, S], err error, requeue time.Duration) (ctrl.Result, error) {
	f, _, after := k.record(ctx, s, err)
	if !classified(err) {
		// Not classified: an API server or programming error. The
		// condition says it, and controller-runtime backs off.
		return ctrl.Result{}, err
	}
	if f.Stalled {
		return ctrl.Result{RequeueAfter: after}, nil
	}
	return ctrl.Result{RequeueAfter: Shortest(after, requeue)}, nil
}

// record marks err's failure on s.Obj, redacted, and tells OnFailure
// (unless the error only sums up failures of parts already told); it
// returns the failure, its message and when to look again.
func (k *Kind[T, S]) record(ctx context.Context, s *Scope[T, S], err error) (*conditions.Failure, string, time.Duration) {
	f := conditions.AsFailure(err)
	msg := events.Redact(err.Error(), f.Secrets...)
	after := conditions.Record(s.Obj, f, msg)
	if after == 0 && !f.Stalled && k.Retry != nil {
		after = k.Retry(s, f)
	}
	var sum *partsFailed
	if k.OnFailure != nil && !errors.As(err, &sum) {
		k.OnFailure(ctx, s, f, msg)
	}
	return f, msg, after
}

// classified reports whether err is classified (conditions.Classify): a sum of
// parts' failures is one unless a part's was not.
func classified(err error) bool {
	var sum *partsFailed
	if errors.As(err, &sum) {
		return sum.plain == nil
	}
	_, ok := conditions.Classify(err)
	return ok
}

// A Part is a part of the object that runs phases of its own, such as
// one target of an automation written on several repositories: its Obj
// is a view of the object whose status is the part's, its State the
// part's. A part's failure takes the kind's one failure path (recorded on
// the view, redacted, told to OnFailure with the part's scope) without
// ending the reconcile: the phase that runs the parts copies what each
// changed into the object, which the reconcile writes once, and sums up
// the failures with PartsFailed. A part's phases do not write
// (Scope.Patch fails).
func (s *Scope[T, S]) Part(view T, state S) *Scope[T, S] {
	return &Scope[T, S]{Obj: view, Requested: s.Requested, Start: s.Start, State: state}
}

// PartResult is how a part's phases ended.
type PartResult struct {
	// RequeueAfter is the shortest any of them asked for, or the
	// failure's retry.
	RequeueAfter time.Duration
	// Failure is the part's failure, recorded on the part's view; nil
	// when its phases ran.
	Failure *conditions.Failure
	// Message is the failure's message, redacted.
	Message string
	// Err is the failure's error when it was not classified (an API
	// server error): the reconcile returns it, so controller-runtime
	// backs off.
	Err error
}

// RunPart runs phases over part, in order, as the kind runs its own: the
// first error is recorded through the one failure path and ends the
// part's list, not the reconcile.
func (k *Kind[T, S]) RunPart(ctx context.Context, part *Scope[T, S], phases []Phase[T, S]) PartResult {
	var requeue time.Duration
	for _, p := range phases {
		part.Phase = p.Name
		res, err := p.Run(ctx, part)
		requeue = Shortest(requeue, res.RequeueAfter)
		if err != nil {
			f, msg, after := k.record(ctx, part, err)
			out := PartResult{RequeueAfter: after, Failure: f, Message: msg}
			if !classified(err) {
				out.Err = err
			} else if !f.Stalled {
				out.RequeueAfter = Shortest(after, requeue)
			}
			return out
		}
		if res.Stop {
			break
		}
	}
	return PartResult{RequeueAfter: requeue}
}

// PartsFailed is the failure of a reconcile whose parts failed, for the
// phase that ran them to return: reason is the first failure's, the
// message sums up all, and it is Stalled only when every failed part is
// (retrying helps none of them), looking again after requeue all the
// same for the parts that ran. A part's unclassified error makes the sum
// unclassified too, so controller-runtime backs off. OnFailure, told of
// each part's failure, is not told of the sum.
func PartsFailed(failed []PartResult, summary string, requeue time.Duration) error {
	sum := &partsFailed{Failure: &conditions.Failure{Reason: failed[0].Failure.Reason, Stalled: true,
		RetryAfter: requeue, Err: errors.New(summary)}}
	for _, p := range failed {
		sum.Stalled = sum.Stalled && p.Failure.Stalled
		if sum.plain == nil {
			sum.plain = p.Err
		}
	}
	return sum
}

// partsFailed marks a sum of parts' failures, already told to OnFailure;
// plain is the first part's unclassified error.
type partsFailed struct {
	*conditions.Failure
	plain error
}

func (p *partsFailed) Unwrap() error { return p.Failure }

// Shortest is the earlier of two requeue times, zero meaning none.
func Shortest(a, b time.Duration) time.Duration {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}
