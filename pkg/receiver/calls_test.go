package receiver

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// Calls are counted per webhook until a flush takes them; counts a flush
// could not write come back added to those that came meanwhile, and are
// added to what the status already holds, the latest refusal's reason
// with its time.
func TestCallsAreCountedUntilWritten(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "apps", Name: "push"}
	h := Hook{Key: key, Object: &imagev1.GitWebhook{}}
	var c calls
	c.add(h, "", t0)
	c.add(h, ReasonBadAuth, t0.Add(time.Second))
	c.add(h, ReasonRateLimited, t0.Add(3*time.Second))
	c.add(Hook{Key: key}, "", t0) // no object: not counted
	taken := c.take()
	if len(c.take()) != 0 || taken[key] == nil || taken[key].accepted != 1 || taken[key].refused != 2 {
		t.Fatalf("taken = %+v", taken[key])
	}
	c.add(h, ReasonBadPayload, t0.Add(2*time.Second))
	c.putBack(key, taken[key])
	p := c.take()[key]
	if p.accepted != 1 || p.refused != 3 || p.lastRefusedReason != ReasonRateLimited || !p.lastAccepted.Equal(t0) {
		t.Fatalf("after put back: %+v", p)
	}
	st := &imagev1.WebhookStatus{Calls: &imagev1.WebhookCalls{Accepted: 10, Refused: 1,
		LastRefused: &metav1.Time{Time: t0.Add(time.Hour)}, LastRefusedReason: ReasonSuspended}}
	p.addTo(st)
	if st.Calls.Accepted != 11 || st.Calls.Refused != 4 || st.Calls.LastRefusedReason != ReasonSuspended || !st.Calls.LastAccepted.Time.Equal(t0) {
		t.Errorf("status = %+v", st.Calls)
	}
}
