package app

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A reconcile that keeps failing (every status write refused while the API
// server is down) is retried at most MaxRetryDelay later, so that objects
// move again within that time once the server is back; the first retries
// stay quick.
func TestRetryDelayCapped(t *testing.T) {
	rl := (&Options{Concurrent: 1}).ControllerOptions().RateLimiter
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}}
	if d := rl.When(req); d > 10*time.Millisecond {
		t.Errorf("first retry after %s", d)
	}
	last := rl.When(req)
	for range 40 { // 5 ms doubled 40 times would be centuries
		last = rl.When(req)
	}
	if last != MaxRetryDelay {
		t.Errorf("after 42 failures the retry waits %s, want %s", last, MaxRetryDelay)
	}
	rl.Forget(req)
	if d := rl.When(req); d > MaxRetryDelay/100 {
		t.Errorf("after a success the next failure waits %s", d)
	}
}
