package e2e

import (
	"toolkit.dev/image-toolkit/pkg/apis/meta"

	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
	"toolkit.dev/image-toolkit/tests/testkit/testenv"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
	"toolkit.dev/image-toolkit/tests/testkit/testregistry"
)

// Scaling as deployed: two reflector processes sharded by label each
// reconcile only their own ImageRepositories (leader election on, one
// Lease per shard); two update-job processes split ten jobs, each job run
// once.
func TestScaling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cluster, bin := localenv.StartTest(t)

	var procs []*localenv.Process
	defer func() {
		for _, p := range procs {
			if err := p.Stop(20 * time.Second); err != nil {
				t.Errorf("%s: %v\n%s", p.Name, err, p.Log())
			}
		}
	}()
	start := func(name, instance string, args ...string) *localenv.Process {
		p, err := cluster.StartInstance(ctx, bin, name, instance, args...)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		return p
	}
	shards := map[string]*localenv.Process{}
	for _, shard := range []string{"shard1", "shard2"} {
		shards[shard] = start("image-reflector-controller", "reflector-"+shard,
			"--leader-elect=true", "--watch-label-selector=sharding.toolkit.dev/key="+shard)
	}
	runners := []*localenv.Process{
		start("update-job-controller", "update-job-a"),
		start("update-job-controller", "update-job-b"),
	}

	// Sharded reflectors.
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "team/app", []string{"1.0.0", "1.1.0"})
	owner := map[string]string{}
	for i := range 6 {
		shard := fmt.Sprintf("shard%d", i%2+1)
		name := fmt.Sprintf("app-%d", i)
		owner[name] = shard
		repo := &imagev1.ImageRepository{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
				Labels: map[string]string{"sharding.toolkit.dev/key": shard}},
			Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("team/app"), Insecure: true,
				Interval: metav1.Duration{Duration: time.Hour}},
		}
		if err := cluster.Client.Create(ctx, repo); err != nil {
			t.Fatal(err)
		}
	}
	// An object of no shard is left alone by both.
	orphan := &imagev1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: "default"},
		Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("team/app"), Insecure: true,
			Interval: metav1.Duration{Duration: time.Hour}},
	}
	if err := cluster.Client.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, error) {
		list := &imagev1.ImageRepositoryList{}
		if err := cluster.Client.List(ctx, list, client.InNamespace("default")); err != nil {
			return false, err
		}
		scanned := 0
		for _, r := range list.Items {
			if r.Status.LastScanResult != nil && r.Status.LastScanResult.TagCount == 2 {
				scanned++
			}
		}
		return scanned == 6, nil
	})
	for shard, p := range shards {
		body, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for name, o := range owner {
			series := fmt.Sprintf(`imagetoolkit_reflector_ready_condition{kind="ImageRepository",name="%s"`, name)
			if has := strings.Contains(body, series); has != (o == shard) {
				t.Errorf("%s exports %s: %v, want %v", shard, name, has, o == shard)
			}
		}
		if strings.Contains(body, `name="orphan"`) {
			t.Errorf("%s reconciled the unsharded repository", shard)
		}
	}
	if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(orphan), orphan); err != nil || orphan.Status.LastScanResult != nil {
		t.Errorf("the unsharded repository was scanned: %v %+v", err, orphan.Status)
	}

	// Two update-job replicas, ten jobs on one repository.
	git := testgit.New(t, testgit.Options{})
	files := map[string]string{}
	for i := range 10 {
		files[fmt.Sprintf("deploy/app%d.yaml", i)] = fmt.Sprintf("image: ghcr.io/org/app%d:1.0.0 # {\"$imagepolicy\": \"default:app%d\"}\n", i, i)
	}
	git.CreateRepo(t, "fleet", files)
	for i := range 10 {
		job := &updatev1.UpdateJob{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", i), Namespace: "default"},
			Spec: updatev1.UpdateJobSpec{
				Repository: updatev1.GitRepositorySpec{URL: git.RepoURL("fleet")},
				Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
				Update: updatev1.UpdateSpec{Path: "deploy", Setters: []updatev1.PolicySetter{
					{Policy: fmt.Sprintf("default:app%d", i), ImageRef: meta.ImageRef{Name: fmt.Sprintf("ghcr.io/org/app%d", i), Tag: "1.1.0"}}}},
				Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "bot", Email: "bot@example.com"}},
			},
		}
		if err := cluster.Client.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	byRunner := map[string]int{}
	pushed := map[string]bool{}
	testenv.Eventually(t, 90*time.Second, func() (bool, error) {
		list := &updatev1.UpdateJobList{}
		if err := cluster.Client.List(ctx, list, client.InNamespace("default")); err != nil {
			return false, err
		}
		clear(byRunner)
		clear(pushed)
		done := 0
		for _, j := range list.Items {
			if j.Status.Phase.Finished() {
				done++
				if j.Status.Phase != updatev1.UpdateJobSucceeded || j.Status.Attempts != 1 {
					return false, fmt.Errorf("%s: %s after %d attempts: %+v", j.Name, j.Status.Phase, j.Status.Attempts, j.Status.Conditions)
				}
				byRunner[j.Status.Runner]++
				pushed[j.Status.PushedCommit] = true
			}
		}
		return done == 10, nil
	})
	t.Logf("jobs per runner: %v", byRunner)
	log := testgit.Git(t, git.BarePath("fleet"), "log", "--format=%ae", "main")
	// Jobs of one branch ready at once share a commit: the commits are
	// those the jobs name.
	if n := strings.Count(log, "bot@example.com\n"); n != len(pushed) || n > 10 {
		t.Errorf("%d commits by the jobs, which name %d", n, len(pushed))
	}
	for _, p := range runners {
		body, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: jobs succeeded %v", p.LogPath, metricSum(body, `imagetoolkit_updatejob_jobs_total{outcome="succeeded"}`))
	}
}
