package dashboard

import (
	"context"
	"sync"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// heads keeps the branch heads the Automation page lists from the git
// server, so that a page redrawn on each live update (a busy namespace
// asks often) does not ask the git server each time, while a head it
// shows is never older than the automation's own status: the key holds
// the automation's last push and the revision its last run saw, so a push
// by the automation, or a run that saw a new head, lists again. A push by
// someone else shows within headTTL.
type heads struct {
	now func() time.Time

	mu   sync.Mutex
	kept map[headKey]keptHead
}

type headKey struct {
	url, branch, lastPush, observed string
}

type keptHead struct {
	head string
	err  error
	at   time.Time
}

// headTTL is how long a listed head is shown before it is listed again.
const headTTL = 30 * time.Second

// maxHeads bounds what is kept: past it the oldest half of the entries
// go, which a page then lists anew.
const maxHeads = 1024

func newHeads(now func() time.Time) *heads {
	return &heads{now: now, kept: map[headKey]keptHead{}}
}

// list implements explain.HeadLister.
func (h *heads) list(ctx context.Context, a *imagev1.ImageUpdateAutomation, url, branch string, list func(context.Context) (string, error)) (string, error) {
	k := headKey{url: url, branch: branch, lastPush: a.Status.LastPushCommit, observed: a.Status.ObservedSourceRevision}
	h.mu.Lock()
	kh, ok := h.kept[k]
	h.mu.Unlock()
	if ok && h.now().Sub(kh.at) < headTTL {
		return kh.head, kh.err
	}
	head, err := list(ctx)
	kh = keptHead{head: head, err: err, at: h.now()}
	h.mu.Lock()
	if len(h.kept) >= maxHeads {
		for key, v := range h.kept {
			if h.now().Sub(v.at) >= headTTL/2 {
				delete(h.kept, key)
			}
		}
	}
	h.kept[k] = kh
	h.mu.Unlock()
	return head, err
}
