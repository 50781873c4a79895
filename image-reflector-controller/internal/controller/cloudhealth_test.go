package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// devAudience is the audience dev's API server accepts the management
// cluster's ServiceAccount tokens for.
const devAudience = "dev-cluster"

// startTrustingDevCluster starts dev's control plane configured as Flux's
// generic provider expects a remote cluster to be: it trusts the
// management cluster's (the suite's) ServiceAccount issuer through a JWT
// authenticator (AuthenticationConfiguration), so that a ServiceAccount
// token of the management cluster, for devAudience, is a user of dev
// named "mgmt:" + its subject. Dev's API server reads the issuer's OIDC
// discovery and keys from the management API server, which serves them to
// anonymous callers once system:service-account-issuer-discovery is bound
// to system:unauthenticated (Kubernetes' documented set-up).
func startTrustingDevCluster(t *testing.T) *devCluster {
	t.Helper()
	ctx := context.Background()
	discovery := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "issuer-discovery-for-dev"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:unauthenticated"}}}
	if err := env.Client.Create(ctx, discovery); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	dir := t.TempDir()
	issuer := strings.TrimSuffix(env.Config.Host, "/") + "/"
	config := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %q
    audiences: [%q]
    certificateAuthority: |
%s
  claimMappings:
    username: {claim: sub, prefix: "mgmt:"}
`, issuer, devAudience, indent(string(env.Config.CAData), "      "))
	path := filepath.Join(dir, "authentication.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := testenv.New()
	if err != nil {
		t.Fatal(err)
	}
	e.ControlPlane.GetAPIServer().Configure().Set("authentication-config", path)
	cfg, err := e.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{
		testenv.OpenCRD("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations"),
	}}); err != nil {
		t.Fatal(err)
	}
	return &devCluster{&testenv.Env{Environment: e, Config: cfg, Client: c}}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n")
}

func cloudKustomization(configMap string) imagev1.HealthObjectReference {
	return imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization",
		Namespace: "flux-system", Name: "apps",
		KubeConfig: &meta.KubeConfigReference{ConfigMapRef: &meta.LocalObjectReference{Name: configMap}}}
}

// kubeConfig.configMapRef reaches dev with no Secret: Flux's generic
// provider, a ServiceAccount of the policy's namespace whose token dev's
// API server trusts by the management cluster's OIDC issuer. Before dev
// grants that user anything the wait says AccessDenied in dev's words;
// once granted, dev's Kustomization running the upstream commit healthy
// promotes the upstream's image. A ConfigMap that cannot reach a cluster
// (no provider, generic without an address), a missing ConfigMap and a
// controller-level identity that is not there are reasons, not promotions.
func TestPromotionReachesAnotherClusterWithAWorkloadIdentity(t *testing.T) {
	dev := startTrustingDevCluster(t)
	ns := namespace(t)
	create(t, appRepository(ns))
	setDev := dev.kustomization(t, "flux-system", "apps")
	setDev(true, "main@sha1:"+devCommit)
	setUpstream := upstreamAutomation(t, ns, "dev")
	v2 := meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0"}
	setUpstream("app-dev", v2, "main@sha1:"+devCommit)
	create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "promoter"}})
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev-cluster"}, Data: map[string]string{
		"provider": "generic", "address": dev.Config.Host, "ca.crt": string(dev.Config.CAData),
		"audiences": devAudience, "serviceAccountName": "promoter"}})

	prod := promotionPolicy(ns, "prod", "app", imagev1.PromotionSource{Automation: "dev"}, 0, cloudKustomization("dev-cluster"))
	create(t, prod)
	t.Cleanup(func() {
		if t.Failed() {
			_ = env.Client.Get(context.Background(), client.ObjectKeyFromObject(prod), prod)
			t.Logf("status: %+v", prod.Status)
		}
	})
	user := "mgmt:system:serviceaccount:" + ns + ":promoter"
	c := waitReason(t, prod, conditions.AccessDeniedReason)
	if !strings.Contains(c.Message, user) || prod.Status.LatestRef != nil {
		t.Fatalf("before dev grants %s anything: %s (latestRef %v)", user, c.Message, prod.Status.LatestRef)
	}

	ctx := context.Background()
	if err := dev.Client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "health-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kustomize.toolkit.fluxcd.io"}, Resources: []string{"kustomizations"}, Verbs: []string{"get", "list", "watch"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prod-promoter"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "health-reader"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}); err != nil {
		t.Fatal(err)
	}
	// The AccessDenied wait is looked at again after a minute; a
	// reconcile request asks now, as a user fixing access would.
	requestReconcile(t, prod, "dev-granted")
	waitReason(t, prod, conditions.SucceededReason)
	if got := prod.Status.LatestRef; got == nil || *got != v2 {
		t.Fatalf("latestRef %v, want the upstream's %v", got, v2)
	}
	if st := prod.Status.Promotion; st == nil || len(st.Health) != 1 || st.Health[0].Object != "Kustomization/flux-system/apps@dev-cluster" {
		t.Errorf("status.promotion.health %+v, want dev's Kustomization named with its ConfigMap", st)
	}

	for _, tt := range []struct {
		name   string
		data   map[string]string // nil: no ConfigMap
		reason string
		says   string
	}{
		{name: "no-configmap", reason: conditions.DependencyNotReadyReason, says: "not found"},
		{name: "no-provider", data: map[string]string{"address": dev.Config.Host}, reason: imagev1.InvalidPolicyReason, says: `no "provider" key`},
		{name: "generic-without-address", data: map[string]string{"provider": "generic"}, reason: imagev1.InvalidPolicyReason, says: `needs the "address"`},
		{name: "typo", data: map[string]string{"provider": "generic", "address": dev.Config.Host, "serviceAcountName": "x"}, reason: imagev1.InvalidPolicyReason, says: "unknown keys serviceAcountName"},
		{name: "controller-identity", data: map[string]string{"provider": "generic", "address": dev.Config.Host, "audiences": devAudience},
			reason: conditions.AccessDeniedReason, says: "no credentials for the cluster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.data != nil {
				create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tt.name}, Data: tt.data})
			}
			p := promotionPolicy(ns, "prod-"+tt.name, "app", imagev1.PromotionSource{Automation: "dev"}, 0, cloudKustomization(tt.name))
			create(t, p)
			c := waitReason(t, p, tt.reason)
			if !strings.Contains(c.Message, tt.says) {
				t.Errorf("%s: %s, want it to say %q", tt.reason, c.Message, tt.says)
			}
			if p.Status.LatestRef != nil {
				t.Errorf("promoted %v", p.Status.LatestRef)
			}
		})
	}
}
