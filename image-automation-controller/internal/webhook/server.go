package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/receiver"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations,verbs=patch

// PathIndex indexes GitWebhooks by status.webhookPath.
const PathIndex = ".status.webhookPath"

// Options tune the receiver; zero values take the defaults.
type Options struct {
	// Addr is the address to listen on, e.g. :9293.
	Addr string
	// Rate, Burst and MaxBody are receiver.Options'.
	Rate    rate.Limit
	Burst   int
	MaxBody int64
	// CallsFlush is how often the calls answered are added to each
	// webhook's status.calls (receiver.DefaultCallsFlush when zero).
	CallsFlush time.Duration
	// Source is how automations' repositories are resolved (the
	// controller's --no-cross-namespace-refs).
	Source gitsource.Options
	// PushedByJob reports whether one of the namespace's UpdateJobs
	// pushed commit to the branch it checks out. A push of such a commit
	// runs no automation: the automations of a branch take the moves
	// their own jobs make as no change (a monorepo's grouped commits
	// would otherwise ask each of its thousand automations to run, once
	// per commit).
	PushedByJob func(ctx context.Context, namespace, commit string) bool
	Log         logr.Logger
}

// NewMetrics makes the receiver's metrics (docs/metrics.md): its requests
// are automation runs.
func NewMetrics() *receiver.Metrics {
	return receiver.NewMetrics("automation", "run", "Runs of ImageUpdateAutomations")
}

// Server is the GitWebhook receiver: a receiver.Server serving the
// GitWebhook kind, which requests automation runs.
type Server struct {
	*receiver.Server
	// Senders give receiver.Kind's SecretKeys and Verify, and Accept's
	// parse.
	receiver.Senders[Push]
	client  client.Client
	sources client.Reader
	opts    Options

	requested *receiver.Requests
}

// New makes a receiver reading GitWebhooks and ImageUpdateAutomations
// through c (a cached client with the index of SetupIndexes), and
// Secrets and Flux GitRepositories through api, uncached, as the
// automation reconciler reads them.
func New(c client.Client, api client.Reader, m *receiver.Metrics, o Options) *Server {
	s := &Server{Senders: senders, client: c, sources: api, opts: o, requested: receiver.NewRequests(c, m)}
	s.Server = receiver.New(s, api, m, receiver.Options{
		Addr: o.Addr, Rate: o.Rate, Burst: o.Burst, MaxBody: o.MaxBody, Log: o.Log,
		Status: c, CallsFlush: o.CallsFlush,
	})
	return s
}

// SetupIndexes registers the field index the receiver looks up by.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &imagev1.GitWebhook{}, PathIndex, func(o client.Object) []string {
		if w, ok := o.(*imagev1.GitWebhook); ok && w.Status.WebhookPath != "" {
			return []string{w.Status.WebhookPath}
		}
		return nil
	})
}

// Find implements receiver.Kind: the GitWebhook at path.
func (s *Server) Find(ctx context.Context, path string) (receiver.Hook, bool, error) {
	var hooks imagev1.GitWebhookList
	if err := s.client.List(ctx, &hooks, client.MatchingFields{PathIndex: path}); err != nil || len(hooks.Items) != 1 {
		return receiver.Hook{}, false, err
	}
	wh := &hooks.Items[0]
	return receiver.Hook{Key: types.NamespacedName{Namespace: wh.Namespace, Name: wh.Name},
		Type: wh.Spec.Type, Secret: wh.Spec.SecretRef.Name, Suspend: wh.Spec.Suspend, Object: wh}, true, nil
}

// Accept implements receiver.Kind: the automations the push is about are
// found and asked to run after the answer.
func (s *Server) Accept(_ context.Context, c *receiver.Call) (receiver.Work, error) {
	p, err := s.Parse(c)
	if errors.Is(err, errIgnore) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	wh := c.Hook.Object.(*imagev1.GitWebhook)
	sel := labels.Everything()
	if wh.Spec.AutomationSelector != nil {
		if sel, err = metav1.LabelSelectorAsSelector(wh.Spec.AutomationSelector); err != nil {
			// The reconciler clears the path of such a webhook; until it
			// has, refuse as not ready rather than guess.
			return nil, &receiver.Refusal{Status: http.StatusServiceUnavailable, Reason: receiver.ReasonSecret, Msg: "webhook not ready"}
		}
	}
	key, typ, received := c.Hook.Key, c.Hook.Type, c.Received
	return func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if p.After != "" && s.opts.PushedByJob != nil && s.opts.PushedByJob(ctx, key.Namespace, p.After) {
			s.opts.Log.V(1).Info("the push is an UpdateJob's own commit: no run requested", "webhook", key.String(), "commit", p.After)
			return
		}
		autos, err := s.match(ctx, key.Namespace, sel, p)
		if err != nil {
			s.opts.Log.Error(err, "finding the ImageUpdateAutomations of a push", "webhook", key.String())
			return
		}
		for _, a := range autos {
			s.request(ctx, a, typ, received)
		}
	}, nil
}

// match returns the automations of the namespace, chosen by the selector,
// whose repository the push names and whose checkout branch it moved.
// Each automation's repository is resolved as its reconciler resolves it
// (spec.git.repository, or the object of spec.sourceRef, read once per call
// however many automations share it, or spec.applicationSelector's
// Applications); one that does not
// resolve is skipped, its own status says why.
func (s *Server) match(ctx context.Context, namespace string, sel labels.Selector, p Push) ([]types.NamespacedName, error) {
	want := map[string]bool{}
	for _, u := range p.URLs {
		if k, ok := gitsource.RepositoryKey(u); ok {
			want[k] = true
		}
	}
	var list imagev1.ImageUpdateAutomationList
	if err := s.client.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	reader := &onceReader{Reader: s.sources, got: map[onceKey]client.Object{}}
	var out []types.NamespacedName
	for i := range list.Items {
		a := &list.Items[i]
		if a.Spec.Suspend {
			continue
		}
		src, err := gitsource.Resolve(ctx, reader, a, s.opts.Source)
		if err != nil {
			continue
		}
		if moves(src, want, p.Branch) {
			out = append(out, types.NamespacedName{Namespace: a.Namespace, Name: a.Name})
		}
	}
	return out, nil
}

// moves reports whether a push to branch of one of the repositories want
// (by gitsource.RepositoryKey) moved what src checks out: its branch, or
// any of its targets' (Applications on several repositories or
// branches). An Argo CD Application tracking HEAD checks out the default
// branch, which the push does not name: any push may have moved it.
func moves(src *gitsource.Source, want map[string]bool, branch string) bool {
	if len(src.Targets) > 0 {
		return slices.ContainsFunc(src.Targets, func(t *gitsource.Source) bool { return moves(t, want, branch) })
	}
	k, ok := gitsource.RepositoryKey(src.Repository.URL)
	if !ok || !want[k] || !gitsource.BranchOnly(src.Ref) && !src.DefaultBranch {
		return false
	}
	return branch == "" || src.Ref.Branch == "" || branch == src.Ref.Branch
}

// request asks the automation to run now.
func (s *Server) request(ctx context.Context, a types.NamespacedName, typ string, received time.Time) {
	if err := s.requested.Request(ctx, &imagev1.ImageUpdateAutomation{}, a, typ, received); err != nil {
		if !apierrors.IsNotFound(err) {
			s.opts.Log.Error(err, "requesting a run", "imageupdateautomation", a.String())
		}
		return
	}
	s.opts.Log.V(1).Info("run requested by git push webhook", "imageupdateautomation", a.String(), "type", typ)
}

// RunStarted is told by the automation reconciler that it handles the
// reconcile request value on namespace/name; a request of ours is
// observed as webhook → run start latency.
func (s *Server) RunStarted(namespace, name, value string) {
	s.requested.Started(namespace, name, value)
}

// onceReader reads each object once: the automations of a namespace
// commonly share one GitRepository.
type onceReader struct {
	client.Reader
	got map[onceKey]client.Object
}

type onceKey struct {
	gvk string
	key client.ObjectKey
}

func (r *onceReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	k := onceKey{obj.GetObjectKind().GroupVersionKind().String(), key}
	if o, ok := r.got[k]; ok {
		if o == nil {
			return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
		}
		return copyInto(o, obj)
	}
	if err := r.Reader.Get(ctx, key, obj, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			r.got[k] = nil
		}
		return err
	}
	r.got[k] = obj.DeepCopyObject().(client.Object)
	return nil
}

// copyInto copies a stored object into obj, of the same type.
func copyInto(stored, obj client.Object) error {
	dst := reflect.ValueOf(obj)
	src := reflect.ValueOf(stored.DeepCopyObject())
	if dst.Type() != src.Type() || dst.Kind() != reflect.Pointer {
		return fmt.Errorf("reading %T into %T", stored, obj)
	}
	dst.Elem().Set(src.Elem())
	return nil
}
