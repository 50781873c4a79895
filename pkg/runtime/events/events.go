// Package events records Kubernetes events (events.k8s.io/v1) and logs them,
// with credentials redacted from both, so that no reconciler can leak a
// secret by quoting an error.
package events

import (
	"context"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
)

// maxNoteLength is the longest note the events.k8s.io API accepts.
const maxNoteLength = 1024

// Recorder records events and logs them.
type Recorder struct {
	rec events.EventRecorder
}

// New returns a Recorder around an events.k8s.io recorder, e.g. the
// manager's GetEventRecorder(name).
func New(rec events.EventRecorder) *Recorder {
	return &Recorder{rec: rec}
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
	// The note is a format string: escape it so a % in a message or URL is
	// kept as written.
	r.rec.Eventf(obj, nil, eventType, reason, action, "%s", truncate(msg, maxNoteLength))
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
