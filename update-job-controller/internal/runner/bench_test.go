package runner

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
	"toolkit.dev/image-toolkit/update-job-controller/internal/gitops"
)

// BenchmarkRunLargeRepo runs jobs on a repository of 10,000 manifests, 100
// of them with a marker, as Flux's automation was measured: each iteration
// is one job (fetch, check out, update, commit, push) against a warm
// mirror, with a new tag each time. Reports the time of each git operation.
func BenchmarkRunLargeRepo(b *testing.B) {
	srv := testgit.New(b, testgit.Options{})
	files := map[string]string{}
	for i := range 10000 {
		marker := ""
		if i%100 == 0 {
			marker = ` # {"$imagepolicy": "apps:podinfo"}`
		}
		files[fmt.Sprintf("clusters/prod/team-%02d/app-%05d.yaml", i%100, i)] = fmt.Sprintf(
			"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-%05d\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: ghcr.io/stefanprodan/podinfo:6.3.0%s\n", i, marker)
	}
	srv.CreateRepo(b, "large", files)
	cache, err := gitops.NewCache(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ops := map[string]time.Duration{}
	run := func(tag string) *Output {
		s := spec(srv.RepoURL("large"), func(s *updatev1.UpdateJobSpec) {
			s.Update.Path = "clusters/prod"
			s.Update.Setters[0].Tag = tag
		})
		plan, err := NewPlan(s)
		if err != nil {
			b.Fatal(err)
		}
		out, err := Run(context.Background(), cache, Input{Spec: s, Plan: plan, WorkDir: b.TempDir(),
			Observe: func(op string, d time.Duration) { ops[op] += d }})
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	run("6.3.0") // the clone, nothing to change
	clear(ops)
	b.ResetTimer()
	for i := range b.N {
		out := run(fmt.Sprintf("6.4.%d", i))
		if n := len(out.Result.Files); n != 100 || out.Commit == "" {
			b.Fatalf("job changed %d files, commit %q", n, out.Commit)
		}
	}
	for op, d := range ops {
		b.ReportMetric(d.Seconds()/float64(b.N), strings.ToLower(op)+"-s/op")
	}
}
