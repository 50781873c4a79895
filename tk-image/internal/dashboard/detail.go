package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/policy"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/selection"
	"toolkit.dev/image-toolkit/tk-image/internal/explain"
)

// maxEvents is how many of an object's events a page lists, newest first.
const maxEvents = 30

// JobRow is one UpdateJob on an automation's timeline.
type JobRow struct {
	Name        string
	Phase       updatev1.UpdateJobPhase
	Created     metav1.Time
	Started     *metav1.Time
	Finished    *metav1.Time
	Duration    string
	Commit      string
	CommitURL   string
	PullRequest *meta.PullRequestStatus
	Files       int
	Message     string
}

// EventRow is one Kubernetes Event about an object.
type EventRow struct {
	Type, Reason, Message string
	Count                 int32
	Last                  time.Time
}

type automationBody struct {
	Row        FleetRow
	Explain    *explain.AutomationExplanation
	ExplainErr string
	// ExplainText is explain's own text, for everything the page does
	// not lay out.
	ExplainText string
	Jobs        []JobRow
	History     []HistoryRow
	Chart       *VersionChart
	Events      []EventRow
	EventsErr   string
	Timeline    []TimelineEntry
}

func (s *Server) automation(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	a := &imagev1.ImageUpdateAutomation{}
	key, ok := s.read(ctx, w, r, a)
	if !ok {
		return
	}
	var policies imagev1.ImagePolicyList
	var jobs updatev1.UpdateJobList
	_ = s.store.list(ctx, "imagepolicies", &policies, client.InNamespace(key.Namespace))
	_ = s.store.list(ctx, "updatejobs", &jobs, client.InNamespace(key.Namespace))
	body := &automationBody{Row: fleetRow(a, newNamespaceObjects(policies.Items, jobs.Items), s.opts.Now())}
	body.Row.Actions = s.controls(ctx, "imageupdateautomations", key.Namespace, key.Name, body.Row.Suspended, body.Row.Holds, nil)
	// explain's account is part of the live region, so that no part of
	// the page lags another; the branch head it lists from the git server
	// is kept until the automation's status moves (heads).
	if s.down() {
		body.ExplainErr = notRead
	} else {
		body.explain(ctx, s.direct, key, s.heads.list)
	}
	body.Jobs = jobTimeline(a, jobs.Items, body.Row.SourceURL)
	body.History = historyOf(a, body.Row.SourceURL)
	body.Chart = versionChart(body.History)
	body.Events, body.EventsErr = s.eventsOf(ctx, a)
	body.Timeline = timelineOf(a, body.History, body.Events)
	s.render(w, r, "automation", http.StatusOK, s.view(r, "Automation "+key.String(), key.Namespace, body))
}

// explain adds what tk-image explain automation says, read through the
// direct client with the user's rights.
func (b *automationBody) explain(ctx context.Context, c client.Client, key types.NamespacedName, heads explain.HeadLister) {
	e, err := explain.AutomationWith(ctx, c, key, explain.Options{Heads: heads})
	if err != nil {
		b.ExplainErr = err.Error()
		return
	}
	b.Explain = e
	b.ExplainText = explainText(e)
}

// explainText is explain's text as tk-image explain prints it: its
// tab-separated columns aligned, as a <pre> shows them.
func explainText(e explain.Explanation) string {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	e.Text(tw)
	_ = tw.Flush()
	return buf.String()
}

// jobTimeline lists the automation's UpdateJobs, newest first, each as
// its own (a batch with the automation's update and outcome).
func jobTimeline(a *imagev1.ImageUpdateAutomation, jobs []updatev1.UpdateJob, address string) []JobRow {
	var rows []JobRow
	for _, j := range updatev1.ViewsOf(a.UID, jobs) {
		row := JobRow{Name: j.Name, Phase: orPhase(j.Status.Phase), Created: j.CreationTimestamp,
			Started: j.Status.StartTime, Finished: j.Status.CompletionTime, Commit: j.Status.PushedCommit,
			PullRequest: j.Status.PullRequest}
		if row.Commit != "" {
			row.CommitURL = forge.CommitURL(orText(withoutUser(j.Spec.Repository.URL), address), forgeOf(a), row.Commit)
		}
		if s, f := j.Status.StartTime, j.Status.CompletionTime; s != nil && f != nil {
			row.Duration = f.Sub(s.Time).Round(time.Second).String()
		}
		if res := j.Status.Result; res != nil {
			row.Files = len(res.Files)
		}
		if c := apimeta.FindStatusCondition(j.Status.Conditions, conditions.ReadyCondition); c != nil {
			row.Message = c.Message
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(x, y JobRow) int { return y.Created.Compare(x.Created.Time) })
	return rows
}

// eventsOf lists the Events about obj, newest first; a refusal is shown,
// not fatal.
func (s *Server) eventsOf(ctx context.Context, obj client.Object) ([]EventRow, string) {
	if s.down() {
		return nil, "events: " + notRead
	}
	var list corev1.EventList
	err := s.direct.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{"involvedObject.uid": string(obj.GetUID())})
	if err != nil {
		return nil, "events: " + err.Error()
	}
	rows := make([]EventRow, 0, len(list.Items))
	for _, e := range list.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.IsZero() {
			last = e.CreationTimestamp.Time
		}
		rows = append(rows, EventRow{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: max(e.Count, 1), Last: last})
	}
	slices.SortFunc(rows, func(x, y EventRow) int { return y.Last.Compare(x.Last) })
	if len(rows) > maxEvents {
		rows = rows[:maxEvents]
	}
	return rows, ""
}

// PolicyView is one ImagePolicy of an image: what it chose and why the
// better tags were dropped.
type PolicyView struct {
	Namespace, Name string
	Suspended       bool
	Rules           string
	Latest          *meta.ImageRef
	LatestTime      *metav1.MicroTime
	Pending         *imagev1.PendingRef
	// Promotion says what a promotion policy's pending image waits for.
	Promotion string
	// Approval is who approved the promotion of Latest.
	Approval     *imagev1.PromotionApproval
	Verification *imagev1.VerificationStatus
	Unverified   *imagev1.UnverifiedRef
	// Source is where the chosen image says (or a verified provenance
	// says) it was built from.
	Source    *meta.ImageSource
	Held      *imagev1.HeldRef
	Selection *imagev1.TagSelection
	Drops     []policy.Drop
	Ready     *metav1.Condition
	// Why diagnoses a Ready=False.
	Why *Diagnosis
	// Repository links the ImageRepository it follows.
	Repository *ObjectLink
	// Breakdown is explain's own account of the selection.
	Breakdown string
	// UsedBy are the automations that apply it, and where.
	UsedBy []Usage
	// Actions are its buttons, nil when read-only.
	Actions *Controls
}

// Usage is an automation that applies a policy, and the files its last
// job found markers for it in.
type Usage struct {
	Namespace, Automation string
	Files                 []string
}

type imageBody struct {
	Repository *imagev1.ImageRepository
	// Missing is set when no such ImageRepository exists: the page then
	// lists the policies that name it, whose Ready says so.
	Missing  bool
	Actions  *Controls
	Ready    *metav1.Condition
	Why      *Diagnosis
	Policies []PolicyView
}

func (s *Server) image(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	repo := &imagev1.ImageRepository{}
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	body := &imageBody{Repository: repo}
	status := http.StatusOK
	if err := s.get(ctx, key, repo); apierrors.IsNotFound(err) {
		// Policies name it, and a link from one of them leads here: say
		// what is missing and who waits for it, not a bare 404.
		body.Missing, status = true, http.StatusNotFound
		repo.Namespace, repo.Name = key.Namespace, key.Name
	} else if err != nil {
		s.apiError(w, r, err)
		return
	} else {
		body.Ready = apimeta.FindStatusCondition(repo.Status.Conditions, conditions.ReadyCondition)
		body.Why = diagnose(body.Ready, subject{repository: repo}, s.opts.Now())
		body.Actions = s.controls(ctx, "imagerepositories", key.Namespace, key.Name, repo.Spec.Suspend, false, nil)
	}
	var policies imagev1.ImagePolicyList
	var autos imagev1.ImageUpdateAutomationList
	var jobs updatev1.UpdateJobList
	_ = s.store.list(ctx, "imagepolicies", &policies)
	_ = s.store.list(ctx, "imageupdateautomations", &autos)
	_ = s.store.list(ctx, "updatejobs", &jobs)
	for i := range policies.Items {
		p := &policies.Items[i]
		ref := p.Spec.ImageRepositoryRef
		if ref.Name != key.Name || orText(ref.Namespace, p.Namespace) != key.Namespace {
			continue
		}
		v := policyView(ctx, s.explainer(), p, autos.Items, policies.Items, jobs.Items, s.opts.Now())
		v.Actions = s.controls(ctx, "imagepolicies", p.Namespace, p.Name, p.Spec.Suspend, false, awaitingApproval(p))
		body.Policies = append(body.Policies, v)
	}
	title := "Image " + orText(repo.Status.CanonicalImageName, repo.Spec.Image)
	if body.Missing {
		title = "ImageRepository " + key.String() + " does not exist"
	}
	s.render(w, r, "image", status, s.view(r, title, key.Namespace, body))
}

// awaitingApproval is the image p's promotion waits for a person to
// approve: nil unless approval is Required and an image waits unapproved.
func awaitingApproval(p *imagev1.ImagePolicy) *meta.ImageRef {
	pr := p.Spec.Policy.Promotion
	pending := p.Status.PendingRef
	if pr == nil || pr.Approval != imagev1.ApprovalRequired || pending == nil || pending.Image == nil || pending.Approval != nil {
		return nil
	}
	return pending.Image
}

func policyView(ctx context.Context, c client.Client, p *imagev1.ImagePolicy, autos []imagev1.ImageUpdateAutomation,
	policies []imagev1.ImagePolicy, jobs []updatev1.UpdateJob, now time.Time) PolicyView {
	v := PolicyView{Namespace: p.Namespace, Name: p.Name, Suspended: p.Spec.Suspend, Latest: p.Status.LatestRef, LatestTime: p.Status.LatestRefTime,
		Pending: p.Status.PendingRef, Held: p.Status.HeldRef, Selection: p.Status.LastSelection,
		Verification: p.Status.Verification, Unverified: p.Status.UnverifiedRef, Source: p.Status.LatestSource,
		Ready: apimeta.FindStatusCondition(p.Status.Conditions, conditions.ReadyCondition)}
	v.Why = diagnose(v.Ready, subject{policy: p}, now)
	v.Repository = pageOf(imagev1.ImageRepositoryKind, orText(p.Spec.ImageRepositoryRef.Namespace, p.Namespace), p.Spec.ImageRepositoryRef.Name)
	if pr := p.Status.PendingRef; pr != nil && p.Spec.Policy.Promotion != nil {
		v.Promotion = promotionWait(pr, p.Spec.Policy.Promotion.Approval == imagev1.ApprovalRequired)
	}
	if st := p.Status.Promotion; st != nil {
		v.Approval = st.Approval
	}
	if k, ok := policy.Chosen(p.Spec.Policy); ok {
		v.Rules = k.Describe(p.Spec.Policy)
		if v.Selection != nil {
			v.Drops = k.Drops(p.Spec.Policy, *v.Selection)
		}
	}
	if c != nil {
		if e, err := explain.Policy(ctx, c, client.ObjectKeyFromObject(p)); err == nil {
			v.Breakdown = explainText(e)
		}
	}
	v.UsedBy = usages(p, autos, policies, jobs)
	return v
}

// usages are the automations of p's namespace that select it, with the
// files their last job found its markers in.
func usages(p *imagev1.ImagePolicy, autos []imagev1.ImageUpdateAutomation, policies []imagev1.ImagePolicy, jobs []updatev1.UpdateJob) []Usage {
	var out []Usage
	key := updatev1.PolicyKey(p.Namespace, p.Name)
	for i := range autos {
		a := &autos[i]
		if a.Namespace != p.Namespace {
			continue
		}
		// Selected whether or not it has chosen yet: the automation will
		// apply it once it has.
		sel, err := selection.Selector(a)
		if err != nil {
			continue
		}
		if of := selection.Of(a, sel, []imagev1.ImagePolicy{*p}); len(of.Policies) != 1 || of.Policies[0].By == "" {
			continue
		}
		u := Usage{Namespace: a.Namespace, Automation: a.Name}
		if last := a.Status.LastJob; last != nil {
			for i := range jobs {
				if jobs[i].UID != last.UID {
					continue
				}
				j := explain.AsOwnJob(&jobs[i], a.UID)
				if j.Status.Result == nil {
					continue
				}
				for _, m := range j.Status.Result.Markers {
					if m.Policy == key {
						u.Files = fileLines(m)
					}
				}
			}
		}
		out = append(out, u)
	}
	return out
}

type policyBody struct {
	Policy    PolicyView
	Events    []EventRow
	EventsErr string
}

// policy is an ImagePolicy's own page: its rule, what it chose and
// dropped, its verification, promotion or hold, its Ready with the next
// step, where it is used, and its events.
func (s *Server) policy(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	p := &imagev1.ImagePolicy{}
	key, ok := s.read(ctx, w, r, p)
	if !ok {
		return
	}
	var policies imagev1.ImagePolicyList
	var autos imagev1.ImageUpdateAutomationList
	var jobs updatev1.UpdateJobList
	_ = s.store.list(ctx, "imagepolicies", &policies, client.InNamespace(key.Namespace))
	_ = s.store.list(ctx, "imageupdateautomations", &autos, client.InNamespace(key.Namespace))
	_ = s.store.list(ctx, "updatejobs", &jobs, client.InNamespace(key.Namespace))
	body := &policyBody{Policy: policyView(ctx, s.explainer(), p, autos.Items, policies.Items, jobs.Items, s.opts.Now())}
	body.Policy.Actions = s.controls(ctx, "imagepolicies", key.Namespace, key.Name, p.Spec.Suspend, false, awaitingApproval(p))
	body.Events, body.EventsErr = s.eventsOf(ctx, p)
	s.render(w, r, "policy", http.StatusOK, s.view(r, "ImagePolicy "+key.String(), key.Namespace, body))
}

// WebhookRow is one receiver.
type WebhookRow struct {
	Kind, Namespace, Name, Type, Path string
	Suspended                         bool
	Ready                             *metav1.Condition
	Selector                          string
	// Calls are the calls answered, as the receivers last recorded them.
	Calls *imagev1.WebhookCalls
}

type webhooksBody struct {
	Rows []WebhookRow
}

func (s *Server) webhooks(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	var images imagev1.ImageWebhookList
	var gits imagev1.GitWebhookList
	body := &webhooksBody{}
	if err := s.store.list(r.Context(), "imagewebhooks", &images, client.InNamespace(ns)); err != nil {
		s.serverError(w, err)
		return
	}
	if err := s.store.list(r.Context(), "gitwebhooks", &gits, client.InNamespace(ns)); err != nil {
		s.serverError(w, err)
		return
	}
	for _, h := range images.Items {
		body.Rows = append(body.Rows, webhookRow("ImageWebhook", &h, h.Spec.Type, h.Spec.Suspend, h.Spec.ImageRepositorySelector, h.Status))
	}
	for _, h := range gits.Items {
		body.Rows = append(body.Rows, webhookRow("GitWebhook", &h, h.Spec.Type, h.Spec.Suspend, h.Spec.AutomationSelector, h.Status))
	}
	s.render(w, r, "webhooks", http.StatusOK, s.view(r, "Webhooks", ns, body))
}

func webhookRow(kind string, obj client.Object, typ string, suspend bool, sel *metav1.LabelSelector, st imagev1.WebhookStatus) WebhookRow {
	row := WebhookRow{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Type: typ, Path: st.WebhookPath,
		Suspended: suspend, Ready: apimeta.FindStatusCondition(st.Conditions, conditions.ReadyCondition), Selector: "everything",
		Calls: st.Calls}
	if sel != nil {
		row.Selector = metav1.FormatLabelSelector(sel)
	}
	return row
}

// read gets the object the request's path names into obj, with the user's
// rights (not from the cache: a page of one object shows it as it is now);
// when that fails it answers the request and returns false.
func (s *Server) read(ctx context.Context, w http.ResponseWriter, r *http.Request, obj client.Object) (types.NamespacedName, bool) {
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if err := s.get(ctx, key, obj); err != nil {
		s.apiError(w, r, err)
		return key, false
	}
	return key, true
}

// get reads one object with the user's rights, as it is now; while the
// API server does not answer, what the cache last saw, which the page's
// stale banner qualifies, rather than a gateway error after a timeout.
func (s *Server) get(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	if s.down() {
		return s.store.reader.Get(ctx, key, obj)
	}
	rctx, cancel := context.WithTimeout(ctx, directTimeout)
	defer cancel()
	err := s.direct.Get(rctx, key, obj)
	var status apierrors.APIStatus
	if err != nil && !errors.As(err, &status) && ctx.Err() == nil {
		// No status came back: the API server did not answer. A page
		// can learn it before the probe does.
		s.health.observe(err)
		if s.store.reader.Get(ctx, key, obj) == nil {
			return nil
		}
	}
	return err
}

// explainer is the client explain reads with; nil (no explain) while the
// API server does not answer.
func (s *Server) explainer() client.Client {
	if s.down() {
		return nil
	}
	return s.direct
}

// directTimeout bounds a page's read of one object from the API server
// before it falls back to the cache.
const directTimeout = 5 * time.Second

// down reports whether the API server does not answer.
func (s *Server) down() bool { return !s.health.state().OK }

// notRead is what a page says of what it reads only from the API server
// (explain's account, events) while the server does not answer.
const notRead = "not read: the API server does not answer"

// apiError answers a failed read: not found and forbidden are the user's
// to know, with the API server's words.
func (s *Server) apiError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusBadGateway
	switch {
	case apierrors.IsNotFound(err):
		status = http.StatusNotFound
	case apierrors.IsForbidden(err):
		status = http.StatusForbidden
	}
	s.render(w, r, "result", status, s.view(r, http.StatusText(status), "", &resultBody{Message: err.Error(), Failed: true, Back: "/"}))
}

// fileLines names where a policy's markers are, as file:line where the
// job recorded the line.
func fileLines(m updatev1.PolicyMarkers) []string {
	out := make([]string, len(m.Files))
	for i, f := range m.Files {
		out[i] = f
		if i < len(m.Lines) && m.Lines[i] > 0 {
			out[i] = fmt.Sprintf("%s:%d", f, m.Lines[i])
		}
	}
	return out
}
