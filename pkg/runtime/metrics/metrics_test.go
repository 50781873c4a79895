package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type object struct {
	ns, name string
	conds    []metav1.Condition
}

func (o object) GetNamespace() string              { return o.ns }
func (o object) GetName() string                   { return o.name }
func (o object) GetConditions() []metav1.Condition { return o.conds }

func TestRecorder(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r := NewRecorder("reflector")
	r.MustRegister(reg)

	ready := object{"apps", "podinfo", []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}}
	fresh := object{"apps", "new", nil}
	r.RecordReady("ImageRepository", ready)
	r.RecordReady("ImageRepository", fresh)
	r.RecordSuspend("ImageRepository", ready, true)
	r.RecordDuration("ImageRepository", time.Now().Add(-30*time.Millisecond))

	want := `
# HELP imagetoolkit_reflector_ready_condition The Ready condition of each object: one series, whose status label is the condition's, at 1.
# TYPE imagetoolkit_reflector_ready_condition gauge
imagetoolkit_reflector_ready_condition{kind="ImageRepository",name="new",namespace="apps",status="Unknown"} 1
imagetoolkit_reflector_ready_condition{kind="ImageRepository",name="podinfo",namespace="apps",status="True"} 1
# HELP imagetoolkit_reflector_suspended 1 while the object's spec.suspend is true; absent otherwise.
# TYPE imagetoolkit_reflector_suspended gauge
imagetoolkit_reflector_suspended{kind="ImageRepository",name="podinfo",namespace="apps"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"imagetoolkit_reflector_ready_condition", "imagetoolkit_reflector_suspended"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(r.duration); n != 1 {
		t.Errorf("duration series = %d, want 1", n)
	}
	// The pedantic registry checks HELP, types and label consistency.
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}

	// A new status replaces the series; resumed, the suspend series goes.
	r.RecordReady("ImageRepository", object{"apps", "new", []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse}}})
	r.RecordSuspend("ImageRepository", ready, false)
	if n := testutil.CollectAndCount(r.suspend); n != 0 {
		t.Errorf("suspend series after resuming = %d, want 0", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP imagetoolkit_reflector_ready_condition The Ready condition of each object: one series, whose status label is the condition's, at 1.
# TYPE imagetoolkit_reflector_ready_condition gauge
imagetoolkit_reflector_ready_condition{kind="ImageRepository",name="new",namespace="apps",status="False"} 1
imagetoolkit_reflector_ready_condition{kind="ImageRepository",name="podinfo",namespace="apps",status="True"} 1
`), "imagetoolkit_reflector_ready_condition"); err != nil {
		t.Error(err)
	}

	r.Forget("ImageRepository", "apps", "podinfo")
	if n := testutil.CollectAndCount(r.ready); n != 1 {
		t.Errorf("ready series after Forget = %d, want 1", n)
	}
	if n := testutil.CollectAndCount(r.suspend); n != 0 {
		t.Errorf("suspend series after Forget = %d, want 0", n)
	}
}
