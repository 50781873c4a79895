// Package healthhook receives health pushed from clusters the controllers
// cannot reach: the HealthWebhook kind of pkg/receiver, served on the
// reflector's webhook address beside ImageWebhooks.
//
// The design, and why:
//
//   - Prod's network often cannot reach dev's API server, but dev's Flux
//     or Argo CD can make an outbound call. So dev pushes: Flux
//     notification-controller's generic or generic-hmac Provider forwards
//     Kustomization and HelmRelease events, Argo CD Notifications posts an
//     Application's status. Calls are authenticated as every webhook's
//     are (the path from the token, then a bearer token or the HMAC).
//   - A push is recorded, not acted on: the call's object and verdict
//     (pkg/health's rules, the same Health a watched object gives) go into
//     the HealthWebhook's status.objects, and the policies and automations
//     whose healthOf names the webhook (webhookRef) are woken by the watch
//     on it, as by any health object. The status is what the readers, the
//     dashboard and kubectl see, and it outlives restarts.
//   - The status is written before the call is answered, so a call that
//     could not be recorded is answered 503 and the sender retries
//     (notification-controller does), never 202 and lost.
//   - Memory is bounded: one entry per object, the 100 most recently
//     pushed; events of other kinds (a GitRepository's) are answered 200
//     and recorded nowhere.
package healthhook

import (
	"context"
	"errors"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/receiver"
)

// PathIndex is the field index of HealthWebhooks by status.webhookPath.
const PathIndex = ".status.webhookPath"

// Kind serves HealthWebhooks: a receiver.Kind.
type Kind struct {
	receiver.Senders[health.Push]
	// Client lists HealthWebhooks (cached, with PathIndex) and patches
	// their status.
	Client client.Client
	// API reads a webhook fresh before its status is patched, so a
	// conflict with another replica's write is retried on what is there.
	API client.Reader
}

// New makes the HealthWebhook kind.
func New(c client.Client, api client.Reader) *Kind {
	return &Kind{Senders: senders(time.Now), Client: c, API: api}
}

// senders is the table of HealthWebhook types; now is the receiver's
// clock, for pushes that carry no time.
func senders(now func() time.Time) receiver.Senders[health.Push] {
	flux := func(_ http.Header, body []byte) (health.Push, error) { return health.FromFluxEvent(body) }
	return receiver.Senders[health.Push]{
		// The generic Provider sends the headers of its Secret's headers
		// key: we ask for a bearer token there.
		imagev1.HealthFlux:     {Verify: receiver.Bearer, Parse: flux},
		imagev1.HealthFluxHMAC: {Verify: receiver.SHA256("X-Signature"), Parse: flux},
		// Argo CD's webhook service sends the headers it is configured
		// with; it signs nothing.
		imagev1.HealthArgoCD: {Verify: receiver.Bearer, Parse: func(_ http.Header, body []byte) (health.Push, error) {
			return health.FromArgoApplication(body, now())
		}},
	}
}

// SecretKeys are the keys a HealthWebhook's Secret must have.
func SecretKeys(typ string) []string { return senders(time.Now).SecretKeys(typ) }

// SetupIndex registers the field index of HealthWebhooks by path.
func SetupIndex(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &imagev1.HealthWebhook{}, PathIndex, func(o client.Object) []string {
		w, ok := o.(*imagev1.HealthWebhook)
		if !ok || w.Status.WebhookPath == "" {
			return nil
		}
		return []string{w.Status.WebhookPath}
	})
}

// Find implements receiver.Kind: the HealthWebhook at path.
func (k *Kind) Find(ctx context.Context, path string) (receiver.Hook, bool, error) {
	var hooks imagev1.HealthWebhookList
	if err := k.Client.List(ctx, &hooks, client.MatchingFields{PathIndex: path}); err != nil || len(hooks.Items) != 1 {
		return receiver.Hook{}, false, err
	}
	wh := &hooks.Items[0]
	return receiver.Hook{Key: types.NamespacedName{Namespace: wh.Namespace, Name: wh.Name},
		Type: wh.Spec.Type, Secret: wh.Spec.SecretRef.Name, Suspend: wh.Spec.Suspend, Object: wh}, true, nil
}

// Accept implements receiver.Kind: the push is recorded in the webhook's
// status before the answer; nothing is left to do after it.
func (k *Kind) Accept(ctx context.Context, c *receiver.Call) (receiver.Work, error) {
	p, err := k.Parse(c)
	if errors.Is(err, health.ErrNotAHealthObject) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := k.record(ctx, c.Hook.Key, p); err != nil {
		return nil, &receiver.Refusal{Status: http.StatusServiceUnavailable, Reason: receiver.ReasonNotRecorded, Msg: "the health could not be recorded; retry"}
	}
	return nil, nil
}

// record writes p into the webhook's status.objects, retrying on a
// conflict with another writer (a second replica, the calls count).
func (k *Kind) record(ctx context.Context, key types.NamespacedName, p health.Push) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var wh imagev1.HealthWebhook
		if err := k.API.Get(ctx, key, &wh); err != nil {
			return err
		}
		base := wh.DeepCopy()
		objects, changed := health.Record(wh.Status.Objects, p)
		if !changed {
			return nil
		}
		wh.Status.Objects = objects
		return k.Client.Status().Patch(ctx, &wh, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
}
