package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// BenchmarkMonorepoAutomations: one repository with N apps under apps/,
// one ImageUpdateAutomation per app directory (update.path), all pushing to
// main and following one shared base image (the chain's podinfo policy).
// Measures from a new tag pushed (with a reconcile request on the
// ImageRepository, as a registry webhook sends) until every app's manifest
// on main holds it, and reports the commits and UpdateJobs that took. Run
// one size with
//
//	go test -run '^$' -bench 'BenchmarkMonorepoAutomations/1000' -benchtime 1x -timeout 30m ./tests/bench/
func BenchmarkMonorepoAutomations(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for range b.N {
				runMonorepo(b, n)
			}
		})
	}
}

const monorepoApp = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%[3]d
  namespace: apps
spec:
  template:
    spec:
      containers:
      - name: app
        image: %[1]s/%[2]s:6.3.0 # {"$imagepolicy": "default:podinfo"}
`

func runMonorepo(b *testing.B, n int) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	env, root, stop := startChain(ctx, b)
	defer stop()
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("apps/app-%04d/deploy.yaml", i)] = fmt.Sprintf(monorepoApp, env.RegistryHost, chain.Image, i)
	}
	if _, err := env.Commit(files, fmt.Sprintf("%d apps at 6.3.0", n)); err != nil {
		b.Fatal(err)
	}
	applySamples(ctx, b, env, root)
	c := env.Cluster.Client
	fleet := &imagev1.ImageUpdateAutomation{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, fleet); err != nil {
		b.Fatal(err)
	}
	// The apps' automations are the sample's with their own path; the
	// sample itself (clusters/prod) goes.
	for i := range n {
		a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("app-%04d", i)},
			Spec: *fleet.Spec.DeepCopy()}
		a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: fmt.Sprintf("apps/app-%04d", i)}
		if err := c.Create(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Delete(ctx, fleet); err != nil {
		b.Fatal(err)
	}
	// Settled: every automation has run once (nothing to change at 6.3.0).
	testenv.Eventually(b, 15*time.Minute, func() (bool, error) {
		list := &imagev1.ImageUpdateAutomationList{}
		err := c.List(ctx, list, client.InNamespace("default"))
		done := 0
		for _, a := range list.Items {
			if a.Status.ObservedSourceRevision != "" {
				done++
			}
		}
		return done == n, err
	})
	before := env.Head("main")
	jobsBefore := map[string]bool{}
	jl := &updatev1.UpdateJobList{}
	if err := c.List(ctx, jl, client.InNamespace("default")); err != nil {
		b.Fatal(err)
	}
	for _, j := range jl.Items {
		jobsBefore[j.Name] = true
	}

	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	profiled := profile(ctx, b, env.Procs, env.Cluster.Config)
	requestsBefore, byBefore := apiRequests(ctx, b, env)
	b.StartTimer()
	start := time.Now()
	if err := env.PushTag(ctx, "6.4.0"); err != nil {
		b.Fatal(err)
	}
	if err := env.RequestReconcile(ctx, repo); err != nil {
		b.Fatal(err)
	}
	for {
		out, err := env.FleetGit("grep", "-c", "podinfo:6.4.0", "main", "--", "apps")
		if err == nil && strings.Count(out, "\n") == n {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("not every app updated: %v\n%s", ctx.Err(), out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	// The controllers' API requests until every app was updated: the
	// figure the machine's load does not change.
	requestsAfter, byAfter := apiRequests(ctx, b, env)
	requests := requestsAfter - requestsBefore
	// Every automation's status names a commit that carries its app's
	// update: what a user reads, after what git shows.
	testenv.Eventually(b, 10*time.Minute, func() (bool, error) {
		list := &imagev1.ImageUpdateAutomationList{}
		err := c.List(ctx, list, client.InNamespace("default"))
		done := 0
		for _, a := range list.Items {
			if a.Status.LastPushCommit != "" && a.Status.LastPushTime != nil && !a.Status.LastPushTime.Time.Before(start.Truncate(time.Second)) {
				done++
			}
		}
		return done == n, fmt.Errorf("%d of %d automations recorded their push: %v", done, n, err)
	})
	recorded := time.Since(start)
	requestsRecorded, _ := apiRequests(ctx, b, env)
	for k, v := range byAfter {
		if d := v - byBefore[k]; d > 0 {
			b.Logf("API requests of %s: %d", k, d)
		}
	}
	profiled()
	keepLogs(b, env)
	commits, err := env.FleetGit("rev-list", "--count", before+"..main")
	if err != nil {
		b.Fatal(err)
	}
	nc, _ := strconv.Atoi(strings.TrimSpace(commits))
	// The UpdateJobs made for the tag: pruned ones are not counted.
	if err := c.List(ctx, jl, client.InNamespace("default")); err != nil {
		b.Fatal(err)
	}
	// When the last job was made tells the deciding side (automations
	// reading the policy and the branch, making jobs) from the doing side
	// (the jobs' groups); creation times have whole seconds.
	made := 0
	var lastMade time.Time
	for _, j := range jl.Items {
		if !jobsBefore[j.Name] {
			made++
			if t := j.CreationTimestamp.Time; t.After(lastMade) {
				lastMade = t
			}
			// Each job's life from the tag's push, in whole seconds as
			// the API server keeps them.
			since := func(t *metav1.Time) string {
				if t == nil {
					return "-"
				}
				return t.Sub(start.Truncate(time.Second)).String()
			}
			// Every write of a job is a write of all of it: its size is
			// what each of them costs the API server.
			raw, _ := json.Marshal(&j)
			mf, _ := json.Marshal(j.ManagedFields)
			if dir := os.Getenv("BENCH_LOGS"); dir != "" {
				if err := os.WriteFile(filepath.Join(dir, j.Name+".json"), raw, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			b.Logf("UpdateJob %s: %d automations, %s, made at %s, started %s, ended %s, commit %.8s, %d KiB (managedFields %d KiB)", j.Name, len(j.Automations()),
				j.Status.Phase, since(&j.CreationTimestamp), since(j.Status.StartTime), since(j.Status.CompletionTime), j.Status.PushedCommit,
				len(raw)>>10, len(mf)>>10)
		}
	}
	b.ReportMetric(lastMade.Sub(start.Truncate(time.Second)).Seconds(), "s-to-last-job-made")
	b.ReportMetric(elapsed.Seconds(), "s-to-all-updated")
	b.ReportMetric(recorded.Seconds(), "s-to-all-recorded")
	b.ReportMetric(float64(nc), "commits")
	b.ReportMetric(float64(made), "updatejobs")
	b.ReportMetric(float64(requests)/float64(n), "api-requests-per-app")
	b.ReportMetric(float64(requestsRecorded-requestsBefore)/float64(n), "api-requests-per-app-recorded")
}

// apiRequests sums the API requests the chain's controllers have made, and
// returns them by controller, code and method too.
func apiRequests(ctx context.Context, b *testing.B, env *chain.Env) (int, map[string]int) {
	total, by := 0, map[string]int{}
	for name, p := range env.Procs {
		m, err := p.Metrics(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(m, "\n") {
			if !strings.HasPrefix(l, "rest_client_requests_total{") {
				continue
			}
			i := strings.LastIndexByte(l, ' ')
			f, _ := strconv.ParseFloat(l[i+1:], 64)
			total += int(f)
			by[name+" "+labelValue(l, "code")+" "+labelValue(l, "method")] += int(f)
		}
	}
	return total, by
}

// labelValue is the value of label name in a metric line.
func labelValue(line, name string) string {
	_, v, _ := strings.Cut(line, name+`="`)
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// keepLogs copies the controllers' logs to the folder BENCH_LOGS names,
// when set, for reading where a run spent its time.
func keepLogs(b *testing.B, env *chain.Env) {
	dir := os.Getenv("BENCH_LOGS")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for name, p := range env.Procs {
		log, err := os.ReadFile(p.LogPath)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".log"), log, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
