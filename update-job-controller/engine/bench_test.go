package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// BenchmarkRunLargeRepo runs jobs on a repository of 10,000 manifests, 100
// of them with a marker, as Flux's automation was measured: each iteration
// is one job (fetch, check out, update, commit, push) against a warm
// mirror, with a new tag each time, looking for holds as an automation's
// jobs do. Reports the time of each git operation.
//
// The sub-benchmarks: 10k and 100k files with the markers in one of their
// 100 directories (as tests/bench's chain.Grow places them), and
// 100k-spread with one marker in each directory, so that a job changes
// every directory: the trees a commit writes and a push sends are then
// those of the whole repository.
//
//	go test -run '^$' -bench BenchmarkRunLargeRepo -benchtime 10x ./update-job-controller/engine/
func BenchmarkRunLargeRepo(b *testing.B) {
	for _, c := range []struct {
		name   string
		n      int
		spread bool
	}{{"10k", 10000, false}, {"100k", 100000, false}, {"100k-spread", 100000, true}} {
		b.Run(c.name, func(b *testing.B) { runLargeRepo(b, c.n, c.spread) })
	}
}

func runLargeRepo(b *testing.B, n int, spread bool) {
	srv := testgit.New(b, testgit.Options{})
	files := map[string]string{}
	every := n / 100
	for i := range n {
		marker := ""
		// The j-th marker is file j*every (directory 0), or spread, file
		// j*every+j%every (directory j%100).
		if (!spread && i%every == 0) || (spread && i%every == (i/every)%every) {
			marker = ` # {"$imagepolicy": "apps:podinfo"}`
		}
		files[fmt.Sprintf("clusters/prod/team-%02d/app-%05d.yaml", i%100, i)] = fmt.Sprintf(
			"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-%05d\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: ghcr.io/stefanprodan/podinfo:6.3.0%s\n", i, marker)
	}
	srv.CreateRepo(b, "large", files)
	ops := map[string]time.Duration{}
	e := New(Settings{WorkDir: b.TempDir(), Hooks: Hooks{OnEvent: func(ev Event) {
		if ev.Kind == EventGit {
			ops[ev.Op] += ev.Duration
		}
	}}}, Credentials{}, newCache(b))
	run := func(tag string) Result {
		out, err := e.Run(context.Background(), plan(srv.RepoURL("large"), func(p *writeback.Plan) {
			p.Path = "clusters/prod"
			// As every automation's job: values a person set are left.
			p.Update.Holds = &writeback.Holds{}
			p.Update.Images["apps:podinfo"] = meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: tag}
		}))
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
		if n := len(out.Changes.Files); n != 100 || out.Commit == "" {
			b.Fatalf("job changed %d files, commit %q", n, out.Commit)
		}
	}
	for op, d := range ops {
		b.ReportMetric(d.Seconds()/float64(b.N), strings.ToLower(op)+"-s/op")
	}
}
