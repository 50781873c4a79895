package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// unusedGrants are the write permissions (create, update, patch, delete)
// a chart grants that TestRBACLeastPrivilege's scenario does not exercise,
// each with the feature that needs it. A write grant neither used by the
// scenario nor listed here fails the test: it is either superfluous (remove
// its marker) or needs a reason here. Reads (get, list, watch) are only
// counted: a cached read never reaches the API server, so the audit log
// cannot tell which the code needs.
var unusedGrants = map[string]map[string]string{
	"image-reflector-controller": {
		"/serviceaccounts/token:create":                         "cloud workload identity of an ImageRepository's serviceAccountName (--object-level-workload-identity), and of a generic kubeConfig.configMapRef",
		"/events:patch":                                         "a repeated event is patched (its count), core events API",
		"events.k8s.io/events:patch":                            "a repeated event is patched (its series)",
		"image.toolkit.dev/imagerepositories/finalizers:update": "setting the finalizer where the API server enforces OwnerReferencesPermissionEnforcement",
		"image.toolkit.dev/healthwebhooks/status:patch":         "a HealthWebhook's path, and the health another cluster pushes to it (tests/e2e TestChainPromotionReadsHealthPushedByFluxNotificationController)",
	},
	"image-automation-controller": {
		"/serviceaccounts/token:create":                              "cloud workload identity of a repository's serviceAccountName",
		"/events:patch":                                              "a repeated event is patched (its count), core events API",
		"events.k8s.io/events:patch":                                 "a repeated event is patched (its series)",
		"image.toolkit.dev/imagepolicies:update":                     "discovery updates the policies it owns (CreateOrUpdate)",
		"image.toolkit.dev/imagerepositories:update":                 "discovery updates the repositories it owns (CreateOrUpdate)",
		"image.toolkit.dev/imagepolicies:delete":                     "discovery deletes the policies of images gone from the repository",
		"image.toolkit.dev/imagerepositories:delete":                 "discovery deletes the repositories of images gone from the repository",
		"image.toolkit.dev/imageupdateautomations/finalizers:update": "UpdateJobs owned with blockOwnerDeletion where the API server enforces OwnerReferencesPermissionEnforcement",
	},
	"update-job-controller": {
		"/pods:create": "container mode (--job-mode=container): the job's pod",
		"/pods:delete": "container mode: the finished job's pod",
		"authentication.k8s.io/tokenreviews:create": "container mode: the job pod's token is reviewed",
		"/serviceaccounts/token:create":             "cloud workload identity of a repository's serviceAccountName",
		"/events:create":                            "the core events API (the chart grants both event APIs)",
		"/events:patch":                             "a repeated event is patched (its count), core events API",
		"events.k8s.io/events:patch":                "a repeated event is patched (its series)",
		"update.toolkit.dev/updatejobs:delete":      "a finished job's ttlSecondsAfterFinished",
	},
}

// grant is one permission: group/resource[/subresource]:verb.
func grantKey(group, resource, verb string) string { return group + "/" + resource + ":" + verb }

// TestRBACLeastPrivilege proves that each chart's RBAC is enough and no
// more: the ClusterRoles, Roles and bindings rendered by `helm template` are
// applied to a control plane that audits every request, each controller
// runs as its chart's ServiceAccount (a kubeconfig with a TokenRequest
// token) through the whole chain (a scan, a policy, an automation making
// UpdateJobs, the jobs pushing, job history pruned, both webhooks called,
// an ImageRepository reading a ServiceAccount's imagePullSecrets, an
// automation discovering an image and making its repository and policy),
// and the chain's end state is reached with no request refused (the audit
// log's 403s) and no "forbidden" in any log. Every granted write is then
// either seen used in the audit log or listed in unusedGrants with the
// feature that needs it; no rule has a wildcard, secrets are only read,
// and the only cluster-wide writes are to the controller's own kinds (and
// the automation controller's UpdateJobs), events and the token APIs.
func TestRBACLeastPrivilege(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cluster, auditPath := startAudited(t, dir)
	bin, err := localenv.Binaries(cluster.Root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	// The charts' RBAC and ServiceAccounts, as helm renders them.
	kubeconfigs := map[string]string{}
	granted := map[string]map[string]bool{}
	for _, name := range localenv.Controllers {
		docs := helmRBAC(ctx, t, cluster.Root, name)
		apply(ctx, t, cluster, strings.Join(docs, "\n---\n"))
		granted[name] = checkRules(t, name, docs)
		kubeconfigs[name] = serviceAccountKubeconfig(ctx, t, cluster, dir, "rbac-"+name)
	}

	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	git := testgit.New(t, testgit.Options{Username: gitUser, Password: gitPassword})
	git.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": fmt.Sprintf(
		"image: %s:1.0.0 # {\"$imagepolicy\": \"default:app\"}\n", reg.Repo("app"))})
	bare := git.BarePath("fleet")
	// A second repository for discovery: an image no policy follows yet.
	reg.PushTags(t, "other", []string{"2.0.0", "2.1.0"})
	git.CreateRepo(t, "fleet2", map[string]string{"deploy/other.yaml": fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: other}
spec:
  template:
    spec:
      containers:
      - {name: other, image: %s:2.0.0}
`, reg.Repo("other"))})

	procs := map[string]*localenv.Process{}
	for _, name := range localenv.Controllers {
		args := []string{"--kubeconfig=" + kubeconfigs[name], "--log-encoding=console", "--log-level=debug"}
		switch name {
		case "image-reflector-controller":
			args = append(args, "--storage-path="+filepath.Join(dir, name+"-data"))
		case "update-job-controller":
			args = append(args, "--cache-dir="+filepath.Join(dir, name+"-cache"))
		case "image-automation-controller":
			args = append(args, "--job-history-limit=1")
		}
		env := append(os.Environ(), "RUNTIME_NAMESPACE=default", "POD_NAME="+name+"-0")
		p, err := cluster.StartWith(ctx, bin, name, name+"-0", env, args...)
		if err != nil {
			t.Fatal(err)
		}
		procs[name] = p
		t.Cleanup(func() { _ = p.Stop(20 * time.Second) })
	}

	apply(ctx, t, cluster, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: git-credentials, namespace: default}
stringData: {username: %s, password: %s}
---
apiVersion: v1
kind: Secret
metadata: {name: pull, namespace: default}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{"auths":{}}'}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: puller, namespace: default}
imagePullSecrets: [{name: pull}]
---
apiVersion: v1
kind: Secret
metadata: {name: hook, namespace: default}
stringData: {token: rbac-hook-token}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: app, namespace: default, labels: {hook: "yes"}}
spec: {image: %[3]s, interval: 1h, insecure: true, serviceAccountName: puller}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: app, namespace: default, labels: {app: app}}
spec: {imageRepositoryRef: {name: app}, policy: {semver: {range: ">=1.0.0"}}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata: {name: fleet, namespace: default}
spec:
  interval: 1h
  git:
    repository: {url: %[4]q, secretRef: {name: git-credentials}}
    checkout: {ref: {branch: main}}
    commit: {author: {name: imagebot, email: imagebot@example.com}}
  update: {path: ./deploy, strategy: Setters}
  policySelector: {matchLabels: {app: app}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata: {name: onboard, namespace: default}
spec:
  interval: 1h
  git:
    repository: {url: %[5]q, secretRef: {name: git-credentials}}
    checkout: {ref: {branch: main}}
    commit: {author: {name: imagebot, email: imagebot@example.com}}
  update: {path: ./deploy}
  policySelector: {matchLabels: {none: none}}
  discover:
    registries: [{host: %[6]q, insecure: true}]
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageWebhook
metadata: {name: registry, namespace: default}
spec: {type: generic, secretRef: {name: hook}, imageRepositorySelector: {matchLabels: {hook: "yes"}}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: GitWebhook
metadata: {name: fleet, namespace: default}
spec: {type: generic, secretRef: {name: hook}}
`, gitUser, gitPassword, reg.Repo("app"), git.RepoURL("fleet"), git.RepoURL("fleet2"), reg.Host))

	branchHolds := func(tag string) bool {
		return strings.Contains(gitOut(t, bare, "show", "main:deploy/app.yaml"), "app:"+tag+" ")
	}
	hookPath := func(obj client.Object, path *string) string {
		waitFor(t, 30*time.Second, obj.GetName()+"'s webhookPath", func() bool {
			return cluster.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj) == nil && *path != ""
		})
		return *path
	}
	iw := &imagev1.ImageWebhook{}
	iw.Name, iw.Namespace = "registry", "default"
	gw := &imagev1.GitWebhook{}
	gw.Name, gw.Namespace = "fleet", "default"
	// A receiver answers 404 until its cache holds the webhook with the
	// path the test just read from the API server: that is retried, for
	// a while.
	call := func(addr, path, body string) {
		var status string
		waitFor(t, 10*time.Second, "POST "+path+" answered", func() bool {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer rbac-hook-token")
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			status = resp.Status
			return resp.StatusCode != http.StatusNotFound
		})
		if !strings.HasPrefix(status, "2") {
			t.Fatalf("POST %s: %s", path, status)
		}
	}
	// Each new tag reaches git through the registry webhook (the scans
	// are an hour apart); the jobs after the first prune the history
	// (limit 1).
	tags := runs(3, 20)
	for i := 1; i <= tags; i++ {
		tag := fmt.Sprintf("1.%d.0", i)
		reg.PushTags(t, "app", []string{tag})
		call(procs["image-reflector-controller"].WebhookAddr, hookPath(iw, &iw.Status.WebhookPath), `{"repositories":["`+reg.Repo("app")+`"]}`)
		waitFor(t, 90*time.Second, tag+" in git", func() bool { return branchHolds(tag) })
	}
	// Discovery made a repository and a policy for the other image, and
	// its automation moved it to the newest tag.
	waitFor(t, 90*time.Second, "discovery's policy and commit", func() bool {
		pols := &imagev1.ImagePolicyList{}
		if err := cluster.Client.List(ctx, pols, client.InNamespace("default")); err != nil || len(pols.Items) < 2 {
			return false
		}
		return strings.Contains(gitOut(t, git.BarePath("fleet2"), "show", "main:deploy/other.yaml"), "other:2.1.0")
	})
	// A push by a person, reported by the git webhook, runs the automation.
	call(procs["image-automation-controller"].WebhookAddr, hookPath(gw, &gw.Status.WebhookPath), `{"repository":"`+git.RepoURL("fleet")+`","branch":"main"}`)
	time.Sleep(3 * time.Second)

	// Nothing refused, in the logs or the audit log.
	for name, p := range procs {
		b, _ := os.ReadFile(p.LogPath)
		if i := bytes.Index(bytes.ToLower(b), []byte("forbidden")); i >= 0 {
			t.Errorf("%s's log says forbidden: …%s…", name, b[max(0, i-300):min(len(b), i+200)])
		}
	}
	used, forbidden := auditedRequests(t, auditPath)
	var unusedReads int
	var unused []string
	for _, name := range localenv.Controllers {
		sa := "system:serviceaccount:default:rbac-" + name
		for _, f := range forbidden[sa] {
			t.Errorf("%s was refused: %s", name, f)
		}
		if len(used[sa]) == 0 {
			t.Errorf("the audit log shows no request of %s", sa)
		}
		for g := range granted[name] {
			if used[sa][g] {
				continue
			}
			if read := strings.HasSuffix(g, ":get") || strings.HasSuffix(g, ":list") || strings.HasSuffix(g, ":watch"); read {
				unusedReads++
				continue
			}
			if reason, ok := unusedGrants[name][g]; ok {
				unused = append(unused, fmt.Sprintf("%s %s (%s)", name, g, reason))
				continue
			}
			t.Errorf("%s is granted %s, which the scenario never used and unusedGrants does not explain: remove its marker, or say which feature needs it", name, g)
		}
		for g := range unusedGrants[name] {
			if !granted[name][g] {
				t.Errorf("unusedGrants lists %s for %s, which its chart does not grant", g, name)
			}
		}
	}
	sort.Strings(unused)
	for _, u := range unused {
		t.Logf("granted, not exercised here: %s", u)
	}
	var grants, requests int
	for _, name := range localenv.Controllers {
		grants += len(granted[name])
		requests += len(used["system:serviceaccount:default:rbac-"+name])
	}
	var refused int
	for _, f := range forbidden {
		refused += len(f)
	}
	figures(t, "controllers 3 as their ServiceAccounts, granted permissions %d, used %d distinct, writes granted but not exercised %d (each explained), reads not seen %d, refused requests %d, tags pushed through %d",
		grants, requests, len(unused), unusedReads, refused, tags)
}

// startAudited starts a control plane like localenv.Start, whose API server
// writes every request's metadata to an audit log.
func startAudited(t *testing.T, dir string) (*localenv.Cluster, string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.New(testenv.AllCharts...)
	if err != nil {
		t.Fatal(err)
	}
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env.ControlPlane.GetAPIServer().Configure().
		Set("audit-policy-file", policy).
		Set("audit-log-path", auditLog).
		Set("audit-log-format", "json")
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cluster := &localenv.Cluster{Env: &testenv.Env{Environment: env, Config: cfg, Client: c}, Root: root, Dir: dir,
		Kubectl: filepath.Join(env.BinaryAssetsDirectory, "kubectl")}
	user, err := env.AddUser(envtest.User{Name: "image-toolkit-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	cluster.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cluster.Kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return cluster, auditLog
}

// helmRBAC renders a chart and returns its ServiceAccount, RBAC objects
// and bindings, renamed so that the ServiceAccount is rbac-<chart>.
func helmRBAC(ctx context.Context, t *testing.T, root, chart string) []string {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "bin", "helm"), "template", "rbac", filepath.Join(root, "charts", chart),
		"--namespace", "default").Output()
	if err != nil {
		t.Fatalf("helm template %s (make tools): %v", chart, err)
	}
	var docs []string
	for _, doc := range strings.Split(string(out), "\n---") {
		var head struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if yaml.Unmarshal([]byte(doc), &head) != nil {
			continue
		}
		// The reflector's approver role is for people (no binding names the
		// controller's ServiceAccount), so it is not the controller's grant.
		if strings.HasSuffix(head.Metadata.Name, "-approver") {
			continue
		}
		switch head.Kind {
		case "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding":
			docs = append(docs, doc)
		}
	}
	if len(docs) < 3 {
		t.Fatalf("helm template %s rendered %d RBAC objects", chart, len(docs))
	}
	return docs
}

// checkRules fails on a wildcard, a secrets verb other than get, list or
// watch, and a cluster-wide write outside the controller's own API group,
// events and the token APIs; and returns every grant, expanded.
func checkRules(t *testing.T, chart string, docs []string) map[string]bool {
	t.Helper()
	own := map[string]string{
		"image-reflector-controller":  "image.toolkit.dev",
		"image-automation-controller": "image.toolkit.dev",
		"update-job-controller":       "update.toolkit.dev",
	}[chart]
	grants := map[string]bool{}
	for _, doc := range docs {
		var role rbacv1.ClusterRole // Role has the same fields
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil || (role.Kind != "ClusterRole" && role.Kind != "Role") {
			continue
		}
		for _, r := range role.Rules {
			for _, group := range r.APIGroups {
				for _, res := range r.Resources {
					for _, verb := range r.Verbs {
						if group == "*" || res == "*" || verb == "*" {
							t.Errorf("%s %s grants a wildcard: %+v", chart, role.Name, r)
						}
						if res == "secrets" && !slices.Contains([]string{"get", "list", "watch"}, verb) {
							t.Errorf("%s %s may %s secrets", chart, role.Name, verb)
						}
						write := !slices.Contains([]string{"get", "list", "watch"}, verb)
						allowed := group == own || (chart == "image-automation-controller" && res == "updatejobs") || res == "events" || res == "serviceaccounts/token" || res == "tokenreviews" ||
							(chart == "update-job-controller" && res == "pods") || // container mode, see unusedGrants
							(role.Kind == "Role" && res == "leases")
						if write && role.Kind == "ClusterRole" && !allowed {
							t.Errorf("%s %s writes %s/%s cluster-wide (%s)", chart, role.Name, group, res, verb)
						}
						grants[grantKey(group, res, verb)] = true
					}
				}
			}
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Logf("%s %s: rule %+v narrows by name or URL", chart, role.Name, r)
			}
		}
	}
	return grants
}

// serviceAccountKubeconfig creates a ServiceAccount's token with the
// TokenRequest API and writes a kubeconfig that authenticates with it.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, c *localenv.Cluster, dir, sa string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", sa, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[sa] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: sa, Namespace: "default"}
	kc.CurrentContext = sa
	path := filepath.Join(dir, sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// auditedRequests reads the audit log: per user, the grants each request
// needed, and the requests refused (403).
func auditedRequests(t *testing.T, path string) (used map[string]map[string]bool, forbidden map[string][]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	used, forbidden = map[string]map[string]bool{}, map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e struct {
			User       struct{ Username string }
			Verb       string
			RequestURI string `json:"requestURI"`
			ObjectRef  *struct {
				Resource, Subresource, APIGroup, Namespace, Name string
			} `json:"objectRef"`
			ResponseStatus *struct{ Code int } `json:"responseStatus"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.ObjectRef == nil {
			continue
		}
		res := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			res += "/" + e.ObjectRef.Subresource
		}
		key := grantKey(e.ObjectRef.APIGroup, res, e.Verb)
		if e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusForbidden {
			forbidden[e.User.Username] = append(forbidden[e.User.Username], key+" "+e.RequestURI)
			continue
		}
		if used[e.User.Username] == nil {
			used[e.User.Username] = map[string]bool{}
		}
		used[e.User.Username][key] = true
		if e.Verb == "watch" {
			// client-go lists through the watch (sendInitialEvents), and
			// falls back to a list where the server cannot: both needed.
			used[e.User.Username][grantKey(e.ObjectRef.APIGroup, res, "list")] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return used, forbidden
}
