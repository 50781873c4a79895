package dashboard

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/selection"
)

// StateKind is the one word the Fleet page files an automation under.
type StateKind string

const (
	StateUpToDate  StateKind = "up-to-date"
	StatePending   StateKind = "pending"
	StateRunning   StateKind = "running"
	StateFailing   StateKind = "failing"
	StateSuspended StateKind = "suspended"
)

// stateKinds are the states in the order the filter offers them.
var stateKinds = []StateKind{StateFailing, StatePending, StateRunning, StateUpToDate, StateSuspended}

// State is where an automation stands, and why, in a sentence.
type State struct {
	Kind StateKind
	// Reason is a short label: the condition reason, or what waits.
	Reason string
	// Detail is the sentence behind it (a condition message, a tag and
	// its time left).
	Detail string
	// Why says, of a failure, the reason in words, since when, the object
	// at fault and the next step.
	Why *Diagnosis
}

// ImageRow is one policy an automation applies: what its last run applied
// against what the policy chose, and what waits behind that.
type ImageRow struct {
	// Policy is the ImagePolicy's name, in the automation's namespace.
	Namespace, Policy string
	// Repository is the policy's ImageRepository, for the Image page.
	RepoNamespace, Repository string
	Image                     string
	Current, Newest           string
	// Pending is a tag a minimum age holds back, and until when.
	Pending   string
	PendingAt *metav1.Time
	// Promotion says what a promotion policy waits for: the upstream's
	// health, or its soak (PendingAt is then when the soak ends).
	Promotion string
	// Unverified is a better tag whose signature did not verify, and why.
	Unverified string
	// Held is a tag kept although the latest scan lacks it.
	Held string
}

// Outdated reports whether the automation has yet to apply the newest tag.
func (r ImageRow) Outdated() bool { return r.Newest != "" && r.Current != r.Newest }

// FleetRow is one automation on the Fleet page.
type FleetRow struct {
	Namespace, Name string
	Source          string
	// SourceURL is the repository's address, credentials removed.
	SourceURL string
	Branch    string
	State     State
	Images    []ImageRow
	// Commit is the last pushed commit; CommitURL its page on the forge
	// when the repository is on one.
	Commit, CommitURL string
	CommitTime        *metav1.Time
	PullRequest       *meta.PullRequestStatus
	LastRun           *metav1.Time
	Suspended         bool
	// Holds is whether a person holds a value the automation would
	// write (status.holds), which Release holds ends.
	Holds bool
	// Changed is what the last push changed (status.history's newest
	// entry), when it is the last commit: from → to for each image.
	Changed []imagev1.PushedImage
	// MoreChanged counts the images the entry does not list.
	MoreChanged int
	// Actions are the row's buttons, nil when read-only.
	Actions *Controls
}

// ID is the row's element id: namespace and name cannot hold a slash.
func (r FleetRow) ID() string { return "a/" + r.Namespace + "/" + r.Name }

// namespaceObjects are the policies and UpdateJobs of one namespace,
// indexed once for all its automations' rows.
type namespaceObjects struct {
	policies []imagev1.ImagePolicy
	byName   map[string]*imagev1.ImagePolicy
	// inFlight is each automation's unfinished job, as its own (View), by
	// the automation's UID; byUID each job, as it is, by its own.
	inFlight map[types.UID]*updatev1.UpdateJob
	byUID    map[types.UID]*updatev1.UpdateJob
}

func newNamespaceObjects(policies []imagev1.ImagePolicy, jobs []updatev1.UpdateJob) *namespaceObjects {
	o := &namespaceObjects{policies: policies, byName: make(map[string]*imagev1.ImagePolicy, len(policies)),
		inFlight: map[types.UID]*updatev1.UpdateJob{}, byUID: make(map[types.UID]*updatev1.UpdateJob, len(jobs))}
	for i := range policies {
		o.byName[policies[i].Name] = &policies[i]
	}
	for i := range jobs {
		j := &jobs[i]
		o.byUID[j.UID] = j
		// A finished job is finished for each automation it carries, and
		// a view of each member of a batch copies the batch: only the
		// jobs in flight are seen through View.
		if j.Status.Phase.Finished() {
			continue
		}
		for _, uid := range j.Automations() {
			if v, ok := j.View(uid); ok && !v.Status.Phase.Finished() {
				o.inFlight[uid] = v
			}
		}
	}
	return o
}

// fleetRow describes one automation from the objects of its namespace:
// its policies (for the images and their waits) and its UpdateJobs (for
// the repository address and the job in flight). now is for time left.
func fleetRow(a *imagev1.ImageUpdateAutomation, objs *namespaceObjects, now time.Time) FleetRow {
	row := FleetRow{
		Namespace:   a.Namespace,
		Name:        a.Name,
		Commit:      a.Status.LastPushCommit,
		CommitTime:  a.Status.LastPushTime,
		PullRequest: a.Status.LastPullRequest,
		LastRun:     a.Status.LastAutomationRunTime,
		Suspended:   a.Spec.Suspend,
		Holds:       slices.ContainsFunc(a.Status.Holds, func(h imagev1.AutomationHold) bool { return h.Reason == imagev1.HeldByPersonReason }),
	}
	if h := a.Status.History; len(h) > 0 && (h[0].Commit == row.Commit || row.Commit == "") {
		row.Changed, row.MoreChanged = h[0].Images, h[0].MoreImages
		if row.CommitTime == nil {
			row.CommitTime = &h[0].Time
		}
	}
	row.Source, row.SourceURL, row.Branch = source(a, objs)
	if row.Commit != "" {
		row.CommitURL = forge.CommitURL(row.SourceURL, forgeOf(a), row.Commit)
	}
	sel, selErr := selection.Selector(a)
	// Only the policies the automation selects can get a row: selection.Of
	// sorts all it is given, which for every automation of a namespace of
	// a thousand would be most of the page's time.
	var candidates []imagev1.ImagePolicy
	if sel != nil {
		followed := selection.Followed(a)
		for i := range objs.policies {
			if p := &objs.policies[i]; p.Namespace == a.Namespace && (followed[p.Name] || sel.Matches(labels.Set(p.Labels))) {
				candidates = append(candidates, *p)
			}
		}
	}
	for _, p := range selection.Of(a, sel, candidates).Policies {
		if p.By != "" {
			row.Images = append(row.Images, imageRow(a, objs.byName[p.Name]))
		}
	}
	row.State = automationState(a, row.Images, objs.byName, objs.inFlight[a.UID], selErr, now)
	return row
}

func imageRow(a *imagev1.ImageUpdateAutomation, p *imagev1.ImagePolicy) ImageRow {
	r := ImageRow{Namespace: p.Namespace, Policy: p.Name, Repository: p.Spec.ImageRepositoryRef.Name, RepoNamespace: p.Spec.ImageRepositoryRef.Namespace}
	if r.RepoNamespace == "" {
		r.RepoNamespace = p.Namespace
	}
	if l := p.Status.LatestRef; l != nil {
		r.Image, r.Newest = l.Name, l.Tag
	}
	if applied, ok := a.Status.ObservedPolicies[p.Name]; ok {
		r.Current = applied.Tag
		if r.Image == "" {
			r.Image = applied.Name
		}
	}
	if pr := p.Status.PendingRef; pr != nil {
		r.Pending, r.PendingAt = pr.Tag, pr.EligibleAt
		if p.Spec.Policy.Promotion != nil {
			r.Promotion = promotionWait(pr, p.Spec.Policy.Promotion.Approval == imagev1.ApprovalRequired)
		}
	}
	if u := p.Status.UnverifiedRef; u != nil {
		r.Unverified = fmt.Sprintf("%s (%s)", u.Tag, u.Reason)
	}
	if h := p.Status.HeldRef; h != nil {
		r.Held = h.Tag
	}
	return r
}

// automationState decides the state from status alone, most urgent first:
// suspended, failing (Ready=False, Stalled, a bad selector, a failing
// policy), running (a job in flight), then pending with the first reason
// that holds an image back, else up to date. Ready=False for
// DependencyNotReady (no selected policy has a latest image) is no failure
// but a wait, e.g. for a minimum age.
func automationState(a *imagev1.ImageUpdateAutomation, images []ImageRow, policies map[string]*imagev1.ImagePolicy,
	job *updatev1.UpdateJob, selErr error, now time.Time) State {
	ready := apimeta.FindStatusCondition(a.Status.Conditions, conditions.ReadyCondition)
	switch {
	case a.Spec.Suspend:
		return State{Kind: StateSuspended, Reason: "suspended", Detail: "spec.suspend is set: no UpdateJobs until resumed"}
	case selErr != nil:
		return State{Kind: StateFailing, Reason: imagev1.InvalidPolicySelectorReason, Detail: selErr.Error()}
	case ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason != conditions.DependencyNotReadyReason:
		return State{Kind: StateFailing, Reason: ready.Reason, Detail: ready.Message, Why: diagnose(ready, subject{automation: a}, now)}
	}
	if stalled := apimeta.FindStatusCondition(a.Status.Conditions, conditions.StalledCondition); stalled != nil && stalled.Status == metav1.ConditionTrue {
		// Stalled=True is the failure: diagnose it as a Ready=False.
		c := *stalled
		c.Status = metav1.ConditionFalse
		return State{Kind: StateFailing, Reason: stalled.Reason, Detail: stalled.Message, Why: diagnose(&c, subject{automation: a}, now)}
	}
	for _, img := range images {
		p := policies[img.Policy]
		if c := apimeta.FindStatusCondition(p.Status.Conditions, conditions.ReadyCondition); c != nil &&
			c.Status == metav1.ConditionFalse && !waitingReasons[c.Reason] {
			d := diagnose(c, subject{policy: p}, now)
			if d.Culprit == nil {
				d.Culprit = pageOf(imagev1.ImagePolicyKind, p.Namespace, p.Name)
			}
			return State{Kind: StateFailing, Reason: c.Reason, Detail: fmt.Sprintf("ImagePolicy %s: %s", p.Name, c.Message), Why: d}
		}
	}
	if job != nil {
		return State{Kind: StateRunning, Reason: "UpdateJob " + string(orPhase(job.Status.Phase)), Detail: "UpdateJob " + job.Name + " is " + strings.ToLower(string(orPhase(job.Status.Phase)))}
	}
	if ready == nil {
		return State{Kind: StatePending, Reason: "not reconciled yet", Detail: "the automation controller has not reported on it yet"}
	}
	if s, ok := waiting(a, images, ready, now); ok {
		return s
	}
	// No policy has a latest image yet, and none waits a minimum age
	// (that is above): the policies have yet to choose.
	if ready.Status == metav1.ConditionFalse {
		return State{Kind: StatePending, Reason: "waiting for policies", Detail: ready.Message}
	}
	return State{Kind: StateUpToDate, Reason: "up to date", Detail: ready.Message}
}

// waiting is the first reason an image waits: a run still to come (in an
// update window, or the next interval), a pull request not merged yet, a
// minimum age, a held downgrade.
func waiting(a *imagev1.ImageUpdateAutomation, images []ImageRow, ready *metav1.Condition, now time.Time) (State, bool) {
	var outdated []string
	for _, img := range images {
		if img.Outdated() {
			outdated = append(outdated, fmt.Sprintf("%s %s → %s", img.Policy, orText(img.Current, "none"), img.Newest))
		}
	}
	if len(outdated) > 0 {
		if ready.Reason == imagev1.OutsideUpdateWindowReason {
			return State{Kind: StatePending, Reason: "update window", Detail: ready.Message}, true
		}
		return State{Kind: StatePending, Reason: "next run", Detail: "not applied yet: " + strings.Join(outdated, ", ")}, true
	}
	if pr := a.Status.LastPullRequest; pr != nil && pr.State == meta.PullRequestOpen {
		return State{Kind: StatePending, Reason: "pull request open", Detail: fmt.Sprintf("pull request #%d waits to be merged: %s", pr.Number, pr.URL)}, true
	}
	for _, img := range images {
		if img.Promotion != "" {
			return State{Kind: StatePending, Reason: "promotion waiting", Detail: img.Policy + " " + img.Promotion}, true
		}
		if img.Pending != "" && img.PendingAt != nil {
			return State{Kind: StatePending, Reason: "minimum age", Detail: fmt.Sprintf("%s %s is old enough in %s (at %s)",
				img.Policy, img.Pending, TimeLeft(img.PendingAt.Time, now), img.PendingAt.UTC().Format(time.RFC3339))}, true
		}
	}
	for _, img := range images {
		if img.Unverified != "" {
			return State{Kind: StatePending, Reason: "signature unverified", Detail: fmt.Sprintf("%s stays %s: the better %s did not verify",
				img.Policy, orText(img.Current, img.Newest), img.Unverified)}, true
		}
	}
	for _, img := range images {
		if img.Held != "" {
			return State{Kind: StatePending, Reason: "downgrade held", Detail: fmt.Sprintf("%s keeps %s, which the latest scan does not list", img.Policy, img.Held)}, true
		}
	}
	return State{}, false
}

// waitingReasons are the ImagePolicy Ready=False reasons that are a wait
// by design, not a failure: a minimum age, a promotion's upstream health
// or soak.
var waitingReasons = map[string]bool{
	imagev1.MinimumAgeNotReachedReason:  true,
	imagev1.UpstreamNotHealthyReason:    true,
	imagev1.SoakNotElapsedReason:        true,
	imagev1.AwaitingApprovalReason:      true,
	imagev1.PromotionGroupWaitingReason: true,
}

// promotionWait says what a promotion's pending image waits for.
// Under approval Required it also says whether a person approved it.
func promotionWait(pr *imagev1.PendingRef, approval bool) string {
	what := pr.Tag
	if pr.UpstreamRevision != "" {
		what += " from " + shortCommit(pr.UpstreamRevision)
	}
	approved := ""
	switch {
	case !approval:
	case pr.Approval != nil:
		approved = "; approved by " + pr.Approval.By
	default:
		approved = "; waits for an approval"
	}
	if pr.HealthSeen == nil {
		return what + " waits for the upstream to run it healthy" + approved
	}
	msg := what + " ran healthy upstream since " + pr.HealthSeen.UTC().Format(time.RFC3339)
	if pr.SoakLeft != nil {
		msg += "; soak left " + pr.SoakLeft.Duration.Round(time.Second).String()
	}
	return msg + approved
}

// TimeLeft says how long until t, to the minute (seconds under one).
func TimeLeft(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d <= 0:
		return "0s (due now)"
	case d < time.Minute:
		return d.Round(time.Second).String()
	}
	s := strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	return strings.Replace(s, "h0m", "h", 1)
}

// source says where the automation writes: its own repository, or a Flux
// GitRepository, whose address the automation's last job recorded.
func source(a *imagev1.ImageUpdateAutomation, objs *namespaceObjects) (describe, address, branch string) {
	if c := a.Spec.GitSpec.Checkout; c != nil {
		branch = c.Reference.Branch
	}
	if r := a.Spec.GitSpec.Repository; r != nil {
		address = withoutUser(r.URL)
		describe = address
	} else if s := a.Spec.SourceRef; s != nil {
		ns := s.Namespace
		if ns == "" {
			ns = a.Namespace
		}
		kind := s.Kind
		if kind == "" {
			kind = "GitRepository"
		}
		describe = kind + " " + ns + "/" + s.Name
	}
	if last := a.Status.LastJob; last != nil {
		if j := objs.byUID[last.UID]; j != nil {
			address = withoutUser(j.Spec.Repository.URL)
			if branch == "" {
				branch = j.Spec.Checkout.Reference.Branch
			}
		}
	}
	return describe, address, branch
}

// withoutUser is a repository address without its user and password: a
// page shows no credentials, not even redacted ones.
func withoutUser(address string) string {
	u, err := url.Parse(address)
	if err != nil || u.User == nil {
		return git.Redact(address)
	}
	u.User = nil
	return u.String()
}

// forgeOf is the forge an automation names for its pull requests, if any.
func forgeOf(a *imagev1.ImageUpdateAutomation) forge.Provider {
	if p := a.Spec.GitSpec.Push; p != nil && p.PullRequest != nil {
		return forge.Provider(p.PullRequest.Provider)
	}
	return ""
}

// FleetFilter is the Fleet page's query: namespace, state and a search
// over names, sources, images and reasons.
type FleetFilter struct {
	Namespace string
	State     string
	Search    string
}

// Match reports whether a row passes the filter.
func (f FleetFilter) Match(r FleetRow) bool {
	if f.Namespace != "" && r.Namespace != f.Namespace {
		return false
	}
	if f.State != "" && string(r.State.Kind) != f.State {
		return false
	}
	if q := strings.ToLower(strings.TrimSpace(f.Search)); q != "" {
		hay := []string{r.Namespace + "/" + r.Name, r.Source, r.SourceURL, r.State.Reason, r.State.Detail}
		for _, img := range r.Images {
			hay = append(hay, img.Image, img.Policy, img.Current, img.Newest)
		}
		return slices.ContainsFunc(hay, func(s string) bool { return strings.Contains(strings.ToLower(s), q) })
	}
	return true
}

func orPhase(p updatev1.UpdateJobPhase) updatev1.UpdateJobPhase {
	if p == "" {
		return updatev1.UpdateJobPending
	}
	return p
}

func orText(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
