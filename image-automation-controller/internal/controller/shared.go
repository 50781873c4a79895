package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// sharedReads shares reads between the automations that read the same
// thing: a monorepo's thousand automations on main, woken by one tag,
// would otherwise list main's head a thousand times (one git round trip
// each), and read its GitRepository and Secret and the policy they set
// from the API server a thousand times. A run that asks while a
// read of its key is in flight joins the next read, which starts once that
// one ends, so after it asked: its answer is as fresh as a read of its
// own, and a push (or a Secret changed) just before the run is never
// missed. However many runs ask at once, a key has one read in flight and
// one waiting, and every run waits at most two reads.
type sharedReads[T any] struct {
	mu    sync.Mutex
	reads map[string]*sharedRead[T]
}

type sharedRead[T any] struct {
	done chan struct{}
	val  T
	err  error
	// next is the read the runs asking during this one share; joined
	// counts them.
	next   *sharedRead[T]
	joined int
}

// read returns what list reads for key, from a read started after this
// call began. An error is shared like a value: each run records it and
// retries on its own. An empty key is read alone. What is returned is
// shared: read only.
func (h *sharedReads[T]) read(ctx context.Context, key string, list func(context.Context) (T, error)) (T, error) {
	if key == "" {
		return list(ctx)
	}
	h.mu.Lock()
	if h.reads == nil {
		h.reads = map[string]*sharedRead[T]{}
	}
	r := h.reads[key]
	if r == nil {
		r = &sharedRead[T]{done: make(chan struct{})}
		h.reads[key] = r
		h.mu.Unlock()
		h.run(ctx, key, r, list)
		return r.val, r.err
	}
	n := r.next
	first := n == nil
	if first {
		n = &sharedRead[T]{done: make(chan struct{})}
		r.next = n
	}
	n.joined++
	h.mu.Unlock()
	if first {
		// The next read starts once the read in flight (bounded by its
		// timeout) has ended, for all who joined it: none of them
		// giving up stops it.
		go func() {
			<-r.done
			h.mu.Lock()
			h.reads[key] = n
			h.mu.Unlock()
			h.run(context.WithoutCancel(ctx), key, n, list)
		}()
	}
	select {
	case <-n.done:
		return n.val, n.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// run reads r; the key is free again once it ends unless runs joined its
// next read, whose runner takes the key over.
func (h *sharedReads[T]) run(ctx context.Context, key string, r *sharedRead[T], list func(context.Context) (T, error)) {
	r.val, r.err = list(ctx)
	h.mu.Lock()
	if r.next == nil {
		delete(h.reads, key)
	}
	h.mu.Unlock()
	close(r.done)
}

// headKey is what makes two branch-head reads the same: the repository,
// the branch and the credentials (hashed: another automation's Secret may
// reach what this one's cannot). Credentials a provider issues (a GitHub
// App, a cloud identity) are the object's own and not in the Auth's
// fields: their reads are not shared ("").
func headKey(src *source) string {
	if src.remote.Provider() != "" {
		return ""
	}
	b, err := json.Marshal(struct {
		URL, Branch string
		Auth        any
	}{src.Repository.URL, src.Ref.Branch, src.remote})
	if err != nil {
		panic(err) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sourceKey is what makes two source resolutions the same: the namespace
// and every field Resolve and Credentials read (sourceRef and spec.git).
// Automations selecting Applications are resolved alone ("").
func sourceKey(obj *imagev1.ImageUpdateAutomation) string {
	if obj.Spec.ApplicationSelector != nil {
		return ""
	}
	b, err := json.Marshal(struct {
		Namespace string
		SourceRef any
		Git       any
	}{obj.Namespace, obj.Spec.SourceRef, obj.Spec.GitSpec})
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return string(b)
}
