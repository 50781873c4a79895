package controller

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
	"toolkit.dev/image-toolkit/update-job-controller/internal/transfer"
)

// stepBinary is bin/update-job-controller of `make build`
// ($IMAGE_TOOLKIT_BIN when set), built here when missing.
var stepBinary = sync.OnceValues(func() (string, error) {
	dir := os.Getenv("IMAGE_TOOLKIT_BIN")
	if dir == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin")
	}
	bin := filepath.Join(dir, "update-job-controller")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp, err := os.MkdirTemp("", "ujc-step-")
	if err != nil {
		return "", err
	}
	bin = filepath.Join(tmp, "update-job-controller")
	out, err := exec.Command("go", "build", "-o", bin, "toolkit.dev/image-toolkit/update-job-controller").CombinedOutput()
	if err != nil {
		return "", &exec.Error{Name: "go build: " + string(out), Err: err}
	}
	return bin, nil
})

// containerJob is a container-mode job on the repository at url.
func containerJob(ns, name, url string, c updatev1.UpdateContainer, mutate func(*updatev1.UpdateJob)) *updatev1.UpdateJob {
	return newJob(ns, name, url, func(j *updatev1.UpdateJob) {
		j.Spec.Update = updatev1.UpdateSpec{Path: "deploy", Container: &c}
		j.Spec.Commit.MessageTemplate = ""
		j.Spec.BackoffLimit = ptr.To[int32](0)
		if mutate != nil {
			mutate(j)
		}
	})
}

// withServiceAccount creates the namespace's default ServiceAccount, which
// the Pods run as; envtest runs no controller that would.
func withServiceAccount(t *testing.T, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	if err := env.Client.Create(context.Background(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// podOf waits for the job's status to name a Pod of the given round's
// number of Pods so far and returns it.
func podOf(t *testing.T, j *updatev1.UpdateJob, after string) *corev1.Pod {
	t.Helper()
	got := &updatev1.UpdateJob{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("job %s: status %+v", j.Name, got.Status)
		}
	})
	testenv.Eventually(t, 30*time.Second, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(j), got)
		return err == nil && got.Status.Container != nil && got.Status.Container.PodName != after, err
	})
	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: j.Namespace, Name: got.Status.Container.PodName}
	if err := env.Client.Get(context.Background(), key, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// podToken is what the kubelet projects into the steps: a token of the
// Pod's ServiceAccount for audience, bound to the Pod.
func podToken(t *testing.T, pod *corev1.Pod, audience string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: pod.Namespace}}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := env.Client.SubResource("token").Create(context.Background(), sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// kubelet plays the part of a node for one Pod, and only that part: it
// runs the Pod's containers as local processes, in order, with the Pod's
// environment, a workspace directory for /workspace and a pod-bound token
// file, then writes the Pod's status as a kubelet would. The steps are the
// real update-job-controller binary; the user's container runs its command
// with sh on this machine. The real-node tests (tests/node) prove the
// kubelet's own side: images, users, volumes, the projected token.
type kubelet struct {
	t         *testing.T
	pod       *corev1.Pod
	workspace string
	env       []string
}

func newKubelet(t *testing.T, pod *corev1.Pod) *kubelet {
	t.Helper()
	k := &kubelet{t: t, pod: pod, workspace: t.TempDir()}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(podToken(t, pod, transfer.Audience)), 0o600); err != nil {
		t.Fatal(err)
	}
	k.env = []string{transfer.EnvTokenFile + "=" + tokenFile, transfer.EnvWorkspace + "=" + k.workspace}
	return k
}

// container returns the Pod's container of that name.
func (k *kubelet) container(name string) corev1.Container {
	for _, c := range append(append([]corev1.Container{}, k.pod.Spec.InitContainers...), k.pod.Spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	k.t.Fatalf("pod %s has no container %s", k.pod.Name, name)
	return corev1.Container{}
}

// run runs a container: a step with the binary, the user's container with
// sh -c (its command is [sh, -c, script]) in its working directory mapped
// into the workspace; it returns the exit code and the output.
func (k *kubelet) run(name string) (int, string) {
	k.t.Helper()
	c := k.container(name)
	var cmd *exec.Cmd
	if name == UserContainer {
		cmd = exec.Command(c.Command[0], append(c.Command[1:], c.Args...)...)
		cmd.Dir = filepath.Join(k.workspace, strings.TrimPrefix(c.WorkingDir, workspaceDir))
	} else {
		bin, err := stepBinary()
		if err != nil {
			k.t.Fatal(err)
		}
		cmd = exec.Command(bin, c.Args...)
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		if e.Name == transfer.EnvTokenFile || e.Name == transfer.EnvWorkspace || e.Name == "HOME" {
			continue
		}
		env = append(env, e.Name+"="+e.Value)
	}
	cmd.Env = env
	if name != UserContainer {
		cmd.Env = append(env, k.env...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		k.t.Fatal(err)
	}
	return 0, out.String()
}

// status writes the Pod's status as the kubelet would.
func (k *kubelet) status(phase corev1.PodPhase, reason string, containers ...corev1.ContainerStatus) {
	k.t.Helper()
	pod := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(k.pod), pod); err != nil {
		k.t.Fatal(err)
	}
	pod.Status.Phase, pod.Status.Reason = phase, reason
	for _, cs := range containers {
		if cs.Name == uploadStep {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, cs)
		} else {
			pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, cs)
		}
	}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		k.t.Fatal(err)
	}
}

func exited(name string, code int32, msg string) corev1.ContainerStatus {
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: msg}}}
}

// runPod runs the whole Pod: fetch, the user's container, upload; it
// stops at the first failure and reports it in the Pod's status, as the
// kubelet would with restartPolicy Never.
func (k *kubelet) runPod() {
	k.t.Helper()
	var statuses []corev1.ContainerStatus
	for _, name := range []string{fetchContainer, UserContainer, uploadStep} {
		code, out := k.run(name)
		statuses = append(statuses, exited(name, int32(code), out))
		if code != 0 {
			k.t.Logf("container %s exited %d: %s", name, code, out)
			k.status(corev1.PodFailed, "", statuses...)
			return
		}
	}
	k.status(corev1.PodSucceeded, "", statuses...)
}

// A container-mode job runs its container on a checkout of the update path
// and commits and pushes exactly what it changed (modified, added and
// deleted files), with the Pod in status.container, through the real step
// binary over the controller's TLS transfer with a pod-bound token; a
// second job whose container changes nothing ends NoChange.
func TestContainerModeCommitsWhatChanged(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	withServiceAccount(t, ns)
	srv.CreateRepo(t, "cm", map[string]string{"deploy/app.yaml": deployment, "deploy/old.txt": "old\n", "README.md": "hi\n"})
	script := `set -e
sed -i 's/podinfo:6.4.0/podinfo:6.5.0/' app.yaml
echo new > added.txt
rm old.txt`
	j := containerJob(ns, "cm", srv.RepoURL("cm"), updatev1.UpdateContainer{
		Image: "busybox:test", Command: []string{"sh", "-c", script},
	}, nil)
	create(t, j)
	before := head(t, srv, "cm", "refs/heads/main")
	pod := podOf(t, j, "")
	newKubelet(t, pod).runPod()
	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Fatalf("phase %s: %+v", got.Status.Phase, got.Status.Conditions)
	}
	after := head(t, srv, "cm", "refs/heads/main")
	if after != got.Status.PushedCommit || after == before {
		t.Errorf("main = %s, pushed %s, before %s", after, got.Status.PushedCommit, before)
	}
	diff := testgit.Git(t, srv.BarePath("cm"), "diff", "--name-status", before, after)
	if want := "A\tdeploy/added.txt\nM\tdeploy/app.yaml\nD\tdeploy/old.txt\n"; diff != want {
		t.Errorf("the commit changes:\n%s\nwant:\n%s", diff, want)
	}
	if content := testgit.Git(t, srv.BarePath("cm"), "show", after+":deploy/app.yaml"); content != updated {
		t.Errorf("deploy/app.yaml:\n%s", content)
	}
	var files []string
	for _, f := range got.Status.Result.Files {
		files = append(files, string(f.Operation)+" "+f.Path)
	}
	if strings.Join(files, ", ") != "added added.txt, modified app.yaml, deleted old.txt" {
		t.Errorf("status.result.files = %v", files)
	}
	c := got.Status.Container
	if c == nil || c.PodName != pod.Name || c.ContainerName != UserContainer || c.ExitCode == nil || *c.ExitCode != 0 {
		t.Errorf("status.container = %+v", c)
	}
	msg := testgit.Git(t, srv.BarePath("cm"), "log", "-1", "--format=%an <%ae>%n%s", after)
	if msg != "image-bot <bot@example.com>\nUpdate deploy with busybox:test\n" {
		t.Errorf("commit: %q", msg)
	}

	// The event is the built-in mode's: the commit and its message.
	want := "pushed commit " + after[:7] + " to main\n\nUpdate deploy with busybox:test\n"
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == "cm" && e.Reason == conditions.SucceededReason && e.Note == want {
				return true, nil
			}
		}
		return false, nil
	})

	// The same container on the new head changes nothing.
	j2 := containerJob(ns, "cm-again", srv.RepoURL("cm"), updatev1.UpdateContainer{
		Image: "busybox:test", Command: []string{"sh", "-c", "sed -i 's/podinfo:6.4.0/podinfo:6.5.0/' app.yaml"},
	}, nil)
	create(t, j2)
	newKubelet(t, podOf(t, j2, "")).runPod()
	if got := waitFinished(t, j2); got.Status.Phase != updatev1.UpdateJobNoChange {
		t.Fatalf("second job: phase %s: %+v", got.Status.Phase, got.Status.Conditions)
	}
	if h := head(t, srv, "cm", "refs/heads/main"); h != after {
		t.Errorf("a no-change job moved main to %s", h)
	}
}

// The Pod follows the restricted profile, the user's container gets no
// token, no git credential and no ServiceAccount token, only the steps
// mount the pod-bound token, and the Pod belongs to its job.
func TestContainerPodSpec(t *testing.T) {
	c := &Containers{Transfer: mustServer(t), Address: "10.0.0.7:9444", StepImage: "ujc:1"}
	job := &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "uid-1"}}
	job.Spec.Update = updatev1.UpdateSpec{Path: "./apps/", Container: &updatev1.UpdateContainer{
		Image: "alpine:3", Args: []string{"x"}, Timeout: &metav1.Duration{Duration: 90 * time.Second},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
		Env: []corev1.EnvVar{{Name: "FROM_USER", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "mine"}, Key: "k"}}}},
	}}
	job.Status.Attempts = 2
	pod := c.PodFor(job, 1)
	s := pod.Spec
	if s.RestartPolicy != corev1.RestartPolicyNever || !ptr.Equal(s.AutomountServiceAccountToken, ptr.To(false)) ||
		!ptr.Equal(s.ActiveDeadlineSeconds, ptr.To[int64](90)) {
		t.Errorf("restartPolicy %s, automount %v, activeDeadlineSeconds %v", s.RestartPolicy, s.AutomountServiceAccountToken, s.ActiveDeadlineSeconds)
	}
	psc := s.SecurityContext
	if !*psc.RunAsNonRoot || *psc.RunAsUser != 65532 || *psc.RunAsGroup != 65532 || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", psc)
	}
	var names []string
	for _, ctr := range append(append([]corev1.Container{}, s.InitContainers...), s.Containers...) {
		names = append(names, ctr.Name)
		sc := ctr.SecurityContext
		if *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
			!*sc.ReadOnlyRootFilesystem || !*sc.RunAsNonRoot || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: securityContext %+v", ctr.Name, sc)
		}
		token := false
		for _, m := range ctr.VolumeMounts {
			token = token || m.Name == "token"
		}
		if token != (ctr.Name != UserContainer) {
			t.Errorf("%s mounts the token: %v", ctr.Name, token)
		}
		if ctr.Name == UserContainer {
			if ctr.WorkingDir != "/workspace/apps" || ctr.Image != "alpine:3" || ctr.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
				t.Errorf("user container: %+v", ctr)
			}
			for _, e := range ctr.Env {
				if strings.HasPrefix(e.Name, "TRANSFER_") {
					t.Errorf("the user's container gets %s", e.Name)
				}
			}
			if len(ctr.Env) != 2 || ctr.Env[0].Name != "FROM_USER" || ctr.Env[1].Name != "HOME" {
				t.Errorf("user env: %+v", ctr.Env)
			}
		} else if ctr.Image != "ujc:1" || ctr.Args[0] != "step" {
			t.Errorf("step %s: %s %v", ctr.Name, ctr.Image, ctr.Args)
		}
	}
	if strings.Join(names, ",") != "fetch,update,upload" {
		t.Errorf("containers %v", names)
	}
	var audience string
	for _, v := range s.Volumes {
		if v.Projected != nil {
			audience = v.Projected.Sources[0].ServiceAccountToken.Audience
		}
	}
	if audience != transfer.Audience {
		t.Errorf("token audience %q", audience)
	}
	if len(s.ImagePullSecrets) != 1 || s.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %v", s.ImagePullSecrets)
	}
	owner := pod.OwnerReferences
	if len(owner) != 1 || owner[0].UID != "uid-1" || owner[0].Kind != "UpdateJob" || !*owner[0].Controller {
		t.Errorf("owner %+v", owner)
	}
	if pod.Labels[LabelJobName] != "j" || pod.Labels[LabelAttempt] != "2" || pod.Labels[LabelRound] != "1" {
		t.Errorf("labels %v", pod.Labels)
	}
}

func mustServer(t *testing.T) *transfer.Server {
	t.Helper()
	s, err := transfer.NewServer(nil, "10.0.0.7", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A container that fails, times out, cannot be pulled or leaves something
// hostile fails the job with its own reason, the exit code and the tail of
// its message in the condition; nothing is pushed.
func TestContainerModeFailures(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	withServiceAccount(t, ns)
	tests := []struct {
		name    string
		timeout time.Duration
		script  string
		// node does what the kubelet would; nil leaves the Pod alone.
		node     func(k *kubelet)
		reason   string
		message  []string
		exitCode *int32
	}{
		{
			name:   "non-zero exit",
			script: `echo "cannot render: values.yaml: line 3: bad"; exit 3`,
			node:   func(k *kubelet) { k.runPod() },
			reason: updatev1.ContainerFailedReason, message: []string{"container update exited 3", "cannot render: values.yaml: line 3: bad"},
			exitCode: ptr.To[int32](3),
		},
		{
			name:   "the kubelet's activeDeadlineSeconds",
			script: "true",
			node: func(k *kubelet) {
				k.status(corev1.PodFailed, "DeadlineExceeded")
			},
			reason: updatev1.ContainerTimedOutReason, message: []string{"did not finish within 10m0s"},
		},
		{
			name:    "no kubelet ever runs it",
			timeout: time.Second,
			script:  "true",
			reason:  updatev1.ContainerTimedOutReason, message: []string{"did not finish within 1s", "(phase Pending)"},
		},
		{
			name:   "image pull back-off",
			script: "true",
			node: func(k *kubelet) {
				k.status(corev1.PodPending, "", exited(fetchContainer, 0, ""), corev1.ContainerStatus{Name: UserContainer, Image: "busybox:test",
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "busybox:test"`}}})
			},
			reason: updatev1.ImagePullFailedReason, message: []string{"ImagePullBackOff", "Back-off pulling image"},
		},
		{
			name:   "a link out of the checkout",
			script: "ln -s ../../../etc/passwd leak",
			node:   func(k *kubelet) { k.runPod() },
			reason: updatev1.ContainerFailedReason, message: []string{"was refused", "leads out of the workspace"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := "fail-" + string(rune('a'+i))
			srv.CreateRepo(t, repo, map[string]string{"deploy/app.yaml": deployment})
			before := head(t, srv, repo, "refs/heads/main")
			c := updatev1.UpdateContainer{Image: "busybox:test", Command: []string{"sh", "-c", tt.script}}
			if tt.timeout > 0 {
				c.Timeout = &metav1.Duration{Duration: tt.timeout}
			}
			j := containerJob(ns, repo, srv.RepoURL(repo), c, nil)
			create(t, j)
			pod := podOf(t, j, "")
			if tt.node != nil {
				tt.node(newKubelet(t, pod))
			}
			got := waitFinished(t, j)
			ready := conditions.Get(got, conditions.ReadyCondition)
			if got.Status.Phase != updatev1.UpdateJobFailed || ready == nil || ready.Reason != tt.reason {
				t.Fatalf("phase %s, Ready %+v; want Failed, %s", got.Status.Phase, ready, tt.reason)
			}
			for _, m := range tt.message {
				if !strings.Contains(ready.Message, m) {
					t.Errorf("message %q lacks %q", ready.Message, m)
				}
			}
			if tt.exitCode != nil && !ptr.Equal(got.Status.Container.ExitCode, tt.exitCode) {
				t.Errorf("status.container = %+v, want exit code %d", got.Status.Container, *tt.exitCode)
			}
			if h := head(t, srv, repo, "refs/heads/main"); h != before {
				t.Errorf("main moved to %s", h)
			}
		})
	}
}

// The transfer server serves a session only to its own Pod: a token bound
// to another Pod, a token for another audience (the API server's), no
// token, and a second upload are refused; TLS is verified against the
// certificate the Pod is given.
func TestTransferAuthentication(t *testing.T) {
	ns := env.Namespace(t)
	withServiceAccount(t, ns)
	auth := transfer.TokenReviewer{Client: env.Client}
	srv, err := transfer.NewServer(auth, "127.0.0.1", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ctx, ln) }()
	mkpod := func(name string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "c", Image: "x"}}, AutomountServiceAccountToken: ptr.To(false)}}
		create(t, p)
		return p
	}
	mine, other := mkpod("mine"), mkpod("other")
	checkout := t.TempDir()
	if err := os.WriteFile(filepath.Join(checkout, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sess := srv.Open(mine.UID, checkout, t.TempDir())
	defer srv.Close(sess)

	id, err := auth.Authenticate(ctx, podToken(t, mine, transfer.Audience))
	if err != nil || id.PodUID != mine.UID || !strings.Contains(id.Username, ":default") {
		t.Fatalf("Authenticate = %+v, %v", id, err)
	}
	cfg := func(token string) *transfer.StepConfig {
		f := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(f, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		return &transfer.StepConfig{URL: "https://" + ln.Addr().String(), CA: srv.CertPEM(), TokenFile: f, Dir: filepath.Join(t.TempDir(), "ws")}
	}
	tests := []struct {
		name  string
		token string
		want  string
	}{
		{"another pod's token", podToken(t, other, transfer.Audience), "403"},
		{"the API server's audience", podToken(t, mine, "https://kubernetes.default.svc"), "401"},
		{"no token", " ", "401"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := transfer.Fetch(ctx, cfg(tt.token)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Fetch = %v, want %s", err, tt.want)
			}
		})
	}
	good := cfg(podToken(t, mine, transfer.Audience))
	wrongCA := *good
	wrongCA.CA = mustServer(t).CertPEM()
	if err := transfer.Fetch(ctx, &wrongCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Fetch trusting another certificate = %v", err)
	}
	if err := transfer.Fetch(ctx, good); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if err := transfer.Upload(ctx, good); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	if err := transfer.Upload(ctx, good); err == nil || !strings.Contains(err.Error(), http.StatusText(http.StatusConflict)) {
		t.Errorf("second Upload = %v, want a conflict", err)
	}
}

// A replica without --transfer-address and --step-image fails a
// container-mode job at once, Stalled with ContainerModeUnavailable, using
// no attempt and creating no Pod.
func TestContainerModeUnavailable(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	srv.CreateRepo(t, "nocm", map[string]string{"deploy/app.yaml": deployment})
	const only = "test.toolkit.dev/no-containers"
	sel, err := labels.Parse(only)
	if err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	stop, err := env.StartManagerWith(func(o *ctrl.Options) { o.Cache.DefaultLabelSelector = sel }, func(mgr ctrl.Manager) error {
		cache, err := mirror.NewCache(filepath.Join(cacheDir, "mirrors"))
		if err != nil {
			return err
		}
		rec := metrics.NewRecorder("updatejob")
		rec.MustRegister(prometheus.NewRegistry())
		return (&UpdateJobReconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: events.New(events.NewWriter(mgr.GetClient(), mgr.GetScheme(), "update-job-controller")),
			Metrics: rec, JobMetrics: NewJobMetrics(), Cache: cache, WorkDir: cacheDir, Runner: "no-containers",
			LeaseDuration: testLease, Backoff: testBackoff,
		}).SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	j := containerJob(ns, "nocm", srv.RepoURL("nocm"), updatev1.UpdateContainer{Image: "busybox:test"}, func(j *updatev1.UpdateJob) {
		// Only the replica without container mode sees it.
		j.Labels = map[string]string{unmanagedLabel: "true", only: "true"}
	})
	create(t, j)
	got := waitFinished(t, j)
	stalled := conditions.Get(got, conditions.StalledCondition)
	if got.Status.Phase != updatev1.UpdateJobFailed || stalled == nil || stalled.Reason != updatev1.ContainerModeUnavailableReason ||
		!strings.Contains(stalled.Message, "--transfer-address") || got.Status.Attempts != 0 {
		t.Fatalf("phase %s, attempts %d, Stalled %+v", got.Status.Phase, got.Status.Attempts, stalled)
	}
	pods := &corev1.PodList{}
	if err := env.Client.List(context.Background(), pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods %d, %v", len(pods.Items), err)
	}
}
