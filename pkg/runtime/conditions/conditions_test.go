package conditions

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type object struct {
	generation int64
	conds      []metav1.Condition
}

func (o *object) GetGeneration() int64               { return o.generation }
func (o *object) GetConditions() []metav1.Condition  { return o.conds }
func (o *object) SetConditions(c []metav1.Condition) { o.conds = c }

func statuses(o *object) map[string]metav1.ConditionStatus {
	m := map[string]metav1.ConditionStatus{}
	for _, c := range o.conds {
		m[c.Type] = c.Status
	}
	return m
}

func TestMarkers(t *testing.T) {
	tests := []struct {
		name  string
		start func(*object)
		mark  func(*object)
		want  map[string]metav1.ConditionStatus
		ready bool
	}{
		{
			name: "reconciling clears stalled",
			start: func(o *object) {
				MarkStalled(o, InvalidSpecReason, "bad")
			},
			mark: func(o *object) { MarkReconciling(o, ProgressingReason, "working") },
			want: map[string]metav1.ConditionStatus{ReconcilingCondition: "True", ReadyCondition: "Unknown"},
		},
		{
			name:  "ready clears reconciling",
			start: func(o *object) { MarkReconciling(o, ProgressingReason, "working") },
			mark:  func(o *object) { MarkReady(o, SucceededReason, "done") },
			want:  map[string]metav1.ConditionStatus{ReadyCondition: "True"},
			ready: true,
		},
		{
			name:  "stalled sets ready false",
			start: func(o *object) { MarkReady(o, SucceededReason, "done") },
			mark:  func(o *object) { MarkStalled(o, InvalidSpecReason, "bad %s", "image") },
			want:  map[string]metav1.ConditionStatus{StalledCondition: "True", ReadyCondition: "False"},
		},
		{
			name:  "failed clears stalled and reconciling",
			start: func(o *object) { MarkStalled(o, InvalidSpecReason, "bad") },
			mark:  func(o *object) { MarkFailed(o, FailedReason, "retrying") },
			want:  map[string]metav1.ConditionStatus{ReadyCondition: "False"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &object{generation: 3}
			tt.start(o)
			tt.mark(o)
			got := statuses(o)
			if len(got) != len(tt.want) {
				t.Fatalf("conditions = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			if IsReady(o) != tt.ready {
				t.Errorf("IsReady = %v, want %v", IsReady(o), tt.ready)
			}
		})
	}
}

func TestSetKeepsTransitionTimeAndFormats(t *testing.T) {
	o := &object{generation: 1}
	Set(o, ReadyCondition, metav1.ConditionFalse, FailedReason, "found %d tags", 3)
	first := Get(o, ReadyCondition)
	if first.Message != "found 3 tags" || first.ObservedGeneration != 1 {
		t.Fatalf("unexpected condition %+v", first)
	}
	// A literal % in a message without args must survive unformatted.
	o.generation = 2
	Set(o, ReadyCondition, metav1.ConditionFalse, FailedReason, "100% done")
	c := Get(o, ReadyCondition)
	if c.Message != "100% done" || c.ObservedGeneration != 2 {
		t.Fatalf("unexpected condition %+v", c)
	}
	if !c.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Errorf("transition time changed without a status change")
	}
	if IsReady(o) || !IsFalse(o, ReadyCondition) || IsTrue(o, ReadyCondition) {
		t.Errorf("ready helpers disagree with a False condition")
	}
}

func TestIsReadyNeedsCurrentGeneration(t *testing.T) {
	o := &object{generation: 1}
	MarkReady(o, SucceededReason, "ok")
	o.generation = 2
	if IsReady(o) {
		t.Error("IsReady is true for a condition of an older generation")
	}
}
