package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// BenchmarkPushToCommit measures the whole chain driven by a real sender:
// a tag pushed to Debian's docker-registry (CNCF distribution), its
// notification to the reflector's ImageWebhook, the scan, the policy, the
// automation's UpdateJob and the commit on the git server, over 20 tags,
// with the ImageRepository's interval at one hour, so nothing but the
// webhook makes it scan. Reports p50 and p95 from the end of the push to
// the new commit.
func BenchmarkPushToCommit(b *testing.B) {
	for range b.N {
		pushToCommit(b, 20)
	}
}

func pushToCommit(b *testing.B, runs int) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	// The path is known before the webhook exists (docs/api.md): the
	// registry is configured with it before the chain starts.
	const token, hookName, ns = "bench-token", "registry", "default"
	sum := sha256.Sum256([]byte(token + hookName + ns))
	hookAddr := freePort(b)
	reg := startRegistry(b, "http://"+hookAddr+"/hook/"+hex.EncodeToString(sum[:]), token)

	env, err := chain.StartWith(ctx, b.TempDir(), localenv.BinDir(root), nil, func(string) {},
		chain.Options{RegistryHost: reg, ReflectorArgs: []string{"--webhook-bind-address=" + hookAddr}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			b.Error(err)
		}
	}()
	samples, err := env.Samples(root)
	if err != nil {
		b.Fatal(err)
	}
	samples = strings.Replace(samples, "interval: 5m", "interval: 1h", 1)
	samples += fmt.Sprintf(`---
apiVersion: v1
kind: Secret
metadata: {name: webhook-token, namespace: %[3]s}
stringData: {token: %[1]s}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageWebhook
metadata: {name: %[2]s, namespace: %[3]s}
spec:
  type: distribution
  secretRef: {name: webhook-token}
`, token, hookName, ns)
	if err := env.Apply(ctx, samples); err != nil {
		b.Fatal(err)
	}
	hook := &imagev1.ImageWebhook{}
	hook.Name, hook.Namespace = hookName, ns
	testenv.Eventually(b, time.Minute, func() (bool, error) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(hook), hook)
		return hook.Status.WebhookPath == "/hook/"+hex.EncodeToString(sum[:]), err
	})
	// The fleet's manifest has 6.3.0: once the webhook brings it, the
	// automation settles with nothing to do.
	if err := env.PushTag(ctx, "6.3.0"); err != nil {
		b.Fatal(err)
	}
	iua := &imagev1.ImageUpdateAutomation{}
	iua.Name, iua.Namespace = "fleet", ns
	testenv.Eventually(b, time.Minute, func() (bool, error) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(iua), iua)
		return iua.Status.ObservedSourceRevision != "", err
	})

	var lat []time.Duration
	for i := range runs {
		head := env.Head("main")
		if err := env.PushTag(ctx, fmt.Sprintf("6.4.%d", i)); err != nil {
			b.Fatal(err)
		}
		// From the end of the push: the registry notifies once the
		// manifest is stored, the moment a pusher's `docker push` returns.
		b.StartTimer()
		start := time.Now()
		for env.Head("main") == head {
			if ctx.Err() != nil {
				b.Fatalf("run %d: no commit: %v\nreflector:\n%s", i, ctx.Err(), env.Procs["image-reflector-controller"].Log())
			}
			time.Sleep(5 * time.Millisecond)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	rank := func(p float64) time.Duration { return lat[int(math.Ceil(p*float64(len(lat))))-1] }
	b.ReportMetric(rank(0.50).Seconds(), "p50-s")
	b.ReportMetric(rank(0.95).Seconds(), "p95-s")
	b.ReportMetric(lat[len(lat)-1].Seconds(), "max-s")
}
