package explain

import (
	"context"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// The ImagePolicy explainer: what its repository's last scan stored, how
// the policy's rules treated the tags, and the promotion chain upstream of
// it, all read from status.

// PolicyExplanation is what explain policy says.
type PolicyExplanation struct {
	Policy    string `json:"policy"`
	Rules     string `json:"rules"`
	Suspended bool   `json:"suspended,omitempty"`
	// Repository is the policy's ImageRepository, as its status says.
	Repository repositoryFacts `json:"repository"`
	// LastSelection is the policy's status.lastSelection.
	LastSelection *imagev1.TagSelection `json:"lastSelection,omitempty"`
	// SelectionIsCurrent is whether lastSelection evaluated the
	// repository's last scan.
	SelectionIsCurrent bool              `json:"selectionIsCurrent"`
	LatestRef          *meta.ImageRef    `json:"latestRef,omitempty"`
	LatestRefTime      *metav1.MicroTime `json:"latestRefTime,omitempty"`
	// PendingRef is the tag a minimum age holds back (status.pendingRef).
	PendingRef  *imagev1.PendingRef `json:"pendingRef,omitempty"`
	PreviousRef *meta.ImageRef      `json:"previousRef,omitempty"`
	// Source is what the latest image says it was built from
	// (status.latestSource).
	Source *meta.ImageSource `json:"source,omitempty"`
	// Verify is spec.verify; Verification and UnverifiedRef what it
	// found (status.verification, status.unverifiedRef).
	Verify        *imagev1.ImageVerification  `json:"verify,omitempty"`
	Verification  *imagev1.VerificationStatus `json:"verification,omitempty"`
	UnverifiedRef *imagev1.UnverifiedRef      `json:"unverifiedRef,omitempty"`
	Ready         *metav1.Condition           `json:"ready,omitempty"`
	// Chain is, for a promotion policy, the stages it follows, the
	// first environment first and this policy last.
	Chain  []ChainStage `json:"chain,omitempty"`
	choice imagev1.ImagePolicyChoice
	filter *imagev1.TagFilter
}

type repositoryFacts struct {
	Name string `json:"name"`
	// Error says why the repository could not be read.
	Error              string              `json:"error,omitempty"`
	Image              string              `json:"image,omitempty"`
	CanonicalImageName string              `json:"canonicalImageName,omitempty"`
	LastScanResult     *imagev1.ScanResult `json:"lastScanResult,omitempty"`
	ExclusionList      []string            `json:"exclusionList,omitempty"`
	Ready              *metav1.Condition   `json:"ready,omitempty"`
}

func Policy(ctx context.Context, c client.Client, key types.NamespacedName) (*PolicyExplanation, error) {
	p := &imagev1.ImagePolicy{}
	if err := c.Get(ctx, key, p); err != nil {
		return nil, err
	}
	e := &PolicyExplanation{
		Policy:        key.String(),
		Rules:         describeRules(p.Spec.Policy, p.Spec.FilterTags),
		Suspended:     p.Spec.Suspend,
		LastSelection: p.Status.LastSelection,
		LatestRef:     p.Status.LatestRef,
		LatestRefTime: p.Status.LatestRefTime,
		PendingRef:    p.Status.PendingRef,
		PreviousRef:   p.Status.ObservedPreviousRef,
		Source:        p.Status.LatestSource,
		Verify:        p.Spec.Verify,
		Verification:  p.Status.Verification,
		UnverifiedRef: p.Status.UnverifiedRef,
		Ready:         apimeta.FindStatusCondition(p.Status.Conditions, conditions.ReadyCondition),
		choice:        p.Spec.Policy,
		filter:        p.Spec.FilterTags,
	}
	if p.Spec.Policy.Promotion != nil {
		e.Chain = promotionChain(ctx, c, p)
	}
	repoKey := types.NamespacedName{Namespace: p.Spec.ImageRepositoryRef.Namespace, Name: p.Spec.ImageRepositoryRef.Name}
	if repoKey.Namespace == "" {
		repoKey.Namespace = p.Namespace
	}
	e.Repository.Name = repoKey.String()
	repo := &imagev1.ImageRepository{}
	if err := c.Get(ctx, repoKey, repo); err != nil {
		e.Repository.Error = err.Error()
		return e, nil
	}
	e.Repository.Image = repo.Spec.Image
	e.Repository.CanonicalImageName = repo.Status.CanonicalImageName
	e.Repository.LastScanResult = repo.Status.LastScanResult
	e.Repository.ExclusionList = repo.Status.ObservedExclusionList
	e.Repository.Ready = apimeta.FindStatusCondition(repo.Status.Conditions, conditions.ReadyCondition)
	if s, scan := e.LastSelection, repo.Status.LastScanResult; s != nil && scan != nil {
		e.SelectionIsCurrent = s.ScanRevision == scan.Revision
	}
	return e, nil
}

// ChainStage is one environment of a promotion chain: its policy's image
// and, for the stages before the last, what the automation writing that
// environment applied and the health the next promotion saw there.
type ChainStage struct {
	Policy    string            `json:"policy"`
	Image     *meta.ImageRef    `json:"image,omitempty"`
	ImageTime *metav1.MicroTime `json:"imageTime,omitempty"`
	// Automation is the automation writing this stage's environment, as
	// the next stage names it; Applied and AppliedRevision its status.
	Automation      string                 `json:"automation,omitempty"`
	Applied         *meta.ImageRef         `json:"applied,omitempty"`
	AppliedRevision string                 `json:"appliedRevision,omitempty"`
	AppliedTime     *metav1.Time           `json:"appliedTime,omitempty"`
	Health          []imagev1.HealthStatus `json:"health,omitempty"`
	// Pending and Ready are a promotion stage's own.
	Pending *imagev1.PendingRef `json:"pending,omitempty"`
	Ready   *metav1.Condition   `json:"ready,omitempty"`
}

// maxChain bounds a chain walk; the controller refuses cycles.
const maxChain = 16

// promotionChain walks a promotion policy's upstreams: each stage's
// automation and the policy it follows, as the promotion's status names
// it.
func promotionChain(ctx context.Context, c client.Client, p *imagev1.ImagePolicy) []ChainStage {
	stage := func(p *imagev1.ImagePolicy) ChainStage {
		return ChainStage{Policy: p.Name, Image: p.Status.LatestRef, ImageTime: p.Status.LatestRefTime, Pending: p.Status.PendingRef,
			Ready: apimeta.FindStatusCondition(p.Status.Conditions, conditions.ReadyCondition)}
	}
	chain := []ChainStage{stage(p)}
	seen := map[string]bool{p.Name: true}
	for cur := p; cur.Spec.Policy.Promotion != nil && len(chain) < maxChain; {
		pr := cur.Spec.Policy.Promotion
		followed := pr.From.Policy
		if st := cur.Status.Promotion; followed == "" && st != nil {
			followed = st.Policy
		}
		up := &imagev1.ImagePolicy{}
		if followed == "" || seen[followed] || c.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: followed}, up) != nil {
			up = &imagev1.ImagePolicy{}
			up.Name = orText(followed, "?")
		}
		seen[up.Name] = true
		s := stage(up)
		if st := cur.Status.Promotion; st != nil {
			s.Health = st.Health
		}
		s.Automation = pr.From.Automation
		if st := cur.Status.Promotion; s.Automation == "" && st != nil {
			s.Automation = st.Automation
		}
		auto := &imagev1.ImageUpdateAutomation{}
		if c.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: s.Automation}, auto) == nil {
			if img, ok := auto.Status.ObservedPolicies[followed]; ok {
				s.Applied = &img
			}
			s.AppliedRevision, s.AppliedTime = auto.Status.AppliedRevision, auto.Status.LastPushTime
		}
		chain = append([]ChainStage{s}, chain...)
		if up.UID == "" {
			break
		}
		cur = up
	}
	return chain
}
