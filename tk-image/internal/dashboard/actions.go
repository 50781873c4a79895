package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
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
)

// actionKinds are the resources each action applies to.
var actionKinds = map[Action][]string{
	ActionReconcile: {"imageupdateautomations", "imagepolicies", "imagerepositories"},
	ActionRun:       {"imageupdateautomations"},
	ActionSuspend:   {"imageupdateautomations", "imagepolicies", "imagerepositories"},
	ActionResume:    {"imageupdateautomations", "imagepolicies", "imagerepositories"},
	ActionRelease:   {"imageupdateautomations"},
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
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	patch, done := patchFor(action, time.Now().Format(time.RFC3339Nano))
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	err := s.direct.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	what := fmt.Sprintf("%s %s", resource, key)
	switch {
	case err == nil:
		return http.StatusOK, what + ": " + done
	case apierrors.IsForbidden(err):
		return http.StatusForbidden, fmt.Sprintf("Forbidden: your credentials may not %s %s (RBAC needs patch on %s in namespace %s). The API server said: %v",
			action, what, resource, key.Namespace, err)
	case apierrors.IsNotFound(err):
		return http.StatusNotFound, what + " no longer exists"
	}
	return http.StatusBadGateway, fmt.Sprintf("%s %s: %v", action, what, err)
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
