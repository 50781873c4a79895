package webhook

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/index"
)

// Options tune the receiver; zero values take the defaults.
type Options struct {
	// Addr is the address to listen on, e.g. :9292.
	Addr string
	// Window is how long the first call about an ImageRepository waits
	// for others about it before its scan is requested (default 250 ms): a
	// push of many tags becomes one scan, at the cost of this much latency.
	Window time.Duration
	// Rate, Burst and MaxBody are receiver.Options'.
	Rate    rate.Limit
	Burst   int
	MaxBody int64
	// CallsFlush is how often the calls answered are added to each
	// webhook's status.calls (receiver.DefaultCallsFlush when zero).
	CallsFlush time.Duration
	// GoogleCertsURL is where the keys of Google's ID tokens are read
	// (default GoogleCertsURL), for gcr webhooks.
	GoogleCertsURL string
	Log            logr.Logger
	// Kinds are more webhook kinds served on the same address
	// (receiver.Options.Kinds): the reflector's HealthWebhooks.
	Kinds []receiver.Kind
}

// Metrics of the receiver: the shared ones (its requests are scans) and
// the triggers folded into a pending scan.
type Metrics struct {
	*receiver.Metrics
	Coalesced *prometheus.CounterVec
}

// NewMetrics makes the receiver's metrics (docs/metrics.md).
func NewMetrics() *Metrics {
	const ns, sub = "imagetoolkit", "reflector"
	return &Metrics{
		Metrics: receiver.NewMetrics(sub, "scan", "Scans of ImageRepositories"),
		Coalesced: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "webhook_coalesced_total", Help: "Webhook triggers of an ImageRepository folded into a scan already pending, by type."},
			[]string{"type"}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return append(m.Metrics.Collectors(), m.Coalesced)
}

type pendingScan struct {
	first time.Time
	typ   string
}

// Server is the ImageWebhook receiver: a receiver.Server serving the
// ImageWebhook kind, which requests scans.
type Server struct {
	*receiver.Server
	// Senders give receiver.Kind's SecretKeys and Verify, and Accept's
	// parse.
	receiver.Senders[[]Target]
	client  client.Client
	byPath  Lookup
	metrics *Metrics
	window  time.Duration
	log     logr.Logger

	mu        sync.Mutex
	pending   map[types.NamespacedName]*pendingScan
	requested *receiver.Requests
}

// New makes a receiver reading ImageWebhooks and ImageRepositories through
// c (a cached client with the index of SetupIndexes) and byPath, and
// Secrets through secrets, uncached: the reflector never lists Secrets.
func New(c client.Client, byPath Lookup, secrets client.Reader, m *Metrics, o Options) *Server {
	if o.Window <= 0 {
		o.Window = 250 * time.Millisecond
	}
	s := &Server{Senders: senders(newGoogleKeys(o.GoogleCertsURL)), client: c, byPath: byPath, metrics: m, window: o.Window, log: o.Log,
		pending:   map[types.NamespacedName]*pendingScan{},
		requested: receiver.NewRequests(c, m.Metrics),
	}
	s.Server = receiver.New(s, secrets, m.Metrics, receiver.Options{
		Addr: o.Addr, Rate: o.Rate, Burst: o.Burst, MaxBody: o.MaxBody, Log: o.Log,
		Status: c, CallsFlush: o.CallsFlush, Kinds: o.Kinds,
	})
	return s
}

// Lookup returns the keys of the ImageRepositories of an image path
// (library/nginx for nginx), in every namespace.
type Lookup func(ctx context.Context, path string) ([]types.NamespacedName, error)

// SetupIndexes registers the field index of ImageWebhooks by path, and
// returns the index of ImageRepositories by image path: an index.Index,
// as there is an entry for every repository.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) (Lookup, error) {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &imagev1.ImageWebhook{}, PathIndex, indexPath); err != nil {
		return nil, err
	}
	ix, err := index.Follow(ctx, mgr.GetCache(), &imagev1.ImageRepository{}, indexRepositoryPath)
	if err != nil {
		return nil, err
	}
	return ix.Lookup, nil
}

// Find implements receiver.Kind: the ImageWebhook at path.
func (s *Server) Find(ctx context.Context, path string) (receiver.Hook, bool, error) {
	var hooks imagev1.ImageWebhookList
	if err := s.client.List(ctx, &hooks, client.MatchingFields{PathIndex: path}); err != nil || len(hooks.Items) != 1 {
		return receiver.Hook{}, false, err
	}
	wh := &hooks.Items[0]
	return receiver.Hook{Key: types.NamespacedName{Namespace: wh.Namespace, Name: wh.Name},
		Type: wh.Spec.Type, Secret: wh.Spec.SecretRef.Name, Suspend: wh.Spec.Suspend, Object: wh}, true, nil
}

// SecretKeys are the keys a webhook's Secret must have for its type.
func SecretKeys(typ string) []string { return senders(nil).SecretKeys(typ) }

// Accept implements receiver.Kind: the repositories the call names,
// resolved and scheduled after the answer.
func (s *Server) Accept(_ context.Context, c *receiver.Call) (receiver.Work, error) {
	targets, err := s.Parse(c)
	if errors.Is(err, errIgnore) || (err == nil && len(targets) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	wh := c.Hook.Object.(*imagev1.ImageWebhook)
	sel := labels.Everything()
	if wh.Spec.ImageRepositorySelector != nil {
		if sel, err = metav1.LabelSelectorAsSelector(wh.Spec.ImageRepositorySelector); err != nil {
			// The reconciler clears the path of such a webhook; until it
			// has, refuse as not ready rather than guess.
			return nil, &receiver.Refusal{Status: http.StatusServiceUnavailable, Reason: receiver.ReasonSecret, Msg: "webhook not ready"}
		}
	}
	key, typ, received := c.Hook.Key, c.Hook.Type, c.Received
	return func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		repos, err := s.resolve(rctx, key.Namespace, sel, targets)
		cancel()
		if err != nil {
			s.log.Error(err, "finding the ImageRepositories of a webhook call", "webhook", key.String())
			return
		}
		for _, r := range repos {
			s.schedule(ctx, r, typ, received)
		}
	}, nil
}

// resolve returns the ImageRepositories of the namespace, chosen by the
// selector, that the targets name.
func (s *Server) resolve(ctx context.Context, namespace string, sel labels.Selector, targets []Target) ([]types.NamespacedName, error) {
	seen := map[types.NamespacedName]bool{}
	var out []types.NamespacedName
	for _, t := range targets {
		repos, err := s.candidates(ctx, namespace, t)
		if err != nil {
			return nil, err
		}
		for i := range repos {
			r := &repos[i]
			if t.Name != "" {
				if canonicalName(r) != t.Name {
					continue
				}
			}
			if t.Prefix {
				p := indexRepositoryPath(r)
				if len(p) == 0 || (p[0] != t.Path && !strings.HasPrefix(p[0], t.Path+"/")) {
					continue
				}
			}
			k := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
			if seen[k] || !sel.Matches(labels.Set(r.Labels)) {
				continue
			}
			seen[k] = true
			out = append(out, k)
		}
	}
	return out, nil
}

// candidates are the ImageRepositories of the namespace a target may name:
// those of its path, or for a prefix all of them. A name is found by its
// path, and the few repositories of that path on other hosts dropped by
// the caller: an index by whole name too would cost as much again.
func (s *Server) candidates(ctx context.Context, namespace string, t Target) ([]imagev1.ImageRepository, error) {
	path := t.Path
	switch {
	case t.Name != "":
		_, path, _ = strings.Cut(t.Name, "/")
	case t.Prefix:
		var list imagev1.ImageRepositoryList
		err := s.client.List(ctx, &list, client.InNamespace(namespace))
		return list.Items, err
	}
	keys, err := s.byPath(ctx, path)
	if err != nil {
		return nil, err
	}
	var out []imagev1.ImageRepository
	for _, k := range keys {
		if k.Namespace != namespace {
			continue
		}
		var r imagev1.ImageRepository
		if err := s.client.Get(ctx, k, &r); err != nil {
			if apierrors.IsNotFound(err) { // deleted since the index saw it
				continue
			}
			return nil, err
		}
		out = append(out, r)
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
	wait := s.window - time.Since(received)
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
	s.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.requested.Request(ctx, &imagev1.ImageRepository{}, repo, p.typ, p.first); err != nil {
		if !apierrors.IsNotFound(err) {
			s.log.Error(err, "requesting a scan", "imagerepository", repo.String())
		}
		return
	}
	s.log.V(1).Info("scan requested by webhook", "imagerepository", repo.String(), "type", p.typ)
}

// ScanStarted is told by the ImageRepository reconciler that it handles
// the reconcile request value on namespace/name; a request of ours is
// observed as webhook → scan start latency.
func (s *Server) ScanStarted(namespace, name, value string) {
	s.requested.Started(namespace, name, value)
}
