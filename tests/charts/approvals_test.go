package charts

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// The reflector chart's approvals: with its admission policy the approver
// an approval names is the user the API server authenticated for it, and
// its approver ClusterRole is all that tk-image approve needs. Run against
// the real kube-apiserver, whose ValidatingAdmissionPolicy admission
// enforces the policy; tk-image is the real binary, as each user.
func TestApprovalsNameTheUserWhoApproved(t *testing.T) {
	startCluster(t)
	const ns, release, relNS = "approvals", "approvals", "approvals-system"
	args := []string{"install", release, chartDir(testenv.ReflectorChart), "-n", relNS, "--create-namespace", "--set", "crds.keep=false"}
	if _, err := kubectl(nil, "get", "crd", "imagepolicies.image.toolkit.dev"); err == nil {
		args = append(args, "--set", "crds.install=false") // another test's release has them
	}
	mustHelm(t, args...)
	t.Cleanup(func() {
		if _, err := helm("uninstall", release, "-n", relNS, "--wait"); err != nil {
			t.Log(err)
		}
	})
	mustKubectl(t, nil, "wait", "--for", "condition=Established", "--timeout", "30s", "crd/imagepolicies.image.toolkit.dev")
	namespaces(t, ns)
	mustKubectl(t, strings.NewReader(`apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: app-prod, namespace: `+ns+`}
spec:
  imageRepositoryRef: {name: app}
  policy:
    promotion:
      from: {automation: dev}
      healthOf: [{apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev}]
      approval: Required
`), "apply", "-f", "-")
	const waiting, older = "sha256:" + "4f9e000000000000000000000000000000000000000000000000000000000000", "sha256:" + "1111000000000000000000000000000000000000000000000000000000000000"
	mustKubectl(t, nil, "patch", "imagepolicy", "app-prod", "-n", ns, "--subresource=status", "--type=merge", "-p",
		`{"status":{"pendingRef":{"tag":"1.4.0","image":{"name":"registry.example/app","tag":"1.4.0","digest":"`+waiting+`"}}}}`)

	alice := userKC(t, "alice@example.com")
	mallory := userKC(t, "mallory@example.com")
	mustKubectl(t, nil, "create", "rolebinding", "approvers", "-n", ns, "--clusterrole", release+"-image-reflector-controller-approver", "--user", "alice@example.com")
	asAlice := func(args ...string) (string, error) {
		return cmdResult(filepath.Join(cluster.BinaryAssetsDirectory, "kubectl"), nil, nil, append([]string{"--kubeconfig", alice}, args...)...)
	}
	tkImage := func(kc string, args ...string) (string, error) {
		return cmdResult(filepath.Join(binDir(), "tk-image"), nil, nil, append([]string{"--kubeconfig", kc, "-n", ns}, args...)...)
	}

	// An approval naming someone else is refused, with the way to do it
	// right; the policy's bindings take effect within seconds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := asAlice("annotate", "imagepolicy", "app-prod", "-n", ns, "--overwrite", "image.toolkit.dev/approve="+waiting, "image.toolkit.dev/approved-by=bob@example.com")
		if err != nil {
			if !strings.Contains(err.Error(), "set image.toolkit.dev/approved-by to alice@example.com") {
				t.Fatalf("alice's approval naming bob was refused with: %v", err)
			}
			break
		}
		// Admitted before the policy was in force: take it back.
		mustKubectl(t, nil, "annotate", "imagepolicy", "app-prod", "-n", ns, "image.toolkit.dev/approve-", "image.toolkit.dev/approved-by-")
		if time.Now().After(deadline) {
			t.Fatal("an approval naming another user was still admitted after 30 s")
		}
		time.Sleep(time.Second)
	}

	// tk-image refuses what it cannot approve, in the user's words.
	for name, tc := range map[string]struct {
		kc   string
		args []string
		want string
	}{
		"another digest": {alice, []string{"approve", "policy", "app-prod", "--digest", older, "--wait=false"}, "--digest " + older + " is not the image waiting for approval"},
		"no RBAC":        {mallory, []string{"approve", "policy", "app-prod", "--wait=false"}, "needs get and patch on imagepolicies in namespace approvals"},
		"no such kind":   {alice, []string{"approve", "automation", "app-prod", "--wait=false"}, "policy"},
	} {
		if out, err := tkImage(tc.kc, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: tk-image %s = %q, %v; want an error saying %q", name, strings.Join(tc.args, " "), out, err, tc.want)
		}
	}
	if got := mustKubectl(t, nil, "get", "imagepolicy", "app-prod", "-n", ns, "-o", `jsonpath={.metadata.annotations}`); strings.Contains(got, "approve") {
		t.Fatalf("a refused approval left annotations: %s", got)
	}

	out, err := tkImage(alice, "approve", "policy", "app-prod", "--wait=false")
	if err != nil || !strings.Contains(out, "approved by alice@example.com") {
		t.Fatalf("tk-image approve as alice: %q, %v", out, err)
	}
	got := mustKubectl(t, nil, "get", "imagepolicy", "app-prod", "-n", ns, "-o",
		`jsonpath={.metadata.annotations.image\.toolkit\.dev/approve} {.metadata.annotations.image\.toolkit\.dev/approved-by}`)
	if got != waiting+" alice@example.com" {
		t.Errorf("annotations after tk-image approve: %q, want %q", got, waiting+" alice@example.com")
	}
	// Writes that leave the approval as it was pass: a label, by anyone
	// who may patch.
	if _, err := asAlice("label", "imagepolicy", "app-prod", "-n", ns, "team=payments"); err != nil {
		t.Errorf("a label change with the approval untouched was refused: %v", err)
	}
}

// userKC is a kubeconfig of a client-certificate user with no groups
// beyond system:authenticated.
func userKC(t *testing.T, name string) string {
	t.Helper()
	kc, err := userKubeconfig(envtest.User{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return kc
}
