package node

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/cluster"
)

const cmManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: apps
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
`

// cmEnv is the update-job-controller chart installed for container mode,
// a namespace enforcing the restricted profile for the jobs, and a git
// server on the host.
type cmEnv struct {
	c      client.Client
	ns     string
	git    *testgit.Server
	gitURL string // as pods reach it
	tk     string // bin/tk-image
}

func cmClient(t *testing.T) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, updatev1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	ctrllog.SetLogger(logr.Discard())
	c, err := client.New(cl.RESTConfig(), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cmRun(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startContainerMode installs the chart as release cm-ujc in cm-system
// with the `make images` image, which its Pods also use for their steps.
func startContainerMode(t *testing.T, ctx context.Context) *cmEnv {
	t.Helper()
	root := cl.Root()
	e := &cmEnv{c: cmClient(t), ns: "cm-jobs", tk: filepath.Join(root, "bin", "tk-image")}
	ref, ok := images["update-job-controller"]
	if !ok {
		t.Fatal("no update-job-controller image in bin/images: run make images")
	}
	i := strings.LastIndex(ref, ":")
	repo, tag := ref[:i], ref[i+1:]

	// The CRD, unless a release of the charts test kept it: created
	// (not applied: it is larger than the last-applied annotation allows)
	// and deleted again, so that a later helm install can own it.
	crd := filepath.Join(root, "charts/update-job-controller/files/crds/update.toolkit.dev_updatejobs.yaml")
	if _, err := cl.Kubectl(ctx, nil, "get", "crd", "updatejobs.update.toolkit.dev"); err != nil {
		if out, err := cl.Kubectl(ctx, nil, "create", "-f", crd); err != nil {
			t.Fatalf("creating the CRD: %v\n%s", err, out)
		}
		t.Cleanup(func() { _, _ = cl.Kubectl(context.Background(), nil, "delete", "-f", crd, "--wait=true") })
		waitFor(t, 30*time.Second, "the UpdateJob CRD established", func() (bool, string) {
			out, err := cl.Kubectl(ctx, nil, "get", "crd", "updatejobs.update.toolkit.dev", "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
			return err == nil && out == "True", out
		})
	}
	restrictedNamespace(t, "cm-system")
	restrictedNamespace(t, e.ns)
	t.Cleanup(func() {
		for _, ns := range []string{e.ns, "cm-system"} {
			_ = cl.Client().CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
	})
	helmDir := t.TempDir()
	helmEnv := []string{"KUBECONFIG=" + cl.Kubeconfig(), "HELM_CONFIG_HOME=" + filepath.Join(helmDir, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(helmDir, "cache"), "HELM_DATA_HOME=" + filepath.Join(helmDir, "data")}
	helmBin := filepath.Join(root, "bin", "helm")
	start := time.Now()
	cmRun(t, helmEnv, helmBin, "install", "cm-ujc", filepath.Join(root, "charts", "update-job-controller"), "--namespace", "cm-system",
		"--set", "crds.install=false", "--set", "image.repository="+repo, "--set-string", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		"--set", "metrics.service.enabled=false")
	t.Cleanup(func() {
		cmd := exec.Command(helmBin, "uninstall", "cm-ujc", "--namespace", "cm-system", "--wait", "--timeout", "2m")
		cmd.Env = append(os.Environ(), helmEnv...)
		_ = cmd.Run()
	})
	waitFor(t, 3*time.Minute, "the update-job-controller pod Ready", func() (bool, string) {
		pods, err := cl.Client().CoreV1().Pods("cm-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=cm-ujc"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err)
		}
		for _, c := range pods.Items[0].Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue, c.Message
			}
		}
		return false, string(pods.Items[0].Status.Phase)
	})
	fmt.Printf("FIGURES container mode: update-job-controller chart installed to pod Ready in %s\n", time.Since(start).Round(100*time.Millisecond))

	e.git = testgit.New(t, testgit.Options{})
	u, err := url.Parse(e.git.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, err := cl.Expose(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	e.gitURL = "http://" + host
	return e
}

// job creates a job on a new repository holding cmManifest under deploy/
// and waits for it to finish; it returns the job and how long it took
// from its creation to the phase that ended it.
func (e *cmEnv) job(t *testing.T, ctx context.Context, name string, mutate func(*updatev1.UpdateJob)) (*updatev1.UpdateJob, time.Duration) {
	t.Helper()
	e.git.CreateRepo(t, name, map[string]string{"deploy/app.yaml": cmManifest, "deploy/old.txt": "old\n", "README.md": "fleet\n"})
	j := &updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: updatev1.UpdateJobSpec{
			Repository:   updatev1.GitRepositorySpec{URL: e.gitURL + "/" + name + ".git"},
			Checkout:     updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update:       updatev1.UpdateSpec{Path: "deploy"},
			Commit:       updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "image-bot", Email: "bot@example.com"}},
			BackoffLimit: ptr.To[int32](0),
		},
	}
	mutate(j)
	start := time.Now()
	if err := e.c.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "job "+name+" finished", func() (bool, string) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(j), j)
		return err == nil && j.Status.Phase.Finished(), fmt.Sprintf("%v %s %+v", err, j.Status.Phase, j.Status.Conditions)
	})
	return j, time.Since(start)
}

func (e *cmEnv) file(t *testing.T, repo, path string) string {
	t.Helper()
	return testgit.Git(t, e.git.BarePath(repo), "show", "main:"+path)
}

func (e *cmEnv) logs(t *testing.T, name string) string {
	t.Helper()
	return cmRun(t, nil, e.tk, "--kubeconfig", cl.Kubeconfig(), "-n", e.ns, "job", "logs", name)
}

func container(image string, timeout time.Duration, command ...string) func(*updatev1.UpdateJob) {
	return func(j *updatev1.UpdateJob) {
		j.Spec.Update.Container = &updatev1.UpdateContainer{Image: image, Command: command}
		if timeout > 0 {
			j.Spec.Update.Container.Timeout = &metav1.Duration{Duration: timeout}
		}
	}
}

// UpdateJob container mode on a real node, with the chart's wiring
// (--transfer-address from the Pod IP, the chart's image as the steps',
// the RBAC for Pods and TokenReviews): the image-update image running
// tk-image update on the checkout, and a busybox shell script, each
// commit and push what they changed, in Pods the restricted profile
// admits, running as 65532 without any ServiceAccount token or transfer
// setting in the user's container, the logs reachable with tk-image job
// logs; a failing container fails the job with its exit code and last
// words; a container past its timeout fails with ContainerTimedOut. The
// same change by the built-in setters is timed beside it.
func TestContainerMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	e := startContainerMode(t, ctx)
	updateRef, ok := images["image-update"]
	if !ok {
		t.Fatal("no image-update image in bin/images: run make images")
	}
	want := strings.Replace(cmManifest, "podinfo:6.4.0", "podinfo:6.5.0", 1)
	var containerTime, builtinTime time.Duration

	t.Run("tk-image update in the image-update image", func(t *testing.T) {
		j, took := e.job(t, ctx, "krm", container(updateRef, 0,
			"/usr/local/bin/tk-image", "update", "--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0"))
		containerTime = took
		if j.Status.Phase != updatev1.UpdateJobSucceeded {
			t.Fatalf("phase %s: %+v", j.Status.Phase, j.Status.Conditions)
		}
		if got := e.file(t, "krm", "deploy/app.yaml"); got != want {
			t.Errorf("deploy/app.yaml on main:\n%s", got)
		}
		if f := j.Status.Result.Files; len(f) != 1 || f[0].Path != "app.yaml" || f[0].Operation != meta.FileModified {
			t.Errorf("status.result.files = %+v", f)
		}
		if c := j.Status.Container; c == nil || c.ExitCode == nil || *c.ExitCode != 0 {
			t.Errorf("status.container = %+v", c)
		}
		// tk-image update says what it changed: the logs have it.
		if logs := e.logs(t, "krm"); !strings.Contains(logs, "ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0") {
			t.Errorf("tk-image job logs:\n%s", logs)
		}
	})

	t.Run("built-in setters, the same change", func(t *testing.T) {
		j, took := e.job(t, ctx, "builtin", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters = []updatev1.PolicySetter{{Policy: "apps:podinfo", ImageRef: meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"}}}
		})
		builtinTime = took
		if j.Status.Phase != updatev1.UpdateJobSucceeded || e.file(t, "builtin", "deploy/app.yaml") != want {
			t.Fatalf("phase %s: %+v", j.Status.Phase, j.Status.Conditions)
		}
	})
	if containerTime > 0 && builtinTime > 0 {
		fmt.Printf("FIGURES container mode: job from creation to Succeeded: container mode (image-update) %s, built-in setters %s, same change\n",
			containerTime.Round(100*time.Millisecond), builtinTime.Round(100*time.Millisecond))
	}

	t.Run("busybox shell script", func(t *testing.T) {
		script := `set -e
sed -i 's/podinfo:6.4.0/podinfo:6.5.0/' app.yaml
rm old.txt
id -u > uid.txt
{ env | grep -c TRANSFER_ || true; } > transfer-env.txt
{ ls /var/run/secrets 2>/dev/null || true; } > secrets.txt
echo "script done in $(pwd)"`
		j, _ := e.job(t, ctx, "script", container(cluster.BusyboxImage, 0, "/bin/sh", "-c", script))
		if j.Status.Phase != updatev1.UpdateJobSucceeded {
			t.Fatalf("phase %s: %+v", j.Status.Phase, j.Status.Conditions)
		}
		if got := e.file(t, "script", "deploy/app.yaml"); got != want {
			t.Errorf("deploy/app.yaml:\n%s", got)
		}
		for file, content := range map[string]string{"uid.txt": "65532\n", "transfer-env.txt": "0\n", "secrets.txt": ""} {
			if got := e.file(t, "script", "deploy/"+file); got != content {
				t.Errorf("%s = %q, want %q", file, got, content)
			}
		}
		var files []string
		for _, f := range j.Status.Result.Files {
			files = append(files, string(f.Operation)+" "+f.Path)
		}
		if got := strings.Join(files, ", "); got != "modified app.yaml, deleted old.txt, added secrets.txt, added transfer-env.txt, added uid.txt" {
			t.Errorf("status.result.files: %s", got)
		}
		if logs := e.logs(t, "script"); !strings.Contains(logs, "script done in /workspace/deploy") {
			t.Errorf("tk-image job logs:\n%s", logs)
		}
	})

	t.Run("failing container", func(t *testing.T) {
		j, _ := e.job(t, ctx, "failing", container(cluster.BusyboxImage, 0, "/bin/sh", "-c", `echo "kustomize: accumulating resources: missing base"; exit 7`))
		ready := conditions.Get(j, conditions.ReadyCondition)
		if j.Status.Phase != updatev1.UpdateJobFailed || ready == nil || ready.Reason != updatev1.ContainerFailedReason ||
			!strings.Contains(ready.Message, "exited 7") || !strings.Contains(ready.Message, "missing base") {
			t.Fatalf("phase %s, Ready %+v", j.Status.Phase, ready)
		}
		if c := j.Status.Container; c == nil || c.ExitCode == nil || *c.ExitCode != 7 {
			t.Errorf("status.container = %+v", c)
		}
		if logs := e.logs(t, "failing"); !strings.Contains(logs, "missing base") {
			t.Errorf("tk-image job logs:\n%s", logs)
		}
		if got := e.file(t, "failing", "deploy/app.yaml"); got != cmManifest {
			t.Errorf("a failed job changed main:\n%s", got)
		}
	})

	t.Run("container past its timeout", func(t *testing.T) {
		start := time.Now()
		j, _ := e.job(t, ctx, "slow", container(cluster.BusyboxImage, 5*time.Second, "/bin/sh", "-c", "sleep 600"))
		ready := conditions.Get(j, conditions.ReadyCondition)
		if j.Status.Phase != updatev1.UpdateJobFailed || ready == nil || ready.Reason != updatev1.ContainerTimedOutReason {
			t.Fatalf("phase %s, Ready %+v", j.Status.Phase, ready)
		}
		fmt.Printf("FIGURES container mode: a 5 s timeout ended the job (ContainerTimedOut) %s after its creation\n", time.Since(start).Round(100*time.Millisecond))
		pod := &corev1.Pod{}
		err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: j.Status.Container.PodName}, pod)
		if err == nil && pod.Status.Phase != corev1.PodFailed {
			t.Errorf("the timed-out pod is %s", pod.Status.Phase)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})

	// The jobs above ran with the chart's RBAC only: the controller's
	// ServiceAccount is bound by the release and by the API server's
	// bootstrap defaults, nothing else (this test binds nothing); the
	// authorizer refuses it what the chart does not grant; and its log,
	// read through the API server, has no refusal while it claimed every
	// job and started the container jobs' Pods.
	t.Run("the chart's RBAC only, nothing refused", func(t *testing.T) {
		e.chartRBACOnly(t, ctx, map[string]bool{"krm": true, "builtin": false, "script": true, "failing": true, "slow": true})
	})
}

// chartRBACOnly checks the controller's grants and its log; jobs names
// each job run, and whether it ran a container.
func (e *cmEnv) chartRBACOnly(t *testing.T, ctx context.Context, jobs map[string]bool) {
	t.Helper()
	kc := cl.Client()
	pods, err := kc.CoreV1().Pods("cm-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=cm-ujc"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the controller pod: %v (%d pods)", err, len(pods.Items))
	}
	pod := pods.Items[0]
	sa := pod.Spec.ServiceAccountName
	if sa == "" || sa == "default" {
		t.Fatalf("the controller pod runs as ServiceAccount %q, not the chart's", sa)
	}
	user := "system:serviceaccount:cm-system:" + sa
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:cm-system", "system:authenticated"}

	// Every binding naming the ServiceAccount or one of its groups is the
	// release's or a bootstrap default.
	type binding struct {
		kind, name string
		labels     map[string]string
		annots     map[string]string
		subjects   []rbacSubject
	}
	var all []binding
	crbs, err := kc.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		all = append(all, binding{"ClusterRoleBinding", b.Name, b.Labels, b.Annotations, subjectsOf(b.Subjects)})
	}
	rbs, err := kc.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rbs.Items {
		all = append(all, binding{"RoleBinding", b.Namespace + "/" + b.Name, b.Labels, b.Annotations, subjectsOf(b.Subjects)})
	}
	var release int
	for _, b := range all {
		for _, s := range b.subjects {
			mine := (s.kind == "ServiceAccount" && s.name == sa && s.namespace == "cm-system") ||
				(s.kind == "User" && s.name == user) || (s.kind == "Group" && slices.Contains(groups, s.name))
			if !mine {
				continue
			}
			switch {
			case b.annots["meta.helm.sh/release-name"] == "cm-ujc" && b.annots["meta.helm.sh/release-namespace"] == "cm-system":
				release++
			case b.labels["kubernetes.io/bootstrapping"] == "rbac-defaults":
			default:
				t.Errorf("%s %s grants %s %s more than the chart does", b.kind, b.name, s.kind, s.name)
			}
		}
	}
	if release == 0 {
		t.Errorf("no binding of the release names ServiceAccount %s", sa)
	}

	// The authorizer agrees: what container mode needs is allowed, what
	// the chart does not grant is refused.
	for _, c := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Namespace: e.ns, Verb: "create", Resource: "pods"}, true},
		{authorizationv1.ResourceAttributes{Namespace: e.ns, Verb: "delete", Resource: "pods"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{authorizationv1.ResourceAttributes{Namespace: e.ns, Verb: "list", Resource: "pods"}, false},
		{authorizationv1.ResourceAttributes{Namespace: e.ns, Verb: "list", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Namespace: e.ns, Verb: "create", Resource: "pods", Subresource: "exec"}, false},
		{authorizationv1.ResourceAttributes{Namespace: e.ns, Verb: "update", Group: "update.toolkit.dev", Resource: "updatejobs"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}, false},
	} {
		r, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &c.attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.want {
			t.Errorf("%s may %s %s/%s in %q: %v, want %v", sa, c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, c.attrs.Namespace, r.Status.Allowed, c.want)
		}
	}

	// The log: every job claimed, every container Pod started, nothing
	// refused. The claims make sure the log is the one that did the work.
	raw, err := kc.CoreV1().Pods("cm-system").GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logs := string(raw)
	lines := strings.Split(logs, "\n")
	for name, ran := range jobs {
		var claimed, started bool
		for _, l := range lines {
			if !strings.Contains(l, `"`+name+`"`) {
				continue
			}
			claimed = claimed || strings.Contains(l, "claimed job")
			started = started || strings.Contains(l, "started container pod")
		}
		if !claimed || started != ran {
			t.Errorf("job %s: claimed in the log %v, container pod started %v (want %v)", name, claimed, started, ran)
		}
	}
	var refused []string
	for _, l := range lines {
		low := strings.ToLower(l)
		if strings.Contains(low, "forbidden") || strings.Contains(low, "cannot create resource") ||
			strings.Contains(low, "cannot get resource") || strings.Contains(low, "cannot delete resource") {
			refused = append(refused, l)
		}
	}
	if len(refused) > 0 {
		t.Errorf("the controller was refused:\n%s", strings.Join(refused, "\n"))
	}
	fmt.Printf("FIGURES container mode: ServiceAccount %s, %d bindings of the release, %d jobs claimed, controller log %d lines (%d KiB), refusals 0 expected, found %d\n",
		sa, release, len(jobs), len(lines), len(logs)>>10, len(refused))
}

type rbacSubject struct{ kind, name, namespace string }

func subjectsOf(s []rbacv1.Subject) []rbacSubject {
	out := make([]rbacSubject, 0, len(s))
	for _, x := range s {
		out = append(out, rbacSubject{x.Kind, x.Name, x.Namespace})
	}
	return out
}
