package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// groupJob is a job of automation app-N setting base to tag on main.
func groupJob(name string, phase updatev1.UpdateJobPhase, tag string, mutate func(*updatev1.UpdateJob)) updatev1.UpdateJob {
	j := updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", UID: types.UID(name)},
		Spec: updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: "https://git.example.com/org/mono.git"},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update: updatev1.UpdateSpec{Path: "apps/" + name, Setters: []updatev1.PolicySetter{
				{Policy: "apps:base", ImageRef: meta.ImageRef{Name: "registry.example.com/base", Tag: tag}}}},
			Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "bot", Email: "bot@example.com"}},
		},
	}
	j.Status.Phase = phase
	if mutate != nil {
		mutate(&j)
	}
	return j
}

// Which jobs join a leader's commit, and when the leader waits: the
// grouping rule, without an API server.
func TestGather(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	leader := groupJob("app-0", updatev1.UpdateJobPending, "2", nil)
	tests := []struct {
		name    string
		jobs    []updatev1.UpdateJob
		running []string
		// want is the members' names, or busy:NAME.
		want []string
	}{
		{"Pending and new jobs of the branch join, ordered by name", []updatev1.UpdateJob{
			groupJob("app-2", updatev1.UpdateJobPending, "2", nil),
			groupJob("app-1", "", "2", nil),
		}, nil, []string{"app-1", "app-2"}},
		{"a job another runner runs with a fresh heartbeat makes the leader wait", []updatev1.UpdateJob{
			groupJob("app-1", updatev1.UpdateJobPending, "2", nil),
			groupJob("app-2", updatev1.UpdateJobRunning, "2", func(j *updatev1.UpdateJob) {
				j.Status.Runner, j.Status.HeartbeatTime = "other", ago(time.Second)
			}),
		}, nil, []string{"busy:app-2"}},
		{"one whose runner's heartbeat lapsed is not waited for, nor taken", []updatev1.UpdateJob{
			groupJob("app-2", updatev1.UpdateJobRunning, "2", func(j *updatev1.UpdateJob) {
				j.Status.Runner, j.Status.HeartbeatTime = "other", ago(2*time.Minute)
			}),
		}, nil, nil},
		{"a job this runner runs in a group makes the leader wait", []updatev1.UpdateJob{
			groupJob("app-1", updatev1.UpdateJobPending, "2", nil),
			groupJob("app-3", updatev1.UpdateJobRunning, "2", func(j *updatev1.UpdateJob) { j.Status.Runner = "me" }),
		}, []string{"app-3"}, []string{"busy:app-3"}},
		{"another branch, repository, author, namespace or a pull request stays out", []updatev1.UpdateJob{
			groupJob("b", "", "2", func(j *updatev1.UpdateJob) { j.Spec.Checkout.Reference.Branch = "prod" }),
			groupJob("r", "", "2", func(j *updatev1.UpdateJob) { j.Spec.Repository.URL = "https://git.example.com/org/other.git" }),
			groupJob("a", "", "2", func(j *updatev1.UpdateJob) { j.Spec.Commit.Author.Name = "someone" }),
			groupJob("n", "", "2", func(j *updatev1.UpdateJob) { j.Namespace = "other" }),
			groupJob("s", "", "2", func(j *updatev1.UpdateJob) { j.Spec.Repository.SecretRef = &meta.LocalObjectReference{Name: "x"} }),
			groupJob("p", "", "2", func(j *updatev1.UpdateJob) {
				j.Spec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{}}
			}),
		}, nil, nil},
		{"a job setting a policy of the group to another value waits for the next commit", []updatev1.UpdateJob{
			groupJob("app-1", "", "3", nil),
			groupJob("app-2", "", "2", nil),
		}, nil, []string{"app-2"}},
		{"finished jobs, jobs backing off and jobs out of attempts stay out", []updatev1.UpdateJob{
			groupJob("done", updatev1.UpdateJobSucceeded, "2", nil),
			groupJob("backoff", updatev1.UpdateJobPending, "2", func(j *updatev1.UpdateJob) {
				j.Status.Attempts, j.Status.HeartbeatTime = 1, ago(time.Second)
			}),
			groupJob("spent", updatev1.UpdateJobPending, "2", func(j *updatev1.UpdateJob) { j.Status.Attempts = 4 }),
			groupJob("retry", updatev1.UpdateJobPending, "2", func(j *updatev1.UpdateJob) {
				j.Status.Attempts, j.Status.HeartbeatTime = 1, ago(time.Minute)
			}),
		}, nil, []string{"retry"}},
	}
	r := &UpdateJobReconciler{Backoff: 10 * time.Second}
	plan, err := planOf(&leader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gather(groupInput{leader: &leader, plan: plan, key: groupKey(&leader, plan), runner: "me",
				running: func(uid types.UID) bool { return slices.Contains(tt.running, string(uid)) },
				now:     now, lease: time.Minute, backoff: r.backoff}, append([]updatev1.UpdateJob{leader}, tt.jobs...))
			var got []string
			if g.busy != "" {
				got = []string{"busy:" + g.busy}
			}
			for _, c := range g.members {
				got = append(got, c.job.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// A group is at most MaxGroup jobs, the leader included.
func TestGatherBoundsTheGroup(t *testing.T) {
	leader := groupJob("app-0", updatev1.UpdateJobPending, "2", nil)
	plan, err := planOf(&leader)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []updatev1.UpdateJob
	for i := range MaxGroup + 10 {
		jobs = append(jobs, groupJob(fmt.Sprintf("app-%05d", i+1), "", "2", nil))
	}
	g := gather(groupInput{leader: &leader, plan: plan, key: groupKey(&leader, plan), runner: "me",
		running: func(types.UID) bool { return false }, now: time.Now(), lease: time.Minute,
		backoff: func(int32) time.Duration { return 0 }}, jobs)
	if len(g.members) != MaxGroup-1 {
		t.Errorf("%d members, want %d", len(g.members), MaxGroup-1)
	}
}

// The bookkeeping of running groups: one group per key; a job that waits
// for it is woken when it ends, with the group's members.
func TestGroupsWakeWaitersAtTheEnd(t *testing.T) {
	g := newGroups()
	leader := groupJob("app-0", updatev1.UpdateJobRunning, "2", nil)
	member := groupJob("app-1", updatev1.UpdateJobRunning, "2", nil)
	nn := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "apps", Name: name} }
	if g.waitIfBusy("k", nn("app-2")) {
		t.Fatal("busy before any group")
	}
	if !g.begin("k", nn("app-0"), &leader, &member) || g.begin("k", nn("app-9"), &leader) {
		t.Fatal("begin: want one group per key")
	}
	if !g.isRunning(member.UID) || !g.waitIfBusy("k", nn("app-2")) {
		t.Fatal("the member is not running, or the waiter not waiting")
	}
	g.finish(nn("app-1")) // not a leader: nothing ends
	if !g.isRunning(member.UID) {
		t.Fatal("a member's reconcile ended the group")
	}
	g.finish(nn("app-0"))
	var woken []string
	for range 2 {
		select {
		case e := <-g.wake:
			woken = append(woken, e.Object.GetName())
		case <-time.After(5 * time.Second):
			t.Fatalf("woken %v, want app-1 and app-2", woken)
		}
	}
	slices.Sort(woken)
	if !slices.Equal(woken, []string{"app-1", "app-2"}) || g.isRunning(member.UID) || g.waitIfBusy("k", nn("app-3")) {
		t.Errorf("after the end: woken %v, member running %v", woken, g.isRunning(member.UID))
	}
}

// Jobs for one branch that are ready at once become one commit: ten jobs,
// each its own path, made at once, land in at most two commits (the first
// job may start before the others exist; what arrives while it runs is the
// next group). Each job's status names the commit that carries its
// change, and says how many jobs it carries; a job whose path is missing
// fails alone.
func TestJobsOfOneBranchShareACommit(t *testing.T) {
	ctx := context.Background()
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	files := map[string]string{"README.md": "mono\n"}
	const n = 10
	for i := range n {
		files[fmt.Sprintf("apps/app-%d/deploy.yaml", i)] = deployment
	}
	srv.CreateRepo(t, "mono", files)
	before := head(t, srv, "mono", "main")
	made := make([]*updatev1.UpdateJob, n+1)
	for i := range n + 1 {
		name := fmt.Sprintf("app-%d", i)
		j := newJob(ns, name, srv.RepoURL("mono"), func(j *updatev1.UpdateJob) {
			j.Spec.Update.Path = "apps/" + name
			j.Spec.BackoffLimit = ptr.To[int32](0)
		})
		if i == n {
			j.Name, j.Spec.Update.Path = "gone", "apps/gone"
		}
		made[i] = j
	}
	// Made at once, as an automation's burst makes them: created one
	// after another on a loaded machine, they spread over more groups
	// than the rule allows for jobs ready together.
	var wg sync.WaitGroup
	errs := make([]error, len(made))
	for i, j := range made {
		wg.Go(func() { errs[i] = env.Client.Create(ctx, j) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	commits := map[string]int{}
	for _, j := range made[:n] {
		got := waitFinished(t, j)
		if got.Status.Phase != updatev1.UpdateJobSucceeded || got.Status.PushedCommit == "" {
			t.Fatalf("%s: %s %+v", j.Name, got.Status.Phase, got.Status.Conditions)
		}
		commits[got.Status.PushedCommit]++
	}
	if got := waitFinished(t, made[n]); got.Status.Phase != updatev1.UpdateJobFailed ||
		!strings.Contains(conditions.Get(got, conditions.ReadyCondition).Message, "does not exist") {
		t.Errorf("gone: %s %+v, want its own failure", got.Status.Phase, got.Status.Conditions)
	}
	if len(commits) > 2 {
		t.Errorf("%d commits for %d jobs, want at most 2: %v", len(commits), n, commits)
	}
	if c := commitsBy(t, srv, "mono", "main", "bot@example.com"); c != len(commits) {
		t.Errorf("%d commits of the bot on main, the jobs name %d", c, len(commits))
	}
	log := testgit.Git(t, srv.BarePath("mono"), "log", "--format=%H", before+"..main")
	for c, carried := range commits {
		if !strings.Contains(log, c) {
			t.Errorf("commit %s is not on main", c)
		}
		if carried > 1 {
			msg := testgit.Git(t, srv.BarePath("mono"), "log", "-1", "--format=%B", c)
			if !strings.HasPrefix(msg, fmt.Sprintf("Update images of %d automations on main\n", carried)) ||
				strings.Count(msg, "-> ghcr.io/stefanprodan/podinfo:6.5.0") != carried {
				t.Errorf("commit %s carries %d jobs; its message:\n%s", c, carried, msg)
			}
		}
	}
	for _, j := range made[:n] {
		got := &updatev1.UpdateJob{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(j), got); err != nil {
			t.Fatal(err)
		}
		msg := conditions.Get(got, conditions.ReadyCondition).Message
		if carried := commits[got.Status.PushedCommit]; carried > 1 && !strings.Contains(msg, fmt.Sprintf("one commit for %d UpdateJobs", carried)) {
			t.Errorf("%s: Ready says %q, want the %d jobs the commit carries", j.Name, msg, carried)
		}
		if b := testgit.Git(t, srv.BarePath("mono"), "show", "main:apps/"+j.Name+"/deploy.yaml"); !strings.Contains(b, "podinfo:6.5.0") {
			t.Errorf("%s not updated", j.Name)
		}
		// The revision the commit was made on, which the automations
		// walk back through (ownhead.go there).
		parent := strings.TrimSpace(testgit.Git(t, srv.BarePath("mono"), "rev-parse", got.Status.PushedCommit+"^"))
		if got.Status.CheckoutRevision != "main@sha1:"+parent {
			t.Errorf("%s: checkoutRevision %q, want its commit's parent %s", j.Name, got.Status.CheckoutRevision, parent)
		}
	}
	// One Succeeded event per commit, on the job that led it: the members
	// the leader's event reports have none of their own.
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		list := &eventsv1.EventList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		n := 0
		for _, e := range list.Items {
			if e.Reason == conditions.SucceededReason {
				n++
			}
		}
		return n == len(commits), fmt.Errorf("%d Succeeded events for %d commits", n, len(commits))
	})
}

// A member of a group whose runner was killed after the push is taken up
// again and finds the commit through its leader's status.carries: it is
// Succeeded with that commit (not NoChange, which its files alone would
// say), and nothing is pushed again.
func TestMemberFindsTheCommitItsLeaderPushed(t *testing.T) {
	ctx := context.Background()
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	work := srv.CreateRepo(t, "carried", map[string]string{"deploy/app.yaml": deployment})
	// What the killed runner's group pushed: the member's change.
	pushed := work.Commit("the group's commit", map[string]string{"deploy/app.yaml": strings.ReplaceAll(deployment, "6.4.0", "6.5.0")})
	work.Push()

	unmanaged := func(j *updatev1.UpdateJob) { j.Labels = map[string]string{unmanagedLabel: "true"} }
	member := newJob(ns, "member", srv.RepoURL("carried"), unmanaged)
	leader := newJob(ns, "leader", srv.RepoURL("carried"), unmanaged)
	create(t, member)
	create(t, leader)
	// Stage what the killed runner left, then show both to the suite's
	// runner: the leader recorded, the member still claimed.
	now := metav1.Now()
	stage := func(j *updatev1.UpdateJob, st updatev1.UpdateJobStatus) {
		base := j.DeepCopy()
		j.Status = st
		if err := env.Client.Status().Patch(ctx, j, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}
	stage(leader, updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobSucceeded, Runner: "killed-pod", Attempts: 1,
		StartTime: &now, CompletionTime: &now, PushingCommit: pushed, PushedCommit: pushed, Carries: []types.UID{member.UID}})
	stage(member, updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobRunning, Runner: "killed-pod", Attempts: 1,
		StartTime: &now, HeartbeatTime: &now})
	for _, j := range []*updatev1.UpdateJob{leader, member} {
		base := j.DeepCopy()
		j.Labels = nil
		if err := env.Client.Patch(ctx, j, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}

	got := waitFinished(t, member)
	if got.Status.Phase != updatev1.UpdateJobSucceeded || got.Status.PushedCommit != pushed || got.Status.Attempts != 2 {
		t.Errorf("member: %s, pushed %q (want %s), attempts %d", got.Status.Phase, got.Status.PushedCommit, pushed, got.Status.Attempts)
	}
	if h := head(t, srv, "carried", "main"); h != pushed {
		t.Errorf("main moved to %s after the group's commit %s", h, pushed)
	}
}

// A group renews only the members' heartbeats that are getting old: a
// member claimed a moment ago is not written at the next tick.
func TestGroupRenewsOnlyOldHeartbeats(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	r := &UpdateJobReconciler{Client: env.Client, APIReader: env.Client, Runner: "me"}
	g := &jobGroup{}
	for name, age := range map[string]time.Duration{"fresh": 0, "old": 40 * time.Second} {
		j := newJob(ns, name, "https://git.example.com/org/mono.git", func(j *updatev1.UpdateJob) {
			j.Labels = map[string]string{unmanagedLabel: "true"}
		})
		create(t, j)
		base := j.DeepCopy()
		beat := metav1.NewTime(time.Now().Add(-age))
		j.Status = updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobRunning, Runner: "me", Attempts: 1, HeartbeatTime: &beat}
		if err := env.Client.Status().Patch(ctx, j, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		g.members = append(g.members, &member{job: j, run: jobRun{claim: &claim{r: r, job: j.DeepCopy()}}})
	}
	stop := g.heartbeatMembers(ctx, 50*time.Millisecond, 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	stop()
	for _, m := range g.members {
		got := &updatev1.UpdateJob{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m.job), got); err != nil {
			t.Fatal(err)
		}
		renewed := got.ResourceVersion != m.job.ResourceVersion
		if want := m.job.Name == "old"; renewed != want || (want && time.Since(got.Status.HeartbeatTime.Time) > 5*time.Second) {
			t.Errorf("%s: renewed %v (heartbeat %s), want %v", m.job.Name, renewed, got.Status.HeartbeatTime, want)
		}
	}
}
