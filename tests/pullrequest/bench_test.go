package pullrequest

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// BenchmarkPullRequestLatency measures what a team waits for: from a tag
// pushed to the registry (with a reconcile request on the ImageRepository,
// as a registry webhook would send) to the request on Gitea showing it, over
// 10 tags: the first opens the request, the other nine update it. Reports
// p50 and p95 of all ten, and the forge API calls per update of an existing
// request (the goal is at most 3). Run:
//
//	go test -run '^$' -bench PullRequestLatency -benchtime 1x ./tests/pullrequest/
func BenchmarkPullRequestLatency(b *testing.B) {
	for range b.N {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		e := Start(ctx, b)
		var lat []time.Duration
		calls := 0.0
		for i := range 10 {
			if i == 1 {
				calls = e.forgeCalls()
			}
			title := fmt.Sprintf("Update podinfo to 6.4.%d", i)
			b.StartTimer()
			start := time.Now()
			e.pushTag(fmt.Sprintf("6.4.%d", i))
			for {
				prs, err := e.Pulls(ctx, "open")
				if err != nil {
					b.Fatal(err)
				}
				if len(prs) == 1 && prs[0].Title == title {
					break
				}
				if ctx.Err() != nil {
					b.Fatalf("run %d: no request titled %q: %v", i, title, ctx.Err())
				}
				time.Sleep(10 * time.Millisecond)
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			// The automation records the job before the next tag, as it
			// would between two real pushes.
			e.waitAutomation("the run recorded", func(a *imagev1.ImageUpdateAutomation) bool {
				return a.Status.LastPullRequest != nil && a.Status.LastJob != nil && a.Status.LastJob.Phase == "Succeeded" &&
					a.Status.ObservedPolicies["podinfo"].Tag == fmt.Sprintf("6.4.%d", i)
			})
		}
		perUpdate := (e.forgeCalls() - calls) / 9
		cancel()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		rank := func(p float64) time.Duration { return lat[int(math.Ceil(p*float64(len(lat))))-1] }
		b.ReportMetric(rank(0.50).Seconds(), "p50-s")
		b.ReportMetric(rank(0.95).Seconds(), "p95-s")
		b.ReportMetric(perUpdate, "api-calls/update")
	}
}
