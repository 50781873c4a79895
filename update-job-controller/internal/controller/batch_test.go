package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// batchTemplate names the automation whose part of the message it is.
const batchTemplate = `{{ .AutomationObject.Name }}: {{ range .Changed.Changes }}{{ .OldValue }} -> {{ .NewValue }}{{ end }}`

// batchOf makes j a batch controlled by automation lead, with a member
// per name: automation NAME (UID uid-NAME) updating apps/NAME.
func batchOf(j *updatev1.UpdateJob, names ...string) {
	j.OwnerReferences = []metav1.OwnerReference{{APIVersion: imagev1.GroupVersion.String(), Kind: imagev1.ImageUpdateAutomationKind,
		Name: "lead", UID: "uid-lead", Controller: ptr.To(true)}}
	for _, n := range names {
		j.Spec.Members = append(j.Spec.Members, updatev1.UpdateJobMember{Automation: n, UID: types.UID("uid-" + n),
			Update: updatev1.UpdateSpec{Path: "apps/" + n, Setters: []updatev1.PolicySetter{
				{Policy: "apps:podinfo", ImageRef: meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"}}}},
			MessageTemplate: batchTemplate})
	}
}

// newBatch is a batch job on url: the automation lead's own update of
// apps/lead, and a member per name.
func newBatch(ns, name, url string, names ...string) *updatev1.UpdateJob {
	return newJob(ns, name, url, func(j *updatev1.UpdateJob) {
		j.Spec.Update.Path = "apps/lead"
		j.Spec.Commit.MessageTemplate = batchTemplate
		j.Spec.BackoffLimit = ptr.To[int32](0)
		batchOf(j, names...)
	})
}

// monorepo is a repository with a deployment under apps/NAME for each
// name.
func monorepo(t *testing.T, srv *testgit.Server, repo string, names ...string) *testgit.Clone {
	files := map[string]string{"README.md": "mono\n"}
	for _, n := range names {
		files["apps/"+n+"/deploy.yaml"] = deployment
	}
	return srv.CreateRepo(t, repo, files)
}

// members is the job's status.members by automation name.
func members(j *updatev1.UpdateJob) map[string]updatev1.MemberStatus {
	out := map[string]updatev1.MemberStatus{}
	for _, m := range j.Status.Members {
		out[m.Automation] = m
	}
	return out
}

// succeededEvents counts the Succeeded events recorded in namespace ns:
// those of one job are one Event, a series (the events recorder's key is
// the object, type, action and reason, not the note), so it counts the
// series' occurrences.
func succeededEvents(ctx context.Context, ns string) (int, error) {
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range list.Items {
		switch {
		case e.Reason != conditions.SucceededReason:
		case e.Series != nil:
			n += int(e.Series.Count)
		default:
			n++
		}
	}
	return n, nil
}

// A batch is one commit: the leader's update and each member's, each at
// its own path, land together; status.members has each member Succeeded
// with the commit, the message has each automation's part (its own
// template, naming its own automation), one Succeeded event reports the
// commit, and each automation's outcome is counted.
func TestBatchPushesOneCommitCarryingEveryMember(t *testing.T) {
	ctx := context.Background()
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	monorepo(t, srv, "batch", "lead", "m1", "m2")
	before := head(t, srv, "batch", "main")
	succeeded := testutil.ToFloat64(jobMetrics.Jobs.WithLabelValues(OutcomeSucceeded))

	j := newBatch(ns, "batch", srv.RepoURL("batch"), "m1", "m2")
	create(t, j)
	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobSucceeded || got.Status.PushedCommit == "" {
		t.Fatalf("phase %s: %+v", got.Status.Phase, got.Status.Conditions)
	}
	c := got.Status.PushedCommit
	if h := head(t, srv, "batch", "main"); h != c {
		t.Errorf("main is %s, the job pushed %s", h, c)
	}
	if n := strings.Count(testgit.Git(t, srv.BarePath("batch"), "log", "--format=%H", before+"..main"), "\n"); n != 1 {
		t.Errorf("%d commits on main, want 1", n)
	}
	if msg := conditions.Get(got, conditions.ReadyCondition).Message; !strings.Contains(msg, "one commit for 3 automations") {
		t.Errorf("Ready: %q", msg)
	}
	ms := members(got)
	for _, n := range []string{"m1", "m2"} {
		m := ms[n]
		if m.Phase != updatev1.UpdateJobSucceeded || m.PushedCommit != c || m.UID != types.UID("uid-"+n) ||
			m.Reason != conditions.SucceededReason || m.Result == nil || len(m.Result.Files) != 1 {
			t.Errorf("member %s: %+v", n, m)
		}
		// The automation's own view of the job.
		if v, ok := got.View(types.UID("uid-" + n)); !ok || v.Status.Phase != updatev1.UpdateJobSucceeded ||
			v.Status.PushedCommit != c || !conditions.IsReady(v) {
			t.Errorf("view of %s: %+v", n, v)
		}
	}
	msg := testgit.Git(t, srv.BarePath("batch"), "log", "-1", "--format=%B", c)
	if !strings.HasPrefix(msg, "Update images of 3 automations on main\n") {
		t.Errorf("commit message:\n%s", msg)
	}
	for _, n := range []string{"lead", "m1", "m2"} {
		if !strings.Contains(msg, n+": ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0") {
			t.Errorf("the message has no part of %s:\n%s", n, msg)
		}
		if b := testgit.Git(t, srv.BarePath("batch"), "show", "main:apps/"+n+"/deploy.yaml"); b != updated {
			t.Errorf("apps/%s after the job:\n%s", n, b)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		n, err := succeededEvents(ctx, ns)
		if err != nil {
			return false, err
		}
		return n == 1 && testutil.ToFloat64(jobMetrics.Jobs.WithLabelValues(OutcomeSucceeded)) == succeeded+3,
			fmt.Errorf("%d Succeeded events, want 1; %v succeeded outcomes counted, want 3", n,
				testutil.ToFloat64(jobMetrics.Jobs.WithLabelValues(OutcomeSucceeded))-succeeded)
	})
}

// A member whose update fails (its path is missing), or whose plan cannot
// work (its message template), fails alone: the others' changes land in
// one commit, and the batch is Succeeded.
func TestBatchMemberFailsAlone(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	monorepo(t, srv, "partial", "lead", "ok", "bad-template")
	j := newBatch(ns, "partial", srv.RepoURL("partial"), "ok", "gone", "bad-template")
	j.Spec.Members[2].MessageTemplate = "{{ .Updated }}"
	create(t, j)
	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Fatalf("phase %s: %+v", got.Status.Phase, got.Status.Conditions)
	}
	c := got.Status.PushedCommit
	ms := members(got)
	if m := ms["ok"]; m.Phase != updatev1.UpdateJobSucceeded || m.PushedCommit != c {
		t.Errorf("ok: %+v, want Succeeded with %s", m, c)
	}
	if m := ms["gone"]; m.Phase != updatev1.UpdateJobFailed || m.PushedCommit != "" ||
		m.Reason != updatev1.UpdateFailedReason || !strings.Contains(m.Message, "does not exist") {
		t.Errorf("gone: %+v, want its own failure", m)
	}
	if m := ms["bad-template"]; m.Phase != updatev1.UpdateJobFailed ||
		m.Reason != conditions.InvalidSpecReason || !strings.Contains(m.Message, "commit message template") {
		t.Errorf("bad-template: %+v, want its own failure", m)
	}
	if v, _ := got.View("uid-gone"); v == nil || v.Status.Phase != updatev1.UpdateJobFailed || conditions.IsReady(v) {
		t.Errorf("view of gone: %+v", v)
	}
	msg := testgit.Git(t, srv.BarePath("partial"), "log", "-1", "--format=%B", c)
	if !strings.HasPrefix(msg, "Update images of 2 automations on main\n") || !strings.Contains(msg, "lead: ") || !strings.Contains(msg, "ok: ") {
		t.Errorf("commit message:\n%s", msg)
	}
	if b := testgit.Git(t, srv.BarePath("partial"), "show", "main:apps/bad-template/deploy.yaml"); b != deployment {
		t.Errorf("the member whose plan cannot work changed its file:\n%s", b)
	}
	// What a next attempt would take as landed: the updates the commit
	// carries, not the failed ones.
	if c := got.Status.Carries; !slices.Equal(c, []types.UID{"uid-lead", "uid-ok"}) {
		t.Errorf("status.carries %v, want the lead's and ok's automations", c)
	}
}

// Two members failing for the same reason make two events, each related
// to its automation and with its own message: as one object's events of
// one reason, they were one series, whose note was the first member's.
func TestBatchMembersFailingAlikeHaveAnEventEach(t *testing.T) {
	ctx := context.Background()
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	monorepo(t, srv, "alike", "lead")
	j := newBatch(ns, "alike", srv.RepoURL("alike"), "gone1", "gone2")
	create(t, j)
	if got := waitFinished(t, j); got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Fatalf("phase %s: %+v", got.Status.Phase, got.Status.Conditions)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		list := &eventsv1.EventList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		byAutomation := map[string]string{}
		for _, e := range list.Items {
			if e.Reason == updatev1.UpdateFailedReason && e.Related != nil && e.Related.Kind == imagev1.ImageUpdateAutomationKind {
				byAutomation[e.Related.Name] = e.Note
			}
		}
		for _, n := range []string{"gone1", "gone2"} {
			if !strings.Contains(byAutomation[n], "apps/"+n) {
				return false, fmt.Errorf("UpdateFailed events by related automation: %v; want one for %s naming apps/%s", byAutomation, n, n)
			}
		}
		return true, nil
	})
}

// A batch whose runner was killed after its push is taken up again: every
// update resumes from status.pushingCommit, which the branch holds, so
// nothing is pushed again, and each member the commit carries is
// Succeeded with it (not NoChange, which its files alone would say). One
// Succeeded event reports the commit.
func TestBatchResumedAfterPushPushesNothingAgain(t *testing.T) {
	ctx := context.Background()
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	work := monorepo(t, srv, "resumed", "lead", "m1", "m2")
	// What the killed runner pushed: every update's change.
	changed := map[string]string{}
	for _, n := range []string{"lead", "m1", "m2"} {
		changed["apps/"+n+"/deploy.yaml"] = updated
	}
	pushed := work.Commit("the batch's commit", changed)
	work.Push()

	j := newBatch(ns, "resumed", srv.RepoURL("resumed"), "m1", "m2")
	j.Spec.BackoffLimit = nil // the killed attempt was not the last
	createKilledAfterPush(ctx, t, j, pushed)

	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobSucceeded || got.Status.PushedCommit != pushed || got.Status.Attempts != 2 {
		t.Errorf("job: %s, pushed %q (want %s), attempts %d: %+v", got.Status.Phase, got.Status.PushedCommit, pushed,
			got.Status.Attempts, got.Status.Conditions)
	}
	for _, n := range []string{"m1", "m2"} {
		if m := members(got)[n]; m.Phase != updatev1.UpdateJobSucceeded || m.PushedCommit != pushed {
			t.Errorf("%s: %+v, want Succeeded with %s", n, m, pushed)
		}
	}
	if h := head(t, srv, "resumed", "main"); h != pushed {
		t.Errorf("main moved to %s after the batch's commit %s", h, pushed)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, error) {
		n, err := succeededEvents(ctx, ns)
		if err != nil {
			return false, err
		}
		return n == 1, fmt.Errorf("%d Succeeded events, want 1", n)
	})
}

// A resumed batch's commit may not carry every update: one whose update
// failed or found nothing to change in the killed attempt. Such a member
// is not called Succeeded with the commit: it runs again, and here lands
// its change in a commit of its own, on top of the resumed one.
func TestBatchResumedRunsAgainWhatItsCommitDoesNotCarry(t *testing.T) {
	ctx := context.Background()
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	work := monorepo(t, srv, "partly", "lead", "m1", "m2")
	pushed := work.Commit("the batch's commit, without m2", map[string]string{
		"apps/lead/deploy.yaml": updated, "apps/m1/deploy.yaml": updated})
	work.Push()

	j := newBatch(ns, "partly", srv.RepoURL("partly"), "m1", "m2")
	j.Spec.BackoffLimit = nil // the killed attempt was not the last
	createKilledAfterPush(ctx, t, j, pushed)

	got := waitFinished(t, j)
	ms := members(got)
	if got.Status.Phase != updatev1.UpdateJobSucceeded || got.Status.PushedCommit != pushed || ms["m1"].PushedCommit != pushed {
		t.Errorf("job %s with %q, m1 %+v; want both Succeeded with %s", got.Status.Phase, got.Status.PushedCommit, ms["m1"], pushed)
	}
	m2 := ms["m2"]
	if m2.Phase != updatev1.UpdateJobSucceeded || m2.PushedCommit == "" || m2.PushedCommit == pushed {
		t.Fatalf("m2: %+v, want a commit of its own", m2)
	}
	if h := head(t, srv, "partly", "main"); h != m2.PushedCommit || head(t, srv, "partly", h+"^") != pushed {
		t.Errorf("main is %s, want m2's commit %s on the resumed %s", h, m2.PushedCommit, pushed)
	}
}

// A member whose path holds another's (apps holds apps/lead) is not called
// Succeeded with a resumed commit that changed only the other's files:
// status.carries, written with status.pushingCommit, names the updates the
// commit carries, and the member runs again, landing its own change in a
// commit of its own.
func TestBatchResumedDoesNotCallAnOuterPathLanded(t *testing.T) {
	ctx := context.Background()
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	work := monorepo(t, srv, "nested", "lead", "outer")
	pushed := work.Commit("the batch's commit, the lead's change alone", map[string]string{"apps/lead/deploy.yaml": updated})
	work.Push()

	j := newBatch(ns, "nested", srv.RepoURL("nested"), "outer")
	j.Spec.Members[0].Update.Path = "apps"
	j.Spec.BackoffLimit = nil // the killed attempt was not the last
	createKilledAfterPush(ctx, t, j, pushed, "uid-lead")

	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobSucceeded || got.Status.PushedCommit != pushed {
		t.Errorf("job %s with %q, want Succeeded with %s: %+v", got.Status.Phase, got.Status.PushedCommit, pushed, got.Status.Conditions)
	}
	outer := members(got)["outer"]
	if outer.Phase != updatev1.UpdateJobSucceeded || outer.PushedCommit == "" || outer.PushedCommit == pushed {
		t.Fatalf("outer: %+v, want a commit of its own on top of %s", outer, pushed)
	}
	if h := head(t, srv, "nested", "main"); h != outer.PushedCommit || head(t, srv, "nested", h+"^") != pushed {
		t.Errorf("main is %s, want outer's commit %s on the resumed %s", h, outer.PushedCommit, pushed)
	}
}

// One Succeeded event per commit, the first update's it carries: here the
// resumed commit's is the job's own (plan 0), and the new commit's, made
// without the job's own update, its first member's.
func TestReportersOneEventPerCommit(t *testing.T) {
	landed := func(c string) engine.Outcome { return engine.Outcome{Result: engine.Result{Commit: c}} }
	outs := []engine.Outcome{landed("resumed"), landed("resumed"), {Err: errors.New("bad")}, landed("new"), landed("new"), {}}
	shared, quiet := reporters(outs)
	if want := []int{2, 2, 0, 2, 2, 0}; !slices.Equal(shared, want) {
		t.Errorf("shared %v, want %v", shared, want)
	}
	if want := []bool{false, true, false, false, true, false}; !slices.Equal(quiet, want) {
		t.Errorf("quiet %v, want %v", quiet, want)
	}
}

// A batch writes its status three times whatever its members: the claim,
// status.pushingCommit before the push, and the outcome with every
// member's. Counted where the requests leave a runner of the test's own
// (a rest.Config WrapTransport), whose lease is long enough that no
// heartbeat falls within the run.
func TestBatchWritesItsStatusThreeTimes(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	names := []string{"m1", "m2", "m3", "m4", "m5", "m6"}
	monorepo(t, srv, "writes", append([]string{"lead"}, names...)...)

	var mu sync.Mutex
	requests := map[string]int{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if _, rest, ok := strings.Cut(req.URL.Path, "/namespaces/"+ns+"/updatejobs/"); ok && req.Method != http.MethodGet {
				what := "updatejobs"
				if _, sub, ok := strings.Cut(rest, "/"); ok {
					what += "/" + sub
				}
				mu.Lock()
				requests[req.Method+" "+what]++
				mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	}
	const counted = "test.toolkit.dev/counted"
	sel, err := labels.Parse(counted)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := env.StartManagerOn(cfg, func(o *ctrl.Options) { o.Cache.DefaultLabelSelector = sel },
		func(mgr ctrl.Manager) error { return quietRunner(mgr, t.TempDir()) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	j := newBatch(ns, "writes", srv.RepoURL("writes"), names...)
	j.Labels = map[string]string{unmanagedLabel: "true", counted: "true"}
	create(t, j)
	got := waitFinished(t, j)
	if got.Status.Phase != updatev1.UpdateJobSucceeded || len(got.Status.Members) != len(names) {
		t.Fatalf("phase %s, %d members: %+v", got.Status.Phase, len(got.Status.Members), got.Status.Conditions)
	}
	for _, m := range got.Status.Members {
		if m.Phase != updatev1.UpdateJobSucceeded || m.PushedCommit != got.Status.PushedCommit {
			t.Errorf("member %s: %+v", m.Automation, m)
		}
	}
	// A write that follows the outcome would be a fourth: give it the
	// time a reconcile takes.
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"PATCH updatejobs/status": 3}; !maps.Equal(requests, want) {
		t.Errorf("writes to the job: %v, want %v", requests, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// quietRunner is a runner whose lease is a minute (a heartbeat every
// twenty seconds), so that a run of a few seconds writes only what the
// job's life needs.
func quietRunner(mgr ctrl.Manager, dir string) error {
	cache, err := mirror.NewCache(dir)
	if err != nil {
		return err
	}
	rec := metrics.NewRecorder("updatejob")
	return (&UpdateJobReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Events: events.New(events.NewWriter(mgr.GetClient(), mgr.GetScheme(), "update-job-controller")), Metrics: rec, JobMetrics: NewJobMetrics(),
		Cache: cache, WorkDir: dir, Runner: "quiet", LeaseDuration: time.Minute, Backoff: testBackoff,
	}).SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)})
}

// planned is a batch of automation lead and members m1, m2, m3 as its
// plan phase leaves it, Running its first attempt.
func planned(t *testing.T) (*UpdateJobReconciler, *jobScope) {
	t.Helper()
	j := newBatch("apps", "batch", "https://git.example.com/org/mono.git", "m1", "m2", "m3")
	j.Spec.BackoffLimit = ptr.To[int32](3)
	j.Status = updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobRunning, Runner: "me", Attempts: 1}
	r := &UpdateJobReconciler{Backoff: time.Second}
	s := &jobScope{Obj: j}
	if err := r.planBatch(s); err != nil {
		t.Fatal(err)
	}
	if len(s.State.batch) != 3 {
		t.Fatalf("%d members planned, want 3", len(s.State.batch))
	}
	return r, s
}

func memberRun(s *jobScope, name string) *jobRun {
	for _, m := range s.State.batch {
		if m.uid == types.UID("uid-"+name) {
			return &m.run
		}
	}
	return nil
}

// What each member's outcome is, folded into the job's status by the
// job's own outcome write: a member's own (its commit, no change, its
// failure), and a failure that would be retried made final once the job
// has ended, as nothing runs the member again.
func TestBatchOutcomeFoldsEachMembersOwn(t *testing.T) {
	retryable := func() error {
		return failure(&engine.Error{Kind: engine.KindGit, Err: errors.New("the server hung up")})
	}
	terminal := failure(&engine.Error{Kind: engine.KindUpdate, Terminal: true, Err: errors.New("apps/m3 does not exist")})
	pushed := engine.Result{CheckoutRevision: "main@sha1:base", Commit: "c0ffee0"}

	t.Run("the job pushed: members end, a retryable failure too", func(t *testing.T) {
		r, s := planned(t)
		s.State.out, s.State.shared = pushed, 2
		*memberRun(s, "m1") = jobRun{plan: memberRun(s, "m1").plan, out: pushed, shared: 2, quiet: true, automations: true}
		m2err := retryable()
		memberRun(s, "m2").err = m2err
		memberRun(s, "m3").err = terminal
		r.outcome(s.Obj, &s.State)
		r.batchOutcome(s.Obj, &s.State)
		ms := members(s.Obj)
		if s.Obj.Status.Phase != updatev1.UpdateJobSucceeded || ms["m1"].Phase != updatev1.UpdateJobSucceeded ||
			ms["m1"].PushedCommit != "c0ffee0" || !strings.Contains(ms["m1"].Message, "one commit for 2 automations") {
			t.Errorf("job %s, m1 %+v", s.Obj.Status.Phase, ms["m1"])
		}
		if m := ms["m2"]; m.Phase != updatev1.UpdateJobFailed || m.Reason != conditions.GitOperationFailedReason ||
			!strings.Contains(m.Message, "not retried: the batch ended") {
			t.Errorf("m2: %+v", m)
		}
		if m := ms["m3"]; m.Phase != updatev1.UpdateJobFailed || m.Reason != updatev1.UpdateFailedReason {
			t.Errorf("m3: %+v", m)
		}
		if memberRun(s, "m1").outcome != OutcomeSucceeded || memberRun(s, "m2").outcome != OutcomeFailed ||
			len(memberRun(s, "m1").notes) != 0 {
			t.Errorf("counted: m1 %q (%d events), m2 %q", memberRun(s, "m1").outcome, len(memberRun(s, "m1").notes), memberRun(s, "m2").outcome)
		}
		// Folding again (the write conflicted) starts from the
		// attempt's own failure.
		if memberRun(s, "m2").err != m2err {
			t.Error("the member's retryable failure was changed in place")
		}
	})

	t.Run("the job retries: a member that would retry waits with it", func(t *testing.T) {
		r, s := planned(t)
		s.State.err = retryable()
		memberRun(s, "m1").err = retryable()
		memberRun(s, "m2").out = engine.Result{CheckoutRevision: "main@sha1:base"}
		memberRun(s, "m3").err = terminal
		r.outcome(s.Obj, &s.State)
		r.batchOutcome(s.Obj, &s.State)
		ms := members(s.Obj)
		if s.Obj.Status.Phase != updatev1.UpdateJobPending || ms["m1"].Phase != updatev1.UpdateJobPending ||
			ms["m2"].Phase != updatev1.UpdateJobNoChange || ms["m3"].Phase != updatev1.UpdateJobFailed {
			t.Errorf("job %s, members %+v", s.Obj.Status.Phase, ms)
		}
	})
}

// A commit that landed ends the batch: an update of it that would be
// retried is not, as the next attempt would resume every plan from the
// commit and call an update it does not carry Succeeded.
func TestLastTryMakesARetryFinal(t *testing.T) {
	err := failure(&engine.Error{Kind: engine.KindGit, Err: errors.New("the server hung up")})
	f := conditions.AsFailure(lastTry(err, "the batch's commit landed without this update"))
	if !f.Stalled || f.Reason != conditions.GitOperationFailedReason || !strings.Contains(f.Error(), "the server hung up (not retried") {
		t.Errorf("got %+v", f)
	}
	stalled := conditions.Stall(conditions.InvalidSpecReason, errors.New("bad"))
	if lastTry(stalled, "x") != error(stalled) || lastTry(nil, "x") != nil {
		t.Error("a final failure, or none, changed")
	}
}

// A batch that ends without running (a deadline, its attempts, its spec)
// ends each member it has not finished, with its own plan's failure when
// it had one.
func TestBatchEndingUnrunEndsItsMembers(t *testing.T) {
	r, s := planned(t)
	s.Obj.Spec.Members[2].MessageTemplate = "{{ .Updated }}"
	if err := r.planBatch(s); err != nil {
		t.Fatal(err)
	}
	s.Obj.Status.Members = []updatev1.MemberStatus{{UID: "uid-m1", Automation: "m1", Phase: updatev1.UpdateJobSucceeded, PushedCommit: "c0ffee0"}}
	r.giveUp(s, updatev1.DeadlineExceededReason, "the job did not finish within activeDeadlineSeconds (60s)")
	ms := members(s.Obj)
	if m := ms["m1"]; m.Phase != updatev1.UpdateJobSucceeded || m.PushedCommit != "c0ffee0" {
		t.Errorf("m1 ended before: %+v", m)
	}
	if m := ms["m2"]; m.Phase != updatev1.UpdateJobFailed || m.Reason != updatev1.DeadlineExceededReason {
		t.Errorf("m2: %+v", m)
	}
	if m := ms["m3"]; m.Phase != updatev1.UpdateJobFailed || m.Reason != conditions.InvalidSpecReason {
		t.Errorf("m3: %+v", m)
	}
	var counted []string
	for _, m := range s.State.batch {
		counted = append(counted, string(m.uid)+"="+m.run.outcome)
	}
	slices.Sort(counted)
	if want := []string{"uid-m2=failed", "uid-m3=failed"}; !slices.Equal(counted, want) {
		t.Errorf("counted %v, want %v", counted, want)
	}
}

// The plans of a batch: a member whose plan cannot work fails alone; a
// batch none of whose plans can, or that asks for a pull request or has
// no automation to record its members under, cannot run.
func TestPlanBatch(t *testing.T) {
	r := &UpdateJobReconciler{}
	plan := func(mutate func(*updatev1.UpdateJob)) (*jobScope, error) {
		j := newBatch("apps", "batch", "https://git.example.com/org/mono.git", "m1", "m2")
		mutate(j)
		s := &jobScope{Obj: j}
		return s, r.planBatch(s)
	}
	s, err := plan(func(j *updatev1.UpdateJob) { j.Spec.Commit.MessageTemplate = "{{ .Updated }}" })
	if err != nil || s.State.err == nil || memberRun(s, "m1").err != nil {
		t.Errorf("the leader's own invalid update: %v; its failure %v, m1's %v", err, s.State.err, memberRun(s, "m1").err)
	}
	if p, err := commitPlan(s.Obj); err != nil || groupKey(s.Obj, p) == "" {
		t.Errorf("the commit plan of a batch whose own update cannot run: %v", err)
	}
	for name, mutate := range map[string]func(*updatev1.UpdateJob){
		"every plan invalid": func(j *updatev1.UpdateJob) {
			j.Spec.Commit.MessageTemplate = "{{ .Updated }}"
			for i := range j.Spec.Members {
				j.Spec.Members[i].MessageTemplate = "{{ .Updated }}"
			}
		},
		"a pull request": func(j *updatev1.UpdateJob) {
			j.Spec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "gitea"}}
		},
		"no automation": func(j *updatev1.UpdateJob) { j.OwnerReferences = nil },
		// spec.members is atomic: the API server lets a UID through
		// twice, the plan does not.
		"a member twice": func(j *updatev1.UpdateJob) { j.Spec.Members = append(j.Spec.Members, j.Spec.Members[0]) },
		"a container member": func(j *updatev1.UpdateJob) {
			j.Spec.Commit.MessageTemplate = "{{ .Updated }}"
			for i := range j.Spec.Members {
				j.Spec.Members[i].Update = updatev1.UpdateSpec{Container: &updatev1.UpdateContainer{Image: "tool:1"}}
			}
		},
	} {
		if _, err := plan(mutate); err == nil || !conditions.AsFailure(err).Stalled {
			t.Errorf("%s: %v, want a stalled failure", name, err)
		}
	}
}

// A batch job is a group of its own: it joins no leader's group and
// gathers none, but a running batch makes the jobs of its key wait, and a
// batch waits for them.
func TestGatherLeavesBatchesToThemselves(t *testing.T) {
	now := time.Now()
	batch := func(name string, phase updatev1.UpdateJobPhase, mutate func(*updatev1.UpdateJob)) updatev1.UpdateJob {
		return groupJob(name, phase, "2", func(j *updatev1.UpdateJob) {
			batchOf(j, "m-"+name)
			if mutate != nil {
				mutate(j)
			}
		})
	}
	running := func(j *updatev1.UpdateJob) {
		j.Status.Runner, j.Status.HeartbeatTime = "other", &metav1.Time{Time: now.Add(-time.Second)}
	}
	r := &UpdateJobReconciler{Backoff: 10 * time.Second}
	tests := []struct {
		name   string
		leader updatev1.UpdateJob
		jobs   []updatev1.UpdateJob
		want   []string
	}{
		{"a Pending batch does not join a leader's group", groupJob("app-0", updatev1.UpdateJobPending, "2", nil),
			[]updatev1.UpdateJob{batch("b", updatev1.UpdateJobPending, nil), groupJob("app-1", "", "2", nil)}, []string{"app-1"}},
		{"a running batch makes a leader wait", groupJob("app-0", updatev1.UpdateJobPending, "2", nil),
			[]updatev1.UpdateJob{batch("b", updatev1.UpdateJobRunning, running), groupJob("app-1", "", "2", nil)}, []string{"busy:b"}},
		{"a running batch whose own update cannot run makes a leader wait", groupJob("app-0", updatev1.UpdateJobPending, "2", nil),
			[]updatev1.UpdateJob{batch("b", updatev1.UpdateJobRunning, func(j *updatev1.UpdateJob) {
				running(j)
				j.Spec.Commit.MessageTemplate = "{{ .Updated }}"
			})}, []string{"busy:b"}},
		{"a batch gathers no member", batch("b", updatev1.UpdateJobPending, nil),
			[]updatev1.UpdateJob{groupJob("app-1", "", "2", nil), batch("c", "", nil)}, nil},
		{"a batch waits for a running job of its key", batch("b", updatev1.UpdateJobPending, nil),
			[]updatev1.UpdateJob{groupJob("app-1", updatev1.UpdateJobRunning, "2", running)}, []string{"busy:app-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := commitPlan(&tt.leader)
			if err != nil {
				t.Fatal(err)
			}
			g := gather(groupInput{leader: &tt.leader, plan: plan, key: groupKey(&tt.leader, plan), runner: "me",
				running: func(types.UID) bool { return false }, now: now, lease: time.Minute, backoff: r.backoff},
				append([]updatev1.UpdateJob{tt.leader}, tt.jobs...))
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

// createKilledAfterPush creates j away from the suite's manager with the
// status a killed runner left (Running, one attempt, a heartbeat never
// renewed, and pushingCommit when it died after its push), then hands it
// to the manager.
func createKilledAfterPush(ctx context.Context, t *testing.T, j *updatev1.UpdateJob, pushing string, carries ...types.UID) {
	t.Helper()
	j.Labels = map[string]string{unmanagedLabel: "true"}
	create(t, j)
	now := metav1.Now()
	base := j.DeepCopy()
	j.Status = updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobRunning, Runner: "killed-pod", Attempts: 1,
		StartTime: &now, HeartbeatTime: &now, PushingCommit: pushing, Carries: carries}
	if err := env.Client.Status().Patch(ctx, j, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	base = j.DeepCopy()
	j.Labels = nil
	if err := env.Client.Patch(ctx, j, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}
