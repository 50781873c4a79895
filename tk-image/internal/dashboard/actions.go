package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/promotion"
)

// Action is something the dashboard asks of the API server for the user.
type Action string

const (
	// ActionReconcile asks the controller to reconcile now (a scan, a
	// selection, an automation run), as tk-image reconcile does.
	ActionReconcile Action = "reconcile"
	// ActionRun asks an automation to run now: it makes an UpdateJob when
	// something changed, exactly as a scheduled run would (tk-image job
	// run --from-automation).
	ActionRun     Action = "run"
	ActionSuspend Action = "suspend"
	ActionResume  Action = "resume"
	// ActionRelease releases an automation's holds (status.holds) and asks
	// for a run, whose UpdateJob writes the policies' images over the held
	// values, as tk-image release does.
	ActionRelease Action = "release"
	// ActionApprove approves the image a promotion with approval Required
	// waits for, as tk-image approve does: the page's digest, as the
	// dashboard's user.
	ActionApprove Action = "approve"
)

// actionKinds are the resources each action applies to.
var actionKinds = map[Action][]string{
	ActionReconcile: {"imageupdateautomations", "imagepolicies", "imagerepositories"},
	ActionRun:       {"imageupdateautomations"},
	ActionSuspend:   {"imageupdateautomations", "imagepolicies", "imagerepositories"},
	ActionResume:    {"imageupdateautomations", "imagepolicies", "imagerepositories"},
	ActionRelease:   {"imageupdateautomations"},
	ActionApprove:   {"imagepolicies"},
}

// patchFor is the merge patch an action sends, and what it says when done.
func patchFor(a Action, token string) (patch []byte, done string) {
	request := fmt.Sprintf(`"metadata":{"annotations":{%q:%q}}`, meta.ReconcileRequestAnnotation, token)
	switch a {
	case ActionSuspend:
		return []byte(`{"spec":{"suspend":true}}`), "suspended"
	case ActionResume:
		// Resuming also asks for a run now: the object may have waited
		// a whole interval.
		return []byte(`{` + request + `,"spec":{"suspend":false}}`), "resumed, and a reconcile requested"
	case ActionRun:
		return []byte(`{` + request + `}`), "run requested: the automation makes an UpdateJob if anything changed"
	case ActionRelease:
		release := fmt.Sprintf(`"metadata":{"annotations":{%q:%q,%q:%q}}`, meta.ReconcileRequestAnnotation, token, imagev1.ReleaseHoldsAnnotation, token)
		return []byte(`{` + release + `}`), "holds released, and a run requested: its UpdateJob writes the policies' images over the held values"
	}
	return []byte(`{` + request + `}`), "reconcile requested"
}

// Control is one action button as a page draws it: its own form posting
// to its own action URL, so that the click means the same with the page's
// script and without.
type Control struct {
	Action Action
	Label  string
	URL    string
	// Title says what the click does, for the button's tooltip.
	Title   string
	Primary bool
	// Disabled says why the button cannot act now; empty when it can.
	Disabled string
	// Fields are hidden form values the action needs: what the page
	// showed (Approve's digest), so a click acts on that and nothing
	// newer.
	Fields map[string]string
}

// Controls are the buttons of one object, drawn together with the place
// the answer to a click appears: next to them.
type Controls struct {
	// ID is the element id of the group; answers are kept by it across
	// the page's live updates.
	ID    string
	Items []Control
	// Why are the distinct reasons buttons are disabled, each shown once.
	Why []string
}

// WhyIndex is the index in Why of a disabled control's reason, for its
// aria-describedby.
func (c *Controls) WhyIndex(reason string) int { return slices.Index(c.Why, reason) }

// resumeFirst is why a suspended object's buttons other than Resume are
// disabled: its controller does nothing with the request until resumed.
const resumeFirst = "resume first: spec.suspend is set, so its controller takes no requests"

// controls are the buttons for one object, nil in read-only mode: what
// applies to the kind, the primary one first, each disabled with the
// reason when the object is suspended or the user may not patch it. A
// policy with an image waiting for approval (approve) gets Approve first.
func (s *Server) controls(ctx context.Context, resource, namespace, name string, suspended, holds bool, approve *meta.ImageRef) *Controls {
	if s.opts.ReadOnly {
		return nil
	}
	at := "/" + resource + "/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
	c := &Controls{ID: "act" + at}
	add := func(a Action, label, title string, primary bool, disabled string) {
		c.Items = append(c.Items, Control{Action: a, Label: label, URL: "/actions/" + string(a) + at, Title: title, Primary: primary, Disabled: disabled})
	}
	denied := ""
	if !s.down() {
		denied = s.access.mayPatch(ctx, resource, namespace)
	}
	orSuspended := denied
	if orSuspended == "" && suspended {
		orSuspended = resumeFirst
	}
	if suspended {
		add(ActionResume, "Resume", "Clear spec.suspend and ask for a reconcile now", true, denied)
	}
	if resource == "imageupdateautomations" {
		add(ActionRun, "Run now", "Ask the automation to run now: it makes an UpdateJob if an image is not written yet", !suspended, orSuspended)
		if holds {
			add(ActionRelease, "Release holds", "End the holds now: the next UpdateJob writes the policies' images over the held values", false, orSuspended)
		}
	} else {
		primary := !suspended
		if approve != nil {
			c.Items = append(c.Items, Control{Action: ActionApprove, Label: "Approve " + approve.Tag, URL: "/actions/" + string(ActionApprove) + at,
				Title:   "Approve " + approve.String() + " for promotion, as " + orText(s.opts.User, "you") + ": it is promoted once its upstream ran it healthy for the soak",
				Primary: !suspended, Disabled: orSuspended, Fields: map[string]string{"digest": approve.ApprovalKey()}})
			primary = false
		}
		add(ActionReconcile, "Reconcile", reconcileTitle[resource], primary, orSuspended)
	}
	if !suspended {
		add(ActionSuspend, "Suspend", "Set spec.suspend: its controller leaves it alone until resumed", false, denied)
	}
	for _, it := range c.Items {
		if it.Disabled != "" && !slices.Contains(c.Why, it.Disabled) {
			c.Why = append(c.Why, it.Disabled)
		}
	}
	return c
}

var reconcileTitle = map[string]string{
	"imagerepositories": "Ask for a scan of the registry now",
	"imagepolicies":     "Ask the policy to choose again now from the last scan",
}

type resultBody struct {
	Message string
	Failed  bool
	Back    string
}

// act performs an action as the user and says how it went: as JSON to the
// page's script, else as a page linking back.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	action, resource := Action(r.PathValue("action")), r.PathValue("resource")
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	back := localPath(r.PostFormValue("back"))
	status, msg := s.perform(r, action, resource, key)
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": status == http.StatusOK, "message": msg})
		return
	}
	s.render(w, r, "result", status, s.view(r, "Action", "", &resultBody{Message: msg, Failed: status != http.StatusOK, Back: back}))
}

func (s *Server) perform(r *http.Request, action Action, resource string, key types.NamespacedName) (int, string) {
	switch {
	case s.opts.ReadOnly:
		return http.StatusForbidden, "the dashboard is read-only (--read-only): it takes no actions"
	case !s.checkToken(r):
		return http.StatusForbidden, "the request did not come from a dashboard page (missing or wrong token): reload the page and try again"
	}
	kinds, ok := actionKinds[action]
	w, known := watchedByResource(resource)
	if !ok || !known || !slices.Contains(kinds, resource) {
		return http.StatusBadRequest, fmt.Sprintf("unknown action %q on %q", action, resource)
	}
	obj := w.newObj()
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	what := fmt.Sprintf("%s %s", resource, key)
	// A request to a suspended object would be written and then ignored
	// by its controller: refuse it with the way forward instead.
	err := s.direct.Get(ctx, key, obj)
	if err == nil && action != ActionResume && action != ActionSuspend && isSuspended(obj) {
		return http.StatusConflict, fmt.Sprintf("%s is suspended: %s. Nothing was requested.", what, resumeFirst)
	}
	if err == nil && action == ActionApprove {
		return s.approve(ctx, obj.(*imagev1.ImagePolicy), r.PostFormValue("digest"), what)
	}
	if err == nil {
		patch, done := patchFor(action, time.Now().Format(time.RFC3339Nano))
		if err = s.direct.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err == nil {
			return http.StatusOK, what + ": " + done
		}
	}
	return s.failed(err, action, what, resource, key)
}

// approve approves the image the page showed waiting (digest), refusing
// when another one waits now.
func (s *Server) approve(ctx context.Context, p *imagev1.ImagePolicy, digest, what string) (int, string) {
	if digest == "" {
		return http.StatusBadRequest, "the approval names no digest: reload the page and try again"
	}
	img, err := promotion.Waiting(p, digest)
	if err != nil {
		return http.StatusConflict, err.Error() + ". Reload the page to see what waits now."
	}
	patch := promotion.ApprovalPatch(img, s.opts.User, time.Now().Format(time.RFC3339Nano))
	if err := s.direct.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("tk-image-dashboard")); err != nil {
		return s.failed(err, ActionApprove, what, "imagepolicies", client.ObjectKeyFromObject(p))
	}
	by := s.opts.User
	if by == "" {
		by = "field manager tk-image-dashboard (the API server did not say who you are)"
	}
	return http.StatusOK, fmt.Sprintf("%s: %s approved by %s; the policy promotes it once its upstream ran it healthy for the soak", what, img, by)
}

// failed says how an action's request failed, and what to do.
func (s *Server) failed(err error, action Action, what, resource string, key types.NamespacedName) (int, string) {
	switch {
	case apierrors.IsForbidden(err):
		return http.StatusForbidden, fmt.Sprintf("Forbidden: your credentials may not %s %s (RBAC needs get and patch on %s in namespace %s). The API server said: %v",
			action, what, resource, key.Namespace, err)
	case apierrors.IsNotFound(err):
		return http.StatusNotFound, what + " no longer exists"
	}
	return http.StatusBadGateway, fmt.Sprintf("could not %s %s: the API server did not answer (%v). Nothing was requested; try again once it is back.", action, what, err)
}

// isSuspended reads spec.suspend of the kinds actions apply to.
func isSuspended(obj client.Object) bool {
	switch o := obj.(type) {
	case *imagev1.ImageUpdateAutomation:
		return o.Spec.Suspend
	case *imagev1.ImagePolicy:
		return o.Spec.Suspend
	case *imagev1.ImageRepository:
		return o.Spec.Suspend
	}
	return false
}

func watchedByResource(resource string) (watched, bool) {
	for _, w := range watchedKinds {
		if w.resource == resource {
			return w, true
		}
	}
	return watched{}, false
}

// localPath keeps a return address on this server: a path, not //host.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return "/"
	}
	return p
}
