package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Options tune the receiver; zero values take the defaults.
type Options struct {
	// Addr is the address to listen on, e.g. :9292.
	Addr string
	// Window is how long the first call about an ImageRepository waits
	// for others about it before its scan is requested (default 250 ms): a
	// push of many tags becomes one scan, at the cost of this much latency.
	Window time.Duration
	// Rate and Burst limit calls per webhook (default 10/s, burst 100);
	// a sender beyond them gets 429.
	Rate  rate.Limit
	Burst int
	// MaxBody caps a request body (default 1 MiB; the senders' push
	// payloads are a few KiB).
	MaxBody int64
	// GoogleCertsURL is where the keys of Google's ID tokens are read
	// (default GoogleCertsURL), for gcr webhooks.
	GoogleCertsURL string
	Log            logr.Logger
}

func (o *Options) defaults() {
	if o.Window <= 0 {
		o.Window = 250 * time.Millisecond
	}
	if o.Rate <= 0 {
		o.Rate = 10
	}
	if o.Burst <= 0 {
		o.Burst = 100
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 1 << 20
	}
}

// Metrics of the receiver.
type Metrics struct {
	Received       *prometheus.CounterVec
	Accepted       *prometheus.CounterVec
	Rejected       *prometheus.CounterVec
	ScanRequests   *prometheus.CounterVec
	Coalesced      *prometheus.CounterVec
	ScanStartDelay prometheus.Histogram
}

// NewMetrics makes the receiver's metrics (docs/metrics.md).
func NewMetrics() *Metrics {
	const ns, sub = "imagetoolkit", "reflector"
	return &Metrics{
		Received: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "webhook_requests_total", Help: "Calls to the webhook receiver, by webhook type (unknown when the path names no webhook)."},
			[]string{"type"}),
		Accepted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "webhook_accepted_total", Help: "Webhook calls authenticated and accepted, by type."},
			[]string{"type"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "webhook_rejected_total", Help: "Webhook calls refused or ignored, by type and reason."},
			[]string{"type", "reason"}),
		ScanRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "webhook_scan_requests_total", Help: "Scans of ImageRepositories requested by webhooks, by type."},
			[]string{"type"}),
		Coalesced: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "webhook_coalesced_total", Help: "Webhook triggers of an ImageRepository folded into a scan already pending, by type."},
			[]string{"type"}),
		ScanStartDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "webhook_scan_start_seconds", Help: "Time from a webhook call to the start of the scan it requested.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Received, m.Accepted, m.Rejected, m.ScanRequests, m.Coalesced, m.ScanStartDelay}
}

// hook is what the worker needs of an ImageWebhook, copied from the cache.
type hook struct {
	key      types.NamespacedName
	typ      string
	selector labels.Selector
}

type call struct {
	hook     hook
	targets  []Target
	received time.Time
}

type pendingScan struct {
	first time.Time
	typ   string
}

// Server is the receiver: an HTTP handler and a manager Runnable.
type Server struct {
	client  client.Client
	secrets client.Reader
	metrics *Metrics
	opts    Options

	queue  chan call
	google *googleKeys

	mu        sync.Mutex
	limiters  map[types.NamespacedName]*rate.Limiter
	pending   map[types.NamespacedName]*pendingScan
	requested map[string]time.Time // namespace/name|annotation value → first call
}

// New makes a receiver reading ImageWebhooks and ImageRepositories through
// c (a cached client with the indexes of SetupWithManager) and Secrets
// through secrets, uncached: the reflector never lists Secrets.
func New(c client.Client, secrets client.Reader, m *Metrics, o Options) *Server {
	o.defaults()
	return &Server{client: c, secrets: secrets, metrics: m, opts: o,
		queue:     make(chan call, 1024),
		google:    newGoogleKeys(o.GoogleCertsURL),
		limiters:  map[types.NamespacedName]*rate.Limiter{},
		pending:   map[types.NamespacedName]*pendingScan{},
		requested: map[string]time.Time{},
	}
}

// SetupIndexes registers the field indexes the receiver looks up by.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &imagev1.ImageWebhook{}, PathIndex, indexPath); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &imagev1.ImageRepository{}, ImageIndex, indexImage); err != nil {
		return err
	}
	return idx.IndexField(ctx, &imagev1.ImageRepository{}, RepositoryPathIndex, indexRepositoryPath)
}

// NeedLeaderElection is false: every replica serves calls, since any can
// annotate an ImageRepository; the leader scans.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves on Options.Addr until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	l, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	return s.Serve(ctx, l)
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

// reject answers a refused call and counts it. The log line names the
// webhook, never the path (for Docker Hub and Quay the path is the
// credential) or a header.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, hook, typ, reason string, status int, msg string) {
	s.metrics.Rejected.WithLabelValues(typ, reason).Inc()
	s.opts.Log.V(1).Info("webhook call refused", "webhook", hook, "type", typ, "reason", reason, "status", status, "remote", r.RemoteAddr)
	http.Error(w, msg, status)
}

// ServeHTTP authenticates a call, reads what it is about, queues it and
// answers 202; the scans are requested by the worker.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	if r.URL.Path == "/healthz" {
		w.WriteHeader(http.StatusOK)
		return
	}
	if !strings.HasPrefix(r.URL.Path, PathPrefix) || len(r.URL.Path) > len(PathPrefix)+64 {
		s.metrics.Received.WithLabelValues("unknown").Inc()
		s.reject(w, r, "", "unknown", ReasonNotFound, http.StatusNotFound, "no such webhook")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var hooks imagev1.ImageWebhookList
	if err := s.client.List(ctx, &hooks, client.MatchingFields{PathIndex: r.URL.Path}); err != nil || len(hooks.Items) != 1 {
		s.metrics.Received.WithLabelValues("unknown").Inc()
		s.reject(w, r, "", "unknown", ReasonNotFound, http.StatusNotFound, "no such webhook")
		return
	}
	wh := &hooks.Items[0]
	typ := wh.Spec.Type
	key := types.NamespacedName{Namespace: wh.Namespace, Name: wh.Name}
	s.metrics.Received.WithLabelValues(typ).Inc()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.reject(w, r, key.String(), typ, ReasonMethod, http.StatusMethodNotAllowed, "POST only")
		return
	}
	if !s.limiter(key).Allow() {
		w.Header().Set("Retry-After", "1")
		s.reject(w, r, key.String(), typ, ReasonRateLimited, http.StatusTooManyRequests, "too many calls")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.reject(w, r, key.String(), typ, ReasonTooLarge, http.StatusRequestEntityTooLarge, "body too large")
			return
		}
		s.reject(w, r, key.String(), typ, ReasonBadPayload, http.StatusBadRequest, "reading body failed")
		return
	}
	secret, err := s.secret(ctx, wh)
	if err != nil {
		// Our side is not ready: the sender may retry.
		s.opts.Log.Error(err, "reading the webhook's token", "webhook", key.String())
		s.reject(w, r, key.String(), typ, ReasonSecret, http.StatusServiceUnavailable, "webhook not ready")
		return
	}
	// A rotated token moves the path; the old one stops working at once,
	// not when the reconciler next writes the status.
	if !equal(Path(secret[TokenKey], wh.Name, wh.Namespace), r.URL.Path) {
		s.reject(w, r, key.String(), typ, ReasonBadAuth, http.StatusForbidden, "stale webhook path")
		return
	}
	if typ == imagev1.WebhookGCR {
		err = s.google.verify(ctx, r.Header, secret[EmailKey], secret[AudienceKey])
	} else {
		err = verify(typ, r.Header, body, secret[TokenKey])
	}
	if err != nil {
		var ae *authError
		if errors.As(err, &ae) {
			s.reject(w, r, key.String(), typ, ae.reason, ae.status, ae.msg)
			return
		}
		s.reject(w, r, key.String(), typ, ReasonBadAuth, http.StatusForbidden, "refused")
		return
	}
	if wh.Spec.Suspend {
		s.metrics.Rejected.WithLabelValues(typ, ReasonSuspended).Inc()
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "suspended; ignored\n")
		return
	}
	targets, err := parse(typ, r.Header, body)
	if errors.Is(err, errIgnore) {
		s.metrics.Accepted.WithLabelValues(typ).Inc()
		w.WriteHeader(http.StatusOK)
		return
	}
	if err != nil {
		s.reject(w, r, key.String(), typ, ReasonBadPayload, http.StatusBadRequest, err.Error())
		return
	}
	sel := labels.Everything()
	if wh.Spec.ImageRepositorySelector != nil {
		if sel, err = metav1.LabelSelectorAsSelector(wh.Spec.ImageRepositorySelector); err != nil {
			s.reject(w, r, key.String(), typ, ReasonSecret, http.StatusServiceUnavailable, "webhook not ready")
			return
		}
	}
	if len(targets) > 0 {
		select {
		case s.queue <- call{hook: hook{key: key, typ: typ, selector: sel}, targets: targets, received: received}:
		default:
			w.Header().Set("Retry-After", "1")
			s.reject(w, r, key.String(), typ, ReasonOverloaded, http.StatusServiceUnavailable, "busy")
			return
		}
	}
	s.metrics.Accepted.WithLabelValues(typ).Inc()
	w.WriteHeader(http.StatusAccepted)
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

// secret reads the webhook's Secret, checking it has the keys its type
// needs. Its values are never logged or returned in an answer.
func (s *Server) secret(ctx context.Context, wh *imagev1.ImageWebhook) (map[string][]byte, error) {
	var sec corev1.Secret
	if err := s.secrets.Get(ctx, types.NamespacedName{Namespace: wh.Namespace, Name: wh.Spec.SecretRef.Name}, &sec); err != nil {
		return nil, err
	}
	for _, k := range SecretKeys(wh.Spec.Type) {
		if len(sec.Data[k]) == 0 {
			return nil, fmt.Errorf("secret %s has no %q", wh.Spec.SecretRef.Name, k)
		}
	}
	return sec.Data, nil
}

// SecretKeys are the keys a webhook's Secret must have for its type.
func SecretKeys(typ string) []string {
	if typ == imagev1.WebhookGCR {
		return []string{TokenKey, EmailKey, AudienceKey}
	}
	return []string{TokenKey}
}

// work resolves queued calls to ImageRepositories and schedules one scan
// request per repository and window.
func (s *Server) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-s.queue:
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			repos, err := s.resolve(rctx, c.hook, c.targets)
			cancel()
			if err != nil {
				s.opts.Log.Error(err, "finding the ImageRepositories of a webhook call", "webhook", c.hook.key.String())
				continue
			}
			for _, r := range repos {
				s.schedule(ctx, r, c.hook.typ, c.received)
			}
		}
	}
}

// resolve returns the ImageRepositories of the webhook's namespace, chosen
// by its selector, that the targets name.
func (s *Server) resolve(ctx context.Context, h hook, targets []Target) ([]types.NamespacedName, error) {
	seen := map[types.NamespacedName]bool{}
	var out []types.NamespacedName
	for _, t := range targets {
		var list imagev1.ImageRepositoryList
		opts := []client.ListOption{client.InNamespace(h.key.Namespace)}
		switch {
		case t.Name != "":
			opts = append(opts, client.MatchingFields{ImageIndex: t.Name})
		case !t.Prefix:
			opts = append(opts, client.MatchingFields{RepositoryPathIndex: t.Path})
		}
		if err := s.client.List(ctx, &list, opts...); err != nil {
			return nil, err
		}
		for i := range list.Items {
			r := &list.Items[i]
			if t.Prefix {
				p := indexRepositoryPath(r)
				if len(p) == 0 || (p[0] != t.Path && !strings.HasPrefix(p[0], t.Path+"/")) {
					continue
				}
			}
			k := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
			if seen[k] || !h.selector.Matches(labels.Set(r.Labels)) {
				continue
			}
			seen[k] = true
			out = append(out, k)
		}
	}
	return out, nil
}

// schedule requests a scan of repo at the end of the window opened by the
// first call about it; later calls within the window join that request.
func (s *Server) schedule(ctx context.Context, repo types.NamespacedName, typ string, received time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pending[repo]; ok {
		if received.Before(p.first) {
			p.first = received
		}
		s.metrics.Coalesced.WithLabelValues(typ).Inc()
		return
	}
	s.pending[repo] = &pendingScan{first: received, typ: typ}
	wait := s.opts.Window - time.Since(received)
	time.AfterFunc(max(wait, 0), func() { s.request(ctx, repo) })
}

// request sets the reconcile-request annotation on repo, which makes the
// reflector scan it now.
func (s *Server) request(ctx context.Context, repo types.NamespacedName) {
	s.mu.Lock()
	p, ok := s.pending[repo]
	if !ok {
		s.mu.Unlock()
		return
	}
	delete(s.pending, repo)
	value := time.Now().UTC().Format(time.RFC3339Nano)
	s.requested[repo.String()+"|"+value] = p.first
	for k, t := range s.requested {
		if time.Since(t) > 10*time.Minute { // never handled (suspended, deleted)
			delete(s.requested, k)
		}
	}
	s.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	obj := &imagev1.ImageRepository{}
	obj.Namespace, obj.Name = repo.Namespace, repo.Name
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, value)
	if err := s.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if !apierrors.IsNotFound(err) {
			s.opts.Log.Error(err, "requesting a scan", "imagerepository", repo.String())
		}
		return
	}
	s.metrics.ScanRequests.WithLabelValues(p.typ).Inc()
	s.opts.Log.V(1).Info("scan requested by webhook", "imagerepository", repo.String(), "type", p.typ)
}

// ScanStarted is told by the ImageRepository reconciler that it handles
// the reconcile request value on namespace/name; a request of ours is
// observed as webhook → scan start latency.
func (s *Server) ScanStarted(namespace, name, value string) {
	k := namespace + "/" + name + "|" + value
	s.mu.Lock()
	first, ok := s.requested[k]
	delete(s.requested, k)
	s.mu.Unlock()
	if ok {
		s.metrics.ScanStartDelay.Observe(time.Since(first).Seconds())
	}
}
