package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// TestStorageFull proves that the storage_full series of an object exists,
// at 1, exactly while its Ready condition is False with reason StorageFull,
// and goes when the object recovers or is forgotten.
func TestStorageFull(t *testing.T) {
	r := NewRecorder("test")
	reg := prometheus.NewRegistry()
	r.MustRegister(reg)
	ready := func(status metav1.ConditionStatus, reason string) object {
		return object{ns: "ns", name: "a", conds: []metav1.Condition{{Type: "Ready", Status: status, Reason: reason}}}
	}
	for _, step := range []struct {
		obj  object
		want int
	}{
		{ready(metav1.ConditionFalse, "ScanFailed"), 0},
		{ready(metav1.ConditionFalse, conditions.StorageFullReason), 1},
		{ready(metav1.ConditionTrue, "Succeeded"), 0},
		{ready(metav1.ConditionFalse, conditions.StorageFullReason), 1},
	} {
		r.RecordReady("ImageRepository", step.obj)
		if got := testutil.CollectAndCount(r.full); got != step.want {
			t.Errorf("after Ready %s/%s: %d storage_full series, want %d", step.obj.conds[0].Status, step.obj.conds[0].Reason, got, step.want)
		}
	}
	if v, ok := r.full.Value("ImageRepository", "ns", "a"); v != 1 || !ok {
		t.Errorf("storage_full = %v (%v), want 1", v, ok)
	}
	r.Forget("ImageRepository", "ns", "a")
	if got := testutil.CollectAndCount(r.full); got != 0 {
		t.Errorf("%d series after Forget", got)
	}
}
