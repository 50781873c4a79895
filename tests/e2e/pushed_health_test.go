package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testflux"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// The management cluster cannot reach dev's API server: dev's Flux pushes
// instead. Dev is a control plane of its own running Flux's real
// notification-controller (built from its pinned module), with the
// Secret, Provider (generic-hmac) and Alert of docs/policies.md pointing
// at the reflector's HealthWebhook; the management cluster holds no
// kubeconfig of dev. A failed health check, posted to
// notification-controller as kustomize-controller's event recorder posts
// it (fluxcd/pkg/runtime's recorder: an eventv1.Event to --events-addr),
// keeps prod where it is; then dev's real source-controller and
// kustomize-controller apply dev's commit, kustomize-controller's own
// success event reaches the HealthWebhook through notification-controller,
// and prod's commit of that image lands.
func TestChainPromotionReadsHealthPushedByFluxNotificationController(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "notification-controller")
	testenv.NeedTool(t, filepath.Join(bin, testflux.NotificationController), "flux-tools")
	testenv.NeedTool(t, filepath.Join(root, "bin", "flux-controllers", testflux.KustomizeController), "flux-tools")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, _ := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	// Dev's path as Flux applies it: the chain's stand-in Deployment,
	// given the selector a real one has.
	if _, err := env.Commit(map[string]string{chain.LivePath: chain.LiveManifest(env.RegistryHost),
		"clusters/prod/kustomization.yaml": "resources: [podinfo.yaml]\nlabels:\n- pairs: {app: podinfo}\n  includeSelectors: true\n  includeTemplates: true\n",
	}, "prod runs 6.3.0; dev's path as Flux applies it"); err != nil {
		t.Fatal(err)
	}
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	const hmacKey = "dev-pushes-with-this-key"
	objects := fmt.Sprintf(chain.PromotionObjects, "0s", env.RepoURL)
	pushed := strings.Replace(objects, chain.LocalHealthRef, chain.PushedHealthRef, 1)
	if pushed == objects {
		t.Fatal("chain.PromotionObjects no longer names apps-dev as this test expects")
	}
	hook := chain.HealthWebhookObjects(hmacKey)
	start := env.Head("main")
	if err := env.Apply(ctx, samples+"\n---\n"+pushed+hook); err != nil {
		t.Fatal(err)
	}
	c := env.Cluster.Client
	wh := &imagev1.HealthWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dev"}}
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		return c.Get(ctx, client.ObjectKeyFromObject(wh), wh) == nil && wh.Status.WebhookPath != "", nil
	})
	receiverURL := "http://" + env.Procs["image-reflector-controller"].WebhookAddr + wh.Status.WebhookPath

	// Dev: its own API server and notification-controller, told where to
	// push as a user of Flux tells it.
	dev, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Stop() })
	if err := dev.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}); err != nil {
		t.Fatal(err)
	}
	nc := testflux.StartNotification(t, testflux.Options{Bin: bin, Config: dev.Config})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(nc.Diagnose())
		}
	})
	for _, doc := range []string{
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"image-toolkit-health","namespace":"flux-system"},"stringData":{"address":"` + receiverURL + `","token":"` + hmacKey + `"}}`,
		`{"apiVersion":"notification.toolkit.fluxcd.io/v1beta3","kind":"Provider","metadata":{"name":"image-toolkit","namespace":"flux-system"},"spec":{"type":"generic-hmac","secretRef":{"name":"image-toolkit-health"}}}`,
		`{"apiVersion":"notification.toolkit.fluxcd.io/v1beta3","kind":"Alert","metadata":{"name":"image-toolkit","namespace":"flux-system"},"spec":{"providerRef":{"name":"image-toolkit"},"eventSeverity":"info","eventSources":[{"kind":"Kustomization","name":"apps-dev"}]}}`,
	} {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(doc)); err != nil {
			t.Fatal(err)
		}
		if err := dev.Client.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}

	devCommit := waitHead(t, env, "main", start)
	fleet := &imagev1.ImageUpdateAutomation{}
	fleet.Name, fleet.Namespace = "fleet", "default"
	waitAutomation(t, env, fleet, func() bool { return fleet.Status.AppliedRevision != "" })
	revision := fleet.Status.AppliedRevision
	prod := &imagev1.ImagePolicy{}
	prod.Name, prod.Namespace = "podinfo-prod", "default"

	// kustomize-controller's event for apps-dev, as its recorder posts it.
	emit := func(severity, reason, message string) {
		t.Helper()
		body := fmt.Appendf(nil, `{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps-dev","uid":"5d1e","apiVersion":"kustomize.toolkit.fluxcd.io/v1","resourceVersion":"7"},`+
			`"severity":%q,"timestamp":%q,"message":%q,"reason":%q,"metadata":{"kustomize.toolkit.fluxcd.io/revision":%q,"kustomize.toolkit.fluxcd.io/commit_status":"update"},`+
			`"reportingController":"kustomize-controller","reportingInstance":"kustomize-controller-7f9c"}`,
			severity, time.Now().UTC().Format(time.RFC3339), message, reason, revision)
		// A Flux event carries second precision: two in one second would be
		// one time, and a later event must be later.
		time.Sleep(1100 * time.Millisecond)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(nc.EventsURL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("notification-controller answered %s to the event", resp.Status)
		}
	}
	recorded := func(state string) {
		t.Helper()
		testenv.Eventually(t, time.Minute, func() (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(wh), wh); err != nil {
				return false, nil
			}
			p := wh.Pushed("kustomize.toolkit.fluxcd.io", "Kustomization", "flux-system", "apps-dev")
			return p != nil && p.State == state && p.Revision == revision, nil
		})
	}

	emit("error", "HealthCheckFailed", "health check failed after 30s: Deployment/default/podinfo not ready")
	recorded("Degraded")
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
			return false, nil
		}
		ready := apimeta.FindStatusCondition(prod.Status.Conditions, "Ready")
		return ready != nil && ready.Reason == imagev1.UpstreamNotHealthyReason && strings.Contains(ready.Message, "Kustomization/flux-system/apps-dev@dev is Degraded"), nil
	})
	if prod.Status.LatestRef != nil || env.Head("main") != devCommit {
		t.Fatalf("prod moved while dev's health check failed: latestRef %v, head %s", prod.Status.LatestRef, env.Head("main"))
	}

	// Now dev's real Flux applies dev's commit: source-controller fetches
	// the fleet, kustomize-controller applies clusters/prod (dev's path in
	// this chain) and posts its success event to notification-controller,
	// which forwards it here.
	flux := testflux.Start(t, testflux.Options{Bin: filepath.Join(root, "bin", "flux-controllers"), Config: dev.Config, EventsURL: nc.EventsURL})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(flux.Diagnose())
		}
	})
	gitUser, gitPassword := env.GitCredentials()
	if err := dev.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "flux-system", Name: "fleet-auth"},
		StringData: map[string]string{"username": gitUser, "password": gitPassword}}); err != nil {
		t.Fatal(err)
	}
	repo := testflux.GitRepository("flux-system", "fleet", env.RepoURL, "main", 2*time.Second)
	_ = unstructured.SetNestedField(repo.Object, "fleet-auth", "spec", "secretRef", "name")
	ks := testflux.Kustomization("flux-system", "apps-dev", "fleet", "./clusters/prod", "apps", time.Minute, 30*time.Second)
	// envtest runs no Deployment controller: the health is the apply's.
	_ = unstructured.SetNestedField(ks.Object, false, "spec", "wait")
	for _, u := range []*unstructured.Unstructured{repo, ks} {
		if err := dev.Client.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	recorded("Healthy")
	waitPolicyReason(ctx, t, c, prod, "Succeeded")
	if got, want := prod.Status.LatestRef, fleet.Status.ObservedPolicies["podinfo"]; got == nil || *got != want {
		t.Fatalf("latestRef %v, want dev's %v", got, want)
	}
	prodCommit := waitHead(t, env, "main", devCommit)
	if !strings.Contains(must(env.FleetGit("show", prodCommit)), "clusters/live") {
		t.Errorf("prod commit %s does not write clusters/live:\n%s", prodCommit, must(env.FleetGit("show", prodCommit)))
	}
}
