package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// remoteChain is the promotion chain with dev in a cluster of its own: a
// second control plane holding dev's Kustomization flux-system/apps-dev,
// read through a kubeconfig Secret ("watched") or pushed to a HealthWebhook
// ("pushed"), as docs/policies.md sets them up.
type remoteChain struct {
	env  *chain.Env
	dev  *testenv.Env
	hook string // the HealthWebhook's URL (pushed)
	stop func()
}

const remoteHMACKey = "bench-hmac-key"

// startRemoteChain starts the chain with prod's healthOf naming dev's
// Kustomization the way mode says, soak 0, and extra policies like
// podinfo-prod (podinfo-prod-N) naming it the same way.
func startRemoteChain(ctx context.Context, b *testing.B, mode string, extra int) *remoteChain {
	env, root, stop := startChain(ctx, b)
	dev, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	rc := &remoteChain{env: env, dev: dev, stop: func() { stop(); _ = dev.Stop() }}
	if _, err := envtest.InstallCRDs(dev.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{
		testenv.OpenCRD("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations"),
	}}); err != nil {
		b.Fatal(err)
	}
	if err := dev.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}); err != nil {
		b.Fatal(err)
	}
	if err := dev.Client.Create(ctx, chain.Kustomization("flux-system", "apps-dev")); err != nil {
		b.Fatal(err)
	}
	if _, err := env.Commit(map[string]string{chain.LivePath: chain.LiveManifest(env.RegistryHost)}, "prod runs 6.3.0"); err != nil {
		b.Fatal(err)
	}
	samples, err := env.Samples(root)
	if err != nil {
		b.Fatal(err)
	}
	ref := "{apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, namespace: flux-system, name: apps-dev, kubeConfig: {secretRef: {name: dev-kubeconfig}}}"
	var access string
	switch mode {
	case "watched":
		u, err := dev.AddUser(envtest.User{Name: "prod-promoter", Groups: []string{"system:masters"}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		kc, err := u.KubeConfig()
		if err != nil {
			b.Fatal(err)
		}
		if err := env.Cluster.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dev-kubeconfig"},
			Data: map[string][]byte{"value": kc}}); err != nil {
			b.Fatal(err)
		}
	case "pushed":
		ref = strings.TrimSuffix(strings.TrimPrefix(chain.PushedHealthRef, "      - "), "\n")
		access = chain.HealthWebhookObjects(remoteHMACKey)
	}
	objects := strings.Replace(fmt.Sprintf(chain.PromotionObjects, "0s", env.RepoURL), chain.LocalHealthRef, "      - "+ref+"\n", 1)
	for i := range extra {
		objects += fmt.Sprintf(`---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: podinfo-prod-%d}
spec:
  imageRepositoryRef: {name: podinfo}
  policy:
    promotion:
      from: {automation: fleet}
      healthOf:
      - %s
      soak: 0s
`, i, ref)
	}
	if err := env.Apply(ctx, samples+"\n---\n"+objects+access); err != nil {
		b.Fatal(err)
	}
	if mode == "pushed" {
		wh := &imagev1.HealthWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dev"}}
		testenv.Eventually(b, time.Minute, func() (bool, error) {
			return env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(wh), wh) == nil && wh.Status.WebhookPath != "", nil
		})
		rc.hook = "http://" + env.Procs["image-reflector-controller"].WebhookAddr + wh.Status.WebhookPath
	}
	return rc
}

// healthy says dev runs revision healthy: its Kustomization's status
// written in dev (watched), or kustomize-controller's success event as
// notification-controller's generic-hmac Provider posts it (pushed).
func (rc *remoteChain) healthy(ctx context.Context, b *testing.B, revision string) {
	if rc.hook == "" {
		if err := chain.SetKustomization(ctx, rc.dev.Client, "flux-system", "apps-dev", true, revision); err != nil {
			b.Fatal(err)
		}
		return
	}
	body := fmt.Appendf(nil, `{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps-dev","apiVersion":"kustomize.toolkit.fluxcd.io/v1"},`+
		`"severity":"info","timestamp":%q,"message":"Reconciliation finished in 1s, next run in 10m0s","reason":"ReconciliationSucceeded",`+
		`"metadata":{"revision":%q,"commit_status":"update"},"reportingController":"kustomize-controller"}`, time.Now().UTC().Format(time.RFC3339), revision)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rc.hook, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Signature", receiver.Sign([]byte(remoteHMACKey), body))
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("the HealthWebhook answered %s", resp.Status)
	}
}

// BenchmarkRemotePromotionLatency measures promotion from another
// cluster: from dev's health seen (its Kustomization's status written in
// dev's own API server, watched through a kubeconfig Secret; or the
// success event pushed to a HealthWebhook, answered once recorded) to
// prod's commit on the git server, over 10 promotions, soak 0, default
// flags. Reports p50, p95 and max.
//
//	go test -run '^$' -bench BenchmarkRemotePromotionLatency ./tests/bench/
func BenchmarkRemotePromotionLatency(b *testing.B) {
	for _, mode := range []string{"watched", "pushed"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				rc := startRemoteChain(ctx, b, mode, 0)
				env, c := rc.env, rc.env.Cluster.Client
				fleet := &imagev1.ImageUpdateAutomation{}
				fleet.Name, fleet.Namespace = "fleet", "default"
				repo := &imagev1.ImageRepository{}
				repo.Name, repo.Namespace = "podinfo", "default"
				var lat []time.Duration
				for i := range 10 {
					tag := fmt.Sprintf("6.4.%d", i)
					devCommit := releaseToDev(ctx, b, env, c, fleet, repo, tag)
					start := time.Now()
					rc.healthy(ctx, b, fleet.Status.AppliedRevision)
					waitBranch(ctx, b, env, devCommit, chain.LivePath, chain.Image+":"+tag+" ")
					lat = append(lat, time.Since(start))
				}
				reportLatencies(b, lat, "")
				rc.stop()
				cancel()
			}
		})
	}
}

// BenchmarkRemoteHealthIdleRequests counts what 100 promotion policies
// naming one object in another cluster (one kubeconfig Secret) cost that
// cluster's API server while nothing happens: every policy promoted, then
// a minute of idleness, default flags. Reports dev's API server's own
// count of requests on Kustomizations that are not watches, from every
// client, per minute: the remote cluster's polling, which should be none.
//
//	go test -run '^$' -bench BenchmarkRemoteHealthIdleRequests ./tests/bench/
func BenchmarkRemoteHealthIdleRequests(b *testing.B) {
	const policies, window = 100, time.Minute
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		rc := startRemoteChain(ctx, b, "watched", policies-1)
		c := rc.env.Cluster.Client
		fleet := &imagev1.ImageUpdateAutomation{}
		fleet.Name, fleet.Namespace = "fleet", "default"
		testenv.Eventually(b, time.Minute, func() (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(fleet), fleet)
			return fleet.Status.AppliedRevision != "", err
		})
		rc.healthy(ctx, b, fleet.Status.AppliedRevision)
		waitPromoted(ctx, b, c, policies, 5*time.Minute)
		time.Sleep(5 * time.Second)
		b.ResetTimer()
		before, err := testenv.APIRequests(ctx, rc.dev.Config, "kustomizations")
		if err != nil {
			b.Fatal(err)
		}
		// The count includes the setup's writes and the watch's first list.
		if before == 0 {
			b.Fatal("dev's API server counted no request on Kustomizations while 100 policies promoted")
		}
		time.Sleep(window)
		after, err := testenv.APIRequests(ctx, rc.dev.Config, "kustomizations")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric((after-before)*float64(time.Minute)/float64(window), "remote-requests/cluster/min")
		b.ReportMetric(float64(policies), "policies")
		rc.stop()
		cancel()
	}
}
