// Package health tells whether a deployed object is healthy, and at which
// source revision, from the status its own controller writes: Flux's
// Kustomization and HelmRelease, Argo CD's Application, and any other
// object that follows the Kubernetes condition conventions kstatus reads
// (a Ready condition, observedGeneration, Reconciling and Stalled).
//
// Promotion and rollback ask one question of it: "did this object run
// revision R healthy, and since when?". So a verdict always comes with
// the revision it is about, and an object that has not yet acted on its
// latest spec (its generation not observed, a sync in flight) is
// Progressing, never Healthy: stale good news must not promote. Objects
// are read as unstructured, so that Flux's and Argo CD's Go types are not
// dependencies; only the status fields below are read, as each project
// documents them.
package health

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
)

// State is an object's health.
type State string

const (
	// Healthy: the object applied Revision and reports it healthy.
	Healthy State = "Healthy"
	// Progressing: it is still acting (a new spec or revision not yet
	// applied, a rollout or sync in flight); no verdict yet.
	Progressing State = "Progressing"
	// Degraded: applying Revision failed, or what it runs is failing.
	Degraded State = "Degraded"
	// Unknown: the status says nothing a verdict can rest on.
	Unknown State = "Unknown"
)

// Health is what an object's status says.
type Health struct {
	State State
	// Revision is the source revision the verdict is about, as the object
	// writes it (Flux: main@sha1:<hash>; Argo CD: <hash>); empty for
	// kinds that name none.
	Revision string
	// Since is when the verdict last changed (its condition's transition
	// time); zero when the status does not say.
	Since time.Time
	// Reason and Message say why, from the object's status.
	Reason, Message string
}

// Object is one health object as read: Name is Kind/namespace/name, and
// Found is false when it does not exist.
type Object struct {
	Name   string
	Found  bool
	Health Health
}

// NotFound is the state recorded for an object that does not exist.
const NotFound = "NotFound"

// Statuses are objects as a status records them (HealthStatus), the
// messages cut at 256 bytes.
func Statuses(objects []Object) []imagev1.HealthStatus {
	out := make([]imagev1.HealthStatus, 0, len(objects))
	for _, o := range objects {
		s := imagev1.HealthStatus{Object: o.Name, State: NotFound}
		if o.Found {
			s.State, s.Revision, s.Reason = string(o.Health.State), o.Health.Revision, o.Health.Reason
			s.Message = o.Health.Message
			if len(s.Message) > 256 {
				s.Message = strings.ToValidUTF8(s.Message[:256], "") + "…"
			}
		}
		out = append(out, s)
	}
	return out
}

// Commit is the commit hash of Revision, for Flux's label@sha1:hash and
// Argo CD's bare hash alike; empty when Revision names no commit.
func (h Health) Commit() string {
	if _, hash, ok := git.ParseRevision(h.Revision); ok {
		return hash
	}
	if isHex(h.Revision) {
		return h.Revision
	}
	return ""
}

// Kinds that are read by their own rules; any other kind is read by the
// conditions alone.
const (
	fluxKustomizeGroup = "kustomize.toolkit.fluxcd.io"
	fluxHelmGroup      = "helm.toolkit.fluxcd.io"
	argoGroup          = "argoproj.io"
)

// Of reads an object's health.
func Of(obj *unstructured.Unstructured) Health {
	group := obj.GroupVersionKind().Group
	kind := obj.GetKind()
	switch {
	case group == argoGroup && kind == "Application":
		return application(obj)
	case group == fluxKustomizeGroup && kind == "Kustomization":
		return byConditions(obj, str(obj, "status", "lastAppliedRevision"), str(obj, "status", "lastAttemptedRevision"))
	case group == fluxHelmGroup && kind == "HelmRelease":
		// A HelmRelease's revision is the chart version it installed.
		return byConditions(obj, str(obj, "status", "lastAttemptedRevision"), str(obj, "status", "lastAttemptedRevision"))
	}
	return byConditions(obj, "", "")
}

// byConditions reads the Ready condition as kstatus does: True is
// healthy at applied, False is a failure of attempted (unless it is only
// waiting on something else), Unknown or a Reconciling condition is
// progress, Stalled is a failure, and a generation the status has not
// observed is progress whatever the conditions say.
func byConditions(obj *unstructured.Unstructured, applied, attempted string) Health {
	if observed, ok := observedGeneration(obj); ok && observed < obj.GetGeneration() {
		return Health{State: Progressing, Revision: attempted, Reason: "ObservedGeneration",
			Message: "the controller has not yet observed the latest spec"}
	}
	conds := conditions(obj)
	ready := find(conds, "Ready")
	if stalled := find(conds, "Stalled"); stalled != nil && stalled.Status == metav1.ConditionTrue {
		return verdict(Degraded, attempted, stalled)
	}
	// Flux leaves Reconciling True with ProgressingWithRetry after a failed
	// attempt (kustomize-controller's finalizeStatus): the attempt is over,
	// and Ready says how it ended.
	if reconciling := find(conds, "Reconciling"); reconciling != nil && reconciling.Status == metav1.ConditionTrue &&
		reconciling.Reason != "ProgressingWithRetry" {
		return verdict(Progressing, attempted, reconciling)
	}
	switch {
	case ready == nil:
		return Health{State: Unknown, Revision: attempted, Reason: "NoReadyCondition", Message: "the status has no Ready condition"}
	case ready.ObservedGeneration != 0 && ready.ObservedGeneration < obj.GetGeneration():
		return verdict(Progressing, attempted, ready)
	case ready.Status == metav1.ConditionTrue:
		return verdict(Healthy, applied, ready)
	case ready.Status == metav1.ConditionFalse && !waiting(ready.Reason):
		return verdict(Degraded, attempted, ready)
	}
	return verdict(Progressing, attempted, ready)
}

// waiting tells the reasons of a Ready=False that blame no revision: the
// object waits for another (Flux's dependsOn, its source's artifact) or
// is being worked on.
func waiting(reason string) bool {
	switch reason {
	case "DependencyNotReady", "ArtifactFailed", "Progressing", "ProgressingWithRetry":
		return true
	}
	return false
}

// application reads an Argo CD Application: healthy at a revision only
// when it is Synced to it and its health is Healthy; a sync operation
// that failed at that revision is Degraded; anything in between
// (OutOfSync, a sync running, Progressing resources) is Progressing.
func application(obj *unstructured.Unstructured) Health {
	revision := str(obj, "status", "sync", "revision")
	if revision == "" {
		if revs, _, _ := unstructured.NestedStringSlice(obj.Object, "status", "sync", "revisions"); len(revs) > 0 {
			revision = strings.Join(revs, ",")
		}
	}
	h := Health{Revision: revision, Reason: str(obj, "status", "health", "status"), Message: str(obj, "status", "health", "message")}
	if t, err := time.Parse(time.RFC3339, str(obj, "status", "health", "lastTransitionTime")); err == nil {
		h.Since = t.UTC()
	}
	sync := str(obj, "status", "sync", "status")
	phase := str(obj, "status", "operationState", "phase")
	switch {
	case (phase == "Failed" || phase == "Error") && str(obj, "status", "operationState", "syncResult", "revision") == str(obj, "status", "sync", "revision"):
		h.State, h.Reason, h.Message = Degraded, "SyncFailed", str(obj, "status", "operationState", "message")
	case phase == "Running" || phase == "Terminating":
		h.State = Progressing
	case h.Reason == "Degraded" || h.Reason == "Missing":
		h.State = Degraded
	case sync != "Synced":
		h.State, h.Reason = Progressing, "OutOfSync"
	case h.Reason == "Healthy":
		h.State = Healthy
	case h.Reason == "Progressing" || h.Reason == "Suspended":
		h.State = Progressing
	default:
		h.State = Unknown
	}
	return h
}

func verdict(s State, revision string, c *metav1.Condition) Health {
	return Health{State: s, Revision: revision, Since: c.LastTransitionTime.UTC(), Reason: c.Reason, Message: c.Message}
}

func conditions(obj *unstructured.Unstructured) []metav1.Condition {
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var out []metav1.Condition
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func find(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func observedGeneration(obj *unstructured.Unstructured) (int64, bool) {
	g, ok, err := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
	return g, ok && err == nil
}

func str(obj *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(obj.Object, path...)
	return s
}

func isHex(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}
