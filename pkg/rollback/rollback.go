// Package rollback decides whether an automation's own commit broke what
// deploys it (spec.rollback): health that goes bad at the commit's
// revision, within a window after the commit first reached the object.
//
// "Reached" is read as promotion reads it (pkg/promotion): the object
// reports health at exactly the commit's revision, not at a descendant,
// whose files a person may have changed again. The window counts from
// the first time that was seen; a failure after it is not blamed on the
// commit.
//
// Health that was bad already is not blamed either. An object seen at an
// earlier revision before the commit reached it is remembered with its
// state (status.rollback.before): if it was failing there, it failing at
// the commit says nothing about the commit. When the commit reached the
// object before any earlier state was seen (a fast GitOps controller),
// the failure's own time decides: a Ready condition that turned false
// before the commit was pushed and stays false was not turned by it.
package rollback

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/health"
)

// Input is what a decision reads.
type Input struct {
	// Commit is the automation's commit being judged, label@sha1:hash.
	Commit   string
	PushedAt time.Time
	Window   time.Duration
	Objects  []health.Object
	// Prior is the last status.rollback; one for another commit is not
	// carried over.
	Prior *imagev1.RollbackStatus
	Now   time.Time
}

// Decision is the new status.rollback, and whether to revert the commit.
type Decision struct {
	Status imagev1.RollbackStatus
	Revert bool
	// Requeue is when the window ends, while it runs; zero otherwise.
	Requeue time.Duration
}

// final reasons end the judgement of a commit.
var final = []string{imagev1.RolledBackReason, imagev1.RollbackPassedReason}

// Decide judges the commit.
func Decide(in Input) Decision {
	_, commit, _ := git.ParseRevision(in.Commit)
	st := imagev1.RollbackStatus{Commit: in.Commit, PushedAt: &metav1.Time{Time: in.PushedAt}}
	if p := in.Prior; p != nil && p.Commit == in.Commit {
		st.ReachedAt, st.Before = p.ReachedAt, p.Before
		if slices.Contains(final, p.Reason) {
			st.Reason, st.Message = p.Reason, p.Message
			st.Health = health.Statuses(in.Objects)
			return Decision{Status: st}
		}
	}
	st.Health = health.Statuses(in.Objects)
	var failed, badBefore []string
	reached := false
	for _, o := range in.Objects {
		at := o.Found && commit != "" && o.Health.Commit() == commit
		if !at {
			if o.Found && o.Health.Revision != "" && st.ReachedAt == nil {
				st.Before = remember(st.Before, o)
			}
			continue
		}
		reached = true
		if o.Health.State != health.Degraded {
			continue
		}
		if failingBefore(st.Before, o, in.PushedAt) {
			badBefore = append(badBefore, o.Name)
		} else {
			failed = append(failed, fmt.Sprintf("%s (%s: %s)", o.Name, o.Health.Reason, o.Health.Message))
		}
	}
	if reached && st.ReachedAt == nil {
		st.ReachedAt = &metav1.Time{Time: in.Now}
	}
	short := git.ShortRevision(in.Commit)
	var d Decision
	switch {
	case st.ReachedAt == nil:
		st.Reason, st.Message = imagev1.RollbackWatchingReason, fmt.Sprintf("%s has not reached a healthOf object yet", short)
	case len(failed) > 0 && in.Now.Before(st.ReachedAt.Add(in.Window)):
		d.Revert = true
		st.Reason, st.Message = imagev1.RolledBackReason, fmt.Sprintf("%s failed within %s of reaching %s: reverted", short, in.Window, strings.Join(failed, ", "))
	case !in.Now.Before(st.ReachedAt.Add(in.Window)):
		st.Reason, st.Message = imagev1.RollbackPassedReason, fmt.Sprintf("%s passed the %s window", short, in.Window)
	case len(badBefore) > 0:
		st.Reason, st.Message = imagev1.UnhealthyBeforeReason, fmt.Sprintf("%s is failing at %s, as it was before the commit reached it: not blamed on it", strings.Join(badBefore, ", "), short)
		d.Requeue = st.ReachedAt.Add(in.Window).Sub(in.Now)
	default:
		st.Reason = imagev1.RollbackWatchingReason
		st.Message = fmt.Sprintf("%s reached at %s; watching until %s", short, st.ReachedAt.UTC().Format(time.RFC3339), st.ReachedAt.Add(in.Window).UTC().Format(time.RFC3339))
		d.Requeue = st.ReachedAt.Add(in.Window).Sub(in.Now)
	}
	d.Status = st
	return d
}

// remember records an object's state at an earlier revision.
func remember(before []imagev1.HealthStatus, o health.Object) []imagev1.HealthStatus {
	s := health.Statuses([]health.Object{o})[0]
	for i := range before {
		if before[i].Object == o.Name {
			before[i] = s
			return before
		}
	}
	return append(before, s)
}

// failingBefore says whether the object's failure predates the commit.
func failingBefore(before []imagev1.HealthStatus, o health.Object, pushed time.Time) bool {
	for _, b := range before {
		if b.Object == o.Name {
			return b.State == string(health.Degraded)
		}
	}
	return !o.Health.Since.IsZero() && o.Health.Since.Before(pushed)
}
