package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// devCluster is a second control plane, the "dev" cluster whose Flux
// reports the health a promotion in the management cluster (the test's
// main control plane) reads through a kubeconfig Secret.
type devCluster struct {
	*testenv.Env
}

func startDevCluster(t testing.TB) *devCluster {
	t.Helper()
	e, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{
		testenv.OpenCRD("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations"),
	}}); err != nil {
		t.Fatal(err)
	}
	return &devCluster{e}
}

// kubeconfig is a kubeconfig of a user of the dev cluster in groups.
func (d *devCluster) kubeconfig(t testing.TB, user string, groups ...string) []byte {
	t.Helper()
	u, err := d.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kustomization creates a Kustomization in the dev cluster and returns
// what writes its status, as kustomize-controller does there.
func (d *devCluster) kustomization(t testing.TB, ns, name string) func(ready bool, revision string) {
	t.Helper()
	ctx := context.Background()
	if err := d.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("kustomize.toolkit.fluxcd.io/v1")
	u.SetKind("Kustomization")
	u.SetNamespace(ns)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, "./apps/dev", "spec", "path")
	if err := d.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	return func(ready bool, revision string) {
		t.Helper()
		setKustomizationStatus(u, ready, revision)
		if err := d.Client.Status().Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
}

// appRepository is the ImageRepository the promotions of these tests
// promote from; it is never scanned.
func appRepository(ns string) *imagev1.ImageRepository {
	return newRepository(ns, "app", func(r *imagev1.ImageRepository) {
		r.Spec.Image = "registry.example/app"
		r.Spec.Interval = metav1.Duration{Duration: time.Hour}
	})
}

func kubeconfigSecret(ns, name, key string, data []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{key: data}}
}

func remoteKustomization(secret, key string) imagev1.HealthObjectReference {
	return imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization",
		Namespace: "flux-system", Name: "apps",
		KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: secret, Key: key}}}
}

// A promotion reads the health of dev's Kustomization in dev's cluster
// through a kubeconfig Secret, as Flux's Kustomization reaches a remote
// cluster: it waits while dev runs the image degraded, promotes exactly
// the upstream's image once dev's status (a watch of the other cluster,
// no poll) says it runs healthy at the upstream commit, and when no
// policy names the cluster any longer its watches stop.
func TestPromotionReadsHealthFromAnotherCluster(t *testing.T) {
	dev := startDevCluster(t)
	ns := namespace(t)
	create(t, appRepository(ns))
	setDev := dev.kustomization(t, "flux-system", "apps")
	setDev(false, "main@sha1:"+devCommit)
	setUpstream := upstreamAutomation(t, ns, "dev")
	v2 := meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0", Digest: "sha256:" + strings.Repeat("2", 64)}
	setUpstream("app-dev", v2, "main@sha1:"+devCommit)
	// The key Flux writes by default ("value") is read when none is named.
	create(t, kubeconfigSecret(ns, "dev-kubeconfig", "value", dev.kubeconfig(t, "prod-promoter", "system:masters")))
	before := mainPolicies.watches.RemoteClusters()

	prod := promotionPolicy(ns, "prod", "app", imagev1.PromotionSource{Automation: "dev"}, 0, remoteKustomization("dev-kubeconfig", ""))
	create(t, prod)
	t.Cleanup(func() {
		if t.Failed() {
			_ = env.Client.Get(context.Background(), client.ObjectKeyFromObject(prod), prod)
			t.Logf("status: %+v", prod.Status)
		}
	})
	c := waitReason(t, prod, imagev1.UpstreamNotHealthyReason)
	if !strings.Contains(c.Message, "Kustomization/flux-system/apps@dev-kubeconfig is Degraded") {
		t.Errorf("the wait does not name dev's degraded Kustomization: %s", c.Message)
	}
	if prod.Status.LatestRef != nil {
		t.Fatalf("promoted %v while dev runs it degraded", prod.Status.LatestRef)
	}

	setDev(true, "main@sha1:"+devCommit)
	waitReason(t, prod, conditions.SucceededReason)
	if got := prod.Status.LatestRef; got == nil || *got != v2 {
		t.Fatalf("latestRef %v, want the upstream's %v", got, v2)
	}
	if st := prod.Status.Promotion; st == nil || len(st.Health) != 1 || st.Health[0].Object != "Kustomization/flux-system/apps@dev-kubeconfig" || st.Health[0].State != "Healthy" {
		t.Errorf("status.promotion.health %+v, want dev's Kustomization healthy, named with its cluster's Secret", st)
	}
	if n := mainPolicies.watches.RemoteClusters(); n != before+1 {
		t.Errorf("%d remote clusters watched, want %d", n, before+1)
	}

	if err := env.Client.Delete(context.Background(), prod); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		return mainPolicies.watches.RemoteClusters() == before, nil
	})
}

// What goes wrong with another cluster is said, in the policy's status,
// with a reason and the server's or the kubeconfig's words, and nothing
// is promoted: a missing Secret or key, a kubeconfig that runs a program,
// names the controller's files or skips TLS verification, a server that
// does not answer, and a user the server denies.
func TestRemoteHealthFailuresAreReasonsNeverPromotions(t *testing.T) {
	dev := startDevCluster(t)
	ns := namespace(t)
	create(t, appRepository(ns))
	dev.kustomization(t, "flux-system", "apps")(true, "main@sha1:"+devCommit)
	setUpstream := upstreamAutomation(t, ns, "dev")
	setUpstream("app-dev", meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0"}, "main@sha1:"+devCommit)

	good := dev.kubeconfig(t, "admin", "system:masters")
	edit := func(f func(*clientcmdapi.Config)) []byte {
		kc, err := clientcmd.Load(good)
		if err != nil {
			t.Fatal(err)
		}
		f(kc)
		b, err := clientcmd.Write(*kc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	user := func(kc *clientcmdapi.Config) *clientcmdapi.AuthInfo {
		return kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	}
	cluster := func(kc *clientcmdapi.Config) *clientcmdapi.Cluster {
		return kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
	}

	tests := []struct {
		name, key    string
		secret       []byte // nil: no Secret
		reason, says string
	}{
		{name: "no-secret", reason: conditions.SecretNotFoundReason, says: "not found"},
		{name: "wrong-key", key: "config", secret: good, reason: imagev1.InvalidSecretReason, says: "has no key config"},
		{name: "not-a-kubeconfig", secret: []byte("{{{"), reason: imagev1.InvalidSecretReason, says: "does not parse as a kubeconfig"},
		{name: "exec-plugin", secret: edit(func(kc *clientcmdapi.Config) {
			user(kc).Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}
		}), reason: imagev1.InvalidSecretReason, says: "runs an exec plugin"},
		{name: "token-file", secret: edit(func(kc *clientcmdapi.Config) {
			user(kc).TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}), reason: imagev1.InvalidSecretReason, says: "names files (tokenFile)"},
		{name: "insecure-tls", secret: edit(func(kc *clientcmdapi.Config) {
			cluster(kc).InsecureSkipTLSVerify, cluster(kc).CertificateAuthorityData = true, nil
		}), reason: imagev1.InvalidSecretReason, says: "skips TLS verification"},
		{name: "unreachable", secret: edit(func(kc *clientcmdapi.Config) {
			cluster(kc).Server = "https://127.0.0.1:1"
		}), reason: imagev1.UpstreamNotHealthyReason, says: "is Unknown (RemoteClusterUnreachable: "},
		{name: "no-access", secret: dev.kubeconfig(t, "stranger"), reason: conditions.AccessDeniedReason, says: `"stranger" cannot list resource "kustomizations"`},
		// An expired (or revoked) token: the server answers 401 as for
		// any token it no longer accepts.
		{name: "expired-token", secret: edit(func(kc *clientcmdapi.Config) {
			u := user(kc)
			u.ClientCertificateData, u.ClientKeyData, u.Token = nil, nil, "eyJhbGciOiJSUzI1NiJ9.expired.token"
		}), reason: conditions.AccessDeniedReason, says: "the server has asked for the client to provide credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret := "kc-" + tt.name
			if tt.secret != nil {
				// Under Flux's default key; the policy may ask for another.
				create(t, kubeconfigSecret(ns, secret, "value", tt.secret))
			}
			p := promotionPolicy(ns, "p-"+tt.name, "app", imagev1.PromotionSource{Automation: "dev"}, 0, remoteKustomization(secret, tt.key))
			create(t, p)
			c := waitReason(t, p, tt.reason)
			if !strings.Contains(c.Message, tt.says) {
				t.Errorf("message %q does not say %q", c.Message, tt.says)
			}
			if p.Status.LatestRef != nil {
				t.Errorf("promoted %v", p.Status.LatestRef)
			}
			if strings.Contains(c.Message, "BEGIN") || strings.Contains(c.Message, "LS0t") {
				t.Errorf("the message shows the kubeconfig: %s", c.Message)
			}
		})
	}
}
