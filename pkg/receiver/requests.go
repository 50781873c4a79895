package receiver

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Requests makes a receiver's reconcile requests, counts them, and
// remembers each by object and annotation value with the time of the call
// that caused it, so that when the reconciler reports handling one the
// latency from call to work is observed (Metrics.StartDelay). Requests
// never handled (the object was suspended or deleted) are forgotten after
// ten minutes.
type Requests struct {
	client  client.Client
	metrics *Metrics

	mu   sync.Mutex
	made map[string]time.Time
}

// NewRequests makes the requests of a receiver writing through c.
func NewRequests(c client.Client, m *Metrics) *Requests {
	return &Requests{client: c, metrics: m, made: map[string]time.Time{}}
}

func requestKey(obj types.NamespacedName, value string) string { return obj.String() + "|" + value }

// Request asks the reconciler of the object key names (obj gives its
// kind) to act now, for a call of type typ received at first; the request
// is counted once the API server has it.
func (r *Requests) Request(ctx context.Context, obj client.Object, key types.NamespacedName, typ string, first time.Time) error {
	value := time.Now().UTC().Format(time.RFC3339Nano)
	r.mu.Lock()
	r.made[requestKey(key, value)] = first
	for k, t := range r.made {
		if time.Since(t) > 10*time.Minute {
			delete(r.made, k)
		}
	}
	r.mu.Unlock()
	if err := RequestReconcile(ctx, r.client, obj, key, value); err != nil {
		return err
	}
	r.metrics.Requested.WithLabelValues(typ).Inc()
	return nil
}

// Started is told by a reconciler that it handles the reconcile request
// value on namespace/name; a request of ours is observed as call → start
// latency. It has the signature of the reconcilers' RequestHandled hook.
func (r *Requests) Started(namespace, name, value string) {
	k := requestKey(types.NamespacedName{Namespace: namespace, Name: name}, value)
	r.mu.Lock()
	first, ok := r.made[k]
	delete(r.made, k)
	r.mu.Unlock()
	if ok {
		r.metrics.StartDelay.Observe(time.Since(first).Seconds())
	}
}
