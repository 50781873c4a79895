// Package node runs the image-toolkit charts on a real single-node cluster
// (tests/internal/cluster: the pinned kube-apiserver, controller manager,
// scheduler, kubelet and kube-proxy, Debian's containerd and runc): what a
// cluster with no node cannot show, that the pods start, pass their
// probes, run as the chart's user under the restricted profile, and do the
// work from inside the cluster; what a real Flux says of a rollout that
// really ran (flux_test.go); and promotion from dev to prod on that
// evidence, with our controllers on the host (promotion_test.go).
//
// One cluster serves the package (TestMain): it starts in about 10 s once
// the tools are built, and only one cluster runs per machine anyway (see
// the cluster package). It needs root, `make node-tools flux-tools testenv
// images` and Debian's containerd, runc, containernetworking-plugins, iptables,
// conntrack and busybox-static (`make deps`); without them the tests fail
// and say what is missing.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/tests/internal/cluster"
)

var (
	cl *cluster.Cluster
	// images maps an image name (image-reflector-controller, ...) to the
	// reference its `make images` tarball carries.
	images = map[string]string{}
	// startTime is how long the cluster took to start.
	startTime time.Duration
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	verbose := os.Getenv("IMAGE_TOOLKIT_NODE_VERBOSE") != ""
	// IMAGE_TOOLKIT_NODE_DIR keeps the cluster's files and logs there.
	o := cluster.Options{Root: root, Dir: os.Getenv("IMAGE_TOOLKIT_NODE_DIR")}
	if verbose {
		o.Log = os.Stderr
	}
	if cl, err = cluster.Start(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "tests/node:", err)
		return 1
	}
	startTime = time.Since(start)
	defer func() {
		if err := cl.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "tests/node: stopping the cluster:", err)
		}
	}()
	tarballs, err := cluster.ProjectImages(root)
	if err == nil {
		err = cl.ImportImages(ctx, tarballs...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests/node:", err)
		return 1
	}
	for _, t := range tarballs {
		refs, err := cluster.TarballRefs(t)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tests/node:", err)
			return 1
		}
		images[strings.TrimSuffix(filepath.Base(t), ".tar")] = refs[0]
	}
	fmt.Printf("FIGURES cluster: node Ready and images imported %s after Start\n", time.Since(start).Round(100*time.Millisecond))
	return m.Run()
}

func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.work above the working directory")
		}
		d = filepath.Dir(d)
	}
}

// restrictedNamespace creates a namespace enforcing the restricted Pod
// Security Standard.
func restrictedNamespace(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cl.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Pods need the namespace's default ServiceAccount, which the
	// controller manager creates.
	waitFor(t, 30*time.Second, "the default ServiceAccount of "+name, func() (bool, string) {
		_, err := cl.Client().CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// waitFor polls cond every 250 ms until it holds; on timeout the test
// fails with cond's last word and the node's logs.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s; last: %s\n%s", what, timeout, last, cl.Diagnose())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func restrictedContainer() *corev1.SecurityContext {
	no, yes := false, true
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		RunAsNonRoot:             &yes,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// A pod from a locally built image runs on the node in a restricted
// namespace and reaches the API server the way in-cluster clients do:
// through the kubernetes Service, with its ServiceAccount token, verifying
// the serving certificate against the mounted ca.crt only; the API server
// reads its log through the kubelet.
func TestPodReachesAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node, err := cl.Client().CoreV1().Nodes().Get(ctx, cl.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}
	if !ready {
		t.Fatalf("node %s is not Ready: %+v", node.Name, node.Status.Conditions)
	}

	const ref = "image-toolkit.test/apiprobe:1"
	tarball := filepath.Join(t.TempDir(), "apiprobe.tar")
	if err := cluster.BuildGoImage(ctx, cl.Root(), "toolkit.dev/image-toolkit/tests/node/apiprobe", ref, tarball, cluster.ImageUID); err != nil {
		t.Fatal(err)
	}
	if err := cl.ImportImages(ctx, tarball); err != nil {
		t.Fatal(err)
	}
	const ns = "probe"
	restrictedNamespace(t, ns)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "apiprobe", Namespace: ns}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "probe", Image: ref, ImagePullPolicy: corev1.PullNever,
			SecurityContext: restrictedContainer()}},
	}}
	if _, err := cl.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	waitFor(t, 90*time.Second, "the probe pod to finish", func() (bool, string) {
		p, err := cl.Client().CoreV1().Pods(ns).Get(ctx, "apiprobe", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, fmt.Sprintf("%s %+v", phase, p.Status.ContainerStatuses)
	})
	logs, err := cl.Client().CoreV1().Pods(ns).GetLogs("apiprobe", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the pod's log through the kubelet: %v", err)
	}
	want := "user system:serviceaccount:" + ns + ":default via " + cluster.APIServiceIP
	if phase != corev1.PodSucceeded || !strings.Contains(string(logs), want) {
		t.Fatalf("the probe %s, log %q; want %q", phase, logs, want)
	}
}
