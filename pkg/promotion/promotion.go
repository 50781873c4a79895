// Package promotion decides what a promotion policy (spec.policy.promotion)
// chooses: the image an upstream environment's automation applied, once
// the objects that run that environment have run it healthy for the soak.
//
// The evidence is deliberately narrow. The image is the upstream's own
// value, tag and digest as its automation wrote them, never looked up in
// a registry again: what ran healthy is what moves, not whatever a tag
// points to now. And "health at a revision that contains the upstream
// commit" is read as health at a revision whose files the upstream
// automation itself found holding the image (its status.appliedRevision:
// the commit it pushed, or a later head its job found up to date). Git
// ancestry alone would not do: a descendant of the upstream commit may
// have changed the value again (a hand rollback), and the controllers
// that read health have no repository to walk. The upstream automation
// runs a job on every new head, so a later commit that keeps the image
// becomes its applied revision within a run, and the promotion follows.
//
// The soak counts from the moment every healthOf object was first seen
// healthy at such a revision (status.pendingRef.healthSeen), and starts
// again from zero when any of them is seen otherwise: the policy watches
// the objects, so every change of their status is seen. An object whose
// status names no revision (a plain kstatus object) can only be a gate
// that must be healthy: at least one object must name the revision it
// runs, or nothing is promoted.
package promotion

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// NotFound is the state of a healthOf object that does not exist.
const NotFound = health.NotFound

// Upstream is what the upstream automation says of the followed policy.
type Upstream struct {
	// Name says which automation and policy, for messages.
	Name string
	// Image is the image it applied for the policy; nil when none.
	Image *meta.ImageRef
	// Revision is the commit whose files hold Image (the automation's
	// status.appliedRevision, label@sha1:hash); "" while no commit on its
	// branch holds it.
	Revision string
}

// Object is one healthOf object as read.
type Object = health.Object

// Input is everything a decision needs.
type Input struct {
	Upstream Upstream
	Objects  []Object
	Soak     time.Duration
	// Latest is the policy's current choice; Pending the previous
	// reconcile's status.pendingRef.
	Latest  *meta.ImageRef
	Pending *imagev1.PendingRef
	Now     time.Time
}

// Decision is what the policy records.
type Decision struct {
	// Promote is set when Upstream.Image becomes (or already is) the
	// policy's choice.
	Promote *meta.ImageRef
	// HealthSeen is when the soak of a promotion decided now began.
	HealthSeen *metav1.Time
	// Pending is the upstream image waiting, nil when none waits.
	Pending *imagev1.PendingRef
	// Health is each object's health as read, for status.promotion.
	Health []imagev1.HealthStatus
	// Reason and Message say why Pending waits (UpstreamNotHealthy,
	// SoakNotElapsed, DependencyNotReady), or Succeeded.
	Reason, Message string
	// Requeue is when to decide again without a change: the end of the
	// soak; 0 when only a watched change can change the answer.
	Requeue time.Duration
}

// Decide decides. It is pure: the same input gives the same decision.
func Decide(in Input) Decision {
	d := Decision{Health: health.Statuses(in.Objects)}
	up := in.Upstream
	switch {
	case up.Image == nil:
		d.Reason = conditions.DependencyNotReadyReason
		d.Message = up.Name + " has applied no image yet"
		return d
	case in.Latest != nil && *in.Latest == *up.Image:
		d.Promote, d.Reason = up.Image, conditions.SucceededReason
		d.Message = fmt.Sprintf("%s is promoted from %s", up.Image, up.Name)
		return d
	}
	pending := &imagev1.PendingRef{Tag: up.Image.Tag, Image: up.Image, UpstreamRevision: up.Revision}
	d.Pending = pending
	if why := notHealthy(up, in.Objects); why != "" {
		d.Reason = imagev1.UpstreamNotHealthyReason
		d.Message = fmt.Sprintf("%s waits: %s", up.Image, why)
		return d
	}
	now := in.Now.UTC().Truncate(time.Second)
	seen := metav1.NewTime(now)
	if p := in.Pending; p != nil && p.Image != nil && *p.Image == *up.Image && p.HealthSeen != nil && !p.HealthSeen.After(now) {
		seen = *p.HealthSeen
	}
	pending.HealthSeen = &seen
	end := seen.Add(in.Soak)
	if !now.Before(end) {
		d.Pending, d.Promote, d.HealthSeen = nil, up.Image, &seen
		d.Reason = conditions.SucceededReason
		d.Message = fmt.Sprintf("%s is promoted from %s: healthy at %s since %s", up.Image, up.Name,
			git.ShortRevision(up.Revision), seen.UTC().Format(time.RFC3339))
		return d
	}
	eligible := metav1.NewTime(end)
	left := end.Sub(now)
	pending.EligibleAt, pending.SoakLeft = &eligible, &metav1.Duration{Duration: left}
	d.Reason = imagev1.SoakNotElapsedReason
	d.Message = fmt.Sprintf("%s waits: healthy at %s since %s, soak ends at %s (%s left)", up.Image,
		git.ShortRevision(up.Revision), seen.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), left)
	// Stored times have whole seconds: a second more is sure to find the
	// soak over.
	d.Requeue = left + time.Second
	return d
}

// notHealthy says why the objects are not evidence that the upstream ran
// its image healthy; "" when they are.
func notHealthy(up Upstream, objects []Object) string {
	if up.Revision == "" {
		return up.Name + " has only proposed it (no commit on its branch holds it yet)"
	}
	want := commitOf(up.Revision)
	named := false
	for _, o := range objects {
		h := o.Health
		switch {
		case !o.Found:
			return o.Name + " not found"
		case h.State != health.Healthy:
			return fmt.Sprintf("%s is %s%s", o.Name, h.State, because(h))
		case h.Revision == "":
			continue
		case h.Commit() != want:
			return fmt.Sprintf("%s runs %s, not %s, the upstream commit holding it", o.Name, git.ShortRevision(h.Revision), git.ShortRevision(up.Revision))
		}
		named = true
	}
	if !named {
		return "no healthOf object names the revision it runs"
	}
	return ""
}

func because(h health.Health) string {
	switch {
	case h.Reason != "" && h.Message != "":
		return " (" + h.Reason + ": " + h.Message + ")"
	case h.Reason != "":
		return " (" + h.Reason + ")"
	}
	return ""
}

// commitOf is the hash of a label@sha1:hash revision, or the revision
// itself when it is a bare hash.
func commitOf(rev string) string {
	if _, hash, ok := git.ParseRevision(rev); ok {
		return hash
	}
	return rev
}

// Cycle follows a promotion upstream from start: next gives the policy a
// promotion policy follows (false when the policy is no promotion, or its
// upstream is not known). It returns the chain, start first and last,
// when it comes back to start; nil when it ends. A chain through a cycle
// that does not include start is left to that cycle's own policies.
func Cycle(start string, next func(string) (string, bool)) []string {
	chain := []string{start}
	seen := map[string]bool{start: true}
	for cur := start; ; {
		up, ok := next(cur)
		if !ok {
			return nil
		}
		chain = append(chain, up)
		if up == start {
			return chain
		}
		if seen[up] {
			return nil
		}
		seen[up] = true
		cur = up
	}
}
