package e2e

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// shardKey is the label the sharded processes select on.
const shardKey = "sharding.toolkit.dev/key"

// Sharding as deployed, across the whole chain: two shards, each of a
// reflector, an automation controller and update-job replicas started with
// --watch-label-selector=sharding.toolkit.dev/key=<shard> (leader election
// on: one Lease per shard). A shard's ImageRepositories, ImagePolicies and
// ImageUpdateAutomations carry its label, and the UpdateJobs its
// automations make inherit it, so each shard's policies are resolved, its
// jobs made and run and its commits pushed by its own processes only.
// shard1's two update-job replicas share its jobs (whichever claims a
// job runs it, once). A chain of no shard is left alone by every process: no
// status, no job, no commit, and no error in any log. Namespaces are not
// sharded (accessFrom reads them), and a policy whose repository is of
// another shard says so in its condition.
func TestShardedChain(t *testing.T) {
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
	start := func(name, instance, shard string) *localenv.Process {
		p, err := cluster.StartInstance(ctx, bin, name, instance,
			"--leader-elect=true", "--watch-label-selector="+shardKey+"="+shard)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		return p
	}
	// The update-job processes of each shard, by POD_NAME (their runner name).
	runners := map[string][]string{"shard1": {"update-job-shard1-a", "update-job-shard1-b"}, "shard2": {"update-job-shard2-a"}}
	reflectors := map[string]*localenv.Process{}
	for _, shard := range []string{"shard1", "shard2"} {
		reflectors[shard] = start("image-reflector-controller", "reflector-"+shard, shard)
		start("image-automation-controller", "automation-"+shard, shard)
		for _, r := range runners[shard] {
			start("update-job-controller", r, shard)
		}
	}

	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "team/app", []string{"1.0.0", "1.1.0"})
	git := testgit.New(t, testgit.Options{})
	// Each shard's automations push to a branch of their own (the
	// documented layout: a branch's automations in one shard, so that its
	// jobs are grouped and take turns in one update-job-controller).
	apps := map[string][]string{"shard1": {"a0", "a1", "a2", "a3", "a4", "a5"}, "shard2": {"b0", "b1", "b2"}}
	for shard, names := range apps {
		files := map[string]string{}
		for _, n := range names {
			files[appFile(n)] = appManifest(reg.Repo("team/app"), n)
		}
		if shard == "shard1" {
			files[appFile("orphan")] = appManifest(reg.Repo("team/app"), "orphan")
		}
		git.CreateRepo(t, "fleet-"+shard, files)
	}
	create := func(name, shard, repo string) {
		t.Helper()
		var labels map[string]string
		if shard != "" {
			labels = map[string]string{shardKey: shard}
		}
		objs := []client.Object{
			&imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
				Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("team/app"), Insecure: true,
					Interval: metav1.Duration{Duration: time.Hour}}},
			&imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: withApp(labels, name)},
				Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: name},
					Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}}},
			&imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
				Spec: imagev1.ImageUpdateAutomationSpec{
					Interval: metav1.Duration{Duration: time.Hour},
					GitSpec: imagev1.GitSpec{
						Repository: &updatev1.GitRepositorySpec{URL: git.RepoURL(repo)},
						Checkout:   &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
						Commit:     updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "bot", Email: "bot@example.com"}},
					},
					Update:         &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: "apps/" + name},
					PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				}},
		}
		for _, o := range objs {
			if err := cluster.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	for shard, names := range apps {
		for _, n := range names {
			create(n, shard, "fleet-"+shard)
		}
	}
	// A chain of no shard, on shard1's branch.
	create("orphan", "", "fleet-shard1")
	// Namespaces carry no shard label: a shard's policy in another
	// namespace than its repository is granted by accessFrom all the same.
	s1 := map[string]string{shardKey: "shard1"}
	grant := map[string]string{"team": "b"}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Labels: grant}},
		&imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "default", Labels: s1},
			Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("team/app"), Insecure: true, Interval: metav1.Duration{Duration: time.Hour},
				AccessFrom: &meta.AccessFrom{NamespaceSelectors: []meta.NamespaceSelector{{MatchLabels: grant}}}}},
		&imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "team-b", Labels: s1},
			Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "shared", Namespace: "default"},
				Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}}},
		// A policy of shard2 on a repository of shard1: a configuration
		// error, which its condition names.
		&imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "cross", Namespace: "default", Labels: map[string]string{shardKey: "shard2"}},
			Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "a0"},
				Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}}},
	} {
		if err := cluster.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	shardOf := map[string]string{}
	for shard, names := range apps {
		for _, n := range names {
			shardOf[n] = shard
		}
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, error) {
		for shard := range apps {
			// git grep fails when nothing matches yet.
			out, _ := exec.Command("git", "-C", git.BarePath("fleet-"+shard), "grep", "-c", "team/app:1.1.0", "main", "--", "apps").Output()
			if strings.Count(string(out), "\n") < len(apps[shard]) {
				return false, nil
			}
		}
		return true, nil
	})

	testenv.Eventually(t, time.Minute, func() (bool, error) {
		shared, cross := &imagev1.ImagePolicy{}, &imagev1.ImagePolicy{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "shared"}, shared); err != nil {
			return false, err
		}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cross"}, cross); err != nil {
			return false, err
		}
		ready := conditions.Get(cross, conditions.ReadyCondition)
		return shared.Status.LatestRef != nil && shared.Status.LatestRef.Tag == "1.1.0" &&
			ready != nil && strings.Contains(ready.Message, "ImageRepository default/a0 is outside this controller's shard"), nil
	})

	// Policies: resolved by their shard's reflector only.
	for shard, p := range reflectors {
		body, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for name, o := range shardOf {
			series := fmt.Sprintf(`imagetoolkit_reflector_ready_condition{kind="ImagePolicy",name="%s"`, name)
			if has := strings.Contains(body, series); has != (o == shard) {
				t.Errorf("reflector of %s exports %s: %v, want %v", shard, name, has, o == shard)
			}
		}
		if strings.Contains(body, `name="orphan"`) {
			t.Errorf("reflector of %s reconciled the chain of no shard", shard)
		}
	}

	// Jobs: made with the automation's shard label, run once, by a
	// replica of that shard.
	jobs := &updatev1.UpdateJobList{}
	if err := cluster.Client.List(ctx, jobs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	byRunner := map[string]int{}
	for _, j := range jobs.Items {
		owner := metav1.GetControllerOf(&j)
		if owner == nil {
			t.Errorf("job %s has no owner", j.Name)
			continue
		}
		shard := shardOf[owner.Name]
		if shard == "" {
			t.Errorf("job %s was made for %s, which is of no shard", j.Name, owner.Name)
			continue
		}
		if j.Labels[shardKey] != shard {
			t.Errorf("job %s of %s is labelled %v, want %s=%s", j.Name, owner.Name, j.Labels, shardKey, shard)
		}
		if !j.Status.Phase.Finished() {
			continue // a later job of the automation, superseded by a group's commit
		}
		byRunner[j.Status.Runner]++
		if !strings.HasPrefix(j.Status.Runner, "update-job-"+shard+"-") {
			t.Errorf("job %s of %s ran on %q, not a replica of %s", j.Name, shard, j.Status.Runner, shard)
		}
		if j.Status.Attempts != 1 {
			t.Errorf("job %s: %s after %d attempts: %+v", j.Name, j.Status.Phase, j.Status.Attempts, j.Status.Conditions)
		}
	}
	t.Logf("finished jobs per runner: %v", byRunner)

	// The chain of no shard: untouched.
	orphan := &imagev1.ImagePolicy{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "orphan"}, orphan); err != nil || orphan.Status.LatestRef != nil || len(orphan.Status.Conditions) > 0 {
		t.Errorf("the policy of no shard was reconciled: %v %+v", err, orphan.Status)
	}
	oa := &imagev1.ImageUpdateAutomation{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "orphan"}, oa); err != nil || len(oa.Status.Conditions) > 0 {
		t.Errorf("the automation of no shard was reconciled: %v %+v", err, oa.Status)
	}
	if out := testgit.Git(t, git.BarePath("fleet-shard1"), "show", "main:"+appFile("orphan")); out != appManifest(reg.Repo("team/app"), "orphan") {
		t.Errorf("the app of no shard changed:\n%s", out)
	}
	for _, p := range procs {
		if log := p.Log(); strings.Contains(log, `"level":"error"`) {
			t.Errorf("%s logged an error:\n%s", p.Name, log)
		}
	}
}

func appFile(name string) string { return "apps/" + name + "/deploy.yaml" }

func appManifest(image, name string) string {
	return fmt.Sprintf("image: %s:1.0.0 # {\"$imagepolicy\": \"default:%s\"}\n", image, name)
}

func withApp(labels map[string]string, name string) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out["app"] = name
	return out
}
