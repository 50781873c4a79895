package dashboard

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// watched is one kind the dashboard keeps in its cache.
type watched struct {
	// resource is the plural the API server and RBAC use.
	resource string
	newObj   func() client.Object
	newList  func() client.ObjectList
}

var watchedKinds = []watched{
	{"imageupdateautomations", func() client.Object { return &imagev1.ImageUpdateAutomation{} }, func() client.ObjectList { return &imagev1.ImageUpdateAutomationList{} }},
	{"imagepolicies", func() client.Object { return &imagev1.ImagePolicy{} }, func() client.ObjectList { return &imagev1.ImagePolicyList{} }},
	{"imagerepositories", func() client.Object { return &imagev1.ImageRepository{} }, func() client.ObjectList { return &imagev1.ImageRepositoryList{} }},
	{"updatejobs", func() client.Object { return &updatev1.UpdateJob{} }, func() client.ObjectList { return &updatev1.UpdateJobList{} }},
	{"imagewebhooks", func() client.Object { return &imagev1.ImageWebhook{} }, func() client.ObjectList { return &imagev1.ImageWebhookList{} }},
	{"gitwebhooks", func() client.Object { return &imagev1.GitWebhook{} }, func() client.ObjectList { return &imagev1.GitWebhookList{} }},
}

// Change names an object that was added, changed or deleted.
type Change struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// store is the dashboard's view of the cluster: one informer per kind the
// user may list (a watch each, shared by every page and browser), and the
// subscribers the changes go to.
type store struct {
	reader client.Reader
	// denied says, by resource, why the user may not list it; pages show
	// that instead of the objects.
	denied map[string]string

	mu   sync.Mutex
	subs map[*subscriber]struct{}
}

// subscriber collects changes for one event stream until it takes them.
type subscriber struct {
	mu      sync.Mutex
	pending []Change
	// health is set when the API server's state changed since the last
	// take.
	health bool
	notify chan struct{}
}

// maxPending bounds what a stream that does not keep up holds; past it the
// page reloads its view once anyway.
const maxPending = 256

// probeTimeout bounds each RBAC probe at start.
const probeTimeout = 15 * time.Second

// startStore probes which kinds the user may list in namespace (all
// namespaces when empty), starts an informer for each, and waits until
// they have listed.
func startStore(ctx context.Context, c cache.Cache, direct client.Client, namespace string) (*store, error) {
	s := &store{reader: c, denied: map[string]string{}, subs: map[*subscriber]struct{}{}}
	for _, w := range watchedKinds {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := direct.List(pctx, w.newList(), client.InNamespace(namespace), client.Limit(1))
		cancel()
		switch {
		case err == nil:
		case apierrors.IsForbidden(err), apierrors.IsNotFound(err):
			s.denied[w.resource] = listDenied(w.resource, namespace, err)
			continue
		default:
			return nil, fmt.Errorf("listing %s: %w", w.resource, err)
		}
		inf, err := c.GetInformer(ctx, w.newObj())
		if err != nil {
			return nil, fmt.Errorf("watching %s: %w", w.resource, err)
		}
		resource := w.resource
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { s.publish(resource, o) },
			UpdateFunc: func(_, o any) { s.publish(resource, o) },
			DeleteFunc: func(o any) { s.publish(resource, o) },
		}); err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the cache did not sync: %w", context.Cause(ctx))
	}
	return s, nil
}

func listDenied(resource, namespace string, err error) string {
	where := "in any namespace"
	if namespace != "" {
		where = "in namespace " + namespace
	}
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("the API server does not serve %s (is the CRD installed?)", resource)
	}
	return fmt.Sprintf("your credentials may not list %s %s: %s", resource, where, err)
}

// publish hands a change to every subscriber without waiting for any.
func (s *store) publish(resource string, o any) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	ch := Change{Resource: resource, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		sub.mu.Lock()
		if len(sub.pending) < maxPending {
			sub.pending = append(sub.pending, ch)
		}
		sub.mu.Unlock()
		select {
		case sub.notify <- struct{}{}:
		default:
		}
	}
}

// publishHealth tells every subscriber the API server's state changed.
func (s *store) publishHealth() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		sub.mu.Lock()
		sub.health = true
		sub.mu.Unlock()
		select {
		case sub.notify <- struct{}{}:
		default:
		}
	}
}

func (s *store) subscribe() *subscriber {
	sub := &subscriber{notify: make(chan struct{}, 1)}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	return sub
}

func (s *store) unsubscribe(sub *subscriber) {
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
}

// take returns the changes collected since the last take, and whether
// the API server's state changed.
func (sub *subscriber) take() ([]Change, bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	out, health := sub.pending, sub.health
	sub.pending, sub.health = nil, false
	return out, health
}

// list reads a kind from the cache; nothing (not an error) when the user
// may not list it, which the page says through denied.
func (s *store) list(ctx context.Context, resource string, list client.ObjectList, opts ...client.ListOption) error {
	if _, no := s.denied[resource]; no {
		return nil
	}
	return s.reader.List(ctx, list, opts...)
}
