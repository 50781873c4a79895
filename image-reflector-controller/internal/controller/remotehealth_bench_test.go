package controller

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// BenchmarkRemoteClusterMemory measures what watching one remote cluster
// costs the reflector's heap: 100 promotion policies each name one of 100
// Kustomizations in dev's cluster (a second control plane) through one
// kubeconfig Secret. The heap in use after a GC is read while the Secret
// is missing (every policy SecretNotFound: no cluster watched) and again
// once every policy has read its Kustomization healthy through the
// watch; the difference is the cluster's clients, discovery cache and
// watch store (the objects trimmed to identity and status), and the
// larger statuses of the 100 policies, so an upper bound. Default flags.
//
//	go test -run '^$' -bench BenchmarkRemoteClusterMemory ./image-reflector-controller/internal/controller/
func BenchmarkRemoteClusterMemory(b *testing.B) {
	const objects = 100
	for range b.N {
		dev := startDevCluster(b)
		ns := namespace(b)
		create(b, appRepository(ns))
		ctx := context.Background()
		for i := range objects {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("kustomize.toolkit.fluxcd.io/v1")
			u.SetKind("Kustomization")
			u.SetNamespace("flux-system")
			u.SetName(fmt.Sprint("apps-", i))
			if i == 0 {
				dev.kustomization(b, "flux-system", "apps-0")(true, "main@sha1:"+devCommit)
				continue
			}
			_ = unstructured.SetNestedField(u.Object, "./apps/dev", "spec", "path")
			if err := dev.Client.Create(ctx, u); err != nil {
				b.Fatal(err)
			}
			setKustomizationStatus(u, true, "main@sha1:"+devCommit)
			if err := dev.Client.Status().Update(ctx, u); err != nil {
				b.Fatal(err)
			}
		}
		setUpstream := upstreamAutomation(b, ns, "dev")
		setUpstream("app-dev", meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0"}, "main@sha1:"+devCommit)
		var policies []*imagev1.ImagePolicy
		for i := range objects {
			ref := remoteKustomization("dev-kubeconfig", "")
			ref.Name = fmt.Sprint("apps-", i)
			p := promotionPolicy(ns, fmt.Sprint("prod-", i), "app", imagev1.PromotionSource{Automation: "dev"}, 0, ref)
			create(b, p)
			policies = append(policies, p)
		}
		for _, p := range policies {
			waitReason(b, p, conditions.SecretNotFoundReason)
		}
		before := heapInUse()
		clusters := mainPolicies.watches.RemoteClusters()
		b.ResetTimer()
		create(b, kubeconfigSecret(ns, "dev-kubeconfig", "value", dev.kubeconfig(b, "prod-promoter", "system:masters")))
		// A SecretNotFound wait is looked at again after a minute.
		for _, p := range policies {
			requestReconcile(b, p, "secret-created")
		}
		for _, p := range policies {
			waitReason(b, p, conditions.SucceededReason)
		}
		b.StopTimer()
		if got := mainPolicies.watches.RemoteClusters(); got != clusters+1 {
			b.Fatalf("%d remote clusters watched, want %d", got, clusters+1)
		}
		after := heapInUse()
		b.ReportMetric(float64(after-before)/(1<<20), "heap-MiB/cluster")
		b.ReportMetric(float64(objects), "objects")
	}
}

// heapInUse is the heap in use after a GC, settled.
func heapInUse() uint64 {
	var m runtime.MemStats
	for range 2 {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
	}
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
