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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// made collects the batches a batcher makes.
type made struct {
	mu   sync.Mutex
	jobs []*updatev1.UpdateJob
	err  error
}

func (m *made) create(_ context.Context, job *updatev1.UpdateJob) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	m.jobs = append(m.jobs, job)
	return nil
}

func (m *made) wait(t *testing.T, n int) []*updatev1.UpdateJob {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		got := slices.Clone(m.jobs)
		m.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) != n {
				t.Fatalf("%d batches made, want %d", len(got), n)
			}
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// entry is the job automation name would make alone, setting podinfo to
// tag at apps/<name>.
func entry(name, tag string) (*imagev1.ImageUpdateAutomation, *updatev1.UpdateJob) {
	yes := true
	a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, UID: types.UID("uid-" + name)}}
	j := &updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name + "-0123456789",
			Annotations: map[string]string{InputsAnnotation: "in-" + name, RunAnnotation: "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: imagev1.GroupVersion.String(), Kind: imagev1.ImageUpdateAutomationKind,
				Name: name, UID: a.UID, Controller: &yes}}},
		Spec: updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: "https://git.example.com/org/fleet.git"},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update: updatev1.UpdateSpec{Path: "apps/" + name, Setters: []updatev1.PolicySetter{{Policy: "apps:podinfo",
				ImageRef: meta.ImageRef{Name: "podinfo", Tag: tag}}}},
			Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Email: "bot@example.com"}, MessageTemplate: "update " + name},
		},
	}
	return a, j
}

func addEntry(b *batches, name, tag string) {
	a, j := entry(name, tag)
	target, _ := pushTarget(&j.Spec)
	b.add(batchKey(j), target, a, j, time.Now())
}

// An automation of a batch of several writes nothing while the batch is
// younger than adoptAfter, unless its run answers a reconcile request: a
// thousand automations naming two batches that end in seconds were a
// thousand status writes beside the batches' own. The job of an automation
// alone is named at once, and so is a batch once adoptAfter has passed.
func TestYoungBatchIsNotNamedByItsAutomations(t *testing.T) {
	m := &made{}
	b := newBatches(context.Background(), m.create)
	addEntry(b, "app-a", "6.4.0")
	addEntry(b, "app-b", "6.4.0")
	m.wait(t, 1)
	addEntry(b, "app-z", "6.5.0") // a value the first batch does not set: a batch alone
	job := m.wait(t, 2)[0]
	job.CreationTimestamp = metav1.Now()
	now := job.CreationTimestamp.Time
	if left, later := b.adoptLater("uid-app-b", job, false, now.Add(time.Second)); !later || left != batchAdoptAfter-time.Second {
		t.Errorf("a member of a batch made 1 s ago: later %v after %v, want after %v", later, left, batchAdoptAfter-time.Second)
	}
	if _, later := b.adoptLater("uid-app-b", job, true, now); later {
		t.Error("a requested run waits to name its batch")
	}
	if _, later := b.adoptLater("uid-app-b", job, false, now.Add(batchAdoptAfter)); later {
		t.Error("a batch adoptAfter old is not named")
	}
	if _, later := b.adoptLater("uid-app-z", job, false, now); later {
		t.Error("a job of one automation is not named at once")
	}
	b.takeDecided("uid-app-a")
	if _, later := b.adoptLater("uid-app-a", job, false, now); later {
		t.Error("an automation that took its decision (adopted or recorded) waits again")
	}
}

// Jobs of one branch arriving together become one job: the first
// automation by name leads (its name, update and controller), the others
// are members by name, each an owner, with their own update, message and
// annotations; every automation is woken to adopt it.
func TestRunsOfOneBranchMakeOneBatch(t *testing.T) {
	m := &made{}
	b := newBatches(context.Background(), m.create)
	b.adoptAfter = 0
	for _, name := range []string{"app-c", "app-a", "app-b"} {
		addEntry(b, name, "6.4.0")
	}
	if queued, _ := b.pendingTurn("uid-app-b", "", nil); !queued {
		t.Error("an automation in a pending batch is not queued")
	}
	job := m.wait(t, 1)[0]
	if job.Name != "app-a-0123456789" || metav1.GetControllerOf(job).Name != "app-a" || job.Spec.Update.Path != "apps/app-a" {
		t.Errorf("batch led by %s (%s), want app-a's job", metav1.GetControllerOf(job).Name, job.Name)
	}
	var names []string
	for _, mb := range job.Spec.Members {
		names = append(names, mb.Automation)
		if mb.Update.Path != "apps/"+mb.Automation || mb.MessageTemplate != "update "+mb.Automation || mb.Annotations[InputsAnnotation] != "in-"+mb.Automation {
			t.Errorf("member %s: %+v", mb.Automation, mb)
		}
	}
	if !slices.Equal(names, []string{"app-b", "app-c"}) {
		t.Errorf("members %v, want app-b, app-c", names)
	}
	if len(job.OwnerReferences) != 3 {
		t.Errorf("%d owners, want 3", len(job.OwnerReferences))
	}
	woken := map[string]bool{}
	for range 3 {
		select {
		case e := <-b.wake:
			woken[e.Object.GetName()] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("woken: %v", woken)
		}
	}
	if queued, _ := b.pendingTurn("uid-app-b", "", nil); queued {
		t.Error("an automation is still queued once its batch is made")
	}
}

// A run that would set a policy of a pending batch of its branch to
// another value waits for that batch; another branch, or the same value,
// does not.
func TestPendingBatchHoldsItsValues(t *testing.T) {
	b := newBatches(context.Background(), (&made{}).create)
	addEntry(b, "app-a", "6.4.0")
	_, j := entry("app-z", "6.4.1")
	target, _ := pushTarget(&j.Spec)
	if _, busy := b.pendingTurn("uid-app-z", target, policyValues(j.Spec.Update.Setters)); busy == nil ||
		!strings.Contains(busy.Error(), "app-a") {
		t.Errorf("another value of the batch's policy: busy = %v", busy)
	}
	_, same := entry("app-y", "6.4.0")
	if _, busy := b.pendingTurn("uid-app-y", target, policyValues(same.Spec.Update.Setters)); busy != nil {
		t.Errorf("the same value: busy = %v", busy)
	}
	if _, busy := b.pendingTurn("uid-app-z", target+"-elsewhere", policyValues(j.Spec.Update.Setters)); busy != nil {
		t.Errorf("another branch: busy = %v", busy)
	}
}

// A batch is made as soon as it is full: MaxMembers besides its leader.
func TestFullBatchIsMadeAtOnce(t *testing.T) {
	m := &made{}
	b := newBatches(context.Background(), m.create)
	start := time.Now()
	for i := range updatev1.MaxMembers + 3 {
		addEntry(b, fmt.Sprintf("app-%04d", i), "6.4.0")
	}
	first := m.wait(t, 1)[0]
	if len(first.Spec.Members) != updatev1.MaxMembers {
		t.Errorf("first batch has %d members, want %d", len(first.Spec.Members), updatev1.MaxMembers)
	}
	if d := time.Since(start); d > batchQuiet*5 {
		t.Logf("the full batch took %s (load?)", d)
	}
	rest := m.wait(t, 2)[1]
	if len(rest.Spec.Members) != 1 {
		t.Errorf("second batch has %d members, want 1", len(rest.Spec.Members))
	}
}

// A batch that cannot be made wakes its automations, each of which then
// makes its job alone once, so that its own error reaches its status.
func TestUnmadeBatchSendsItsAutomationsAlone(t *testing.T) {
	m := &made{err: errors.New("refused")}
	b := newBatches(context.Background(), m.create)
	addEntry(b, "app-a", "6.4.0")
	addEntry(b, "app-b", "6.4.0")
	for range 2 {
		select {
		case <-b.wake:
		case <-time.After(5 * time.Second):
			t.Fatal("not woken")
		}
	}
	if !b.takeSolo("uid-app-a") || !b.takeSolo("uid-app-b") {
		t.Error("the automations of an unmade batch do not go alone")
	}
	if b.takeSolo("uid-app-a") {
		t.Error("alone twice")
	}
}

// A pull request or a container job shares no commit: no batch key.
func TestBatchKey(t *testing.T) {
	_, a := entry("app-a", "6.4.0")
	_, b := entry("app-b", "6.4.1")
	if batchKey(a) == "" || batchKey(a) != batchKey(b) {
		t.Error("two updates of one branch have different batch keys")
	}
	pr := a.DeepCopy()
	pr.Spec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{}}
	c := a.DeepCopy()
	c.Spec.Update = updatev1.UpdateSpec{Container: &updatev1.UpdateContainer{Image: "x"}}
	other := a.DeepCopy()
	other.Spec.Commit.Author.Email = "someone@example.com"
	if batchKey(pr) != "" || batchKey(c) != "" {
		t.Error("a pull request or a container job has a batch key")
	}
	if batchKey(other) == batchKey(a) {
		t.Error("another author shares the batch key")
	}
}

// Automations of one branch woken by one policy make one UpdateJob, which
// each of them names in its status; when it ends, each records its own
// outcome from it: the members the commit carries Succeeded with it, a
// member whose update failed with its own reason.
func TestAutomationsOfOneBranchShareOneJob(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	app := f.policy("app", nil, "1.0.0")
	names := []string{"app-a", "app-b", "app-c"}
	var autos []*imagev1.ImageUpdateAutomation
	for _, n := range names {
		autos = append(autos, f.automation(n, func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: "apps/" + n}
		}))
	}
	// The first runs come one by one as the automations are created; the
	// tag reaches them all at once.
	for _, j := range waitJobsSettled(t, f.ns) {
		finish(t, &j, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) {
			j.Status.CheckoutRevision = f.head()
			for _, mb := range j.Spec.Members {
				j.Status.Members = append(j.Status.Members, updatev1.MemberStatus{UID: mb.UID, Automation: mb.Automation,
					Phase: updatev1.UpdateJobNoChange, Reason: updatev1.NoChangeReason, Message: "nothing to change"})
			}
		})
	}
	for _, a := range autos {
		waitAutomation(t, a, "first job recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastJob != nil })
	}
	before := map[string]bool{}
	for _, j := range jobs(t, f.ns) {
		before[j.Name] = true
	}

	setLatest(t, app, "1.1.0")
	var batch updatev1.UpdateJob
	testenv.Eventually(t, waitFor, func() (bool, error) {
		var fresh []updatev1.UpdateJob
		for _, j := range jobs(t, f.ns) {
			if !before[j.Name] {
				fresh = append(fresh, j)
			}
		}
		if len(fresh) == 1 {
			batch = fresh[0]
		}
		return len(fresh) == 1 && len(fresh[0].Spec.Members) == 2, fmt.Errorf("%d new jobs", len(fresh))
	})
	if metav1.GetControllerOf(&batch).Name != "app-a" {
		t.Errorf("batch led by %s", metav1.GetControllerOf(&batch).Name)
	}
	// A batch younger than batchAdoptAfter is not named in its
	// automations' statuses: they record it once it ends
	// (TestYoungBatchIsNotNamedByItsAutomations).
	for _, a := range autos {
		got := &imagev1.ImageUpdateAutomation{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a), got); err != nil {
			t.Fatal(err)
		}
		if c := reconciling(got); c != nil && strings.Contains(c.Message, batch.Name) {
			t.Errorf("%s names its batch at once: %s", a.Name, c.Message)
		}
	}

	finish(t, &batch, updatev1.UpdateJobSucceeded, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision, j.Status.PushedCommit = f.head(), "0123456789abcdef0123456789abcdef01234567"
		j.Status.PushedRefs = []string{"refs/heads/main"}
		for _, mb := range j.Spec.Members {
			st := updatev1.MemberStatus{UID: mb.UID, Automation: mb.Automation, Phase: updatev1.UpdateJobSucceeded,
				PushedCommit: j.Status.PushedCommit, Reason: "Succeeded", Message: "pushed"}
			if mb.Automation == "app-c" {
				st = updatev1.MemberStatus{UID: mb.UID, Automation: mb.Automation, Phase: updatev1.UpdateJobFailed,
					Reason: updatev1.UpdateFailedReason, Message: "apps/app-c/app.yaml: bad YAML"}
			}
			j.Status.Members = append(j.Status.Members, st)
		}
	})
	for _, a := range autos[:2] {
		got := waitAutomation(t, a, "batch recorded", func(a *imagev1.ImageUpdateAutomation) bool {
			return a.Status.LastJob != nil && a.Status.LastJob.Name == batch.Name
		})
		if got.Status.LastPushCommit != batch.Status.PushedCommit {
			t.Errorf("%s: lastPushCommit %q, want the batch's", a.Name, got.Status.LastPushCommit)
		}
	}
	failed := waitAutomation(t, autos[2], "its failure recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.Name == batch.Name
	})
	if c := ready(failed); c.Status != metav1.ConditionFalse || c.Reason != updatev1.UpdateFailedReason || !strings.Contains(c.Message, "bad YAML") {
		t.Errorf("app-c's Ready: %+v", c)
	}
	if failed.Status.LastPushCommit == batch.Status.PushedCommit {
		t.Error("app-c names a commit that does not carry its change")
	}
}

// A run that handles a reconcile request and joins a batch marks the
// request handled only with the batch made and named: tk-image job run
// --from-automation reads the status once the request is handled, and
// took the last run's Ready for this one's outcome when the request was
// marked while the batch was still gathering (100 ms at least).
func TestRequestedRunInABatchIsHandledWithItsJob(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	a := f.automation("app-a", nil)
	for _, j := range waitJobsSettled(t, f.ns) {
		finish(t, &j, updatev1.UpdateJobNoChange, nil)
	}
	waitAutomation(t, a, "first job recorded", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.LastJob != nil })
	before := map[string]bool{}
	for _, j := range jobs(t, f.ns) {
		before[j.Name] = true
	}

	// One write asks for a run and changes what the run does, so the run
	// that handles the request is the one that makes the new job.
	const token = "batched"
	p := client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(
		`{"metadata":{"annotations":{%q:%q}},"spec":{"git":{"commit":{"messageTemplate":"batched run"}}}}`,
		meta.ReconcileRequestAnnotation, token)))
	if err := env.Client.Patch(ctx, a, p); err != nil {
		t.Fatal(err)
	}
	got := &imagev1.ImageUpdateAutomation{}
	deadline := time.Now().Add(waitFor)
	for {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.LastHandledReconcileAt == token {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request not handled within %s: status %+v", waitFor, got.Status)
		}
		time.Sleep(2 * time.Millisecond)
	}
	var fresh []string
	for _, j := range jobs(t, f.ns) {
		if !before[j.Name] && slices.Contains(j.Automations(), got.UID) {
			fresh = append(fresh, j.Name)
		}
	}
	if len(fresh) != 1 {
		t.Fatalf("request handled with new jobs %v, want the one batch; status %+v", fresh, got.Status)
	}
	if c := conditions.Get(got, conditions.ReconcilingCondition); c == nil || !strings.Contains(c.Message, fresh[0]) {
		t.Errorf("request handled with Reconciling %+v, want it to name %s", c, fresh[0])
	}
}

// waitJobsSettled waits until the namespace's jobs stop changing in
// number for a second, and returns them.
func waitJobsSettled(t *testing.T, ns string) []updatev1.UpdateJob {
	t.Helper()
	last, since := -1, time.Now()
	var got []updatev1.UpdateJob
	testenv.Eventually(t, waitFor, func() (bool, error) {
		got = jobs(t, ns)
		if len(got) != last {
			last, since = len(got), time.Now()
		}
		return len(got) > 0 && time.Since(since) > time.Second, fmt.Errorf("%d jobs", len(got))
	})
	return got
}

func reconciling(a *imagev1.ImageUpdateAutomation) *metav1.Condition {
	got := &imagev1.ImageUpdateAutomation{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a), got); err != nil {
		return nil
	}
	for i := range got.Status.Conditions {
		if got.Status.Conditions[i].Type == "Reconciling" {
			return &got.Status.Conditions[i]
		}
	}
	return nil
}

// A pending batch is held while the last batch of its branch runs, and
// made once that one has ended: what arrives meanwhile is one commit more,
// not one per window.
func TestPendingBatchWaitsForTheLastOfItsBranch(t *testing.T) {
	m := &made{}
	b := newBatches(context.Background(), m.create)
	var mu sync.Mutex
	running := true
	b.lookup = func(types.NamespacedName) (updatev1.UpdateJobPhase, time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		if running {
			return updatev1.UpdateJobRunning, time.Now(), true
		}
		return updatev1.UpdateJobSucceeded, time.Now(), true
	}
	addEntry(b, "app-a", "6.4.0")
	m.wait(t, 1)
	addEntry(b, "app-b", "6.4.0")
	time.Sleep(batchWindow + 3*batchPoll)
	addEntry(b, "app-c", "6.4.0")
	time.Sleep(3 * batchPoll)
	if got := len(m.wait(t, 1)); got != 1 {
		t.Fatalf("%d batches made while the first ran", got)
	}
	mu.Lock()
	running = false
	mu.Unlock()
	second := m.wait(t, 2)[1]
	if metav1.GetControllerOf(second).Name != "app-b" || len(second.Spec.Members) != 1 || second.Spec.Members[0].Automation != "app-c" {
		t.Errorf("second batch: %s with %+v, want app-b with app-c", metav1.GetControllerOf(second).Name, second.Spec.Members)
	}
}

// A batch that is still being created holds the next one of its branch
// as a batch that runs does.
func TestPendingBatchWaitsForTheCreateOfTheLast(t *testing.T) {
	release := make(chan struct{})
	m := &made{}
	b := newBatches(context.Background(), func(ctx context.Context, j *updatev1.UpdateJob) error {
		if metav1.GetControllerOf(j).Name == "app-a" {
			<-release
		}
		return m.create(ctx, j)
	})
	b.lookup = func(types.NamespacedName) (updatev1.UpdateJobPhase, time.Time, bool) { return "", time.Time{}, false }
	addEntry(b, "app-a", "6.4.0")
	time.Sleep(2 * batchQuiet)
	addEntry(b, "app-b", "6.4.0")
	addEntry(b, "app-c", "6.4.0")
	time.Sleep(3 * batchQuiet)
	if got := len(m.wait(t, 0)); got != 0 {
		t.Fatalf("%d batches made while the first was being created", got)
	}
	close(release)
	if second := m.wait(t, 2)[1]; len(second.Spec.Members) != 1 {
		t.Errorf("second batch: %d members, want app-b with app-c", len(second.Spec.Members))
	}
}

// A batch just made, not in the reconciler's cache yet, holds the next
// of its branch as one being created does: read as gone, it let the
// overflow of a full batch be made at once, one commit more.
func TestBatchNotYetCachedHoldsTheNext(t *testing.T) {
	m := &made{}
	b := newBatches(context.Background(), m.create)
	b.lookup = func(types.NamespacedName) (updatev1.UpdateJobPhase, time.Time, bool) { return "", time.Time{}, false }
	addEntry(b, "app-a", "6.4.0")
	m.wait(t, 1)
	addEntry(b, "app-b", "6.4.0")
	time.Sleep(3 * batchQuiet)
	if got := len(m.wait(t, 1)); got != 1 {
		t.Fatalf("%d batches made while the first was not in the cache yet", got)
	}
	// No runner ever claims it: after batchClaimGrace the next is made.
	m.wait(t, 2)
}

// A batch no runner claimed within batchClaimGrace holds no other: with no
// update-job-controller running, each batch is made at once as a job
// alone would be.
func TestUnclaimedBatchHoldsNone(t *testing.T) {
	m := &made{}
	b := newBatches(context.Background(), m.create)
	b.lookup = func(types.NamespacedName) (updatev1.UpdateJobPhase, time.Time, bool) {
		return updatev1.UpdateJobPending, time.Now().Add(-batchClaimGrace), true
	}
	addEntry(b, "app-a", "6.4.0")
	m.wait(t, 1)
	addEntry(b, "app-b", "6.4.0")
	m.wait(t, 2)
}
