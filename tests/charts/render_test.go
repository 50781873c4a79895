package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestLint(t *testing.T) {
	for _, c := range charts {
		sets := map[string][]string{
			"defaults": nil,
			"all":      allValues(c),
			"shard1":   {"-f", filepath.Join(chartDir(c), "examples/shard1.yaml")},
			"shard2":   {"-f", filepath.Join(chartDir(c), "examples/shard2.yaml")},
			"shard3":   {"-f", filepath.Join(chartDir(c), "examples/shard3.yaml")},
		}
		for name, values := range sets {
			t.Run(c+"/"+name, func(t *testing.T) {
				mustHelm(t, append([]string{"lint", "--strict", chartDir(c)}, values...)...)
			})
		}
	}
}

// generatedRules are the rules of files/role.yaml (controller-gen) plus the
// events rule every chart adds.
func generatedRules(t *testing.T, chart string) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(chart), "files/role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role map[string]any
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	rules, _ := role["rules"].([]any)
	if len(rules) == 0 {
		t.Fatalf("%s/files/role.yaml has no rules", chart)
	}
	return append(rules, map[string]any{
		"apiGroups": []any{"", "events.k8s.io"}, "resources": []any{"events"}, "verbs": []any{"create", "patch"},
	})
}

// generatedCRDs reads files/crds of a chart, by name.
func generatedCRDs(t *testing.T, chart string) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(chart), "files/crds/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s/files/crds: %v", chart, err)
	}
	crds := map[string]map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd map[string]any
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatal(err)
		}
		crds[crd["metadata"].(map[string]any)["name"].(string)] = crd
	}
	return crds
}

func hasArg(a []string, want string) bool { return slices.Contains(a, want) }

func TestTemplateDefaults(t *testing.T) {
	for _, c := range charts {
		t.Run(c, func(t *testing.T) {
			objs := render(t, c, c, "image-toolkit-system")
			leader := c != "update-job-controller"

			// CRDs: the generated ones, unchanged but for labels and the keep policy.
			want := generatedCRDs(t, c)
			crds := find(objs, "CustomResourceDefinition")
			if len(crds) != len(want) {
				t.Fatalf("%d CRDs rendered, %d generated", len(crds), len(want))
			}
			for _, crd := range crds {
				gen, ok := want[crd.GetName()]
				if !ok {
					t.Fatalf("CRD %s is not in files/crds", crd.GetName())
				}
				if !reflect.DeepEqual(crd.Object["spec"], gen["spec"]) {
					t.Errorf("CRD %s: rendered spec differs from files/crds", crd.GetName())
				}
				a := crd.GetAnnotations()
				if a["helm.sh/resource-policy"] != "keep" || a["controller-gen.kubebuilder.io/version"] == "" {
					t.Errorf("CRD %s annotations = %v", crd.GetName(), a)
				}
			}

			// RBAC: exactly the generated rules, cluster-wide. The
			// reflector's approver role is for people, not the controller.
			cr := one(t, withoutApprover(objs), "ClusterRole")
			if !reflect.DeepEqual(cr.Object["rules"], generatedRules(t, c)) {
				t.Errorf("ClusterRole rules are not files/role.yaml's:\n%v", cr.Object["rules"])
			}
			crb := one(t, objs, "ClusterRoleBinding")
			subj, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
			sa := one(t, objs, "ServiceAccount")
			if len(subj) != 1 || subj[0].(map[string]any)["name"] != sa.GetName() || subj[0].(map[string]any)["namespace"] != "image-toolkit-system" {
				t.Errorf("ClusterRoleBinding subjects = %v", subj)
			}
			roles := find(objs, "Role")
			if leader != (len(roles) == 1) {
				t.Fatalf("%d Roles; leader election Role wanted: %v", len(roles), leader)
			}
			if leader {
				rules, _, _ := unstructured.NestedSlice(roles[0].Object, "rules")
				if !strings.Contains(toJSON(t, rules), `"resources":["leases"],"verbs":["get","create","update"]`) {
					t.Errorf("leader election rules = %s", toJSON(t, rules))
				}
			}

			// The workload: one Deployment, restricted, probed, JSON logs.
			w := workload(t, objs)
			if w.GetKind() != "Deployment" {
				t.Errorf("kind %s, want Deployment", w.GetKind())
			}
			a := args(t, w)
			// The automation controller's runs mostly wait: more at once.
			concurrent := map[string]string{"image-automation-controller": "--concurrent=32",
				"image-reflector-controller": "--concurrent=16", "update-job-controller": "--concurrent=4"}[c]
			for _, want := range []string{"--log-encoding=json", "--log-level=info", concurrent,
				"--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
				"--leader-elect=" + map[bool]string{true: "true", false: "false"}[leader]} {
				if !hasArg(a, want) {
					t.Errorf("args %v lack %s", a, want)
				}
			}
			for _, flag := range []string{"--watch-namespace", "--watch-label-selector", "--events-addr"} {
				if slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, flag) }) {
					t.Errorf("args %v have %s by default", a, flag)
				}
			}
			ctr := container(t, w)
			if img := ctr["image"]; img != "ghcr.io/image-toolkit/"+c+":0.1.0" {
				t.Errorf("image = %v", img)
			}
			for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
				p, _, _ := unstructured.NestedString(ctr, probe, "httpGet", "path")
				port, _, _ := unstructured.NestedFieldNoCopy(ctr, probe, "httpGet", "port")
				if p != path || port != "healthz" {
					t.Errorf("%s = %v %v", probe, p, port)
				}
			}
			if ports := toJSON(t, ctr["ports"]); !strings.Contains(ports, `"containerPort":8081,"name":"healthz"`) {
				t.Errorf("ports = %s", ports)
			}
			if env := toJSON(t, ctr["env"]); !strings.Contains(env, `{"name":"RUNTIME_NAMESPACE","valueFrom":{"fieldRef":{"fieldPath":"metadata.namespace"}}}`) {
				t.Errorf("env = %s", env)
			}
			if mem, _, _ := unstructured.NestedString(ctr, "resources", "requests", "memory"); mem == "" {
				t.Error("no memory request")
			}
			sc := toJSON(t, ctr["securityContext"])
			for _, want := range []string{`"allowPrivilegeEscalation":false`, `"readOnlyRootFilesystem":true`, `"drop":["ALL"]`, `"runAsNonRoot":true`} {
				if !strings.Contains(sc, want) {
					t.Errorf("container securityContext %s lacks %s", sc, want)
				}
			}
			psc, _, _ := unstructured.NestedMap(w.Object, "spec", "template", "spec", "securityContext")
			if !strings.Contains(toJSON(t, psc), `"seccompProfile":{"type":"RuntimeDefault"}`) {
				t.Errorf("pod securityContext = %v", psc)
			}

			// Metrics: a Service with the scrape annotations, no ServiceMonitor, no dashboard.
			svc := named(t, objs, "Service", c+"-metrics")
			if svc.GetAnnotations()["prometheus.io/scrape"] != "true" || svc.GetAnnotations()["prometheus.io/port"] != "8080" {
				t.Errorf("Service annotations = %v", svc.GetAnnotations())
			}
			for _, kind := range []string{"ServiceMonitor", "ConfigMap", "PersistentVolumeClaim", "StatefulSet", "Ingress"} {
				if n := len(find(objs, kind)); n != 0 {
					t.Errorf("%d %s by default", n, kind)
				}
			}
			// The reflector's and the automation controller's webhook
			// receivers listen and have a ClusterIP Service by default.
			if port, ok := map[string]string{"image-reflector-controller": "9292", "image-automation-controller": "9293"}[c]; ok {
				hs := named(t, objs, "Service", c+"-webhook")
				if s := toJSON(t, hs.Object["spec"]); !strings.Contains(s, `"type":"ClusterIP"`) || !strings.Contains(s, `"port":80`) {
					t.Errorf("webhook Service spec = %s", s)
				}
				if !hasArg(args(t, w), "--webhook-bind-address=:"+port) {
					t.Errorf("args = %v", args(t, w))
				}
			}
		})
	}
}

func TestTemplateAllOptions(t *testing.T) {
	for _, c := range charts {
		t.Run(c, func(t *testing.T) {
			objs := render(t, c, c, "image-toolkit-system", allValues(c)...)

			// watchNamespace: the generated rules in a Role there, nothing cluster-wide.
			for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
				if n := len(find(objs, kind)); n != 0 {
					t.Errorf("%d %s with watchNamespace", n, kind)
				}
			}
			var role, binding *unstructured.Unstructured
			for _, r := range find(withoutApprover(objs), "Role") {
				if r.GetNamespace() == "team-a" {
					role = r
				}
			}
			for _, b := range find(objs, "RoleBinding") {
				if b.GetNamespace() == "team-a" {
					binding = b
				}
			}
			if role == nil || binding == nil {
				t.Fatal("no Role and RoleBinding in team-a")
			}
			if !reflect.DeepEqual(role.Object["rules"], generatedRules(t, c)) {
				t.Errorf("Role rules are not files/role.yaml's")
			}
			if s := toJSON(t, binding.Object["subjects"]); !strings.Contains(s, `"name":"image-toolkit-sa","namespace":"image-toolkit-system"`) {
				t.Errorf("RoleBinding subjects = %s", s)
			}

			w := workload(t, objs)
			a := args(t, w)
			for _, want := range []string{"--watch-namespace=team-a", "--watch-label-selector=sharding.toolkit.dev/key=shard1",
				"--log-encoding=console", "--log-level=debug", "--concurrent=8", "--kube-api-qps=100", "--kube-api-burst=400",
				"--metrics-bind-address=:9440", "--health-probe-bind-address=:9441", "--kube-api-qps=120",
				"--events-addr=http://notification-controller.flux-system.svc.cluster.local./"} {
				if !hasArg(a, want) {
					t.Errorf("args %v lack %s", a, want)
				}
			}
			ctr := container(t, w)
			if img := ctr["image"]; img != "registry.example.com/image-toolkit/controller@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
				t.Errorf("image = %v (a digest wins over the tag)", img)
			}
			if env := toJSON(t, ctr["env"]); !strings.Contains(env, "HTTPS_PROXY") {
				t.Errorf("env = %s", env)
			}
			spec, _, _ := unstructured.NestedMap(w.Object, "spec", "template", "spec")
			for _, k := range []string{"nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "imagePullSecrets", "priorityClassName"} {
				if spec[k] == nil {
					t.Errorf("pod spec lacks %s", k)
				}
			}

			switch c {
			case "image-reflector-controller":
				for _, want := range []string{"--storage-path=/var/lib/tags", "--registry-qps=5", "--registry-burst=10", "--leader-elect=true"} {
					if !hasArg(a, want) {
						t.Errorf("args %v lack %s", a, want)
					}
				}
				pvc := one(t, objs, "PersistentVolumeClaim")
				if s := toJSON(t, pvc.Object["spec"]); !strings.Contains(s, `"storageClassName":"fast"`) || !strings.Contains(s, `"storage":"2Gi"`) {
					t.Errorf("PVC spec = %s", s)
				}
				if st, _, _ := unstructured.NestedString(w.Object, "spec", "strategy", "type"); st != "Recreate" {
					t.Errorf("strategy %q with a ReadWriteOnce claim", st)
				}
				allWebhookValues(t, c, objs, w, a)
			case "image-automation-controller":
				allWebhookValues(t, c, objs, w, a)
				if !hasArg(a, "--no-cross-namespace-refs=false") {
					t.Errorf("args %v", a)
				}
			case "update-job-controller":
				if w.GetKind() != "StatefulSet" {
					t.Fatalf("kind %s with cache persistence, want StatefulSet", w.GetKind())
				}
				for _, want := range []string{"--cache-dir=/var/cache/git", "--cache-max-age=12h", "--job-lease-duration=90s", "--leader-elect=false"} {
					if !hasArg(a, want) {
						t.Errorf("args %v lack %s", a, want)
					}
				}
				vct, _, _ := unstructured.NestedSlice(w.Object, "spec", "volumeClaimTemplates")
				if s := toJSON(t, vct); len(vct) != 1 || !strings.Contains(s, `"ReadWriteOncePod"`) || !strings.Contains(s, `"storage":"10Gi"`) {
					t.Errorf("volumeClaimTemplates = %s", s)
				}
				if n := len(find(objs, "PersistentVolumeClaim")); n != 0 {
					t.Errorf("%d shared claims: replicas must not share a cache", n)
				}
			}

			// Metrics: the ServiceMonitor replaces the scrape annotations.
			svc := named(t, objs, "Service", c+"-metrics")
			if _, ok := svc.GetAnnotations()["prometheus.io/scrape"]; ok || svc.GetAnnotations()["example.com/scraped-by"] != "prometheus" {
				t.Errorf("Service annotations with a ServiceMonitor = %v", svc.GetAnnotations())
			}
			sm := one(t, objs, "ServiceMonitor")
			if s := toJSON(t, sm.Object["spec"]); !strings.Contains(s, `"interval":"30s"`) || !strings.Contains(s, `"port":"http-metrics"`) || sm.GetLabels()["release"] != "prometheus" {
				t.Errorf("ServiceMonitor = %s %v", s, sm.GetLabels())
			}
			cm := one(t, objs, "ConfigMap")
			if cm.GetNamespace() != "monitoring" || cm.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap %s/%s labels %v", cm.GetNamespace(), cm.GetName(), cm.GetLabels())
			}
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			var dash map[string]any
			if err := json.Unmarshal([]byte(data[c+".json"]), &dash); err != nil {
				t.Errorf("dashboard is not JSON: %v", err)
			}
			for _, crd := range find(objs, "CustomResourceDefinition") {
				if crd.GetAnnotations()["example.com/owner"] != "platform" {
					t.Errorf("CRD %s annotations = %v", crd.GetName(), crd.GetAnnotations())
				}
			}
		})
	}
}

// Options that change which objects exist.
func TestTemplateToggles(t *testing.T) {
	objs := render(t, "image-reflector-controller", "r", "ns", "--set", "crds.install=false,rbac.create=false,serviceAccount.create=false,metrics.service.enabled=false,leaderElection.enabled=false,webhook.enabled=false")
	for _, kind := range []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount", "Service"} {
		if n := len(find(objs, kind)); n != 0 {
			t.Errorf("%d %s", n, kind)
		}
	}
	w := workload(t, objs)
	if sa, _, _ := unstructured.NestedString(w.Object, "spec", "template", "spec", "serviceAccountName"); sa != "default" {
		t.Errorf("serviceAccountName = %q", sa)
	}
	if !hasArg(args(t, w), "--leader-elect=false") || !hasArg(args(t, w), "--webhook-bind-address=") {
		t.Errorf("args = %v", args(t, w))
	}
	objs = render(t, "image-reflector-controller", "r", "ns", "--set", "crds.keep=false")
	for _, crd := range find(objs, "CustomResourceDefinition") {
		if _, ok := crd.GetAnnotations()["helm.sh/resource-policy"]; ok {
			t.Errorf("CRD %s kept with crds.keep=false", crd.GetName())
		}
	}
	// Three shards of each chart, as examples/ installs them: distinct
	// names for every namespaced and cluster-wide object, the CRDs in
	// shard1's release only, each selecting its own key.
	for _, c := range charts {
		names := map[string]string{}
		for i, shard := range []string{"shard1", "shard2", "shard3"} {
			objs := render(t, c, c+"-"+shard, "ns", "-f", filepath.Join(chartDir(c), "examples/"+shard+".yaml"))
			for _, o := range objs {
				id := o.GetKind() + "/" + o.GetName()
				if other, ok := names[id]; ok {
					t.Errorf("%s: %s and %s both render %s", c, other, shard, id)
				}
				names[id] = shard
			}
			if crds := len(find(objs, "CustomResourceDefinition")); (crds > 0) != (i == 0) {
				t.Errorf("%s: %s renders %d CRDs; shard1 must own them, the others not", c, shard, crds)
			}
			if !hasArg(args(t, workload(t, objs)), "--watch-label-selector=sharding.toolkit.dev/key="+shard) {
				t.Errorf("%s: %s args = %v", c, shard, args(t, workload(t, objs)))
			}
		}
	}
}

// values.schema.json and the templates refuse bad values with a message
// naming the value.
func TestBadValuesRejected(t *testing.T) {
	tests := []struct {
		chart string
		set   string
		want  string
	}{
		{"image-reflector-controller", "replicaCount=x", "/replicaCount"},
		{"image-automation-controller", "replicaCount=-1", "/replicaCount"},
		{"update-job-controller", "replicaCont=2", "additional properties 'replicaCont' not allowed"},
		{"image-reflector-controller", "image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"image-reflector-controller", "image.digest=latest", "/image/digest"},
		// --set reads digits as a number; a tag such as a short commit
		// hash of digits only needs --set-string (TestTemplateDigitOnlyTag).
		{"update-job-controller", "image.tag=9522516", "/image/tag"},
		{"image-automation-controller", "logEncoding=xml", "/logEncoding"},
		{"update-job-controller", "logLevel=loud", "/logLevel"},
		{"update-job-controller", "concurrent=0", "/concurrent"},
		{"image-reflector-controller", "watchNamespace=Team_A", "/watchNamespace"},
		{"image-reflector-controller", "metrics.port=70000", "/metrics/port"},
		{"image-reflector-controller", "storage.path=data", "/storage/path"},
		{"update-job-controller", "jobLeaseDuration=soon", "/jobLeaseDuration"},
		{"update-job-controller", "leaderElection.enabled=true", "additional properties 'leaderElection' not allowed"},
		{"image-automation-controller", "metrics.serviceMonitor.enable=true", "additional properties 'enable' not allowed"},
		{"image-reflector-controller", "resources.requests.memory=lots", "/resources/requests/memory"},
		{"update-job-controller", "eventsAddr=notification-controller:80", "/eventsAddr"},
		// Checked by the templates: combinations the schema cannot express.
		{"image-reflector-controller", "storage.persistence.enabled=true,replicaCount=2", "storage.persistence.enabled needs replicaCount: 1"},
		{"update-job-controller", "metrics.service.enabled=false,metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.enabled needs metrics.service.enabled"},
		{"image-reflector-controller", "webhook.service.enabled=false,webhook.ingress.enabled=true", "webhook.ingress.enabled needs webhook.service.enabled"},
		{"image-reflector-controller", "webhook.service.type=External", "/webhook/service/type"},
	}
	for _, tt := range tests {
		t.Run(tt.chart+"/"+tt.set, func(t *testing.T) {
			out, err := helm("template", "x", chartDir(tt.chart), "--set", tt.set)
			if err == nil {
				t.Fatalf("accepted:\n%.300s", out)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error does not name %q:\n%v", tt.want, err)
			}
		})
	}
}

// A tag of digits only, given as a string, is the image's tag as written:
// the commit hash 9522516 once failed the chart tests as a number.
func TestTemplateDigitOnlyTag(t *testing.T) {
	for _, c := range charts {
		objs := render(t, c, c, "image-toolkit-system", "--set-string", "image.tag=0522516")
		ds := find(objs, "Deployment")
		if len(ds) == 0 {
			t.Fatalf("%s: no Deployment", c)
		}
		if img, _, _ := unstructured.NestedString(container(t, ds[0]), "image"); !strings.HasSuffix(img, ":0522516") {
			t.Errorf("%s: image = %q, want the tag 0522516", c, img)
		}
	}
}

// The charts share their generic templates: they must not drift apart.
func TestSharedTemplatesIdentical(t *testing.T) {
	shared := []string{"_helpers.tpl", "crds.yaml", "serviceaccount.yaml", "rbac.yaml", "service.yaml", "servicemonitor.yaml", "dashboard.yaml"}
	for _, f := range shared {
		ref, err := os.ReadFile(filepath.Join(chartDir(charts[0]), "templates", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range charts[1:] {
			b, err := os.ReadFile(filepath.Join(chartDir(c), "templates", f))
			if err != nil {
				t.Fatal(err)
			}
			if strings.ReplaceAll(string(b), c, charts[0]) != string(ref) {
				t.Errorf("templates/%s of %s differs from %s's (beyond the chart name)", f, c, charts[0])
			}
		}
	}
}

// Every metric a dashboard queries is defined in the controller's code.
func TestDashboardMetricsExist(t *testing.T) {
	subsystems := map[string]string{"image-reflector-controller": "reflector", "image-automation-controller": "automation", "update-job-controller": "updatejob"}
	// controller-runtime's own metrics.
	runtimeMetrics := []string{"controller_runtime_reconcile_total", "workqueue_depth"}
	ours := regexp.MustCompile(`imagetoolkit_([a-z]+)_([a-z_]+?)(_bucket|_count|_sum)?\b`)
	for _, c := range charts {
		t.Run(c, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(chartDir(c), "files/dashboard.json"))
			if err != nil {
				t.Fatal(err)
			}
			var dash struct {
				Panels []struct {
					Title   string
					Targets []struct{ Expr string }
				}
			}
			if err := json.Unmarshal(b, &dash); err != nil {
				t.Fatal(err)
			}
			code := sourceOf(t, c, "pkg/runtime/metrics")
			for _, p := range dash.Panels {
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				for _, tg := range p.Targets {
					for _, m := range ours.FindAllStringSubmatch(tg.Expr, -1) {
						if m[1] != subsystems[c] {
							t.Errorf("panel %q queries %s, another controller's metric", p.Title, m[0])
						}
						if !strings.Contains(code, `"`+m[2]+`"`) {
							t.Errorf("panel %q queries imagetoolkit_%s_%s, which no code in %s defines", p.Title, m[1], m[2], c)
						}
					}
					if !ours.MatchString(tg.Expr) && !slices.ContainsFunc(runtimeMetrics, func(m string) bool { return strings.Contains(tg.Expr, m) }) {
						t.Errorf("panel %q queries no known metric: %s", p.Title, tg.Expr)
					}
				}
			}
		})
	}
}

// sourceOf concatenates the non-test Go files under the given workspace
// directories.
func sourceOf(t *testing.T, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			b.Write(src)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// allWebhookValues checks the webhook receiver's values of the all-options
// files: flag, container port, Service, Ingress on /hook/.
func allWebhookValues(t *testing.T, c string, objs []*unstructured.Unstructured, w *unstructured.Unstructured, a []string) {
	t.Helper()
	if !hasArg(a, "--webhook-bind-address=:9393") {
		t.Errorf("args %v lack the webhook address", a)
	}
	if p := toJSON(t, container(t, w)["ports"]); !strings.Contains(p, `{"containerPort":9393,"name":"http-webhook","protocol":"TCP"}`) {
		t.Errorf("container ports = %s", p)
	}
	hs := named(t, objs, "Service", c+"-webhook")
	if s := toJSON(t, hs.Object["spec"]); !strings.Contains(s, `"type":"LoadBalancer"`) || !strings.Contains(s, `"port":8443`) || !strings.Contains(s, `"targetPort":"http-webhook"`) {
		t.Errorf("webhook Service spec = %s", s)
	}
	ing := one(t, objs, "Ingress")
	if s := toJSON(t, ing.Object["spec"]); !strings.Contains(s, `"ingressClassName":"nginx"`) || !strings.Contains(s, `"host":"hooks.example.com"`) ||
		!strings.Contains(s, `"path":"/hook/"`) || !strings.Contains(s, `"secretName":"hooks-tls"`) || !strings.Contains(s, `"name":"`+c+`-webhook"`) {
		t.Errorf("Ingress spec = %s", s)
	}
	if ing.GetAnnotations()["nginx.ingress.kubernetes.io/proxy-body-size"] != "1m" {
		t.Errorf("Ingress annotations = %v", ing.GetAnnotations())
	}
}
