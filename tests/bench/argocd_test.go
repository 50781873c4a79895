package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/argochain"
)

// BenchmarkArgoCDApplications measures one automation over 1,000 Argo CD
// Applications (spec.applicationSelector), one image each, on one
// repository: from the automation's creation to the commit holding every
// Application's override file (the scan, the policy, the decision and one
// job writing 1,000 files), then from a tag push (with a reconcile request,
// as a registry webhook sends) to the commit moving all 1,000. Default
// flags. The Applications' status is written as Argo CD writes it (no Argo
// CD runs: it would measure Argo CD).
func BenchmarkArgoCDApplications(b *testing.B) {
	const apps = 1000
	for range b.N {
		b.StopTimer()
		paths := make([]string, apps)
		for i := range paths {
			paths[i] = fmt.Sprintf("apps/app-%04d", i)
		}
		c := argochain.Start(b, argochain.Options{Apps: paths})
		for i, p := range paths {
			c.Application(b, fmt.Sprintf("app-%04d", i), p, map[string]string{"team": "shop"})
		}
		head := c.Head(b)
		b.StartTimer()
		start := time.Now()
		c.Follow(b, nil, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}})
		first := waitAll(b, c, head, paths, argochain.FirstTag)
		written := time.Since(start)

		start = time.Now()
		c.Push(b, "6.5.1")
		c.Scan(b)
		waitAll(b, c, first, paths, "6.5.1")
		tagged := time.Since(start)
		b.StopTimer()
		b.ReportMetric(written.Seconds(), "s-to-all-overrides")
		b.ReportMetric(tagged.Seconds(), "s-tag-to-commit")
	}
}

// waitAll waits for a commit after from that writes every path's override
// file at tag, checks the first and the last, and returns it.
func waitAll(b *testing.B, c *argochain.Chain, from string, paths []string, tag string) string {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for c.Head(b) == from {
		if time.Now().After(deadline) {
			b.Fatalf("no commit after %s", from)
		}
		time.Sleep(20 * time.Millisecond)
	}
	head := c.Head(b)
	files := testgit.Git(b, c.Git.BarePath("apps"), "diff", "--name-only", from, head)
	if n := strings.Count(files, ".argocd-source-"); n != len(paths) {
		b.Fatalf("commit %s changed %d override files, want %d", head, n, len(paths))
	}
	for _, i := range []int{0, len(paths) - 1} {
		if err := c.OverrideAt(b, head, fmt.Sprintf("app-%04d", i), paths[i], tag); err != nil {
			b.Fatal(err)
		}
	}
	return head
}

// BenchmarkArgoCDTagToOverrideCommit is what an Argo CD user waits for
// before Argo CD's own sync: from a tag pushed to the registry (with a
// reconcile request on the ImageRepository, as a registry webhook sends) to
// the commit of the Application's override file, over 20 tags, all
// processes on loopback, default flags. Reports p50 and p95.
func BenchmarkArgoCDTagToOverrideCommit(b *testing.B) {
	for range b.N {
		b.StopTimer()
		c := argochain.Start(b, argochain.Options{Apps: []string{"podinfo"}})
		c.Application(b, "podinfo", "podinfo", nil)
		c.Follow(b, &imagev1.CrossNamespaceSourceReference{Kind: "Application", Name: "podinfo"}, nil)
		c.OverrideOn(b, "podinfo", "podinfo", argochain.FirstTag, time.Minute)
		var lat []time.Duration
		for i := range 20 {
			head := c.Head(b)
			tag := fmt.Sprintf("6.6.%d", i)
			b.StartTimer()
			start := time.Now()
			c.Push(b, tag)
			c.Scan(b)
			for c.Head(b) == head {
				if time.Since(start) > time.Minute {
					b.Fatalf("tag %s: no commit", tag)
				}
				time.Sleep(5 * time.Millisecond)
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			if err := c.OverrideAt(b, c.Head(b), "podinfo", "podinfo", tag); err != nil {
				b.Fatal(err)
			}
		}
		reportLatencies(b, lat, "")
	}
}
