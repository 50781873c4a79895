package controller

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// The Application cache keeps what automations read, and only changes of
// that pass: Argo CD's refreshes (sync, health, reconciledAt, the resource
// tree) bump an Application's generation, since its CRD has no status
// subresource, yet change no automation's job.
func TestApplicationChangedPassesWhatAutomationsRead(t *testing.T) {
	app := func(mutate func(map[string]any)) *unstructured.Unstructured {
		obj := map[string]any{
			"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
			"metadata": map[string]any{"name": "web", "namespace": "argocd", "labels": map[string]any{"team": "shop"},
				"annotations":   map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{...}", "team": "shop"},
				"managedFields": []any{map[string]any{"manager": "argocd-application-controller"}}},
			"operation": map[string]any{"sync": map[string]any{"revision": "abc"}},
			"spec":      map[string]any{"source": map[string]any{"repoURL": "https://git.example.com/fleet.git", "path": "apps/web", "targetRevision": "main"}},
			"status": map[string]any{
				"sourceType":   "Kustomize",
				"summary":      map[string]any{"images": []any{"ghcr.io/org/app:1.0.0"}, "externalURLs": []any{"https://web.example.com"}},
				"sync":         map[string]any{"status": "Synced", "revision": "abc"},
				"health":       map[string]any{"status": "Healthy"},
				"reconciledAt": "2026-11-26T10:00:00Z",
				"resources":    []any{map[string]any{"kind": "Deployment", "name": "web"}},
			},
		}
		if mutate != nil {
			mutate(obj)
		}
		u := &unstructured.Unstructured{Object: obj}
		trimmed, err := trimApplication(u)
		if err != nil {
			t.Fatal(err)
		}
		return trimmed.(*unstructured.Unstructured)
	}
	base := app(nil)
	if base.GetManagedFields() != nil || base.Object["operation"] != nil || !reflect.DeepEqual(base.GetAnnotations(), map[string]string{"team": "shop"}) {
		t.Errorf("managedFields, the operation or kubectl's annotation kept: %v", base.Object)
	}
	want := map[string]any{"sourceType": "Kustomize", "summary": map[string]any{"images": []any{"ghcr.io/org/app:1.0.0"}}}
	if got := base.Object["status"]; !reflect.DeepEqual(got, want) {
		t.Errorf("trimmed status %v, want %v", got, want)
	}
	status := func(obj map[string]any) map[string]any { return obj["status"].(map[string]any) }
	for _, tc := range []struct {
		name   string
		mutate func(map[string]any)
		passes bool
	}{
		{"a refresh", func(o map[string]any) {
			status(o)["reconciledAt"] = "2026-11-26T10:03:00Z"
			status(o)["sync"] = map[string]any{"status": "OutOfSync", "revision": "def"}
			status(o)["health"] = map[string]any{"status": "Progressing"}
		}, false},
		{"the images it runs", func(o map[string]any) {
			status(o)["summary"].(map[string]any)["images"] = []any{"ghcr.io/org/app:1.1.0"}
		}, true},
		{"how Argo CD renders it", func(o map[string]any) { status(o)["sourceType"] = "Helm" }, true},
		{"its source", func(o map[string]any) {
			o["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"] = "release"
		}, true},
		{"its labels", func(o map[string]any) {
			o["metadata"].(map[string]any)["labels"] = map[string]any{"team": "other"}
		}, true},
	} {
		got := applicationChanged{}.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: app(tc.mutate)})
		if got != tc.passes {
			t.Errorf("%s: passes %v, want %v", tc.name, got, tc.passes)
		}
	}
}
