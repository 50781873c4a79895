package predicates

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

func obj(gen int64, requestedAt string) *corev1.ConfigMap {
	o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Generation: gen}}
	if requestedAt != "" {
		o.Annotations = map[string]string{meta.ReconcileRequestAnnotation: requestedAt}
	}
	return o
}

func TestSpecOrRequest(t *testing.T) {
	tests := []struct {
		name     string
		old, new *corev1.ConfigMap
		want     bool
	}{
		{"status write only", obj(1, ""), obj(1, ""), false},
		{"spec change", obj(1, ""), obj(2, ""), true},
		{"new request", obj(1, ""), obj(1, "now"), true},
		{"changed request", obj(1, "a"), obj(1, "b"), true},
		{"same request", obj(1, "a"), obj(1, "a"), false},
		{"request removed", obj(1, "a"), obj(1, ""), false},
	}
	p := SpecOrRequest()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.want {
				t.Errorf("Update = %v, want %v", got, tt.want)
			}
		})
	}
	if !p.Create(event.CreateEvent{Object: obj(1, "")}) {
		t.Error("creations must pass")
	}
}

func TestAnnotationChanged(t *testing.T) {
	with := func(v string) *corev1.ConfigMap {
		o := &corev1.ConfigMap{}
		if v != "" {
			o.Annotations = map[string]string{"example.com/release": v}
		}
		return o
	}
	p := AnnotationChanged("example.com/release")
	for _, tt := range []struct {
		name     string
		old, new *corev1.ConfigMap
		want     bool
	}{
		{"set", with(""), with("a"), true},
		{"changed", with("a"), with("b"), true},
		{"unchanged", with("a"), with("a"), false},
		{"removed", with("a"), with(""), false},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.want {
			t.Errorf("%s: %t, want %t", tt.name, got, tt.want)
		}
	}
}
