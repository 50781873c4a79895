// Package selection answers one question the same way wherever it is
// asked: which ImagePolicies does an ImageUpdateAutomation apply, with
// which values, and why not the others? The automation controller asks it
// to make an UpdateJob's setters, its ImagePolicy watch to know which
// automations a policy change concerns, and tk-image explain to say why an
// image is not updated. Each used to have a copy of its own, and the copies
// drifted (explain did not know about discovered images).
//
// An automation applies the policies of its own namespace that
// spec.policySelector matches (all of them without a selector) and the
// policies that follow the images spec.discover found (status.discovered
// names them), each once, and only those that have picked a latest image.
// Each discovered image is followed by exactly one policy: the namespace's
// own for that image when it has one (the first by name), else the one the
// automation's discovery makes (ForImages).
//
// The package is pure: it reads the objects it is given and asks nothing
// of the API server, so callers list the policies the way that suits them
// (a cache, a live read, a file).
package selection

import (
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/imagename"
)

// Selector is spec.policySelector as a label selector; without one it
// selects every policy of the namespace. An invalid selector is an error
// and a nil selector, with which the automation applies nothing (it is
// Stalled): Of and Concerns take nil so.
func Selector(a *imagev1.ImageUpdateAutomation) (labels.Selector, error) {
	if a.Spec.PolicySelector == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(a.Spec.PolicySelector)
	if err != nil {
		return nil, err
	}
	return sel, nil
}

// By is what selects a policy for an automation.
type By string

const (
	// BySelector: spec.policySelector matches the policy.
	BySelector By = "policySelector"
	// ByDiscovery: the policy follows an image spec.discover found.
	ByDiscovery By = "discovery"
)

// Policy is one ImagePolicy of the automation's namespace, and whether the
// automation applies it.
type Policy struct {
	Name string
	// Key is NAMESPACE:NAME, as markers and setters name the policy.
	Key string
	// By is what selects the policy; empty when nothing does.
	By     By
	Latest *meta.ImageRef
	// Group names the member of the policy's promotion group that has
	// not moved yet: until it has, the automation keeps the image it
	// applied before (none, when it applied none).
	Group string
}

// Applied reports whether the automation sets the policy's latest image.
func (p Policy) Applied() bool { return p.By != "" && p.Latest != nil && p.Group == "" }

// Why says why the automation does not apply the policy, as the end of a
// sentence about it; empty when it does.
func (p Policy) Why() string {
	switch {
	case p.By == "":
		return "is not selected by spec.policySelector"
	case p.Latest == nil:
		return "has no latest image yet"
	case p.Group != "":
		return "waits for " + p.Group + " of its promotion group, which its upstream commit also moved, before its new image is written"
	}
	return ""
}

// Selection is what an automation applies.
type Selection struct {
	// Setters are the applied policies' latest images, sorted by policy:
	// what an UpdateJob sets.
	Setters []updatev1.PolicySetter
	// Observed is the same by policy name, as status.observedPolicies
	// records what a run applied.
	Observed imagev1.ObservedPolicies
	// Times holds, by NAMESPACE:NAME, when each applied policy picked its
	// latest image (status.latestRefTime), where it says.
	Times map[string]time.Time
	// Policies are all the policies of the namespace, sorted by name, with
	// what selects each.
	Policies []Policy
}

// Of returns what a applies of policies, given its selector sel (from
// Selector; nil when invalid, and then nothing is applied). Policies of
// other namespaces are left out.
func Of(a *imagev1.ImageUpdateAutomation, sel labels.Selector, policies []imagev1.ImagePolicy) *Selection {
	s := &Selection{Setters: []updatev1.PolicySetter{}, Observed: imagev1.ObservedPolicies{}, Times: map[string]time.Time{}}
	followed := Followed(a)
	if sel == nil {
		sel, followed = labels.Nothing(), nil
	}
	for i := range policies {
		p := &policies[i]
		if p.Namespace != a.Namespace {
			continue
		}
		row := Policy{Name: p.Name, Key: updatev1.PolicyKey(p.Namespace, p.Name), Latest: p.Status.LatestRef}
		switch {
		case sel.Matches(labels.Set(p.Labels)):
			row.By = BySelector
		case followed[p.Name]:
			row.By = ByDiscovery
		}
		prev, applied := a.Status.ObservedPolicies[p.Name]
		if row.By != "" && row.Latest != nil && (!applied || prev != *row.Latest) {
			row.Group = groupWait(p, policies)
		}
		s.Policies = append(s.Policies, row)
		if row.Group != "" && applied {
			// Held for its group: the image applied before stays.
			s.Setters = append(s.Setters, updatev1.PolicySetter{Policy: row.Key, ImageRef: prev, Verified: verified(p, prev)})
			s.Observed[p.Name] = prev
			continue
		}
		if !row.Applied() {
			continue
		}
		ref := *p.Status.LatestRef
		setter := updatev1.PolicySetter{Policy: row.Key, ImageRef: ref}
		setter.Verified = verified(p, ref)
		setter.Source = source(p)
		setter.Approval = approval(p, ref)
		if st := p.Status.Promotion; p.Spec.Policy.Promotion != nil && st != nil && st.PromotedRevision != "" && st.Automation != "" {
			setter.Group = st.Automation + "@" + st.PromotedRevision
		}
		s.Setters = append(s.Setters, setter)
		s.Observed[p.Name] = ref
		if p.Status.LatestRefTime != nil {
			s.Times[row.Key] = p.Status.LatestRefTime.Time
		}
	}
	slices.SortFunc(s.Setters, func(x, y updatev1.PolicySetter) int { return strings.Compare(x.Policy, y.Policy) })
	slices.SortFunc(s.Policies, func(x, y Policy) int { return strings.Compare(x.Key, y.Key) })
	return s
}

// source is what p's latest image says of its source, with the image p
// chose before and its source; nil when the image says nothing. What was
// dropped stays in the policy's status: a job has no use for it.
func source(p *imagev1.ImagePolicy) *meta.ImageSourceChange {
	st := p.Status
	if st.LatestSource.IsZero() {
		return nil
	}
	out := &meta.ImageSourceChange{Source: *st.LatestSource}
	out.Source.Dropped = nil
	if st.ObservedPreviousRef != nil && !st.ObservedPreviousSource.IsZero() {
		prev, ps := *st.ObservedPreviousRef, *st.ObservedPreviousSource
		ps.Dropped = nil
		out.Previous, out.PreviousSource = &prev, &ps
	}
	return out
}

// groupWait names a member of p's promotion group that its upstream
// commit also moved and that has not moved yet; "" when none (or p is no
// promotion). The reflector promotes a group's members together, each
// when all can move, but in separate writes: an automation that ran
// between two would commit one image ahead of the others, so it waits
// for the last.
func groupWait(p *imagev1.ImagePolicy, policies []imagev1.ImagePolicy) string {
	st := p.Status.Promotion
	if p.Spec.Policy.Promotion == nil || st == nil || st.PromotedRevision == "" || st.Automation == "" {
		return ""
	}
	for i := range policies {
		q := &policies[i]
		qs := q.Status.Promotion
		if q.Namespace != p.Namespace || q.Name == p.Name || q.Spec.Policy.Promotion == nil || q.Spec.Suspend || qs == nil || qs.Automation != st.Automation {
			continue
		}
		if pr := q.Status.PendingRef; pr != nil && pr.Image != nil && pr.UpstreamRevision == st.PromotedRevision {
			return q.Name
		}
	}
	return ""
}

// approval is who approved ref, when p promoted it with an approval.
func approval(p *imagev1.ImagePolicy, ref meta.ImageRef) *meta.Approval {
	st := p.Status.Promotion
	if st == nil || st.Approval == nil || st.Approval.Digest != ref.ApprovalKey() {
		return nil
	}
	a := st.Approval.Approval
	return &a
}

// verified says how the job checks, right before its commit, that ref's
// tag still points to the digest p chose; nil when p chose no digest to
// hold the tag to. A verified digest is held (spec.verify), and so is a
// promoted one (policy.promotion): what ran healthy upstream is what
// reaches the next environment, even through a marker that writes only
// the tag.
func verified(p *imagev1.ImagePolicy, ref meta.ImageRef) *updatev1.VerifiedImage {
	if ref.Digest == "" {
		return nil
	}
	ns := p.Spec.ImageRepositoryRef.Namespace
	if ns == "" {
		ns = p.Namespace
	}
	out := &updatev1.VerifiedImage{ImageRepository: meta.NamespacedObjectReference{Namespace: ns, Name: p.Spec.ImageRepositoryRef.Name}}
	if p.Spec.Policy.Promotion != nil {
		return out
	}
	v := p.Status.Verification
	if p.Spec.Verify == nil || v == nil {
		return nil
	}
	switch {
	case v.Digest == ref.Digest:
		return out
	case v.PlatformDigest != "" && v.PlatformDigest == ref.Digest:
		out.Digest = v.Digest
		return out
	}
	return nil
}

// Followed returns the names of the policies that follow the images the
// automation discovered; none without spec.discover.
func Followed(a *imagev1.ImageUpdateAutomation) map[string]bool {
	out := map[string]bool{}
	if a.Spec.Discover == nil {
		return out
	}
	for _, d := range a.Status.Discovered {
		if d.Policy != "" {
			out[d.Policy] = true
		}
	}
	return out
}

// Concerns reports whether p, as it is now, is one a may apply: selected
// with a latest image, following an image a discovered, or made by a's
// discovery. A watch asks it of a policy before and after a change to
// find the automations the change concerns.
func Concerns(a *imagev1.ImageUpdateAutomation, sel labels.Selector, p *imagev1.ImagePolicy) bool {
	if sel == nil || p.Namespace != a.Namespace {
		return false
	}
	if a.Spec.Discover != nil && (p.Labels[imagev1.DiscoveredByLabel] == a.Name || Followed(a)[p.Name]) {
		return true
	}
	return p.Status.LatestRef != nil && sel.Matches(labels.Set(p.Labels))
}

// Candidates are index keys that find, among many automations, the few a
// policy change can concern, without asking Concerns of every automation
// of the namespace: a watch of 30,000 policies and 3,000 automations asked
// it 90 million times on start, longer than a cache may take to sync.
// Concerns(a, p) holds only if AutomationKeys(a) and PolicyKeys(p) share
// a key. An automation whose selector has matchLabels is found by one of
// its pairs (every pair must match, so any one finds it); the others, a
// discovery, a selector of expressions only or none, by AnyPolicy.
const AnyPolicy = "*"

// AutomationKeys are a's index keys (Candidates); none when its selector
// is invalid, as it applies nothing.
func AutomationKeys(a *imagev1.ImageUpdateAutomation) []string {
	if _, err := Selector(a); err != nil {
		return nil
	}
	if a.Spec.Discover != nil || a.Spec.PolicySelector == nil || len(a.Spec.PolicySelector.MatchLabels) == 0 {
		return []string{AnyPolicy}
	}
	k := slices.Min(slices.Collect(maps.Keys(a.Spec.PolicySelector.MatchLabels)))
	return []string{k + "=" + a.Spec.PolicySelector.MatchLabels[k]}
}

// PolicyKeys are the keys under which the automations a change of p may
// concern are indexed (Candidates).
func PolicyKeys(p *imagev1.ImagePolicy) []string {
	keys := []string{AnyPolicy}
	for k, v := range p.Labels {
		keys = append(keys, k+"="+v)
	}
	return keys
}

// ForImages returns, by canonical image name, the namespace's own policy
// for each image: exactly one, the first by name of the policies that
// refer to an ImageRepository of the namespace for the image and that no
// automation's discovery made. Discovery follows it instead of making a
// policy of its own.
func ForImages(namespace string, policies []imagev1.ImagePolicy, repos []imagev1.ImageRepository) map[string]string {
	repoImage := map[string]string{}
	for _, r := range repos {
		if r.Namespace == namespace {
			repoImage[r.Name] = imagename.Normalize(r.Spec.Image)
		}
	}
	byName := slices.Clone(policies)
	slices.SortFunc(byName, func(x, y imagev1.ImagePolicy) int { return strings.Compare(x.Name, y.Name) })
	out := map[string]string{}
	for _, p := range byName {
		if p.Namespace != namespace || p.Labels[imagev1.DiscoveredByLabel] != "" {
			continue
		}
		if ref := p.Spec.ImageRepositoryRef; ref.Namespace == "" || ref.Namespace == namespace {
			if img, ok := repoImage[ref.Name]; ok {
				if _, taken := out[img]; !taken {
					out[img] = p.Name
				}
			}
		}
	}
	return out
}
