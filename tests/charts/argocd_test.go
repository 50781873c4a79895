package charts

import (
	"strings"
	"testing"
)

// argocd.namespace grants what the controllers read of Argo CD there, by a
// Role of that namespace and nothing wider: the automation controller
// Argo CD's repository Secrets (get, list) and its two ConfigMaps by name,
// told where with --argocd-namespace; the job controller the ConfigMaps.
// Unset, no Role is made.
func TestArgoCDNamespaceRole(t *testing.T) {
	configMaps := `{"apiGroups":[""],"resourceNames":["argocd-ssh-known-hosts-cm","argocd-tls-certs-cm"],"resources":["configmaps"],"verbs":["get"]}`
	for chart, rules := range map[string]string{
		"image-automation-controller": `[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list"]},` + configMaps + `]`,
		"update-job-controller":       `[` + configMaps + `]`,
	} {
		t.Run(chart, func(t *testing.T) {
			for _, r := range find(render(t, chart, chart, "image-toolkit-system"), "Role") {
				if strings.HasSuffix(r.GetName(), "-argocd") {
					t.Errorf("Role %s/%s without argocd.namespace", r.GetNamespace(), r.GetName())
				}
			}
			objs := render(t, chart, chart, "image-toolkit-system", "--set", "argocd.namespace=argo")
			var found bool
			for _, r := range find(objs, "Role") {
				if r.GetNamespace() != "argo" {
					continue
				}
				found = true
				if got := toJSON(t, r.Object["rules"]); got != rules {
					t.Errorf("rules %s, want %s", got, rules)
				}
			}
			var bound bool
			for _, b := range find(objs, "RoleBinding") {
				bound = bound || b.GetNamespace() == "argo" && strings.Contains(toJSON(t, b.Object["subjects"]), `"namespace":"image-toolkit-system"`)
			}
			if !found || !bound {
				t.Fatalf("Role in argo: %v, bound to the controller's ServiceAccount: %v", found, bound)
			}
			if a := args(t, workload(t, objs)); (chart == "image-automation-controller") != hasArg(a, "--argocd-namespace=argo") {
				t.Errorf("args %v", a)
			}
		})
	}
}
