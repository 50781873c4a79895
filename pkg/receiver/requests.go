package receiver

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Requests remembers the reconcile requests a receiver made, by object and
// annotation value, with the time of the call that caused each, so that
// when the reconciler reports handling one the latency from call to work
// can be observed. Requests never handled (the object was suspended or
// deleted) are forgotten after ten minutes.
type Requests struct {
	mu   sync.Mutex
	made map[string]time.Time
}

// NewRequests makes an empty Requests.
func NewRequests() *Requests { return &Requests{made: map[string]time.Time{}} }

func requestKey(obj types.NamespacedName, value string) string { return obj.String() + "|" + value }

// Add records a request of value on obj, caused by a call at first.
func (r *Requests) Add(obj types.NamespacedName, value string, first time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.made[requestKey(obj, value)] = first
	for k, t := range r.made {
		if time.Since(t) > 10*time.Minute {
			delete(r.made, k)
		}
	}
}

// Take returns and forgets the call time of a request of value on obj;
// ok is false for a request some other client made.
func (r *Requests) Take(obj types.NamespacedName, value string) (first time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := requestKey(obj, value)
	first, ok = r.made[k]
	delete(r.made, k)
	return first, ok
}
