package controller

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/hold"
	"toolkit.dev/image-toolkit/pkg/hold/ending"
	"toolkit.dev/image-toolkit/pkg/policy"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/selection"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// recordHolds takes the holds a finished job reported as status.holds: the
// job's checkout is the latest word on which values a person set. A hold
// released before stays released (until the job overrides it, it is
// reported again); one the job no longer reports is gone (its value was
// overridden, or set back by hand). A job that did not get to the setters
// says nothing of holds.
func recordHolds(ctx context.Context, ev *events.Recorder, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob, t *tally) {
	if job.Spec.Update.Holds == nil || job.Status.Result == nil {
		return
	}
	prev := map[updatev1.HoldKey]imagev1.AutomationHold{}
	for _, h := range obj.Status.Holds {
		prev[h.HoldKey] = h
	}
	var out []imagev1.AutomationHold
	for _, h := range obj.Status.Holds {
		if h.Path == "" {
			// A rollback's hold is the automation's own: no job reports it.
			out = append(out, h)
		}
	}
	for _, h := range job.Status.Result.Holds {
		if h.HeldWith != "" {
			// Derived from its member's hold, which ends it: no ending,
			// event or count of its own.
			out = append(out, imagev1.AutomationHold{Hold: h, Policy: policyName(h.Setter), Reason: imagev1.HeldWithGroupReason,
				Message: fmt.Sprintf("left with %s, held in the same promotion group: what ran together upstream moves together", h.HeldWith)})
			continue
		}
		ah := imagev1.AutomationHold{Hold: h, Policy: policyName(h.Setter), Reason: imagev1.HeldByPersonReason}
		if p, ok := prev[h.HoldKey]; ok {
			ah.Reason, ah.Message, ah.Ends = p.Reason, p.Message, p.Ends
		} else {
			t.hold(imagev1.HeldByPersonReason)
			ev.Normal(ctx, obj, imagev1.HeldByPersonReason, "Hold", fmt.Sprintf("%s in %s line %d is held at %s, set by %s in %s over %s; %s is not applied there",
				h.Setter, h.Path, h.Line, h.Value, h.Author, short(h.Commit), h.From, h.Want))
		}
		out = append(out, ah)
	}
	obj.Status.Holds = out
}

// reviewHolds decides, for each hold, whether it still lasts (pkg/hold/ending):
// a release (the annotation, once per token), holdFor, or a newer image
// than the one rolled back from ends it, and the next job overrides the
// value. It wakes the automation when holdFor ends the next hold. While a
// rollback's hold lasts, its policy's setter is the held image: the job
// writes it (the revert), and no run writes the policy's choice.
func (r *ImageUpdateAutomationReconciler) reviewHolds(ctx context.Context, s *scope) (reconcile.Result, error) {
	obj, st := s.Obj, &s.State
	token, sel := ending.ParseRelease(obj.Annotations[imagev1.ReleaseHoldsAnnotation])
	release := token != "" && token != obj.Status.LastHandledRelease
	if release {
		obj.Status.LastHandledRelease = token
	}
	var holdFor time.Duration
	if obj.Spec.HoldFor != nil {
		holdFor = obj.Spec.HoldFor.Duration
	}
	var wake time.Duration
	kept := obj.Status.Holds[:0]
	for i := range obj.Status.Holds {
		h := &obj.Status.Holds[i]
		if h.Reason == imagev1.HeldWithGroupReason {
			kept = append(kept, *h)
			continue
		}
		in := ending.Input{Hold: h.Hold, HoldFor: holdFor, Now: st.now,
			Released: h.Reason == imagev1.HoldReleasedReason || release && ending.Matches(h.Hold, sel)}
		key := hold.Policy(h.Setter)
		for _, set := range st.selection.Setters {
			if set.Policy == key {
				in.Choice = &set.ImageRef
			}
		}
		if ns, name, _ := strings.Cut(key, ":"); ns == obj.Namespace {
			in.Rank = rankOf(st.policies, name)
		}
		d := ending.Decide(in)
		was := h.Reason
		lasting := imagev1.HeldByPersonReason
		if h.Path == "" {
			lasting = imagev1.RolledBackReason
		}
		h.Reason, h.Message, h.Ends = cmp.Or(d.Ended, lasting), d.Message, nil
		if d.Ends != nil {
			h.Ends = &metav1.Time{Time: *d.Ends}
		}
		if d.Ended == "" && d.Ends != nil {
			if left := d.Ends.Sub(st.now); wake == 0 || left < wake {
				wake = max(left, time.Millisecond)
			}
		}
		if d.Ended != "" && was != d.Ended {
			st.tally.hold(d.Ended)
			r.Events.Normal(ctx, obj, d.Ended, "Hold", fmt.Sprintf("hold of %s in %s ended: %s", h.Setter, orText(h.Path, "every file"), d.Message))
		}
		switch {
		case h.Path != "":
			kept = append(kept, *h)
		case d.Ended == "":
			kept = append(kept, *h)
			holdSetter(st.selection, *h)
		}
		// An ended rollback hold is gone: the policy's setter is its
		// own again.
	}
	obj.Status.Holds = kept
	revertOnly(st.selection, kept, obj.Status.ObservedPolicies)
	return reconcile.Result{RequeueAfter: wake}, nil
}

// revertOnly keeps a revert to the values the rolled-back commit changed:
// while a rollback hold's image is not yet what the automation applied
// (the revert has not landed), every other setter stays at the image the
// automation applied last, and a policy it has not applied yet waits. The
// policies that moved meanwhile follow in the next commit, judged on
// their own.
func revertOnly(sel *selection.Selection, holds []imagev1.AutomationHold, applied imagev1.ObservedPolicies) {
	pending := map[string]bool{}
	for _, h := range holds {
		if h.Path != "" || h.Reason != imagev1.RolledBackReason {
			continue
		}
		if ref, err := setters.ParseImage(h.Value); err == nil && !setters.SameImage(applied[h.Policy], ref) {
			pending[h.Setter] = true
		}
	}
	if len(pending) == 0 {
		return
	}
	out := sel.Setters[:0]
	for _, s := range sel.Setters {
		if pending[s.Policy] {
			out = append(out, s)
			continue
		}
		name := policyName(s.Policy)
		ref, ok := applied[name]
		if !ok {
			delete(sel.Observed, name)
			continue
		}
		// What the files hold already: nothing to verify again.
		s.ImageRef, s.Verified = ref, nil
		if sel.Observed != nil {
			sel.Observed[name] = ref
		}
		out = append(out, s)
	}
	sel.Setters = out
}

// holdSetter makes a rollback hold's image its policy's setter and
// observed image for this run.
func holdSetter(sel *selection.Selection, h imagev1.AutomationHold) {
	ref, err := setters.ParseImage(h.Value)
	if err != nil {
		return
	}
	for i := range sel.Setters {
		if sel.Setters[i].Policy == h.Setter {
			sel.Setters[i].ImageRef = ref
			if sel.Observed != nil {
				sel.Observed[h.Policy] = ref
			}
		}
	}
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// rankOf orders the tags of the namespace's policy name; nil when there
// is no such policy or it has no order (a promotion).
func rankOf(policies []imagev1.ImagePolicy, name string) ending.Rank {
	for i := range policies {
		if policies[i].Name != name {
			continue
		}
		p, err := policy.New(policies[i].Spec.Policy, policies[i].Spec.FilterTags)
		if err != nil {
			return nil
		}
		return p.Prefers
	}
	return nil
}

// holdSpec is what a job is told of holds: look for them, and override
// those that ended.
func holdSpec(status *imagev1.ImageUpdateAutomationStatus) *updatev1.HoldSpec {
	spec := &updatev1.HoldSpec{}
	for _, h := range status.Holds {
		if h.Path != "" && !lasting(h.Reason) && len(spec.Released) < updatev1.MaxHolds {
			spec.Released = append(spec.Released, h.HoldKey)
		}
	}
	return spec
}

// releasing reports whether a hold ended that the next job overrides.
func releasing(status *imagev1.ImageUpdateAutomationStatus) bool {
	for _, h := range status.Holds {
		if h.Path != "" && !lasting(h.Reason) {
			return true
		}
	}
	return false
}

// lasting reports whether a hold of a file's value still lasts: a
// person's, or one with its promotion group's (which its member's hold
// ends).
func lasting(reason string) bool {
	return reason == imagev1.HeldByPersonReason || reason == imagev1.HeldWithGroupReason
}

// policyName is the name of the policy a setter (NAMESPACE:NAME[:FIELD])
// names.
func policyName(setter string) string {
	_, name, _ := strings.Cut(hold.Policy(setter), ":")
	return name
}

// unheld are the setters but those a rollback hold sets: their image is
// the held one, not the policy's, on purpose.
func unheld(in []updatev1.PolicySetter, holds []imagev1.AutomationHold) []updatev1.PolicySetter {
	out := make([]updatev1.PolicySetter, 0, len(in))
	for _, s := range in {
		held := false
		for _, h := range holds {
			held = held || h.Path == "" && h.Reason == imagev1.RolledBackReason && h.Setter == s.Policy
		}
		if !held {
			out = append(out, s)
		}
	}
	return out
}
