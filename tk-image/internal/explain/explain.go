// Package explain answers "why was (or wasn't) my image updated" from what
// the controllers record in status: for an ImagePolicy, its repository's
// last scan and how the policy's rules treated the tags; for an
// ImageUpdateAutomation, its policies against what its last job applied, the
// branch head, the last job and the markers. It reads objects through a
// controller-runtime client and computes nothing the controllers do not
// record, except the markers of a local checkout (a dry run of the
// setters) and the branch head (listed from the git server), so it cannot
// disagree with them. An explanation prints as text, or marshals to YAML or
// JSON through its exported fields; tk-image's explain command is the front
// end.
package explain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/policy"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/schedule"
	"toolkit.dev/image-toolkit/pkg/selection"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// UsageError says the command line was wrong (tk-image exits 2 for it).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Explanation is what explain prints: as text, or as YAML or JSON (its
// exported fields).
type Explanation interface {
	Text(w io.Writer)
}

// defaultHeadTimeout bounds listing the branch head: the controllers'
// default of a minute is long for a command someone waits on; a shorter
// repository timeout wins.
const defaultHeadTimeout = 30 * time.Second

// maxScanSites is how many marker places per policy a --scan-checkout
// explanation lists (the count stays exact).
const maxScanSites = 5

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

func writeChain(w io.Writer, chain []ChainStage) {
	fmt.Fprintf(w, "Promotion chain:\t%d stages, upstream first\n", len(chain))
	for i, s := range chain {
		chosen := ""
		if s.ImageTime != nil {
			chosen = ", chosen " + formatTime(s.ImageTime.Time)
		}
		fmt.Fprintf(w, "  %d. %s:\t%s%s\n", i+1, s.Policy, refOr(s.Image, "no image yet"), chosen)
		if pr := s.Pending; pr != nil && pr.Image != nil {
			wait := "waiting for health"
			if pr.EligibleAt != nil && pr.HealthSeen != nil {
				wait = fmt.Sprintf("healthy since %s, soak ends %s", formatTime(pr.HealthSeen.Time), formatTime(pr.EligibleAt.Time))
				if pr.SoakLeft != nil {
					wait += fmt.Sprintf(" (%s left when last reconciled)", pr.SoakLeft.Duration)
				}
			}
			fmt.Fprintf(w, "     Pending:\t%s: %s\n", pr.Image, wait)
		}
		if i < len(chain)-1 && s.Ready != nil && s.Ready.Reason != conditions.SucceededReason {
			fmt.Fprintf(w, "     Ready:\t%s: %s\n", s.Ready.Reason, s.Ready.Message)
		}
		if s.Automation == "" {
			continue
		}
		applied := "nothing yet"
		if s.Applied != nil {
			applied = s.Applied.String() + ", proposed only (no commit on its branch holds it yet)"
			if s.AppliedRevision != "" {
				applied = s.Applied.String() + " at " + shortRevision(s.AppliedRevision)
			}
			if s.AppliedTime != nil {
				applied += ", last push " + formatTime(s.AppliedTime.Time)
			}
		}
		fmt.Fprintf(w, "     Applied by %s:\t%s\n", s.Automation, applied)
		for _, h := range s.Health {
			at := ""
			if h.Revision != "" {
				at = " at " + shortRevision(h.Revision)
			}
			why := ""
			if h.Reason != "" {
				why = " (" + h.Reason + ")"
			}
			fmt.Fprintf(w, "     Health:\t%s %s%s%s\n", h.Object, h.State, at, why)
		}
	}
}

func (e *PolicyExplanation) Text(w io.Writer) {
	fmt.Fprintf(w, "ImagePolicy:\t%s\n", e.Policy)
	fmt.Fprintf(w, "Rules:\t%s\n", e.Rules)
	if e.Suspended {
		fmt.Fprintf(w, "Suspended:\ttrue: the policy is not evaluated until resumed\n")
	}
	r := e.Repository
	if r.Error != "" {
		fmt.Fprintf(w, "ImageRepository:\t%s: %s\n", r.Name, r.Error)
	} else {
		fmt.Fprintf(w, "ImageRepository:\t%s (%s)\n", r.Name, orText(r.CanonicalImageName, r.Image))
		if s := r.LastScanResult; s != nil {
			fmt.Fprintf(w, "  Last scan:\t%s, revision %s\n", formatTime(s.ScanTime.Time), shortRevision(s.Revision))
			excluded := fmt.Sprintf("%d dropped by the exclusionList", s.ExcludedCount)
			if len(r.ExclusionList) > 0 {
				excluded += " " + quoteList(r.ExclusionList)
			}
			fmt.Fprintf(w, "  Tags:\t%d kept, %s\n", s.TagCount, excluded)
		} else {
			fmt.Fprintf(w, "  Last scan:\tnone yet\n")
		}
		writeCondition(w, "  Ready:", r.Ready)
	}
	switch s := e.LastSelection; {
	case len(e.Chain) > 0:
		// A promotion orders no tags.
	case s == nil:
		fmt.Fprintf(w, "Last selection:\tnone recorded: the policy has not evaluated any tags yet\n")
	case r.LastScanResult == nil || e.SelectionIsCurrent:
		fmt.Fprintf(w, "Last selection:\tof scan %s (the repository's last)\n", shortRevision(s.ScanRevision))
		WriteSelection(w, "  ", s, e.choice, e.filter)
	default:
		fmt.Fprintf(w, "Last selection:\tof scan %s, not the repository's last (%s): the policy has not been evaluated since\n",
			shortRevision(s.ScanRevision), shortRevision(r.LastScanResult.Revision))
		WriteSelection(w, "  ", s, e.choice, e.filter)
	}
	if len(e.Chain) > 0 {
		writeChain(w, e.Chain)
	}
	if pr := e.PendingRef; pr != nil && pr.Image == nil && pr.EligibleAt != nil {
		fmt.Fprintf(w, "Pending:\t%s, old enough at %s (minimumAge)\n", pr.Tag, formatTime(pr.EligibleAt.Time))
	}
	e.writeVerification(w)
	if e.LatestRef == nil {
		fmt.Fprintf(w, "Latest image:\tnone chosen yet\n")
	} else {
		fmt.Fprintf(w, "Latest image:\t%s\n", e.LatestRef)
		if e.LatestRefTime != nil {
			fmt.Fprintf(w, "  Chosen:\t%s\n", formatTime(e.LatestRefTime.Time))
		}
		if e.PreviousRef != nil {
			fmt.Fprintf(w, "  Previous:\t%s\n", e.PreviousRef)
		} else {
			fmt.Fprintf(w, "  Previous:\tnone\n")
		}
	}
	writeCondition(w, "Ready:", e.Ready)
}

// writeVerification says what spec.verify checked: who signed the chosen
// digest, and the best candidate that did not verify and why.
func (e *PolicyExplanation) writeVerification(w io.Writer) {
	v := e.Verify
	if v == nil {
		return
	}
	trust := "keys of Secret " + refName(v.SecretRef)
	switch {
	case v.Provider == imagev1.SignatureProviderNotation:
		trust = "certificates of Secret " + refName(v.SecretRef) + ", trust policy of ConfigMap " + refName(v.TrustPolicyRef)
	case len(v.MatchOIDCIdentity) > 0:
		ids := make([]string, len(v.MatchOIDCIdentity))
		for i, id := range v.MatchOIDCIdentity {
			ids[i] = fmt.Sprintf("subject %s issued by %s", id.Subject, id.Issuer)
		}
		root := "the public Sigstore root"
		if v.TrustedRootSecretRef != nil {
			root = "the trusted root of Secret " + v.TrustedRootSecretRef.Name
		}
		trust = "keyless: " + strings.Join(ids, "; ") + " (" + root + ")"
	}
	fmt.Fprintf(w, "Verification:\t%s signatures, trusting %s\n", v.Provider, trust)
	if vs := e.Verification; vs != nil {
		fmt.Fprintf(w, "  Verified:\t%s, signed by %s (%s signature)\n", vs.Digest, vs.Signer, vs.Format)
		if vs.PlatformDigest != "" {
			fmt.Fprintf(w, "  Platform:\t%s, the platform's manifest in the verified index, is written\n", vs.PlatformDigest)
		}
		if vs.Skipped > 0 {
			fmt.Fprintf(w, "  Skipped:\t%d better candidate(s) did not verify\n", vs.Skipped)
		}
	}
	if u := e.UnverifiedRef; u != nil {
		fmt.Fprintf(w, "  Not verified:\t%s (%s): %s: %s\n", u.Tag, orText(u.Digest, "no digest"), u.Reason, u.Message)
	}
}

func refName(r *meta.LocalObjectReference) string {
	if r == nil {
		return "(none)"
	}
	return r.Name
}

// describeRules says how a policy orders tags, in the spec's words (the
// kind's, from pkg/policy's table).
func describeRules(choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) string {
	s := "none"
	if k, ok := policy.Chosen(choice); ok {
		s = k.Describe(choice)
	}
	if filter != nil && filter.Pattern != "" {
		s += fmt.Sprintf("; only tags matching %q", filter.Pattern)
		if filter.Extract != "" {
			s += fmt.Sprintf(", ordered by %q", filter.Extract)
		}
	}
	return s
}

// WriteSelection writes a selection's breakdown as tab-separated lines,
// naming each drop as the policy's rules have it. explain policy and
// policy eval --explain both print it.
func WriteSelection(w io.Writer, indent string, s *imagev1.TagSelection, choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) {
	fmt.Fprintf(w, "%sConsidered:\t%d tags\n", indent, s.Considered)
	if filter != nil && filter.Pattern != "" {
		fmt.Fprintf(w, "%sFiltered out:\t%d not matching %q\n", indent, s.Filtered, filter.Pattern)
	}
	if k, ok := policy.Chosen(choice); ok {
		for _, d := range k.Drops(choice, *s) {
			writeDrop(w, indent, d)
		}
	}
	if s.BeyondLimit > 0 {
		fmt.Fprintf(w, "%sBeyond limit:\t%d first seen before the newest maxCandidates\n", indent, s.BeyondLimit)
	}
	fmt.Fprintf(w, "%sKept:\t%d\n", indent, s.Kept)
	if s.TooNew > 0 {
		fmt.Fprintf(w, "%sToo new:\t%d ranking higher, younger than the minimum age\n", indent, s.TooNew)
	}
	if len(s.TopCandidates) > 0 {
		fmt.Fprintf(w, "%sBest first:\t%s\n", indent, strings.Join(s.TopCandidates, ", "))
	}
	switch sel := s.Selected(); {
	case sel != "":
		fmt.Fprintf(w, "%sSelected:\t%s\n", indent, sel)
	case s.Kept > 0 && s.TooNew > 0:
		fmt.Fprintf(w, "%sSelected:\tnothing yet: no tag is old enough\n", indent)
	default:
		fmt.Fprintf(w, "%sSelected:\tnothing: no tag is left\n", indent)
	}
}

// writeDrop writes how many tags the policy's kind dropped for a reason.
func writeDrop(w io.Writer, indent string, d policy.Drop) {
	if d.Detail == "" {
		fmt.Fprintf(w, "%s%s:\t%d\n", indent, d.Label, d.Count)
		return
	}
	fmt.Fprintf(w, "%s%s:\t%d %s\n", indent, d.Label, d.Count, d.Detail)
}

// AutomationExplanation is what explain automation says.
type AutomationExplanation struct {
	Automation string      `json:"automation"`
	Suspended  bool        `json:"suspended,omitempty"`
	Source     sourceFacts `json:"source"`
	// PolicySelector selects the policies; empty selects all.
	PolicySelector string             `json:"policySelector"`
	Policies       []automationPolicy `json:"policies"`
	// Schedule is spec.schedule read now; absent without one.
	Schedule *scheduleFacts `json:"schedule,omitempty"`
	// Discovered are the images spec.discover found (status.discovered):
	// what follows each, or why nothing does.
	Discovered []imagev1.DiscoveredImage `json:"discovered,omitempty"`
	// Holds are the values a person set that the automation leaves
	// (status.holds), each with why it lasts or ended.
	Holds []imagev1.AutomationHold `json:"holds,omitempty"`
	// Rollback is what spec.rollback judges and did (status.rollback).
	Rollback       *imagev1.RollbackStatus `json:"rollback,omitempty"`
	LastRunTime    *metav1.Time            `json:"lastRunTime,omitempty"`
	LastPushCommit string                  `json:"lastPushCommit,omitempty"`
	LastPushTime   *metav1.Time            `json:"lastPushTime,omitempty"`
	// LastPullRequest is the request the last job that proposed, updated
	// or closed one left (status.lastPullRequest), as it was then.
	LastPullRequest *updatev1.PullRequestStatus `json:"lastPullRequest,omitempty"`
	Ready           *metav1.Condition           `json:"ready,omitempty"`
	// InFlightJob is an UpdateJob that has not finished yet.
	InFlightJob *jobFacts   `json:"inFlightJob,omitempty"`
	LastJob     *jobFacts   `json:"lastJob,omitempty"`
	Markers     markerFacts `json:"markers"`
	// Problems are the reasons, found in the above, that an image is not
	// updated.
	Problems []string `json:"problems,omitempty"`
}

// scheduleFacts is where the automation stands in its update windows,
// computed now by the controller's own code (pkg/schedule).
type scheduleFacts struct {
	// Windows are the windows as a person reads them back.
	Windows string `json:"windows,omitempty"`
	// Error says why the schedule does not work (the automation is
	// Stalled).
	Error string `json:"error,omitempty"`
	// Open is whether a window is open now.
	Open bool `json:"open"`
	// Start and End are the window open now, or the next to open.
	Start *metav1.Time `json:"start,omitempty"`
	End   *metav1.Time `json:"end,omitempty"`
}

type sourceFacts struct {
	// Describe names where the repository comes from.
	Describe   string `json:"describe"`
	URL        string `json:"url,omitempty"`
	Ref        string `json:"ref,omitempty"`
	UpdatePath string `json:"updatePath,omitempty"`
	// Head is the checkout branch's head, listed now.
	Head      string `json:"head,omitempty"`
	HeadError string `json:"headError,omitempty"`
	// ObservedRevision is the head the last run saw.
	ObservedRevision string `json:"observedRevision,omitempty"`
	// Applications are the Argo CD Applications the automation writes
	// (spec.sourceRef or spec.applicationSelector).
	Applications []applicationFacts `json:"applications,omitempty"`
	// Targets are, when those are written on several repositories or
	// branches, each one as its last run left it (status.targets).
	Targets []targetFacts `json:"targets,omitempty"`
}

// targetFacts is one repository and branch an automation writes.
type targetFacts struct {
	URL            string   `json:"url"`
	Branch         string   `json:"branch"`
	Applications   []string `json:"applications,omitempty"`
	LastPushCommit string   `json:"lastPushCommit,omitempty"`
	// Ready is the target's Ready condition: status, reason and message.
	Ready string `json:"ready,omitempty"`
}

// applicationFacts is an Argo CD Application an automation writes.
type applicationFacts struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Sources are its written git sources.
	Sources []applicationSource `json:"sources"`
	// Images are what Argo CD reports it runs (status.summary.images).
	Images []string `json:"images,omitempty"`
}

type applicationSource struct {
	Index int    `json:"index"`
	Path  string `json:"path"`
	Type  string `json:"type,omitempty"`
	// OverrideFile is where strategy ArgoCD writes its images.
	OverrideFile string `json:"overrideFile,omitempty"`
}

type automationPolicy struct {
	// Policy is NAMESPACE:NAME, as markers write it.
	Policy    string         `json:"policy"`
	LatestRef *meta.ImageRef `json:"latestRef,omitempty"`
	// Applied is the image the last run applied (status.observedPolicies).
	Applied *meta.ImageRef `json:"applied,omitempty"`
	// State is applied, pending (the latest image differs from the
	// applied one) or "no latest image".
	State string `json:"state"`
	// Markers counts the markers naming the policy; absent when not known.
	Markers *int `json:"markers,omitempty"`
	// Files are some of the files holding them, from the repository root
	// (with the line after a colon when scanned).
	Files []string `json:"files,omitempty"`
}

type jobFacts struct {
	Name  string                  `json:"name"`
	Phase updatev1.UpdateJobPhase `json:"phase,omitempty"`
	// Error says why the job could not be read (e.g. it was deleted).
	Error            string            `json:"error,omitempty"`
	CheckoutRevision string            `json:"checkoutRevision,omitempty"`
	PushedCommit     string            `json:"pushedCommit,omitempty"`
	PushedRefs       []string          `json:"pushedRefs,omitempty"`
	CompletionTime   *metav1.Time      `json:"completionTime,omitempty"`
	Ready            *metav1.Condition `json:"ready,omitempty"`
	// Changes are the job's status.result.files: paths from the update path.
	Changes []meta.FileResult      `json:"changes,omitempty"`
	result  *updatev1.UpdateResult // the markers, read into markerFacts
}

type markerFacts struct {
	// From says where the markers were read; empty when nowhere has them.
	From string `json:"from,omitempty"`
	// Complete is whether every policy markers name is listed, so that a
	// policy not listed has no marker.
	Complete bool          `json:"complete"`
	Policies []markerEntry `json:"policies,omitempty"`
	// Omitted counts the policies the job's status did not list.
	Omitted int `json:"omitted,omitempty"`
	// WouldChange lists, for --scan-checkout, the values a run would set.
	WouldChange []string `json:"wouldChange,omitempty"`
	// Problems are files the scan could not read or rewrite.
	ScanProblems []string `json:"scanProblems,omitempty"`
}

type markerEntry struct {
	Policy string `json:"policy"`
	// Count is the number of markers naming the policy; absent when only
	// its existence is known.
	Count *int     `json:"count,omitempty"`
	Files []string `json:"files,omitempty"`
	// Problem says why the automation cannot apply the policy.
	Problem string `json:"problem,omitempty"`
	// AppliedBy names the automation of the namespace that applies the
	// policy when this one does not select it: the markers are its.
	AppliedBy string `json:"appliedBy,omitempty"`
}

// selectedElsewhere maps each policy of a's namespace that a does not
// select, and another automation there does, to that automation's name;
// a list that fails leaves it empty (every such marker is then reported).
func selectedElsewhere(ctx context.Context, c client.Client, a *imagev1.ImageUpdateAutomation, chosen *selection.Selection, policies []imagev1.ImagePolicy) map[string]string {
	if !slices.ContainsFunc(chosen.Policies, func(p selection.Policy) bool { return p.By == "" }) {
		return nil
	}
	var autos imagev1.ImageUpdateAutomationList
	if err := c.List(ctx, &autos, client.InNamespace(a.Namespace)); err != nil {
		return nil
	}
	return elsewhereOf(a, chosen, policies, autos.Items)
}

// elsewhereOf is selectedElsewhere over the namespace's automations.
func elsewhereOf(a *imagev1.ImageUpdateAutomation, chosen *selection.Selection, policies []imagev1.ImagePolicy, autos []imagev1.ImageUpdateAutomation) map[string]string {
	var unselected []imagev1.ImagePolicy
	for _, p := range chosen.Policies {
		if p.By != "" {
			continue
		}
		if i := slices.IndexFunc(policies, func(o imagev1.ImagePolicy) bool { return o.Name == p.Name }); i >= 0 {
			unselected = append(unselected, policies[i])
		}
	}
	out := map[string]string{}
	for i := range autos {
		o := &autos[i]
		if o.UID == a.UID {
			continue
		}
		sel, err := selection.Selector(o)
		if err != nil {
			continue
		}
		for _, p := range selection.Of(o, sel, unselected).Policies {
			if _, seen := out[p.Key]; p.By != "" && !seen {
				out[p.Key] = o.Name
			}
		}
	}
	return out
}

// Automation explains an automation: its source and branch head, the
// policies it selects against what its last run applied, its jobs and
// markers, and the problems found in them.
func Automation(ctx context.Context, c client.Client, key types.NamespacedName, scanCheckout string) (*AutomationExplanation, error) {
	return AutomationWith(ctx, c, key, Options{ScanCheckout: scanCheckout})
}

// Options are how AutomationWith reads what lies beyond the API server.
type Options struct {
	// ScanCheckout is a local checkout whose markers a dry run of the
	// setters finds; empty: the last job's record of them.
	ScanCheckout string
	// Heads, when set, lists a branch head in place of a plain ls-remote:
	// list does the listing, and the function may answer from what it
	// kept instead (the dashboard, which explains an automation on each
	// live update, keeps a head until the automation's status moves).
	Heads HeadLister
}

// HeadLister lists the head of an automation's branch at url with list,
// or answers from what it kept.
type HeadLister func(ctx context.Context, a *imagev1.ImageUpdateAutomation, url, branch string, list func(context.Context) (string, error)) (string, error)

// AutomationWith is Automation with Options.
func AutomationWith(ctx context.Context, c client.Client, key types.NamespacedName, o Options) (*AutomationExplanation, error) {
	scanCheckout := o.ScanCheckout
	a := &imagev1.ImageUpdateAutomation{}
	if err := c.Get(ctx, key, a); err != nil {
		return nil, err
	}
	e := &AutomationExplanation{
		Automation:      key.String(),
		Suspended:       a.Spec.Suspend,
		LastRunTime:     a.Status.LastAutomationRunTime,
		LastPushCommit:  a.Status.LastPushCommit,
		LastPushTime:    a.Status.LastPushTime,
		LastPullRequest: a.Status.LastPullRequest,
		Ready:           apimeta.FindStatusCondition(a.Status.Conditions, conditions.ReadyCondition),
		Policies:        []automationPolicy{},
		Discovered:      a.Status.Discovered,
		Holds:           a.Status.Holds,
		Rollback:        a.Status.Rollback,
	}
	e.Source = branchHead(ctx, c, a, o.Heads)
	chosen, policies, err := e.selectPolicies(ctx, c, a)
	if err != nil {
		return nil, err
	}
	e.judgeDiscovered()
	e.judgeHolds()
	e.judgeSchedule(a, time.Now())
	e.findJobs(ctx, c, a)
	if scanCheckout != "" {
		if err := e.scan(scanCheckout, a); err != nil {
			return nil, err
		}
	} else {
		e.markersFromJob(a)
	}
	e.judge(a, chosen, selectedElsewhere(ctx, c, a, chosen, policies))
	return e, nil
}

// selectPolicies lists the policies as the automation controller selects
// them (pkg/selection): in its namespace, by spec.policySelector (all
// without one), and those following its discovered images; each selected
// one gets a row saying whether the last run applied its latest image.
func (e *AutomationExplanation) selectPolicies(ctx context.Context, c client.Client, a *imagev1.ImageUpdateAutomation) (*selection.Selection, []imagev1.ImagePolicy, error) {
	all := &imagev1.ImagePolicyList{}
	if err := c.List(ctx, all, client.InNamespace(a.Namespace)); err != nil {
		return nil, nil, err
	}
	sel, err := selection.Selector(a)
	if err != nil {
		e.Problems = append(e.Problems, fmt.Sprintf("spec.policySelector is invalid, so no policy is selected: %s", err))
	}
	if a.Spec.PolicySelector != nil {
		e.PolicySelector = metav1.FormatLabelSelector(a.Spec.PolicySelector)
	}
	chosen := selection.Of(a, sel, all.Items)
	for _, p := range chosen.Policies {
		if p.By != "" {
			e.Policies = append(e.Policies, policyRow(a, p))
		}
	}
	return chosen, all.Items, nil
}

// policyRow is a selected policy's latest image against the one the last
// run applied (status.observedPolicies).
func policyRow(a *imagev1.ImageUpdateAutomation, p selection.Policy) automationPolicy {
	row := automationPolicy{Policy: p.Key, LatestRef: p.Latest}
	if applied, ok := a.Status.ObservedPolicies[p.Name]; ok {
		row.Applied = &applied
	}
	switch {
	case row.LatestRef == nil:
		row.State = "no latest image"
	case row.Applied != nil && *row.Applied == *row.LatestRef:
		row.State = "applied"
	default:
		row.State = "pending"
	}
	return row
}

// judgeDiscovered lists each discovered image no policy follows as a
// problem.
func (e *AutomationExplanation) judgeDiscovered() {
	for _, d := range e.Discovered {
		if d.Reason != "" {
			e.Problems = append(e.Problems, fmt.Sprintf("discovered image %s:%s is not followed: %s", d.Name, d.Tag, d.Reason))
		}
	}
}

// judgeHolds lists each held value as a reason its policy's image is
// not written there.
func (e *AutomationExplanation) judgeHolds() {
	ns, name, _ := strings.Cut(e.Automation, "/")
	for _, h := range e.Holds {
		if h.Reason == imagev1.HeldByPersonReason {
			e.Problems = append(e.Problems, fmt.Sprintf("%s in %s is held at %s, as %s set it (tk-image release automation %s -n %s releases it)",
				h.Setter, h.Path, h.Value, orText(h.Author, "a person"), name, ns))
		}
	}
}

// judgeSchedule reads spec.schedule at now, and says when it is why
// pending images wait: it does not work, or no window is open.
func (e *AutomationExplanation) judgeSchedule(a *imagev1.ImageUpdateAutomation, now time.Time) {
	e.Schedule = explainSchedule(a.Spec.Schedule, now)
	sf := e.Schedule
	if sf == nil || a.Spec.Suspend {
		return
	}
	pending := slices.ContainsFunc(e.Policies, func(p automationPolicy) bool { return p.State == "pending" })
	switch {
	case sf.Error != "":
		e.Problems = append(e.Problems, "spec.schedule does not work, so the automation makes no job: "+sf.Error)
	case !sf.Open && pending:
		e.Problems = append(e.Problems, fmt.Sprintf("no update window is open: the pending images wait for the one opening at %s",
			formatTime(sf.Start.Time)))
	}
}

// findJobs reads the automation's job in flight and its last job; a last
// job that cannot be read says why.
func (e *AutomationExplanation) findJobs(ctx context.Context, c client.Client, a *imagev1.ImageUpdateAutomation) {
	if job, err := InFlightJob(ctx, c, a); err == nil && job != nil {
		e.InFlightJob = describeJob(job)
	}
	ref := a.Status.LastJob
	if ref == nil {
		return
	}
	job := &updatev1.UpdateJob{}
	err := c.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: ref.Name}, job)
	switch {
	case err == nil && job.UID == ref.UID:
		e.LastJob = describeJob(AsOwnJob(job, a.UID))
	case err == nil || apierrors.IsNotFound(err):
		e.LastJob = &jobFacts{Name: ref.Name, Phase: ref.Phase, Error: "deleted since (pruned, or removed by its TTL)"}
	default:
		e.LastJob = &jobFacts{Name: ref.Name, Phase: ref.Phase, Error: err.Error()}
	}
}

func describeJob(job *updatev1.UpdateJob) *jobFacts {
	f := &jobFacts{
		Name:             job.Name,
		Phase:            job.Status.Phase,
		CheckoutRevision: job.Status.CheckoutRevision,
		PushedCommit:     job.Status.PushedCommit,
		PushedRefs:       job.Status.PushedRefs,
		CompletionTime:   job.Status.CompletionTime,
		Ready:            apimeta.FindStatusCondition(job.Status.Conditions, conditions.ReadyCondition),
		result:           job.Status.Result,
	}
	if f.Phase == "" {
		f.Phase = updatev1.UpdateJobPending
	}
	if job.Status.Result != nil {
		f.Changes = job.Status.Result.Files
	}
	return f
}

// branchHead resolves the automation's repository and checkout ref as its
// controller does (pkg/gitsource), and lists the branch head from the
// server with the repository's credentials, read from the automation's
// namespace. Any failure is recorded, not returned: the rest of the
// explanation stands.
func branchHead(ctx context.Context, c client.Client, a *imagev1.ImageUpdateAutomation, heads HeadLister) sourceFacts {
	f := sourceFacts{ObservedRevision: a.Status.ObservedSourceRevision, Describe: "none"}
	if u := a.Spec.Update; u != nil {
		f.UpdatePath = u.Path
	}
	// explain does not know the controller's --no-cross-namespace-refs; a
	// refusal shows in the automation's Ready condition.
	src, err := gitsource.Resolve(ctx, c, a, gitsource.Options{})
	// On a failure src still says where it was looked for.
	if src != nil {
		f.Describe = src.Describe
		f.URL, f.Ref = git.Redact(src.Repository.URL), gitsource.DescribeRef(src.Ref)
		if f.UpdatePath == "" {
			f.UpdatePath = src.Path
		}
		for _, app := range src.Applications {
			af := applicationFacts{Name: app.Name, Namespace: app.Namespace, Images: app.Images}
			for _, s := range app.Written {
				as := applicationSource{Index: s.Index, Path: s.Path, Type: s.Type}
				if u := a.Spec.Update; u != nil && u.Strategy == imagev1.UpdateStrategyArgoCD {
					as.OverrideFile = app.OverrideFile(app.ArgoNamespace, s)
				}
				af.Sources = append(af.Sources, as)
			}
			f.Applications = append(f.Applications, af)
		}
	}
	if err != nil {
		f.HeadError = err.Error()
		return f
	}
	for _, t := range a.Status.Targets {
		tf := targetFacts{URL: git.Redact(t.URL), Branch: t.Branch, Applications: t.Applications, LastPushCommit: t.LastPushCommit}
		if c := t.Ready; c != nil {
			tf.Ready = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
		f.Targets = append(f.Targets, tf)
	}
	if len(src.Targets) > 0 {
		var names, paths []string
		for _, t := range src.Targets {
			names = append(names, git.Redact(t.Repository.URL)+" ("+orText(t.Ref.Branch, "HEAD")+")")
			paths = append(paths, orText(t.Path, "the root"))
		}
		f.URL = strings.Join(names, ", ")
		if u := a.Spec.Update; u == nil || u.Path == "" {
			f.UpdatePath = "per target: " + strings.Join(paths, ", ")
		}
		f.HeadError = fmt.Sprintf("not listed: the Applications are written on %d repositories or branches, each its own target with its own jobs and commits (status.targets)", len(src.Targets))
		return f
	}
	if !gitsource.BranchOnly(src.Ref) && !src.DefaultBranch {
		f.HeadError = "not listed: the checkout ref is not just a branch, so the automation does not compare heads"
		return f
	}
	// tk-image registers no credentials provider, to keep the cloud SDKs
	// and the GitHub App client out of it: a provider's token would be
	// the controller's identity (its pod's, or a ServiceAccount's through
	// the controller's RBAC), which tk-image neither has nor should
	// borrow. The automation's Ready condition says how its controller
	// fared.
	if p := src.Repository.Provider; p != "" && p != git.ProviderGeneric {
		f.HeadError = fmt.Sprintf("not listed: provider %s: credentials are issued by the controllers; "+
			"tk-image does not read cloud or GitHub App identities (the automation's Ready condition says whether its controller can list the branch)", p)
		return f
	}
	auth, err := gitsource.Credentials(ctx, c, a, src)
	if err != nil {
		// The condition's wording says where the controller's jobs read
		// the Secrets; here pkg/git's error alone reads better.
		var ce *gitsource.CredentialsError
		if errors.As(err, &ce) {
			err = ce.Err
		}
		f.HeadError = "credentials: " + err.Error()
		return f
	}
	if err := src.ReadDefaultBranch(ctx, auth); err != nil {
		f.HeadError = err.Error()
		return f
	}
	f.Ref = gitsource.DescribeRef(src.Ref) + " (targetRevision HEAD)"
	if !src.DefaultBranch {
		f.Ref = gitsource.DescribeRef(src.Ref)
	}
	timeout := defaultHeadTimeout
	if t := src.Repository.Timeout; t != nil && t.Duration > 0 {
		timeout = min(timeout, t.Duration)
	}
	list := func(ctx context.Context) (string, error) {
		lctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		oid, err := git.Branch(lctx, src.Repository.URL, auth, src.Ref.Branch)
		if err != nil {
			return "", errors.New(auth.Scrub(err.Error()))
		}
		return git.FormatRevision(src.Ref.Branch, oid), nil
	}
	if heads == nil {
		f.Head, err = list(ctx)
	} else {
		f.Head, err = heads(ctx, a, src.Repository.URL, src.Ref.Branch, list)
	}
	if err != nil {
		f.HeadError = err.Error()
	}
	return f
}

// explainSchedule reads spec.schedule at now as the controller does; nil
// without one.
func explainSchedule(spec *imagev1.UpdateSchedule, now time.Time) *scheduleFacts {
	sched, err := schedule.OfAutomation(spec)
	switch {
	case err != nil:
		return &scheduleFacts{Error: err.Error()}
	case sched == nil:
		return nil
	}
	f := &scheduleFacts{Windows: sched.Describe()}
	span, open, ok := sched.At(now)
	if !ok {
		f.Error = "no window opens within five years (" + f.Windows + ")"
		return f
	}
	f.Open = open
	f.Start, f.End = &metav1.Time{Time: span.Start}, &metav1.Time{Time: span.End}
	return f
}

// markersFromJob reads the markers from the last job's status.result, or,
// when the job is gone, what the automation kept of them in lastJob.
func (e *AutomationExplanation) markersFromJob(a *imagev1.ImageUpdateAutomation) {
	m := &e.Markers
	switch {
	case e.LastJob != nil && e.LastJob.Error == "" && e.LastJob.result != nil:
		r := e.LastJob.result
		m.From = fmt.Sprintf("UpdateJob %s status.result", e.LastJob.Name)
		m.Complete = r.OmittedMarkerPolicies == 0
		m.Omitted = r.OmittedMarkerPolicies
		for _, pm := range r.Markers {
			m.Policies = append(m.Policies, markerEntry{Policy: pm.Policy, Count: ptrTo(pm.Count), Files: e.inRepository(pm.Files...)})
		}
		// Unmarked setters are known to have no marker even in a cut list.
		for _, p := range r.UnmarkedPolicies {
			m.Policies = append(m.Policies, markerEntry{Policy: p, Count: ptrTo(0)})
		}
	case a.Status.LastJob != nil && (len(a.Status.LastJob.UnknownPolicies) > 0 || len(a.Status.LastJob.UnmarkedPolicies) > 0):
		m.From = fmt.Sprintf("the automation's status.lastJob (UpdateJob %s is gone: only the policies it could not apply are known)", a.Status.LastJob.Name)
		for _, p := range a.Status.LastJob.UnknownPolicies {
			m.Policies = append(m.Policies, markerEntry{Policy: p})
		}
		for _, p := range a.Status.LastJob.UnmarkedPolicies {
			m.Policies = append(m.Policies, markerEntry{Policy: p, Count: ptrTo(0)})
		}
	}
}

// scan finds the markers in a local checkout with a dry run of the setters
// over the automation's update path, with the selected policies' latest
// images: the markers, and the values a run would set.
func (e *AutomationExplanation) scan(checkout string, a *imagev1.ImageUpdateAutomation) error {
	dir := filepath.Join(checkout, filepath.FromSlash(e.Source.UpdatePath))
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return UsageError{fmt.Errorf("--scan-checkout: %s is not a directory: give the repository's root (the update path %q is joined to it)", dir, e.Source.UpdatePath)}
	}
	policies := setters.Policies{}
	for _, p := range e.Policies {
		if p.LatestRef != nil {
			policies[p.Policy] = *p.LatestRef
		}
	}
	res, err := setters.UpdateDir(dir, policies, setters.Options{DryRun: true})
	if err != nil {
		return err
	}
	m := &e.Markers
	m.From = "a dry run of the setters over " + dir
	m.Complete = true
	byPolicy := map[string]int{}
	for _, site := range res.Markers {
		i, ok := byPolicy[site.Marker.Policy]
		if !ok {
			i = len(m.Policies)
			byPolicy[site.Marker.Policy] = i
			m.Policies = append(m.Policies, markerEntry{Policy: site.Marker.Policy, Count: ptrTo(0)})
		}
		en := &m.Policies[i]
		*en.Count++
		if len(en.Files) < maxScanSites {
			en.Files = append(en.Files, fmt.Sprintf("%s:%d", e.inRepository(site.Path)[0], site.Line))
		}
	}
	for _, f := range res.Files {
		for _, o := range f.Objects {
			for _, ch := range o.Changes {
				m.WouldChange = append(m.WouldChange, fmt.Sprintf("%s: %s -> %s (%s)", e.inRepository(f.Path)[0], ch.OldValue, ch.NewValue, ch.Setter))
			}
		}
	}
	for _, p := range res.Problems {
		m.ScanProblems = append(m.ScanProblems, p.Error())
	}
	return nil
}

// judge matches the markers with the policies: it fills each selected
// policy's marker count, says what is wrong with the policies markers name
// that the automation cannot apply, and lists the problems.
func (e *AutomationExplanation) judge(a *imagev1.ImageUpdateAutomation, chosen *selection.Selection, elsewhere map[string]string) {
	m := &e.Markers
	slices.SortStableFunc(m.Policies, func(x, y markerEntry) int { return strings.Compare(x.Policy, y.Policy) })
	m.Policies = slices.CompactFunc(m.Policies, func(x, y markerEntry) bool { return x.Policy == y.Policy })
	byPolicy := map[string]*markerEntry{}
	for i := range m.Policies {
		en := &m.Policies[i]
		byPolicy[en.Policy] = en
		if en.Count != nil && *en.Count == 0 {
			continue // a setter no marker names: judged below
		}
		en.Problem = whyNotApplied(a, en.Policy, chosen)
		// A marker of a policy another automation of the namespace
		// selects is that automation's (apps holds apps/redis, whose
		// automation applies redis): not a problem of this one.
		if other, ok := elsewhere[en.Policy]; ok && en.Problem != "" {
			en.Problem, en.AppliedBy = "", other
		}
		if en.Problem != "" {
			e.Problems = append(e.Problems, fmt.Sprintf("%s %s, but %s", markersName(en), en.Policy, en.Problem))
		}
	}
	for i := range e.Policies {
		p := &e.Policies[i]
		en, listed := byPolicy[p.Policy]
		switch {
		case listed:
			p.Markers, p.Files = en.Count, en.Files
		case m.Complete:
			p.Markers = ptrTo(0)
		}
		if p.LatestRef == nil {
			_, name, _ := updatev1.SplitPolicyKey(p.Policy)
			e.Problems = append(e.Problems, fmt.Sprintf("ImagePolicy %s/%s has no latest image yet, so the automation does not apply it: tk-image explain policy %s -n %s",
				a.Namespace, name, name, a.Namespace))
			continue
		}
		if p.Markers != nil && *p.Markers == 0 {
			e.Problems = append(e.Problems, fmt.Sprintf("no marker names %s, so its image %s is written nowhere", p.Policy, p.LatestRef))
		}
	}
}

// inRepository makes paths relative to the update path, as jobs and the
// setters report them, relative to the repository root, as people find them.
func (e *AutomationExplanation) inRepository(paths ...string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = path.Join(e.Source.UpdatePath, p)
	}
	return out
}

func markersName(en *markerEntry) string {
	switch {
	case en.Count == nil:
		return "markers name"
	case *en.Count == 1:
		return "1 marker names"
	}
	return fmt.Sprintf("%d markers name", *en.Count)
}

// whyNotApplied says why the automation does not apply a policy markers
// name, "" when it does.
func whyNotApplied(a *imagev1.ImageUpdateAutomation, key string, chosen *selection.Selection) string {
	ns, name, ok := updatev1.SplitPolicyKey(key)
	switch {
	case !ok:
		return "that is not NAMESPACE:NAME"
	case ns != a.Namespace:
		return fmt.Sprintf("the automation applies only the ImagePolicies of its own namespace, %s", a.Namespace)
	}
	i := slices.IndexFunc(chosen.Policies, func(p selection.Policy) bool { return p.Key == key })
	if i < 0 {
		return fmt.Sprintf("no ImagePolicy %s/%s exists", ns, name)
	}
	if why := chosen.Policies[i].Why(); why != "" {
		return fmt.Sprintf("ImagePolicy %s/%s %s", ns, name, why)
	}
	return ""
}

func (e *AutomationExplanation) Text(w io.Writer) {
	fmt.Fprintf(w, "ImageUpdateAutomation:\t%s\n", e.Automation)
	if e.Suspended {
		fmt.Fprintf(w, "Suspended:\ttrue: the automation makes no job until resumed\n")
	}
	writeSource(w, e.Source)
	if sf := e.Schedule; sf != nil {
		writeSchedule(w, sf)
	}
	writeDiscovered(w, e.Discovered)
	writeHolds(w, e.Holds)
	if rb := e.Rollback; rb != nil {
		fmt.Fprintf(w, "Rollback:\t%s: %s\n", rb.Reason, rb.Message)
		for _, h := range rb.Health {
			fmt.Fprintf(w, "  %s:\t%s at %s (%s)\n", h.Object, h.State, orText(h.Revision, "no revision"), h.Reason)
		}
	}
	e.writeLastRun(w)
	e.writePolicies(w)
	if j := e.InFlightJob; j != nil {
		fmt.Fprintf(w, "\nUpdateJob in flight:\t%s (%s)\n", j.Name, j.Phase)
	}
	e.writeLastJob(w)
	e.writeMarkers(w)
	if len(e.Problems) > 0 {
		fmt.Fprintf(w, "\nProblems:\n")
		for _, p := range e.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
}

// writeSource writes the automation's repository, and its branch head now
// against the one its last run saw.
func writeSource(w io.Writer, s sourceFacts) {
	fmt.Fprintf(w, "Repository:\t%s (%s)\n", orText(s.URL, "unknown"), s.Describe)
	if s.Ref != "" {
		fmt.Fprintf(w, "  Checkout:\t%s\n", s.Ref)
	}
	fmt.Fprintf(w, "  Update path:\t%s\n", orText(s.UpdatePath, "the repository root"))
	for _, app := range s.Applications {
		fmt.Fprintf(w, "  Application:\t%s/%s, running %s\n", app.Namespace, app.Name, orText(strings.Join(app.Images, ", "), "no images reported yet"))
		for _, src := range app.Sources {
			fmt.Fprintf(w, "    Source %d:\t%s, %s", src.Index, orText(src.Path, "the repository root"), orText(src.Type, "not rendered by Argo CD yet"))
			if src.OverrideFile != "" {
				fmt.Fprintf(w, ", images written to %s", src.OverrideFile)
			}
			fmt.Fprintln(w)
		}
	}
	for _, t := range s.Targets {
		fmt.Fprintf(w, "  Target:\t%s (%s), Applications %s\n", t.URL, t.Branch, orText(strings.Join(t.Applications, ", "), "none"))
		fmt.Fprintf(w, "    Last push:\t%s\n", orText(t.LastPushCommit, "none yet"))
		fmt.Fprintf(w, "    Ready:\t%s\n", orText(t.Ready, "not run yet"))
	}
	if s.Head != "" {
		fmt.Fprintf(w, "  Branch head:\t%s (listed now)\n", s.Head)
	} else {
		fmt.Fprintf(w, "  Branch head:\tunknown: %s\n", s.HeadError)
	}
	switch {
	case s.ObservedRevision == "":
		fmt.Fprintf(w, "  Last run saw:\tnothing recorded yet\n")
	case s.Head == "":
		fmt.Fprintf(w, "  Last run saw:\t%s\n", s.ObservedRevision)
	case s.Head == s.ObservedRevision:
		fmt.Fprintf(w, "  Last run saw:\t%s: the same, nothing was pushed since\n", s.ObservedRevision)
	default:
		fmt.Fprintf(w, "  Last run saw:\t%s: the branch moved since; the next run looks again\n", s.ObservedRevision)
	}
}

// writeDiscovered writes the images spec.discover found, each with the
// policy that follows it or why none does.
func writeDiscovered(w io.Writer, discovered []imagev1.DiscoveredImage) {
	if len(discovered) == 0 {
		return
	}
	fmt.Fprintf(w, "Discovered images:\t%d (spec.discover)\n", len(discovered))
	for _, d := range discovered {
		switch {
		case d.Reason != "":
			fmt.Fprintf(w, "  %s:%s\t%d locations, not followed: %s\n", d.Name, d.Tag, d.Locations, d.Reason)
		case d.Owned:
			fmt.Fprintf(w, "  %s:%s\t%d locations, ImagePolicy %s (made by the automation)\n", d.Name, d.Tag, d.Locations, d.Policy)
		default:
			fmt.Fprintf(w, "  %s:%s\t%d locations, ImagePolicy %s (the namespace's own)\n", d.Name, d.Tag, d.Locations, d.Policy)
		}
	}
}

// writeHolds writes the values a person set that the automation leaves,
// and what ends each hold.
func writeHolds(w io.Writer, holds []imagev1.AutomationHold) {
	if len(holds) == 0 {
		return
	}
	fmt.Fprintf(w, "Holds:\t%d (status.holds)\n", len(holds))
	for _, h := range holds {
		fmt.Fprintf(w, "  %s line %d, %s:\t%s (%s)\n", h.Path, h.Line, h.Setter, h.Value, h.Reason)
		fmt.Fprintf(w, "    Set by:\t%s in %s at %s, over %s\n", orText(h.Author, "unknown"), h.Commit, formatTimePtr(h.Since), orText(h.From, "unknown"))
		if h.Want != "" {
			fmt.Fprintf(w, "    Not written:\t%s\n", h.Want)
		}
		if h.Message != "" {
			fmt.Fprintf(w, "    Why:\t%s\n", h.Message)
		}
	}
}

// writeLastRun writes when the automation last ran and pushed, its last
// pull request, and its Ready condition.
func (e *AutomationExplanation) writeLastRun(w io.Writer) {
	fmt.Fprintf(w, "Last run:\t%s\n", formatTimePtr(e.LastRunTime))
	if e.LastPushCommit != "" {
		to := ""
		// A request's job pushes to the head branch, not the checkout
		// branch the lines above are about.
		if pr := e.LastPullRequest; pr != nil && pr.HeadCommit == e.LastPushCommit {
			to = " to the pull request's head branch"
		}
		fmt.Fprintf(w, "Last push:\t%s%s at %s\n", e.LastPushCommit, to, formatTimePtr(e.LastPushTime))
	}
	if pr := e.LastPullRequest; pr != nil {
		writeLastPullRequest(w, pr)
	}
	writeCondition(w, "Ready:", e.Ready)
}

// writePolicies writes the selected policies' table: latest image, the
// one the last run applied, and their markers.
func (e *AutomationExplanation) writePolicies(w io.Writer) {
	what := "all ImagePolicies of the namespace"
	if e.PolicySelector != "" {
		what = "ImagePolicies matching " + e.PolicySelector
	}
	fmt.Fprintf(w, "\nPolicies (%s):\n", what)
	if len(e.Policies) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	fmt.Fprintf(w, "  POLICY\tLATEST IMAGE\tAPPLIED BY THE LAST RUN\tSTATE\tMARKERS\n")
	for _, p := range e.Policies {
		markers := "unknown"
		if p.Markers != nil {
			markers = fmt.Sprint(*p.Markers)
			if len(p.Files) > 0 {
				markers += " (" + strings.Join(p.Files, ", ") + ")"
			}
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", p.Policy, refOr(p.LatestRef, "none"), refOr(p.Applied, "none"), p.State, markers)
	}
}

// writeLastJob writes the last finished UpdateJob: what it checked out,
// pushed and changed.
func (e *AutomationExplanation) writeLastJob(w io.Writer) {
	j := e.LastJob
	if j == nil {
		fmt.Fprintf(w, "\nLast job:\tnone finished yet\n")
		return
	}
	fmt.Fprintf(w, "\nLast job:\t%s (%s)\n", j.Name, j.Phase)
	if j.Error != "" {
		fmt.Fprintf(w, "  Job:\t%s\n", j.Error)
	}
	if j.CompletionTime != nil {
		fmt.Fprintf(w, "  Finished:\t%s\n", formatTime(j.CompletionTime.Time))
	}
	if j.CheckoutRevision != "" {
		fmt.Fprintf(w, "  Checked out:\t%s\n", j.CheckoutRevision)
	}
	if j.PushedCommit != "" {
		fmt.Fprintf(w, "  Pushed:\t%s to %s\n", j.PushedCommit, strings.Join(j.PushedRefs, ", "))
	}
	writeCondition(w, "  Ready:", j.Ready)
	if len(j.Changes) == 0 {
		return
	}
	fmt.Fprintf(w, "  Changes:\n")
	for _, f := range j.Changes {
		for _, o := range f.Objects {
			for _, ch := range o.Changes {
				fmt.Fprintf(w, "    %s %s/%s/%s: %s -> %s (%s)\n", e.inRepository(f.Path)[0], o.Kind, o.Namespace, o.Name, ch.OldValue, ch.NewValue, ch.Setter)
			}
		}
	}
}

// writeMarkers writes where the markers were read, the policies they name
// with what is wrong with each, and, after a scan, what a run would change.
func (e *AutomationExplanation) writeMarkers(w io.Writer) {
	m := e.Markers
	if m.From == "" {
		fmt.Fprintf(w, "\nMarkers:\tunknown: no finished UpdateJob recorded them; --scan-checkout DIR finds them in a local checkout\n")
	} else {
		fmt.Fprintf(w, "\nMarkers (from %s):\n", m.From)
	}
	found := slices.ContainsFunc(m.Policies, func(en markerEntry) bool { return en.Count == nil || *en.Count > 0 })
	if !found && m.Complete {
		fmt.Fprintln(w, "  none found")
	} else if found {
		writeMarkerTable(w, m.Policies)
	}
	if m.Omitted > 0 {
		fmt.Fprintf(w, "  (%d more policies, not listed in the job's status)\n", m.Omitted)
	}
	if len(m.WouldChange) > 0 {
		fmt.Fprintf(w, "  A run would change:\n")
		for _, c := range m.WouldChange {
			fmt.Fprintf(w, "    %s\n", c)
		}
	}
	for _, p := range m.ScanProblems {
		fmt.Fprintf(w, "  Not read: %s\n", p)
	}
}

// writeMarkerTable writes the policies markers name, with how many, where
// and what is wrong.
func writeMarkerTable(w io.Writer, entries []markerEntry) {
	fmt.Fprintf(w, "  POLICY\tMARKERS\tWHERE\tPROBLEM\n")
	for _, en := range entries {
		if en.Count != nil && *en.Count == 0 {
			continue // a setter no marker names: see the policies and problems
		}
		count := "some"
		if en.Count != nil {
			count = fmt.Sprint(*en.Count)
		}
		problem := orText(en.Problem, "-")
		if en.AppliedBy != "" {
			problem = "- (applied by automation " + en.AppliedBy + ")"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", en.Policy, count, orText(strings.Join(en.Files, ", "), "-"), problem)
	}
}

// writeSchedule writes where the automation stands in its update windows.
func writeSchedule(w io.Writer, sf *scheduleFacts) {
	if sf.Windows != "" {
		fmt.Fprintf(w, "Update windows:\t%s\n", sf.Windows)
	}
	switch {
	case sf.Error != "":
		fmt.Fprintf(w, "  Now:\tinvalid: %s\n", sf.Error)
	case sf.Open:
		fmt.Fprintf(w, "  Now:\topen until %s: changes get an UpdateJob\n", formatTime(sf.End.Time))
	default:
		fmt.Fprintf(w, "  Now:\tclosed: no UpdateJob until the next window, %s to %s (a job already running is left to finish)\n",
			formatTime(sf.Start.Time), formatTime(sf.End.Time))
	}
}

// writeLastPullRequest writes an automation's last pull request. Its state
// is the one the job saw: explain asks no forge, so a request merged or
// closed by hand since still shows open.
func writeLastPullRequest(w io.Writer, pr *updatev1.PullRequestStatus) {
	fmt.Fprintf(w, "Last pull request:\t#%d %s\n", pr.Number, pr.URL)
	state := fmt.Sprintf("%s when its job finished", pr.State)
	if pr.State == updatev1.PullRequestOpen {
		// The automation makes no job while the base and the policies
		// are as they were, so a request closed unmerged since waits.
		state += " (explain asks no forge; closed unmerged since, it is proposed again only once the base branch or a policy changes)"
	}
	fmt.Fprintf(w, "  State:\t%s\n", state)
	fmt.Fprintf(w, "  Action:\t%s\n", explainPullRequestAction(pr.Action))
	head := pr.HeadBranch
	if pr.HeadCommit != "" {
		head += " at " + pr.HeadCommit[:min(len(pr.HeadCommit), 7)]
	}
	fmt.Fprintf(w, "  Head branch:\t%s\n", head)
}

// explainPullRequestAction says what a job did to its request, and why.
func explainPullRequestAction(a updatev1.PullRequestAction) string {
	switch a {
	case updatev1.PullRequestOpened:
		return "opened"
	case updatev1.PullRequestUpdated:
		return "updated: a new commit on the head branch, or a new title or description"
	case updatev1.PullRequestUnchanged:
		return "unchanged: it already proposed the policies' values"
	case updatev1.PullRequestClosedNow:
		return "closed: the base branch already had the policies' values"
	}
	return string(a)
}

// writeCondition writes a condition as status, reason: message.
func writeCondition(w io.Writer, label string, c *metav1.Condition) {
	if c == nil {
		fmt.Fprintf(w, "%s\tunknown: no Ready condition yet\n", label)
		return
	}
	fmt.Fprintf(w, "%s\t%s, %s: %s\n", label, c.Status, c.Reason, c.Message)
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func formatTimePtr(t *metav1.Time) string {
	if t == nil {
		return "never"
	}
	return formatTime(t.Time)
}

// shortRevision abbreviates a sha256:<hex> scan revision as git does a
// commit.
func shortRevision(rev string) string {
	if algo, hex, ok := strings.Cut(rev, ":"); ok && len(hex) > 12 {
		return algo + ":" + hex[:12]
	}
	return orText(rev, "unknown")
}

func quoteList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "(" + strings.Join(q, ", ") + ")"
}

func orText(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

func refOr(r *meta.ImageRef, fallback string) string {
	if r == nil {
		return fallback
	}
	return r.String()
}

func ptrTo[T any](v T) *T { return &v }

// InFlightJob is the automation's unfinished UpdateJob, if any (an
// automation has at most one at a time), as its own (UpdateJob.View).
func InFlightJob(ctx context.Context, c client.Client, auto *imagev1.ImageUpdateAutomation) (*updatev1.UpdateJob, error) {
	var jobs updatev1.UpdateJobList
	if err := c.List(ctx, &jobs, client.InNamespace(auto.Namespace)); err != nil {
		return nil, err
	}
	for _, j := range updatev1.ViewsOf(auto.UID, jobs.Items) {
		if !j.Status.Phase.Finished() {
			return &j, nil
		}
	}
	return nil, nil
}

// AsOwnJob is job as the automation uid's own (View). A job that carries
// nothing of uid's is returned as it is: the automation's status named it,
// so it is the best account there is.
func AsOwnJob(job *updatev1.UpdateJob, uid types.UID) *updatev1.UpdateJob {
	if v, ok := job.View(uid); ok {
		return v
	}
	return job
}
