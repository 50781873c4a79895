// Package events records Kubernetes events (events.k8s.io/v1) and logs them,
// with credentials redacted from both, so that no reconciler can leak a
// secret by quoting an error. With a Forwarder (--events-addr), every event
// also goes to an HTTP endpoint in the JSON of Flux's notification-controller
// event API, so that Flux Alerts and Providers (Slack, Teams, ...) report
// image-toolkit's events unchanged.
//
// # Forwarding
//
// A reconcile must never wait for a chat notification: the endpoint may be
// slow, restarting or gone, and a reconciler blocked on it would stop
// scanning, updating and pushing for everyone. So recording an event only
// puts it on a bounded queue, without waiting, and one goroutine sends
// from it:
//
//   - Bounded, because an unbounded queue turns an endpoint that is down
//     for an hour into a controller that runs out of memory. The bound
//     caps the memory at QueueSize encoded events (most under 1 KiB; a
//     message is cut at 39,000 bytes).
//   - Dropping, not blocking, when the queue is full: the alternative,
//     blocking the recorder, is the stall above. A dropped event is
//     counted (forwarded_events_total{outcome="dropped"}) and logged, and
//     it still exists as a Kubernetes Event, which stays the record; the
//     forwarded copy is a notification, best effort.
//   - One sender, so that a team hears of a push before it hears of the
//     next one, and the endpoint (notification-controller rate-limits
//     duplicates) sees one request at a time from each controller.
//   - Retries with exponential backoff for what may pass (no answer, a
//     timeout, 5xx), so that an endpoint back within the attempts (pauses
//     of 8 to 15 s in all with the defaults, as Flux's own) loses nothing;
//     no retry for what will not (4xx: the endpoint refused the event).
//     notification-controller answers 429 to an event it already has
//     within its rate-limit window: that is delivered, not retried, as
//     Flux's own controllers do.
//   - Each event is encoded when it is recorded: the queue holds no
//     reference to an object the reconciler goes on changing, and the
//     message and metadata are redacted like the Kubernetes event's.
//
// Metadata keys are sent prefixed with the API group of the object the
// event is about (image.toolkit.dev/revision), which is what
// notification-controller keeps: it drops other keys and strips the prefix,
// so its providers see revision, commit and so on, as with Flux's own
// controllers.
package events

import (
	"context"
	"maps"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
)

// maxNoteLength is the longest note the events.k8s.io API accepts.
const maxNoteLength = 1024

// Recorder records events and logs them, and forwards them when it has a
// Forwarder. A Recorder is not changed once made: ForwardTo and
// WithMetadata return new ones, so reconcilers share one safely.
type Recorder struct {
	w        *Writer
	fwd      *Forwarder
	metadata map[string]string
	related  *corev1.ObjectReference
}

// New returns a Recorder that writes its events with w.
func New(w *Writer) *Recorder {
	return &Recorder{w: w}
}

// ForwardTo returns a Recorder that also sends every event to f; with a nil
// f, events go to Kubernetes only.
func (r *Recorder) ForwardTo(f *Forwarder) *Recorder {
	c := *r
	c.fwd = f
	return &c
}

// WithMetadata returns a Recorder whose events also carry md (keys such as
// MetaRevision, added to those r has; empty values are left out). Metadata
// is forwarded, redacted like the message; Kubernetes events have no place
// for it.
func (r *Recorder) WithMetadata(md map[string]string) *Recorder {
	c := *r
	c.metadata = make(map[string]string, len(r.metadata)+len(md))
	maps.Copy(c.metadata, r.metadata)
	for k, v := range md {
		if v != "" {
			c.metadata[k] = v
		}
	}
	return &c
}

// WithRelated returns a Recorder whose Kubernetes events name ref as their
// related object (events.k8s.io's secondary object), e.g. the automation
// whose update a batch job's event is about. It is part of what makes
// two events one series: a Writer counts an event of the same object,
// type, action and reason as a repeat of the first and drops its note, so
// two members of a batch failing for the same reason would keep one
// member's message between them; related to their automations, each is
// an event of its own.
func (r *Recorder) WithRelated(ref *corev1.ObjectReference) *Recorder {
	c := *r
	c.related = ref
	return &c
}

// Normal records and logs an informational event. secrets are values to
// redact from the message besides the credentials Redact finds by shape.
func (r *Recorder) Normal(ctx context.Context, obj runtime.Object, reason, action, msg string, secrets ...string) {
	r.record(ctx, obj, corev1.EventTypeNormal, reason, action, msg, secrets)
}

// Warning records and logs a warning event.
func (r *Recorder) Warning(ctx context.Context, obj runtime.Object, reason, action, msg string, secrets ...string) {
	r.record(ctx, obj, corev1.EventTypeWarning, reason, action, msg, secrets)
}

func (r *Recorder) record(ctx context.Context, obj runtime.Object, eventType, reason, action, msg string, secrets []string) {
	msg = Redact(msg, secrets...)
	// Warnings are expected outcomes (a registry says no), not program
	// errors: logged at info with their type, without a stack trace.
	ctrl.LoggerFrom(ctx).Info(msg, "type", eventType, "reason", reason)
	r.w.Write(ctx, obj, r.related, eventType, reason, action, truncate(msg, maxNoteLength))
	if r.fwd != nil {
		md := make(map[string]string, len(r.metadata))
		for k, v := range r.metadata {
			md[k] = Redact(v, secrets...)
		}
		r.fwd.enqueue(ctx, obj, eventType, reason, action, msg, md)
	}
}

var (
	// scheme://user:password@ → scheme://user:***@
	urlPassword = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*):[^/@\s]*@`)
	// Authorization header values.
	bearer = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+`)
)

// Redact removes credentials from s: passwords in URLs, bearer and basic
// authorization values, and every occurrence of the given secret values.
func Redact(s string, secrets ...string) string {
	for _, v := range secrets {
		// Very short values would redact ordinary words; they are no
		// secret worth the damage.
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "***")
		}
	}
	s = urlPassword.ReplaceAllString(s, "$1:***@")
	return bearer.ReplaceAllString(s, "$1 ***")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "..."
	cut := n - len(ellipsis)
	// Do not split a UTF-8 sequence.
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + ellipsis
}
