package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Runs asking for a branch's head while a read of it is in flight share
// the next read, which starts after they asked: never the read in
// flight's older answer, and one git round trip for all of them. Another
// branch (or other credentials) reads on its own.
func TestHeadReadsShareTheNextRead(t *testing.T) {
	var h sharedReads[string]
	ctx := context.Background()
	var reads atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 100)
	list := func(context.Context) (string, error) {
		n := reads.Add(1)
		started <- struct{}{}
		if n == 1 {
			<-release
		}
		return fmt.Sprintf("head-%d", n), nil
	}
	first := make(chan string)
	go func() {
		oid, _ := h.read(ctx, "main", list)
		first <- oid
	}()
	<-started // read 1 is in flight
	var wg sync.WaitGroup
	got := make([]string, 20)
	for i := range got {
		wg.Go(func() { got[i], _ = h.read(ctx, "main", list) })
	}
	// Every run has joined the next read before the first ends.
	for joined := 0; joined < len(got); {
		h.mu.Lock()
		if n := h.reads["main"].next; n != nil {
			joined = n.joined
		}
		h.mu.Unlock()
		if joined < len(got) {
			time.Sleep(time.Millisecond)
		}
	}
	other, err := h.read(ctx, "other", list)
	if err != nil || other != "head-2" {
		t.Fatalf("another key read %q, %v; want its own read, head-2", other, err)
	}
	close(release)
	if oid := <-first; oid != "head-1" {
		t.Errorf("the first run got %q, want head-1", oid)
	}
	wg.Wait()
	for i, oid := range got {
		if oid != "head-3" {
			t.Errorf("run %d got %q, want head-3: the one read started after it asked", i, oid)
		}
	}
	if n := reads.Load(); n != 3 {
		t.Errorf("%d reads, want 3 (the first, the other key's, one for the 20 waiting)", n)
	}
	if oid, _ := h.read(ctx, "main", list); oid != "head-4" {
		t.Errorf("a run after all that got %q, want a read of its own (head-4)", oid)
	}
}

// A run that gives up waiting (its context ends) returns at once.
func TestHeadReadsWaitEndsWithContext(t *testing.T) {
	var h sharedReads[string]
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	go h.read(context.Background(), "main", func(context.Context) (string, error) {
		close(started)
		<-release
		return "x", nil
	})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.read(ctx, "main", func(context.Context) (string, error) { return "y", nil }); err == nil {
		t.Fatal("want the context's error")
	}
}

// Credentials issued by a provider are the automation's own: its reads
// are not shared. Others' key is the repository, branch and credentials.
func TestHeadKey(t *testing.T) {
	a := &source{remote: nil}
	a.Repository.URL, a.Ref.Branch = "https://git.example.com/fleet.git", "main"
	b := *a
	b.Ref.Branch = "dev"
	if headKey(a) == "" || headKey(a) == headKey(&b) {
		t.Errorf("keys %q and %q, want two keys", headKey(a), headKey(&b))
	}
}
