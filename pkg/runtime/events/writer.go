package events

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/reference"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Bounds of a Writer.
const (
	// seriesWindow is how long after an event's last occurrence a repeat
	// still counts in its series, as in client-go's events broadcaster.
	seriesWindow = 6 * time.Minute
	// seriesEntries bounds the events a Writer remembers for series, as
	// client-go's core/v1 correlator bounds its cache: past it, the event
	// seen longest ago is forgotten, and its next repeat starts a series
	// of its own.
	seriesEntries = 4096
	// writeTimeout bounds each request.
	writeTimeout = 10 * time.Second
	// retryQueueSize bounds the writes that wait for a retry.
	retryQueueSize = 1000
	// retryAttempts, retryBackoff and retryMaxBackoff: a write that failed
	// in a way that may pass is tried again for about two minutes, as
	// client-go's broadcaster does (12 tries, 10 s apart).
	retryAttempts   = 12
	retryBackoff    = time.Second
	retryMaxBackoff = 20 * time.Second
)

// Writer writes events.k8s.io/v1 Events: one per occurrence, and a repeat
// within six minutes of the last (same object, related object, type,
// reason and action) counted in the series of the first, as client-go's
// events broadcaster, which controller-runtime's recorder uses, does. It
// replaces that broadcaster because of what the broadcaster holds, which
// grows with the rate of events:
//
//   - The broadcaster keeps a copy of every event for six minutes, to spot
//     repeats; a cold start of thousands of image policies (one event
//     each) kept all of them. A Writer remembers what a series needs (the event's
//     name, count and time) for at most 4,096 events.
//   - It starts a goroutine per event to send it, so a burst is a burst of
//     goroutines and requests in flight. A Writer writes in the caller's
//     goroutine: an event is one more request beside the reconcile's own,
//     to the same API server, so the reconcile waits for it as it waits
//     for its status write, and a burst is no larger than the reconcilers
//     that make it.
//
// A write that fails in a way that may pass (no answer, a timeout, 429,
// 5xx) waits in a bounded queue, and one goroutine retries it with
// backoff for about two minutes; the Writer is a manager Runnable for that
// goroutine. A full queue drops the event, logged (the Recorder has
// logged the event itself already).
type Writer struct {
	c          client.Client
	scheme     *runtime.Scheme
	controller string
	instance   string
	log        logr.Logger
	now        func() time.Time

	mu     sync.Mutex
	series map[seriesKey]*list.Element // of *seriesEntry, most recent first
	recent *list.List

	retry chan *eventsv1.Event
	drops drops
}

// seriesKey is what makes two events one series: client-go's key.
type seriesKey struct {
	eventType, reason, action string
	regarding, related        corev1.ObjectReference
}

// seriesEntry is a written event that repeats add to.
type seriesEntry struct {
	key         seriesKey
	namespace   string
	name        string
	count       int32
	first, last time.Time
}

// NewWriter returns a Writer of events reported by controller (e.g.
// image-reflector-controller), through c; scheme names the kinds of the
// objects events are about. Failures are logged to ctrl.Log.
func NewWriter(c client.Client, scheme *runtime.Scheme, controller string) *Writer {
	// client-go's reportingInstance: the controller and the host, which
	// is the pod in a cluster.
	host, _ := os.Hostname()
	return &Writer{
		c:          c,
		scheme:     scheme,
		controller: controller,
		instance:   controller + "-" + host,
		log:        ctrl.Log.WithName("events"),
		now:        time.Now,
		series:     map[seriesKey]*list.Element{},
		recent:     list.New(),
		retry:      make(chan *eventsv1.Event, retryQueueSize),
	}
}

// Write writes an event about regarding; related may be nil. note must be
// within the API's 1 KiB.
func (w *Writer) Write(ctx context.Context, regarding runtime.Object, related *corev1.ObjectReference, eventType, reason, action, note string) {
	ref, err := reference.GetReference(w.scheme, regarding)
	if err != nil {
		w.log.Error(err, "event not written: no reference to its object", "reason", reason)
		return
	}
	key := seriesKey{eventType: eventType, reason: reason, action: action, regarding: *ref}
	if related != nil {
		key.related = *related
	}
	now := w.now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(ref.Name, now), Namespace: ns},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: w.controller,
		ReportingInstance:   w.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             related,
		Note:                note,
		Type:                eventType,
	}
	w.count(key, ev, now)
	w.write(ctx, ev)
}

// eventName is client-go's: the object's name and the time, or a UUID
// where that would be too long for a name.
func eventName(object string, now time.Time) string {
	name := fmt.Sprintf("%s.%x", object, now.UnixNano())
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return string(uuid.NewUUID())
	}
	return name
}

// count makes ev a repeat in the series of the event remembered under
// key within the window (its name, and a series with the count), or
// remembers ev as the first of a series, forgetting the event seen
// longest ago past seriesEntries. Two repeats written at once may reach
// the API server out of order, the lower count last: a series' count is
// a hint, as client-go's (which writes it every 30 minutes) is.
func (w *Writer) count(key seriesKey, ev *eventsv1.Event, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if el, ok := w.series[key]; ok {
		e := el.Value.(*seriesEntry)
		if now.Sub(e.last) <= seriesWindow {
			e.count++
			e.last = now
			w.recent.MoveToFront(el)
			ev.Name, ev.Namespace, ev.EventTime = e.name, e.namespace, metav1.NewMicroTime(e.first)
			ev.Series = &eventsv1.EventSeries{Count: e.count, LastObservedTime: metav1.NewMicroTime(now)}
			return
		}
		w.recent.Remove(el)
	}
	w.series[key] = w.recent.PushFront(&seriesEntry{key: key, namespace: ev.Namespace, name: ev.Name, count: 1, first: now, last: now})
	for w.recent.Len() > seriesEntries {
		oldest := w.recent.Back()
		w.recent.Remove(oldest)
		delete(w.series, oldest.Value.(*seriesEntry).key)
	}
}

// write makes one attempt, and queues a write that may pass later.
func (w *Writer) write(ctx context.Context, ev *eventsv1.Event) {
	retry, err := w.attempt(ctx, ev)
	if err == nil {
		w.log.V(1).Info("event written", "event", ev.Namespace+"/"+ev.Name, "reason", ev.Reason, "series", ev.Series != nil)
		return
	}
	if !retry || ctx.Err() != nil {
		w.notWritten(ev, err)
		return
	}
	select {
	case w.retry <- ev:
	default:
		if n := w.drops.add(); n > 0 {
			w.log.Info("events dropped: too many wait for a retry", "dropped", n, "error", Redact(err.Error()))
		}
	}
}

func (w *Writer) notWritten(ev *eventsv1.Event, err error, kv ...any) {
	w.log.Info("event not written", append([]any{"object", ev.Regarding.Kind + " " + ev.Namespace + "/" + ev.Regarding.Name,
		"reason", ev.Reason, "error", Redact(err.Error())}, kv...)...)
}

// attempt writes an event, or adds to its series. retry says whether
// another attempt could succeed.
func (w *Writer) attempt(ctx context.Context, ev *eventsv1.Event) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if ev.Series != nil {
		patch := fmt.Sprintf(`{"series":{"count":%d,"lastObservedTime":%q}}`,
			ev.Series.Count, ev.Series.LastObservedTime.UTC().Format(metav1.RFC3339Micro))
		err = w.c.Patch(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace}},
			client.RawPatch(types.MergePatchType, []byte(patch)))
		if !apierrors.IsNotFound(err) {
			return mayPass(err), err
		}
		// The first event is gone (the API server keeps events an
		// hour): the series is written as an event of its own.
	}
	err = w.c.Create(ctx, ev.DeepCopy())
	switch {
	case apierrors.IsAlreadyExists(err) && ev.Series == nil:
		return false, nil // an earlier attempt's, answered too late
	case apierrors.IsAlreadyExists(err):
		// The first event was written meanwhile (the repeat's patch
		// came first): the retry patches it, as client-go's does.
		return true, err
	}
	return mayPass(err), err
}

// mayPass says whether a failed request may succeed later: no answer, a
// timeout, throttling or a server error.
func mayPass(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err != nil
	}
	code := status.Status().Code
	return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
}

// NeedLeaderElection is false: a replica that is not the leader may still
// record events (the update-job-controller runs jobs on every replica).
func (w *Writer) NeedLeaderElection() bool { return false }

// Start retries queued writes until ctx ends; what is left then is lost.
func (w *Writer) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-w.retry:
			tries, ok, err := retrying(ctx, retryAttempts-1, retryBackoff, retryMaxBackoff, func() (bool, error) {
				return w.attempt(ctx, ev)
			}, nil)
			if !ok {
				return nil
			}
			if err != nil {
				w.notWritten(ev, err, "attempts", tries+1)
			}
		}
	}
}
