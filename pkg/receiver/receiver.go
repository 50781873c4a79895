// Package receiver serves webhooks: calls from registries and git hosts that
// say something was pushed. It is the front both controllers share; what a
// call is about, and what it triggers, is the caller's (a Kind).
//
// The design, and why:
//
//   - A webhook is a namespaced object whose status holds its URL path: the
//     sha256 of the Secret's token, the object's name and its namespace, so
//     it cannot be guessed from either alone, as Flux's Receivers do. The
//     path is checked against the current token on every call, so a rotated
//     token moves the path at once, not when the reconciler next runs.
//   - Every call is also authenticated the way its sender signs or sends a
//     credential, with constant-time comparisons, and refused with 401 (no
//     credential) or 403 (a wrong one); each refusal is counted by reason
//     and logged at debug level without the path (for senders that send no
//     credential the path is it) or any header.
//   - The handler only authenticates, reads and queues, then answers 202:
//     senders time out quickly (Docker Hub and GitHub after about 10 s) and
//     retry, so the work must not hold the request. Calls beyond a rate per
//     webhook get 429, bodies are capped, and a full queue answers 503 with
//     Retry-After rather than blocking.
//   - Senders are a table per kind (Senders, keyed by the API's type enum),
//     not switches: each entry says how its calls are authenticated, which
//     Secret keys it needs and how its payload reads, so a new sender is one
//     entry, its test and its enum value.
//   - Secrets are read uncached, per call: the controllers never list or
//     watch Secrets.
package receiver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// TokenKey is the key of a webhook's Secret that holds the token or HMAC
// key; the path is derived from it.
const TokenKey = "token"

// PathPrefix is where every webhook lives on a receiver's address.
const PathPrefix = "/hook/"

// Path is the URL path of a webhook: the sha256 of the token, name and
// namespace, so it is unguessable without the token and differs between
// webhooks sharing one.
func Path(token []byte, name, namespace string) string {
	h := sha256.New()
	h.Write(token)
	h.Write([]byte(name))
	h.Write([]byte(namespace))
	return PathPrefix + hex.EncodeToString(h.Sum(nil))
}

// Hook is a webhook object as the receiver needs it.
type Hook struct {
	Key types.NamespacedName
	// Type is the sender type, the metrics' type label.
	Type string
	// Secret names the Secret of Key's namespace holding the token.
	Secret  string
	Suspend bool
	// Object is the webhook object itself, for Accept.
	Object client.Object

	// kind is the Kind that found it, which serves the call.
	kind Kind
}

// Call is a call to a webhook, read and authenticated.
type Call struct {
	Hook     Hook
	Header   http.Header
	Body     []byte
	Received time.Time
}

// Work is what a call triggers, run after the answer on the receiver's
// worker (one at a time, in arrival order).
type Work func(ctx context.Context)

// Kind is what the receiver needs of one kind of webhook object.
type Kind interface {
	// Find returns the webhook whose status path is path; ok is false
	// when there is none.
	Find(ctx context.Context, path string) (h Hook, ok bool, err error)
	// SecretKeys are the keys the Secret of a webhook of type typ must hold.
	SecretKeys(typ string) []string
	// Verify authenticates a call with its Secret's data: nil, or a
	// *Refusal (any other error is refused as bad credentials).
	Verify(ctx context.Context, c *Call, secret map[string][]byte) error
	// Accept reads what a verified call is about. It returns the work to
	// do, nil work for a valid call about nothing to do (a ping, a delete)
	// or done before the answer, or a *Refusal (any other error is refused
	// as a bad payload). ctx ends with the call.
	Accept(ctx context.Context, c *Call) (Work, error)
}

// Reasons a call is refused, the rejected metric's reason label.
const (
	ReasonNotFound        = "not_found"
	ReasonMethod          = "method"
	ReasonRateLimited     = "rate_limited"
	ReasonTooLarge        = "too_large"
	ReasonMissingAuth     = "missing_credentials"
	ReasonBadAuth         = "bad_credentials"
	ReasonBadSignature    = "bad_signature"
	ReasonBadPayload      = "bad_payload"
	ReasonSuspended       = "suspended"
	ReasonSecret          = "secret_unavailable"
	ReasonOverloaded      = "overloaded"
	ReasonNotRecorded     = "not_recorded"
	ReasonUnsupportedType = "unsupported_type"
)

// Refusal is a refused call: the status to answer, the reason label and a
// message safe to send back (it never holds a credential).
type Refusal struct {
	Status int
	Reason string
	Msg    string
}

func (e *Refusal) Error() string { return e.Msg }

// Options tune a receiver; zero values take the defaults.
type Options struct {
	// Addr is the address to listen on, e.g. :9292.
	Addr string
	// Rate and Burst limit calls per webhook (default 10/s, burst 100);
	// a sender beyond them gets 429.
	Rate  rate.Limit
	Burst int
	// MaxBody caps a request body (default 1 MiB; push payloads are a few
	// KiB, GitHub caps its own at 25 MiB but a push of a thousand commits
	// is still well under one).
	MaxBody int64
	Log     logr.Logger
	// Status, when set, writes the calls answered into each webhook's
	// status.calls every CallsFlush (default DefaultCallsFlush): a client
	// that reads the webhook kind (cached is fine) and patches its status.
	Status     client.Client
	CallsFlush time.Duration
	// Kinds are more kinds of webhook served on the same address beside
	// New's: a path is one webhook's, so it finds its kind.
	Kinds []Kind
}

func (o *Options) defaults() {
	if o.Rate <= 0 {
		o.Rate = 10
	}
	if o.Burst <= 0 {
		o.Burst = 100
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 1 << 20
	}
	if o.CallsFlush <= 0 {
		o.CallsFlush = DefaultCallsFlush
	}
}

// Metrics of a receiver.
type Metrics struct {
	Received *prometheus.CounterVec
	Accepted *prometheus.CounterVec
	Rejected *prometheus.CounterVec
	// Requested counts the reconcile requests calls led to, and
	// StartDelay is the time from a call to the start of the work it
	// requested (Requests).
	Requested  *prometheus.CounterVec
	StartDelay prometheus.Histogram
}

// NewMetrics makes a receiver's metrics, named
// imagetoolkit_<subsystem>_webhook_* (docs/metrics.md); work names what a
// request starts (scan, run) and requested says what is counted.
func NewMetrics(subsystem, work, requested string) *Metrics {
	const ns = "imagetoolkit"
	return &Metrics{
		Received: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: subsystem,
			Name: "webhook_requests_total", Help: "Calls to the webhook receiver, by webhook type (unknown when the path names no webhook)."},
			[]string{"type"}),
		Accepted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: subsystem,
			Name: "webhook_accepted_total", Help: "Webhook calls authenticated and accepted, by type."},
			[]string{"type"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: subsystem,
			Name: "webhook_rejected_total", Help: "Webhook calls refused or ignored, by type and reason."},
			[]string{"type", "reason"}),
		Requested: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: subsystem,
			Name: "webhook_" + work + "_requests_total", Help: requested + " requested by webhooks, by type."},
			[]string{"type"}),
		StartDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: subsystem,
			Name: "webhook_" + work + "_start_seconds", Help: "Time from a webhook call to the start of the " + work + " it requested.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Received, m.Accepted, m.Rejected, m.Requested, m.StartDelay}
}

// Server is a receiver: an HTTP handler and a manager Runnable.
type Server struct {
	kinds   []Kind
	secrets client.Reader
	metrics *Metrics
	opts    Options
	queue   chan Work
	calls   calls

	mu       sync.Mutex
	limiters map[types.NamespacedName]*rate.Limiter
	// listening is set once Start listens.
	listening atomic.Bool
}

// New makes a receiver for kind, reading Secrets through secrets
// (uncached: the controllers never list Secrets).
func New(kind Kind, secrets client.Reader, m *Metrics, o Options) *Server {
	o.defaults()
	return &Server{kinds: append([]Kind{kind}, o.Kinds...), secrets: secrets, metrics: m, opts: o,
		queue:    make(chan Work, 1024),
		limiters: map[types.NamespacedName]*rate.Limiter{},
	}
}

// NeedLeaderElection is false: every replica serves calls, since what a
// call triggers is a request on an object, which the leader acts on.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves on Options.Addr until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	l, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	s.listening.Store(true)
	return s.Serve(ctx, l)
}

// Listening is a readiness check (healthz.Checker): an error until the
// receiver listens. A replica is not ready while the calls it is there to
// answer cannot reach it; and a controller whose address was taken exits
// before it was ever called ready.
func (s *Server) Listening(*http.Request) error {
	if !s.listening.Load() {
		return errors.New("the webhook receiver does not listen yet")
	}
	return nil
}

// Serve serves on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go s.work(ctx)
	counted := make(chan struct{})
	if s.opts.Status != nil {
		go func() { s.countCalls(ctx); close(counted) }()
	} else {
		close(counted)
	}
	// The last counts are written before Serve returns.
	defer func() { <-counted }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	s.opts.Log.Info("serving webhooks", "address", l.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// reject answers a refused call and counts it, in the metrics and, when
// the path named a webhook h, in its status. The log line names the
// webhook, never the path (for some senders the path is the credential) or
// a header.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, h *Hook, typ string, e *Refusal, received time.Time) {
	s.metrics.Rejected.WithLabelValues(typ, e.Reason).Inc()
	hook := ""
	if h != nil {
		hook = h.Key.String()
		s.calls.add(*h, e.Reason, received)
	}
	s.opts.Log.V(1).Info("webhook call refused", "webhook", hook, "type", typ, "reason", e.Reason, "status", e.Status, "remote", r.RemoteAddr)
	http.Error(w, e.Msg, e.Status)
}

var notFound = &Refusal{http.StatusNotFound, ReasonNotFound, "no such webhook"}

// ServeHTTP authenticates a call, reads what it is about, queues the work
// and answers 202.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	if r.URL.Path == "/healthz" {
		w.WriteHeader(http.StatusOK)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	h, ok := s.find(ctx, r.URL.Path)
	if !ok {
		s.metrics.Received.WithLabelValues("unknown").Inc()
		s.reject(w, r, nil, "unknown", notFound, received)
		return
	}
	typ := h.Type
	s.metrics.Received.WithLabelValues(typ).Inc()
	if refused := s.admit(w, r, h); refused != nil {
		s.reject(w, r, &h, typ, refused, received)
		return
	}
	body, refused := s.readBody(w, r)
	if refused != nil {
		s.reject(w, r, &h, typ, refused, received)
		return
	}
	c := &Call{Hook: h, Header: r.Header, Body: body, Received: received}
	if refused := s.authenticate(ctx, c, r.URL.Path); refused != nil {
		s.reject(w, r, &h, typ, refused, received)
		return
	}
	if h.Suspend {
		s.metrics.Rejected.WithLabelValues(typ, ReasonSuspended).Inc()
		s.calls.add(h, ReasonSuspended, received)
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "suspended; ignored\n")
		return
	}
	if refused := s.accept(ctx, w, c); refused != nil {
		s.reject(w, r, &h, typ, refused, received)
	}
}

// find returns the webhook at path; false when there is none, or the path
// cannot be one (too long to be a Path).
func (s *Server) find(ctx context.Context, path string) (Hook, bool) {
	if !strings.HasPrefix(path, PathPrefix) || len(path) > len(PathPrefix)+64 {
		return Hook{}, false
	}
	for _, k := range s.kinds {
		if h, ok, err := k.Find(ctx, path); ok && err == nil {
			h.kind = k
			return h, true
		}
	}
	return Hook{}, false
}

// admit refuses a call that is not a POST, or beyond the webhook's rate,
// before its body is read.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, h Hook) *Refusal {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return &Refusal{http.StatusMethodNotAllowed, ReasonMethod, "POST only"}
	}
	if !s.limiter(h.Key).Allow() {
		w.Header().Set("Retry-After", "1")
		return &Refusal{http.StatusTooManyRequests, ReasonRateLimited, "too many calls"}
	}
	return nil
}

// readBody reads the call's body, at most Options.MaxBody.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Refusal) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &Refusal{http.StatusRequestEntityTooLarge, ReasonTooLarge, "body too large"}
		}
		return nil, &Refusal{http.StatusBadRequest, ReasonBadPayload, "reading body failed"}
	}
	return body, nil
}

// authenticate checks a call made to path with its webhook's Secret: the
// path must be the token's, and the sender's credentials must verify.
func (s *Server) authenticate(ctx context.Context, c *Call, path string) *Refusal {
	h := c.Hook
	secret, err := ReadSecret(ctx, s.secrets, h.Key.Namespace, h.Secret, h.kind.SecretKeys(h.Type))
	if err != nil {
		// Our side is not ready: the sender may retry.
		s.opts.Log.Error(err, "reading the webhook's token", "webhook", h.Key.String())
		return &Refusal{http.StatusServiceUnavailable, ReasonSecret, "webhook not ready"}
	}
	// A rotated token moves the path; the old one stops working at once,
	// not when the reconciler next writes the status.
	if !Equal(Path(secret[TokenKey], h.Key.Name, h.Key.Namespace), path) {
		return &Refusal{http.StatusForbidden, ReasonBadAuth, "stale webhook path"}
	}
	if err := h.kind.Verify(ctx, c, secret); err != nil {
		return refusal(err, http.StatusForbidden, ReasonBadAuth, "refused")
	}
	return nil
}

// accept reads what a verified call is about and queues its work: 202, or
// 200 when there is nothing to do.
func (s *Server) accept(ctx context.Context, w http.ResponseWriter, c *Call) *Refusal {
	work, err := c.Hook.kind.Accept(ctx, c)
	if err != nil {
		return refusal(err, http.StatusBadRequest, ReasonBadPayload, err.Error())
	}
	if work == nil {
		s.metrics.Accepted.WithLabelValues(c.Hook.Type).Inc()
		s.calls.add(c.Hook, "", c.Received)
		w.WriteHeader(http.StatusOK)
		return nil
	}
	select {
	case s.queue <- work:
	default:
		w.Header().Set("Retry-After", "1")
		return &Refusal{http.StatusServiceUnavailable, ReasonOverloaded, "busy"}
	}
	s.metrics.Accepted.WithLabelValues(c.Hook.Type).Inc()
	s.calls.add(c.Hook, "", c.Received)
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// refusal is err as a *Refusal, or the given one.
func refusal(err error, status int, reason, msg string) *Refusal {
	var e *Refusal
	if errors.As(err, &e) {
		return e
	}
	return &Refusal{status, reason, msg}
}

func (s *Server) limiter(key types.NamespacedName) *rate.Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.limiters[key]
	if !ok {
		l = rate.NewLimiter(s.opts.Rate, s.opts.Burst)
		s.limiters[key] = l
	}
	return l
}

// work runs queued work one at a time until ctx ends.
func (s *Server) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-s.queue:
			w(ctx)
		}
	}
}

// ReadSecret reads a webhook's Secret and checks it holds keys. A missing
// Secret or key is a *conditions.Failure (SecretNotFound, InvalidSecret)
// for the reconciler to report; values are never logged or put in errors.
func ReadSecret(ctx context.Context, c client.Reader, namespace, name string, keys []string) (map[string][]byte, error) {
	var sec corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, conditions.Retryf(conditions.SecretNotFoundReason, "secret %q not found", name)
		}
		return nil, err
	}
	for _, k := range keys {
		if len(sec.Data[k]) == 0 {
			return nil, conditions.Retryf(imagev1.InvalidSecretReason, "secret %q has no %q key", name, k)
		}
	}
	return sec.Data, nil
}

// RequestReconcile sets the reconcile-request annotation on the object key
// names (obj gives its kind), which its reconciler honours at once. A
// request is an annotation, not a channel into the reconciler, so any
// replica can make it, the leader acts on it, and it is visible on the
// object.
func RequestReconcile(ctx context.Context, c client.Client, obj client.Object, key types.NamespacedName, value string) error {
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, value)
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
}
