package charts

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The in-cluster dashboard (ui values) runs tk-image dashboard read-only,
// names the Ingress hosts it answers to, and its ServiceAccount may only
// read what the pages show: no write verb, no Secrets. Its pods are
// selected by its own Service and not by the controller's, and with
// watchNamespace its rights and its view are that namespace's.
func TestTemplateUIReadOnly(t *testing.T) {
	const c = "image-automation-controller"
	objs := render(t, c, c, "image-toolkit-system", "--set", "ui.enabled=true,ui.allowedHosts={images.example.com},ui.image.tag=v9.9.9")
	var ui *unstructured.Unstructured
	for _, d := range find(objs, "Deployment") {
		if strings.HasSuffix(d.GetName(), "-ui") {
			ui = d
		}
	}
	if ui == nil {
		t.Fatal("no -ui Deployment")
	}
	a := args(t, ui)
	for _, want := range []string{"dashboard", "--address=:9880", "--no-browser", "--read-only", "--allowed-host=images.example.com"} {
		if !hasArg(a, want) {
			t.Errorf("dashboard args %v lack %s", a, want)
		}
	}
	if img, _, _ := unstructured.NestedString(container(t, ui), "image"); img != "ghcr.io/image-toolkit/tk-image:v9.9.9" {
		t.Errorf("image = %q", img)
	}
	var role *unstructured.Unstructured
	for _, r := range find(objs, "ClusterRole") {
		if strings.HasSuffix(r.GetName(), "-ui") {
			role = r
		}
	}
	if role == nil {
		t.Fatal("no -ui ClusterRole")
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	for _, r := range rules {
		rule := r.(map[string]any)
		for _, v := range rule["verbs"].([]any) {
			if !slices.Contains([]string{"get", "list", "watch"}, v.(string)) {
				t.Errorf("the dashboard may %s %v", v, rule["resources"])
			}
		}
		for _, res := range rule["resources"].([]any) {
			if res == "secrets" || res == "*" {
				t.Errorf("the dashboard may read %s", res)
			}
		}
	}
	podLabels, _, _ := unstructured.NestedStringMap(ui.Object, "spec", "template", "metadata", "labels")
	for _, svc := range find(objs, "Service") {
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		selects := true
		for k, v := range sel {
			selects = selects && podLabels[k] == v
		}
		if ownService := strings.HasSuffix(svc.GetName(), "-ui"); selects != ownService {
			t.Errorf("Service %s selects the dashboard's pods: %v", svc.GetName(), selects)
		}
	}

	objs = render(t, c, c, "image-toolkit-system", "--set", "ui.enabled=true,watchNamespace=team-a")
	for _, r := range find(objs, "ClusterRole") {
		if strings.HasSuffix(r.GetName(), "-ui") {
			t.Error("a ClusterRole for the dashboard with watchNamespace")
		}
	}
	found := false
	for _, r := range find(objs, "Role") {
		found = found || strings.HasSuffix(r.GetName(), "-ui") && r.GetNamespace() == "team-a"
	}
	for _, d := range find(objs, "Deployment") {
		if strings.HasSuffix(d.GetName(), "-ui") && !hasArg(args(t, d), "--namespace=team-a") {
			t.Errorf("dashboard args %v lack --namespace=team-a", args(t, d))
		}
	}
	if !found {
		t.Error("no dashboard Role in team-a")
	}
	if d := find(render(t, c, c, "image-toolkit-system"), "Deployment"); len(d) != 1 {
		t.Errorf("%d Deployments by default, want the controller's alone", len(d))
	}
}
