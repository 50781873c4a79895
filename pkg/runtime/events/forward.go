package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/reference"
	ctrl "sigs.k8s.io/controller-runtime"

	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

// Defaults of ForwarderOptions.
const (
	DefaultQueueSize  = 1000
	DefaultAttempts   = 5
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 30 * time.Second
	DefaultTimeout    = 5 * time.Second
)

const (
	// maxMessageLength is the longest message notification-controller's
	// event API takes (39,000 characters; bytes are never more).
	maxMessageLength = 39000
	// flushTimeout bounds the last sends at shutdown, well within the
	// manager's 10 s graceful shutdown.
	flushTimeout = 3 * time.Second
	// dropLogInterval spaces the log lines about dropped events: an
	// endpoint down for an hour is one line a minute, not one per event.
	dropLogInterval = time.Minute
)

// Outcomes of a forwarded event, the values of the outcome label.
const (
	OutcomeSent    = "sent"
	OutcomeFailed  = "failed"
	OutcomeDropped = "dropped"
)

// ForwarderOptions configure a Forwarder. Zero values take the defaults.
type ForwarderOptions struct {
	// Address is the endpoint's URL, e.g. notification-controller's
	// http://notification-controller.flux-system.svc.cluster.local./
	Address string
	// Controller is the reportingController of the events, e.g.
	// image-reflector-controller.
	Controller string
	// Scheme names the kinds of the objects events are about.
	Scheme *runtime.Scheme
	// Subsystem names the metrics imagetoolkit_<subsystem>_..., e.g.
	// reflector.
	Subsystem string
	// Log receives failures and drops; ctrl.Log when unset.
	Log logr.Logger

	// QueueSize is how many events may wait to be sent.
	QueueSize int
	// Attempts is how many times an event is tried before it fails.
	Attempts int
	// Backoff is the pause after the first failed attempt; it doubles up
	// to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Timeout bounds each attempt.
	Timeout time.Duration
}

// Forwarder sends events to an HTTP endpoint from a bounded queue (see the
// package documentation). It is a manager Runnable: nothing is sent before
// Start, and events recorded meanwhile wait in the queue.
type Forwarder struct {
	address    string
	display    string // the address without credentials, for logs
	client     *http.Client
	controller string
	instance   string
	scheme     *runtime.Scheme
	log        logr.Logger

	queue               chan queued
	attempts            int
	backoff, maxBackoff time.Duration
	timeout             time.Duration

	stopped atomic.Bool
	drops   drops

	outcomes *prometheus.CounterVec
	retries  prometheus.Counter
	length   prometheus.GaugeFunc
}

// queued is an event encoded for the wire, and what it is about for logs.
type queued struct {
	body   []byte
	object string
}

// NewForwarder checks the options and returns a Forwarder.
func NewForwarder(o ForwarderOptions) (*Forwarder, error) {
	if err := ValidateAddress(o.Address); err != nil {
		return nil, err
	}
	if o.Scheme == nil {
		return nil, errors.New("events forwarder: no scheme")
	}
	f := &Forwarder{
		address:    o.Address,
		display:    Redact(o.Address),
		client:     &http.Client{},
		controller: o.Controller,
		scheme:     o.Scheme,
		log:        o.Log,
		queue:      make(chan queued, or(o.QueueSize, DefaultQueueSize)),
		attempts:   or(o.Attempts, DefaultAttempts),
		backoff:    or(o.Backoff, DefaultBackoff),
		maxBackoff: or(o.MaxBackoff, DefaultMaxBackoff),
		timeout:    or(o.Timeout, DefaultTimeout),
	}
	if f.log.GetSink() == nil {
		f.log = ctrl.Log.WithName("events")
	}
	// The pod's name: POD_NAME where the charts set it, else the host
	// name, which is the pod's name in a cluster (what Flux reports).
	if f.instance = os.Getenv("POD_NAME"); f.instance == "" {
		f.instance, _ = os.Hostname()
	}

	f.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace,
		Subsystem: o.Subsystem,
		Name:      "forwarded_events_total",
		Help: "Events for --events-addr by outcome: sent (the endpoint took it), failed (refused, or every attempt failed), " +
			"dropped (the queue was full, or the controller was stopping).",
	}, []string{"outcome"})
	// Every outcome exists from the start, at 0, for alerts on rates.
	for _, outcome := range []string{OutcomeSent, OutcomeFailed, OutcomeDropped} {
		f.outcomes.WithLabelValues(outcome)
	}
	f.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace,
		Subsystem: o.Subsystem,
		Name:      "forwarded_event_retries_total",
		Help:      "Attempts to send an event to --events-addr repeated after no answer, a timeout or a 5xx.",
	})
	f.length = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace,
		Subsystem: o.Subsystem,
		Name:      "forwarded_event_queue_length",
		Help:      "Events waiting to be sent to --events-addr.",
	}, func() float64 { return float64(len(f.queue)) })
	return f, nil
}

// ValidateAddress checks an endpoint address: an http or https URL with a
// host.
func ValidateAddress(addr string) error {
	u, err := url.Parse(addr)
	if err != nil {
		// url's errors quote the address, credentials and all.
		return fmt.Errorf("events address %q is not a URL", Redact(addr))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("events address %q: want an http:// or https:// URL with a host", Redact(addr))
	}
	return nil
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Collectors are the forwarder's metrics, for a Prometheus registry.
func (f *Forwarder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{f.outcomes, f.retries, f.length}
}

// NeedLeaderElection is false: a replica that is not the leader may still
// record events (the update-job-controller runs jobs on every replica).
func (f *Forwarder) NeedLeaderElection() bool { return false }

// Start sends queued events until ctx ends, then tries those left once
// each, for at most a few seconds.
func (f *Forwarder) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			f.flush(nil)
			return nil
		case q := <-f.queue:
			if !f.deliver(ctx, q) {
				f.flush(&q)
				return nil
			}
		}
	}
}

// wireEvent is the JSON body notification-controller decodes as
// github.com/fluxcd/pkg/apis/event/v1beta1's Event (the tests decode it
// with that type). Action is the newer v1 Event's; v1beta1 readers ignore
// it.
type wireEvent struct {
	InvolvedObject      corev1.ObjectReference `json:"involvedObject"`
	Severity            string                 `json:"severity"`
	Timestamp           metav1.Time            `json:"timestamp"`
	Message             string                 `json:"message"`
	Reason              string                 `json:"reason"`
	Action              string                 `json:"action,omitempty"`
	Metadata            map[string]string      `json:"metadata,omitempty"`
	ReportingController string                 `json:"reportingController"`
	ReportingInstance   string                 `json:"reportingInstance,omitempty"`
}

// Flux's severities of Kubernetes event types.
const (
	severityInfo  = "info"
	severityError = "error"
)

// enqueue encodes an event and queues it without waiting. msg and md are
// redacted already.
func (f *Forwarder) enqueue(ctx context.Context, obj runtime.Object, eventType, reason, action, msg string, md map[string]string) {
	ref, err := reference.GetReference(f.scheme, obj)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "event not forwarded: no reference to its object", "reason", reason)
		f.outcomes.WithLabelValues(OutcomeFailed).Inc()
		return
	}
	object := ref.Kind + " " + ref.Namespace + "/" + ref.Name
	if f.stopped.Load() {
		f.drop(object)
		return
	}
	severity := severityInfo
	if eventType == corev1.EventTypeWarning {
		severity = severityError
	}
	body, err := json.Marshal(wireEvent{
		InvolvedObject:      *ref,
		Severity:            severity,
		Timestamp:           metav1.Now(),
		Message:             truncate(msg, maxMessageLength),
		Reason:              reason,
		Action:              action,
		Metadata:            groupKeys(ref, md),
		ReportingController: f.controller,
		ReportingInstance:   f.instance,
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "event not forwarded: encoding it failed", "reason", reason)
		f.outcomes.WithLabelValues(OutcomeFailed).Inc()
		return
	}
	select {
	case f.queue <- queued{body: body, object: object}:
	default:
		f.drop(object)
	}
}

// groupKeys prefixes the metadata keys with the API group of the object,
// as Flux's controllers do and notification-controller requires (it keeps
// only those keys, prefix stripped). Keys with a / are already qualified.
func groupKeys(ref *corev1.ObjectReference, md map[string]string) map[string]string {
	if len(md) == 0 {
		return nil
	}
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	out := make(map[string]string, len(md))
	for k, v := range md {
		if gv.Group != "" && !strings.Contains(k, "/") {
			k = gv.Group + "/" + k
		}
		out[k] = v
	}
	return out
}

func (f *Forwarder) drop(object string) {
	f.outcomes.WithLabelValues(OutcomeDropped).Inc()
	if n := f.drops.add(); n > 0 {
		f.log.Info("events dropped: the queue for --events-addr is full or the controller is stopping",
			"dropped", n, "latest", object, "queueSize", cap(f.queue), "address", f.display)
	}
}

// deliver sends one event, retrying what may pass, and counts its outcome.
// It returns false, with the outcome not counted, when ctx ended first.
func (f *Forwarder) deliver(ctx context.Context, q queued) bool {
	tries, ok, err := retrying(ctx, f.attempts, f.backoff, f.maxBackoff, func() (bool, error) {
		return f.post(ctx, q.body)
	}, f.retries.Inc)
	switch {
	case !ok:
		return false
	case err != nil:
		f.outcomes.WithLabelValues(OutcomeFailed).Inc()
		f.log.Info("event not forwarded", "object", q.object, "attempts", tries,
			"address", f.display, "error", Redact(err.Error()))
	default:
		f.outcomes.WithLabelValues(OutcomeSent).Inc()
	}
	return true
}

// post makes one attempt. retry says whether another could succeed.
func (f *Forwarder) post(ctx context.Context, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.address, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return true, err // no answer: refused, reset, timed out
	}
	defer resp.Body.Close()
	// Read a little of the body so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return false, nil
	case c == http.StatusTooManyRequests:
		// notification-controller's answer to a duplicate of an event it
		// took within its rate-limit window: delivered, and a retry
		// would get the same answer.
		return false, nil
	case c >= 500 || c == http.StatusRequestTimeout:
		return true, fmt.Errorf("endpoint answered %s", resp.Status)
	default:
		return false, fmt.Errorf("endpoint refused the event: %s", resp.Status)
	}
}

// flush tries each event left once, then counts the rest as dropped. After
// it, events are dropped at once: nothing would send them.
func (f *Forwarder) flush(pending *queued) {
	f.stopped.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	send := func(q queued) {
		if ctx.Err() != nil {
			f.drop(q.object)
			return
		}
		if _, err := f.post(ctx, q.body); err != nil {
			f.outcomes.WithLabelValues(OutcomeFailed).Inc()
			f.log.Info("event not forwarded at shutdown", "object", q.object, "address", f.display, "error", Redact(err.Error()))
			return
		}
		f.outcomes.WithLabelValues(OutcomeSent).Inc()
	}
	if pending != nil {
		send(*pending)
	}
	for {
		select {
		case q := <-f.queue:
			send(q)
		default:
			return
		}
	}
}
