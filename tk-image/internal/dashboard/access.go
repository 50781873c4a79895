package dashboard

import (
	"context"
	"fmt"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// access answers whether the user may patch a kind in a namespace, so that
// a page disables the buttons the API server would refuse and says why,
// instead of offering a click that fails. The answer comes from a
// SelfSubjectAccessReview, the API server's own authorizer, and is kept a
// minute per resource and namespace: a Fleet page of a thousand
// automations in five namespaces asks five questions, not a thousand, and
// a role granted now shows within a minute (the refused click still shows
// the API server's own words meanwhile).
type access struct {
	c   client.Client
	now func() time.Time

	mu      sync.Mutex
	answers map[accessKey]accessAnswer
}

type accessKey struct{ resource, namespace string }

type accessAnswer struct {
	allowed bool
	// why is the authorizer's reason for a denial, when it gives one.
	why string
	at  time.Time
}

// accessTTL is how long an answer is kept.
const accessTTL = time.Minute

// accessTimeout bounds one review: a page waits for it.
const accessTimeout = 5 * time.Second

func newAccess(c client.Client, now func() time.Time) *access {
	return &access{c: c, now: now, answers: map[accessKey]accessAnswer{}}
}

// mayPatch returns "" when the user may patch resource in namespace, else
// the sentence a disabled button shows. A review that fails says nothing
// (""): the button stays, and a click shows the API server's answer.
func (a *access) mayPatch(ctx context.Context, resource, namespace string) string {
	k := accessKey{resource, namespace}
	a.mu.Lock()
	ans, ok := a.answers[k]
	a.mu.Unlock()
	if !ok || a.now().Sub(ans.at) > accessTTL {
		var err error
		if ans, err = a.review(ctx, k); err != nil {
			return ""
		}
		a.mu.Lock()
		a.answers[k] = ans
		a.mu.Unlock()
	}
	if ans.allowed {
		return ""
	}
	msg := fmt.Sprintf("your credentials may not patch %s in namespace %s", resource, namespace)
	if ans.why != "" {
		msg += " (" + ans.why + ")"
	}
	return msg
}

func (a *access) review(ctx context.Context, k accessKey) (accessAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, accessTimeout)
	defer cancel()
	r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: k.namespace, Verb: "patch",
			// Every kind the dashboard acts on is of this group.
			Group: imagev1.GroupVersion.Group, Resource: k.resource}}}
	if err := a.c.Create(ctx, r); err != nil {
		return accessAnswer{}, err
	}
	return accessAnswer{allowed: r.Status.Allowed, why: r.Status.Reason, at: a.now()}, nil
}
