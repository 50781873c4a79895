package explain

import (
	"context"
	"fmt"
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
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/schedule"
	"toolkit.dev/image-toolkit/pkg/selection"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// The ImageUpdateAutomation explainer: its policies against what its last
// job applied, the schedule, the jobs, the markers of the last job or of a
// local checkout, and why each policy was or was not applied, read from
// status (branchHead, head.go, is the one read from the git server).

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
	LastPullRequest *meta.PullRequestStatus `json:"lastPullRequest,omitempty"`
	Ready           *metav1.Condition       `json:"ready,omitempty"`
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
		switch h.Reason {
		case imagev1.HeldByPersonReason:
			e.Problems = append(e.Problems, fmt.Sprintf("%s in %s is held at %s, as %s set it (tk-image release automation %s -n %s releases it)",
				h.Setter, h.Path, h.Value, orText(h.Author, "a person"), name, ns))
		case imagev1.HeldWithGroupReason:
			e.Problems = append(e.Problems, fmt.Sprintf("%s in %s is held at %s with %s, held in the same promotion group (releasing %s's hold releases it)",
				h.Setter, h.Path, h.Value, h.HeldWith, h.HeldWith))
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
