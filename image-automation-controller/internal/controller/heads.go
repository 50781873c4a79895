package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
)

// headReads shares branch-head reads between the automations of one
// branch: a monorepo's thousand automations on main, woken by one tag,
// would otherwise list main's head a thousand times, one git round trip
// each. A run that asks while a read of its branch is in flight joins the
// next read, which starts once that one ends, so after it asked: its
// answer is as fresh as a read of its own, and a push just before the run
// is never missed. However many runs ask at once, a branch has one read in
// flight and one waiting, and every run waits at most two round trips.
type headReads struct {
	mu    sync.Mutex
	reads map[string]*headRead
}

type headRead struct {
	done chan struct{}
	oid  string
	err  error
	// next is the read the runs asking during this one share; joined
	// counts them.
	next   *headRead
	joined int
}

// read returns the head list reads for key, from a read started after
// this call began. An error is shared like a head: each run records it
// and retries on its own. An empty key is read alone.
func (h *headReads) read(ctx context.Context, key string, list func(context.Context) (string, error)) (string, error) {
	if key == "" {
		return list(ctx)
	}
	h.mu.Lock()
	if h.reads == nil {
		h.reads = map[string]*headRead{}
	}
	r := h.reads[key]
	if r == nil {
		r = &headRead{done: make(chan struct{})}
		h.reads[key] = r
		h.mu.Unlock()
		h.run(ctx, key, r, list)
		return r.oid, r.err
	}
	n := r.next
	first := n == nil
	if first {
		n = &headRead{done: make(chan struct{})}
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
		return n.oid, n.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// run reads r; the key is free again once it ends unless runs joined its
// next read, whose runner takes the key over.
func (h *headReads) run(ctx context.Context, key string, r *headRead, list func(context.Context) (string, error)) {
	r.oid, r.err = list(ctx)
	h.mu.Lock()
	if r.next == nil {
		delete(h.reads, key)
	}
	h.mu.Unlock()
	close(r.done)
}

// headKey is what makes two head reads the same: the repository, the
// branch and the credentials (hashed: another automation's Secret may
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
