package receiver

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// DefaultCallsFlush is how often a receiver adds the calls it answered to
// its webhooks' status.calls.
const DefaultCallsFlush = 10 * time.Second

// calls counts the calls a receiver answered per webhook until they are
// added to the webhook's status. The status is written at most once per
// webhook per flush, however many calls came: a flood of refused calls
// (which anyone who knows the address can send) costs the API server one
// write per interval, not one per call. Each replica adds its own counts
// under an optimistic lock, so replicas never overwrite each other's.
type calls struct {
	mu      sync.Mutex
	pending map[types.NamespacedName]*pendingCalls
}

type pendingCalls struct {
	// obj is a copy of the webhook object, its kind for the Get.
	obj                       Object
	accepted, refused         int64
	lastAccepted, lastRefused time.Time
	lastRefusedReason         string
}

// add counts one call to h, refused for reason when reason is not empty.
func (c *calls) add(h Hook, reason string, at time.Time) {
	obj, ok := h.Object.(Object)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[types.NamespacedName]*pendingCalls{}
	}
	p := c.pending[h.Key]
	if p == nil {
		p = &pendingCalls{obj: obj}
		c.pending[h.Key] = p
	}
	if reason == "" {
		p.accepted++
		p.lastAccepted = later(p.lastAccepted, at)
	} else {
		p.refused++
		if !at.Before(p.lastRefused) {
			p.lastRefused, p.lastRefusedReason = at, reason
		}
	}
}

// take returns the counts so far and starts afresh.
func (c *calls) take() map[types.NamespacedName]*pendingCalls {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending
	c.pending = nil
	return p
}

// putBack returns counts a flush could not write, for the next one.
func (c *calls) putBack(key types.NamespacedName, p *pendingCalls) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[types.NamespacedName]*pendingCalls{}
	}
	q := c.pending[key]
	if q == nil {
		c.pending[key] = p
		return
	}
	q.accepted += p.accepted
	q.refused += p.refused
	q.lastAccepted = later(q.lastAccepted, p.lastAccepted)
	if p.lastRefused.After(q.lastRefused) {
		q.lastRefused, q.lastRefusedReason = p.lastRefused, p.lastRefusedReason
	}
}

// addTo adds p to the status counts of a webhook.
func (p *pendingCalls) addTo(st *imagev1.WebhookStatus) {
	if st.Calls == nil {
		st.Calls = &imagev1.WebhookCalls{}
	}
	st.Calls.Accepted += p.accepted
	st.Calls.Refused += p.refused
	if !p.lastAccepted.IsZero() && (st.Calls.LastAccepted == nil || p.lastAccepted.After(st.Calls.LastAccepted.Time)) {
		st.Calls.LastAccepted = &metav1.Time{Time: p.lastAccepted}
	}
	if !p.lastRefused.IsZero() && (st.Calls.LastRefused == nil || p.lastRefused.After(st.Calls.LastRefused.Time)) {
		st.Calls.LastRefused = &metav1.Time{Time: p.lastRefused}
		st.Calls.LastRefusedReason = p.lastRefusedReason
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// flushCalls adds the counts so far to the webhooks' status. A webhook
// that is gone drops its counts; a write that fails keeps them for the
// next flush.
func (s *Server) flushCalls(ctx context.Context) {
	for key, p := range s.calls.take() {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			obj := p.obj.DeepCopyObject().(Object)
			if err := s.opts.Status.Get(ctx, key, obj); err != nil {
				return err
			}
			base := obj.DeepCopyObject().(Object)
			p.addTo(obj.GetWebhookStatus())
			return s.opts.Status.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		default:
			s.opts.Log.V(1).Info("recording webhook calls failed; will retry", "webhook", key.String(), "error", err.Error())
			s.calls.putBack(key, p)
		}
	}
}

// countCalls flushes every interval until ctx ends, then once more.
func (s *Server) countCalls(ctx context.Context) {
	t := time.NewTicker(s.opts.CallsFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.flushCalls(last)
			cancel()
			return
		case <-t.C:
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			s.flushCalls(fctx)
			cancel()
		}
	}
}
