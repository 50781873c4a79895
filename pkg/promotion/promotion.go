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
	"encoding/json"
	"fmt"
	"strings"
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
	// RequireApproval is approval Required; Approval the approval the
	// policy's annotations hold (Approved), nil when none. Policy names
	// the policy (namespace/name) in the message that says how to approve.
	RequireApproval bool
	Approval        *meta.Approval
	Policy          string
}

// Decision is what the policy records.
type Decision struct {
	// Promote is set when Upstream.Image becomes (or already is) the
	// policy's choice.
	Promote *meta.ImageRef
	// HealthSeen is when the soak of a promotion decided now began.
	HealthSeen *metav1.Time
	// Approval is the approval a promotion decided now was made with,
	// under approval Required.
	Approval *imagev1.PromotionApproval
	// Group is the promotion's group as Group found it.
	Group []imagev1.PromotionGroupMember
	// Pending is the upstream image waiting, nil when none waits.
	Pending *imagev1.PendingRef
	// Health is each object's health as read, for status.promotion.
	Health []imagev1.HealthStatus
	// Reason and Message say why Pending waits (UpstreamNotHealthy,
	// SoakNotElapsed, AwaitingApproval, DependencyNotReady), or
	// Succeeded.
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
	now := in.Now.UTC().Truncate(time.Second)
	approval, other := approvalOf(in, *up.Image, now)
	pending.Approval = approval
	if why := notHealthy(up, in.Objects); why != "" {
		d.Reason = imagev1.UpstreamNotHealthyReason
		d.Message = fmt.Sprintf("%s waits: %s", up.Image, why)
		return d
	}
	seen := metav1.NewTime(now)
	if p := in.Pending; p != nil && p.Image != nil && *p.Image == *up.Image && p.HealthSeen != nil && !p.HealthSeen.After(now) {
		seen = *p.HealthSeen
	}
	pending.HealthSeen = &seen
	end := seen.Add(in.Soak)
	healthy := fmt.Sprintf("healthy at %s since %s", git.ShortRevision(up.Revision), seen.UTC().Format(time.RFC3339))
	if !now.Before(end) {
		if in.RequireApproval {
			if approval == nil {
				d.Reason = imagev1.AwaitingApprovalReason
				d.Message = fmt.Sprintf("%s waits for approval: %s, soak over; approve %s with: tk-image approve policy %s%s",
					up.Image, healthy, up.Image.ApprovalKey(), policyArgs(in.Policy), stale(other))
				return d
			}
			d.Approval = approval
			healthy += ", approved by " + approval.By
		}
		d.Pending, d.Promote, d.HealthSeen = nil, up.Image, &seen
		d.Reason = conditions.SucceededReason
		d.Message = fmt.Sprintf("%s is promoted from %s: %s", up.Image, up.Name, healthy)
		return d
	}
	eligible := metav1.NewTime(end)
	left := end.Sub(now)
	pending.EligibleAt, pending.SoakLeft = &eligible, &metav1.Duration{Duration: left}
	d.Reason = imagev1.SoakNotElapsedReason
	d.Message = fmt.Sprintf("%s waits: %s, soak ends at %s (%s left)", up.Image, healthy, end.UTC().Format(time.RFC3339), left)
	if in.RequireApproval {
		if approval != nil {
			d.Message += "; approved by " + approval.By
		} else {
			d.Message += "; it needs an approval too" + stale(other)
		}
	}
	// Stored times have whole seconds: a second more is sure to find the
	// soak over.
	d.Requeue = left + time.Second
	return d
}

// Member is another promotion policy of a promotion's group, as decided
// now: its upstream, its latest image and its own decision (no group), or
// the error deciding it.
type Member struct {
	Name     string
	Upstream Upstream
	Latest   *meta.ImageRef
	Decision Decision
	Err      error
}

// Group holds d, a new promotion of up's image, back while a member of its
// group cannot move: a member whose upstream image differs from its latest
// at the same upstream commit. What an upstream commit moved together ran
// together there; promoting one image ahead of the others would make a
// state that never ran anywhere. A member that cannot be decided (an
// error) holds the group too, since whether its image moves is not known;
// suspending it takes it out. The wait ends at the soonest member requeue
// or with a watched change.
func Group(d Decision, up Upstream, members []Member) Decision {
	var group, waiting []imagev1.PromotionGroupMember
	var requeue time.Duration
	for _, m := range members {
		gm := imagev1.PromotionGroupMember{Policy: m.Name}
		switch {
		case m.Err != nil:
			gm.Reason, gm.Message = conditions.AsFailure(m.Err).Reason, m.Err.Error()
		case m.Upstream.Image == nil || (m.Latest != nil && *m.Latest == *m.Upstream.Image) || m.Upstream.Revision != up.Revision:
			continue // nothing of it moves with this commit
		case m.Decision.Promote != nil:
			gm.Ready = true
		default:
			gm.Reason, gm.Message = m.Decision.Reason, m.Decision.Message
			if r := m.Decision.Requeue; r > 0 && (requeue == 0 || r < requeue) {
				requeue = r
			}
		}
		group = append(group, gm)
		if !gm.Ready {
			waiting = append(waiting, gm)
		}
	}
	d.Group = group
	if len(waiting) == 0 {
		return d
	}
	whys := make([]string, len(waiting))
	for i, w := range waiting {
		whys[i] = w.Policy + " (" + w.Reason + ": " + w.Message + ")"
	}
	pending := &imagev1.PendingRef{Tag: up.Image.Tag, Image: up.Image, UpstreamRevision: up.Revision, HealthSeen: d.HealthSeen}
	if d.Approval != nil {
		pending.Approval = d.Approval
	}
	return Decision{Pending: pending, Health: d.Health, Group: group, Requeue: requeue,
		Reason: imagev1.PromotionGroupWaitingReason,
		Message: fmt.Sprintf("%s can move, and waits for its promotion group (the images %s holds at %s): %s",
			up.Image, up.Name, git.ShortRevision(up.Revision), strings.Join(whys, "; "))}
}

// ReadApproval is the approval a promotion policy's annotations hold:
// ApproveAnnotation's value, by ApprovedByAnnotation, else by the field
// manager that last wrote ApproveAnnotation (managedFields); nil when
// there is none.
func ReadApproval(obj metav1.Object) *meta.Approval {
	key := oneLine(obj.GetAnnotations()[imagev1.ApproveAnnotation], 256)
	if key == "" {
		return nil
	}
	by := oneLine(obj.GetAnnotations()[imagev1.ApprovedByAnnotation], 512)
	if by == "" {
		by = "unknown"
		if m := managerOf(obj.GetManagedFields(), imagev1.ApproveAnnotation); m != "" {
			by = "field manager " + m
		}
	}
	return &meta.Approval{Digest: key, By: by}
}

// Waiting is the image p waits to have approved, which digest (when
// not empty) must name; else an error that says why there is none, or
// why it is not that one. tk-image approve and the dashboard ask it
// before they write an approval.
func Waiting(p *imagev1.ImagePolicy, digest string) (meta.ImageRef, error) {
	key := p.Namespace + "/" + p.Name
	pr := p.Spec.Policy.Promotion
	switch {
	case pr == nil:
		return meta.ImageRef{}, fmt.Errorf("ImagePolicy %s is not a promotion (spec.policy.promotion): there is nothing to approve", key)
	case pr.Approval != imagev1.ApprovalRequired:
		return meta.ImageRef{}, fmt.Errorf("ImagePolicy %s promotes without approvals: set spec.policy.promotion.approval: Required to make it wait for one", key)
	}
	pending := p.Status.PendingRef
	if pending == nil || pending.Image == nil {
		latest := "no image yet"
		if l := p.Status.LatestRef; l != nil {
			latest = l.String()
		}
		return meta.ImageRef{}, fmt.Errorf("no image waits for approval in ImagePolicy %s (status.pendingRef is empty; the latest image is %s): approve once its upstream applies a new one", key, latest)
	}
	img := *pending.Image
	if digest != "" && digest != img.ApprovalKey() {
		return meta.ImageRef{}, fmt.Errorf("--digest %s is not the image waiting for approval: ImagePolicy %s waits with %s; nothing was approved", digest, key, img)
	}
	return img, nil
}

// ApprovalPatch is the merge patch that approves img as user (no
// approved-by when empty: the field manager then says who), with a
// reconcile request of token.
func ApprovalPatch(img meta.ImageRef, user, token string) []byte {
	annotations := map[string]any{imagev1.ApproveAnnotation: img.ApprovalKey(), meta.ReconcileRequestAnnotation: token,
		imagev1.ApprovedByAnnotation: nil}
	if user != "" {
		annotations[imagev1.ApprovedByAnnotation] = user
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}}) // strings only: cannot fail
	return b
}

// oneLine is an annotation's words on one line, at most n bytes: what is
// recorded of it goes into a status field of that size and a commit
// trailer, which a line break would end.
func oneLine(v string, n int) string {
	v = strings.Join(strings.Fields(v), " ")
	if len(v) > n {
		v = strings.ToValidUTF8(v[:n], "")
	}
	return v
}

// managerOf is the manager of the newest managedFields entry that owns
// annotation key.
func managerOf(entries []metav1.ManagedFieldsEntry, key string) string {
	var best string
	var at time.Time
	for _, e := range entries {
		if e.FieldsV1 == nil {
			continue
		}
		var f struct {
			Metadata struct {
				Annotations map[string]json.RawMessage `json:"f:annotations"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(e.FieldsV1.Raw, &f) != nil {
			continue
		}
		if _, ok := f.Metadata.Annotations["f:"+key]; !ok {
			continue
		}
		if t := e.Time; best == "" || (t != nil && t.After(at)) {
			best = e.Manager
			if t != nil {
				at = t.Time
			}
		}
	}
	return best
}

// approvalOf is, under approval Required, the approval of img (seen
// first when the pending image's was, else now), or the approval on
// record that names another image.
func approvalOf(in Input, img meta.ImageRef, now time.Time) (ok *imagev1.PromotionApproval, other *meta.Approval) {
	a := in.Approval
	switch {
	case !in.RequireApproval || a == nil:
		return nil, nil
	case a.Digest != img.ApprovalKey():
		return nil, a
	}
	seen := metav1.NewTime(now)
	if p := in.Pending; p != nil && p.Approval != nil && p.Approval.Approval == *a && p.Approval.SeenAt != nil && !p.Approval.SeenAt.After(now) {
		seen = *p.Approval.SeenAt
	}
	return &imagev1.PromotionApproval{Approval: *a, SeenAt: &seen}, nil
}

// stale says why an approval on record does not approve the image that
// waits; "" when there is none.
func stale(a *meta.Approval) string {
	if a == nil {
		return ""
	}
	return fmt.Sprintf(" (the approval on record, of %s by %s, is for another image)", a.Digest, a.By)
}

// policyArgs is how tk-image names the policy namespace/name.
func policyArgs(key string) string {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return key
	}
	return name + " -n " + ns
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
