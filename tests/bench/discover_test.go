package bench

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// BenchmarkDiscoverCycle onboards a repository of 5,000 unmarked
// Deployments naming 500 distinct images (two tags each in the registry)
// with one automation and spec.discover, through the three controller
// binaries, default flags. Reports the time from applying the automation
// to its discovery job's result (discover-s), to every image committed at
// its newer tag (onboard-s), the registry requests of that first cycle,
// and the registry requests of a later scan cycle of every repository it
// made (requests-per-cycle: one scan per image however many files name
// it).
//
//	go test -run '^$' -bench BenchmarkDiscoverCycle -benchtime 1x ./tests/bench/
func BenchmarkDiscoverCycle(b *testing.B) {
	const files, images = 5000, 500
	for range b.N {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		root, err := testenv.RepoRoot()
		if err != nil {
			b.Fatal(err)
		}
		env, err := chain.Start(ctx, b.TempDir(), binDir(b, root), nil, func(string) {})
		if err != nil {
			b.Fatal(err)
		}
		reg := env.RegistryHost
		img, err := random.Image(256, 1)
		if err != nil {
			b.Fatal(err)
		}
		for i := range images {
			for _, tag := range []string{"1.0.0", "1.1.0"} {
				ref, err := name.NewTag(fmt.Sprintf("%s/acme/app-%03d:%s", reg, i, tag), name.Insecure)
				if err != nil {
					b.Fatal(err)
				}
				if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
					b.Fatal(err)
				}
			}
		}
		tree := map[string]string{}
		for i := range files {
			tree[fmt.Sprintf("apps/team-%02d/app-%05d.yaml", i%100, i)] = fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%05d
spec:
  template:
    spec:
      containers:
      - name: app
        image: %s/acme/app-%03d:1.0.0
`, i, reg, i%images)
		}
		if _, err := env.Commit(tree, "5,000 apps without markers"); err != nil {
			b.Fatal(err)
		}
		samples, err := env.Samples(root)
		if err != nil {
			b.Fatal(err)
		}
		secret := samples[strings.LastIndex(samples, "---\napiVersion: v1\nkind: Secret"):]
		reflector := env.Procs["image-reflector-controller"]
		before := registryRequests(b, ctx, reflector)
		start := time.Now()
		if err := env.Apply(ctx, secret+fmt.Sprintf(`---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata: {name: onboard, namespace: default}
spec:
  interval: 1h
  git:
    repository: {url: %[2]s, secretRef: {name: git-credentials}}
    checkout: {ref: {branch: main}}
    commit: {author: {name: imagebot, email: imagebot@example.com}}
    push: {branch: main}
  update: {path: ./apps}
  policySelector: {matchLabels: {none: none}}
  discover:
    interval: 1h
    registries: [{host: "%[1]s", insecure: true}]
`, reg, env.RepoURL)); err != nil {
			b.Fatal(err)
		}
		iua := &imagev1.ImageUpdateAutomation{}
		iua.Name, iua.Namespace = "onboard", "default"
		c := env.Cluster.Client
		testenv.Eventually(b, 5*time.Minute, func() (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(iua), iua)
			return err == nil && len(iua.Status.Discovered) == images, err
		})
		discovered := time.Since(start)
		// Onboarded: every file at 1.1.0.
		testenv.Eventually(b, 10*time.Minute, func() (bool, error) {
			out, err := env.FleetGit("grep", "-l", ":1.1.0", "main", "--", "apps")
			return err == nil && strings.Count(out, "\n") == files, nil
		})
		onboarded := time.Since(start)
		first := registryRequests(b, ctx, reflector) - before

		// A scan cycle of every repository it made.
		var repos imagev1.ImageRepositoryList
		if err := c.List(ctx, &repos, client.InNamespace("default"), client.MatchingLabels{imagev1.DiscoveredByLabel: "onboard"}); err != nil {
			b.Fatal(err)
		}
		if len(repos.Items) != images {
			b.Fatalf("%d ImageRepositories, want %d", len(repos.Items), images)
		}
		before = registryRequests(b, ctx, reflector)
		tokens := map[string]string{}
		for i := range repos.Items {
			tok, err := env.RequestReconcileToken(ctx, &repos.Items[i])
			if err != nil {
				b.Fatal(err)
			}
			tokens[repos.Items[i].Name] = tok
		}
		testenv.Eventually(b, 5*time.Minute, func() (bool, error) {
			var list imagev1.ImageRepositoryList
			if err := c.List(ctx, &list, client.InNamespace("default"), client.MatchingLabels{imagev1.DiscoveredByLabel: "onboard"}); err != nil {
				return false, err
			}
			for _, r := range list.Items {
				if r.Status.LastHandledReconcileAt != tokens[r.Name] {
					return false, nil
				}
			}
			return true, nil
		})
		cycle := registryRequests(b, ctx, reflector) - before
		b.ReportMetric(discovered.Seconds(), "discover-s")
		b.ReportMetric(onboarded.Seconds(), "onboard-s")
		b.ReportMetric(first, "requests-first-cycle")
		b.ReportMetric(cycle, "requests-per-cycle")
		if err := env.Stop(); err != nil {
			b.Error(err)
		}
		cancel()
	}
}

// registryRequests sums imagetoolkit_reflector_registry_requests_total.
func registryRequests(b *testing.B, ctx context.Context, p *localenv.Process) float64 {
	b.Helper()
	text, err := p.Metrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "imagetoolkit_reflector_registry_requests_total{") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				b.Fatal(err)
			}
			total += v
		}
	}
	return total
}
