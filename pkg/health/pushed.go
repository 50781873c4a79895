package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// Health pushed by another cluster (a HealthWebhook) is read here into
// the same Health as a watched object's, so that promotion and rollback
// judge both alike. A push is an event about one object: Flux's
// notification-controller forwards its controllers' events as they happen,
// Argo CD Notifications posts an Application's status when a trigger
// fires. Neither is the object itself, so each sender's rules below say
// which events are a verdict; any other is progress, never a promotion.

// ErrNotAHealthObject is a valid push about an object whose health is not
// read (a Flux GitRepository's events, say): nothing to record.
var ErrNotAHealthObject = errors.New("not a Kustomization, HelmRelease or Application")

// Push is what one call says of one object.
type Push struct {
	Group, Kind, Namespace, Name string
	Health                       Health
	// At is the sender's time of the call.
	At time.Time
}

// fluxEvent is the part of a Flux event (fluxcd/pkg/apis/event/v1beta1
// Event, the JSON notification-controller's generic and generic-hmac
// Providers post) read here.
type fluxEvent struct {
	InvolvedObject struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Namespace  string `json:"namespace"`
		Name       string `json:"name"`
	} `json:"involvedObject"`
	Severity  string            `json:"severity"`
	Timestamp metav1.Time       `json:"timestamp"`
	Message   string            `json:"message"`
	Reason    string            `json:"reason"`
	Metadata  map[string]string `json:"metadata"`
}

// Reasons of Flux's events (the object's Ready reason when it emitted
// them) that end an attempt well: kustomize-controller's one success
// event, helm-controller's install, upgrade and test. Every other info
// event (a change set applied, health checks running, a rollback) comes
// while the attempt is still going or after it failed.
var fluxSucceeded = []string{"ReconciliationSucceeded", "InstallSucceeded", "UpgradeSucceeded", "TestSucceeded"}

// fluxRemediated are info events that say the attempt failed and was
// undone.
var fluxRemediated = []string{"RollbackSucceeded", "UninstallSucceeded"}

// FromFluxEvent reads a Flux event: a success event is Healthy at its
// revision (metadata "revision", which notification-controller strips of
// the kind's group), an error event Degraded (unless its reason only
// waits on something else: a dependency, a source), anything else
// Progressing.
func FromFluxEvent(body []byte) (Push, error) {
	var e fluxEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return Push{}, fmt.Errorf("not a Flux event: %w", err)
	}
	o := e.InvolvedObject
	if o.Kind == "" || o.Name == "" || e.Severity == "" {
		return Push{}, errors.New("not a Flux event: involvedObject.kind, involvedObject.name and severity are required")
	}
	group, _, _ := strings.Cut(o.APIVersion, "/")
	if !(group == fluxKustomizeGroup && o.Kind == "Kustomization") && !(group == fluxHelmGroup && o.Kind == "HelmRelease") {
		return Push{}, ErrNotAHealthObject
	}
	if e.Timestamp.IsZero() {
		return Push{}, errors.New("not a Flux event: no timestamp")
	}
	h := Health{Revision: e.Metadata["revision"], Reason: e.Reason, Message: e.Message, Since: e.Timestamp.UTC()}
	switch {
	case e.Severity == "error" && waiting(e.Reason):
		h.State = Progressing
	case e.Severity == "error", slices.Contains(fluxRemediated, e.Reason):
		h.State = Degraded
	case e.Severity == "info" && slices.Contains(fluxSucceeded, e.Reason):
		h.State = Healthy
	default:
		h.State = Progressing
	}
	return Push{Group: group, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Health: h, At: e.Timestamp.UTC()}, nil
}

// argoApplication is what the Argo CD Notifications template of
// docs/policies.md posts: an Application trimmed to its name and the
// status fields its health is read from.
type argoApplication struct {
	Metadata struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
	Status map[string]any `json:"status"`
	// Timestamp is when the notification was made ({{now}}), optional:
	// the receiver's clock otherwise.
	Timestamp *metav1.Time `json:"timestamp,omitempty"`
}

// FromArgoApplication reads an Argo CD Notifications post as the
// Application it is about, by the rules a watched Application is read
// with (application); received is the time when the post says none.
func FromArgoApplication(body []byte, received time.Time) (Push, error) {
	var a argoApplication
	if err := json.Unmarshal(body, &a); err != nil {
		return Push{}, fmt.Errorf("not an Argo CD Application notification: %w", err)
	}
	if a.Metadata.Name == "" || a.Status == nil {
		return Push{}, errors.New("not an Argo CD Application notification: metadata.name and status are required (see the template in docs/policies.md)")
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"status": a.Status}}
	obj.SetAPIVersion(argoGroup + "/v1alpha1")
	obj.SetKind("Application")
	at := received.UTC()
	if a.Timestamp != nil && !a.Timestamp.IsZero() {
		at = a.Timestamp.UTC()
	}
	h := application(obj)
	if h.Since.IsZero() || h.Since.After(at) {
		h.Since = at
	}
	return Push{Group: argoGroup, Kind: "Application", Namespace: a.Metadata.Namespace, Name: a.Metadata.Name, Health: h, At: at}, nil
}

// Record adds a push to the objects a HealthWebhook holds: the object's
// entry is replaced (its Since kept while the state and revision stay)
// and moved first, a push older than the entry's last one is dropped, and
// past imagev1.MaxPushedObjects the least recently pushed go. It reports
// whether objects changed.
func Record(objects []imagev1.PushedHealth, p Push) ([]imagev1.PushedHealth, bool) {
	name := p.Kind + "/" + p.Namespace + "/" + p.Name
	entry := imagev1.PushedHealth{
		HealthStatus: Statuses([]Object{{Name: name, Found: true, Health: p.Health}})[0],
		APIGroup:     p.Group, Since: metav1.NewTime(p.At), LastPushed: metav1.NewTime(p.At),
	}
	if !p.Health.Since.IsZero() && p.Health.Since.Before(p.At) {
		entry.Since = metav1.NewTime(p.Health.Since)
	}
	i := slices.IndexFunc(objects, func(o imagev1.PushedHealth) bool { return o.APIGroup == p.Group && o.Object == name })
	if i >= 0 {
		old := objects[i]
		if p.At.Before(old.LastPushed.Time) {
			return objects, false
		}
		if old.State == entry.State && old.Revision == entry.Revision && old.Since.Before(&entry.Since) {
			entry.Since = old.Since
		}
		objects = slices.Delete(slices.Clone(objects), i, i+1)
	}
	out := append([]imagev1.PushedHealth{entry}, objects...)
	if len(out) > imagev1.MaxPushedObjects {
		out = out[:imagev1.MaxPushedObjects]
	}
	return out, true
}

// FromPushed is the Health a HealthWebhook recorded for an object.
func FromPushed(p *imagev1.PushedHealth) Health {
	return Health{State: State(p.State), Revision: p.Revision, Since: p.Since.UTC(), Reason: p.Reason, Message: p.Message}
}
