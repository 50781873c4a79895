package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/schedule"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// testClock is the real time plus an offset a test sets: it keeps moving,
// as the controller's requeue timers (real time) expect.
type testClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Set makes the clock read t now.
func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset = time.Until(t)
}

// startClocked runs a manager of its own for objects labelled clocked,
// whose reconciler reads the clock.
func startClocked(t *testing.T, clock *testClock) map[string]string {
	t.Helper()
	shard := map[string]string{shardLabel: "clocked"}
	stop, err := env.StartManagerWith(func(o *ctrl.Options) {
		o.Cache.DefaultLabelSelector = labels.SelectorFromSet(shard)
	}, func(mgr ctrl.Manager) error {
		r := newReconciler(mgr)
		r.Clock = clock.Now
		return r.SetupWithManager(context.Background(), mgr, controller.Options{})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return shard
}

func reason(want string) func(*imagev1.ImageUpdateAutomation) bool {
	return func(a *imagev1.ImageUpdateAutomation) bool { return ready(a).Reason == want }
}

// Outside its update window an automation makes no UpdateJob, neither for
// its first run, a policy change nor a reconcile request, and its status
// says what waits and when the window (cron in Asia/Kolkata) opens; when
// the window opens the job is made with no other trigger; a job still
// running when the window closes is left to finish and its outcome is
// recorded; the next change waits for the next day's window.
func TestUpdateWindow(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	clock := &testClock{}
	// The window opens at a minute boundary (cron has minutes), read in a
	// half-hour zone to prove the time zone is applied; the controller's
	// clock starts an hour before it.
	opens := time.Now().Truncate(time.Minute).Add(10 * time.Minute).UTC()
	clock.Set(opens.Add(-time.Hour))
	shard := startClocked(t, clock)
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	local := opens.In(kolkata)
	cron := fmt.Sprintf("%d %d * * *", local.Minute(), local.Hour())

	p := f.policy("app", shard, "1.0.0")
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Labels = shard
		a.Spec.Schedule = &imagev1.UpdateSchedule{TimeZone: "Asia/Kolkata", Windows: []imagev1.UpdateWindow{
			{Cron: cron, Duration: metav1.Duration{Duration: 30 * time.Minute}},
		}}
	})
	got := waitAutomation(t, a, "waiting for the window", reason(imagev1.OutsideUpdateWindowReason))
	w := got.Status.NextWindow
	if w == nil || !w.Start.Time.Equal(opens) || !w.End.Time.Equal(opens.Add(30*time.Minute)) {
		t.Fatalf("nextWindow %+v, want %s to %s", w, opens, opens.Add(30*time.Minute))
	}
	c := ready(got)
	if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "app (1.0.0)") ||
		!strings.Contains(c.Message, opens.Format(time.RFC3339)) || !strings.Contains(c.Message, "in Asia/Kolkata") {
		t.Errorf("Ready %s %s: %q; want True, naming app (1.0.0), the opening and the zone", c.Status, c.Reason, c.Message)
	}

	setLatest(t, p, "1.1.0")
	waitAutomation(t, a, "the new tag waiting", func(a *imagev1.ImageUpdateAutomation) bool {
		return strings.Contains(ready(a).Message, "app (1.1.0)")
	})
	request(t, a, "outside")
	if js := jobs(t, f.ns); len(js) != 0 {
		t.Fatalf("%d jobs outside the window, want none", len(js))
	}

	// 5 s before the window, a request is still refused; the opening
	// then makes the job by itself.
	clock.Set(opens.Add(-5 * time.Second))
	got = request(t, a, "just-before")
	if ready(got).Reason != imagev1.OutsideUpdateWindowReason {
		t.Fatalf("the request 5 s before the window was handled as %s: %s (a machine too slow for this test?)", ready(got).Reason, ready(got).Message)
	}
	if js := jobs(t, f.ns); len(js) != 0 {
		t.Fatalf("%d jobs before the window, want none", len(js))
	}
	job := waitJobs(t, f.ns, 1)[0]
	if s := job.Spec.Update.Setters; len(s) != 1 || s[0].Tag != "1.1.0" {
		t.Errorf("setters %+v, want app at 1.1.0", s)
	}
	got = waitAutomation(t, a, "the job recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return conditions.IsTrue(a, conditions.ReconcilingCondition)
	})
	if lr := got.Status.LastAutomationRunTime; lr == nil || lr.Time.Before(opens) {
		t.Errorf("lastAutomationRunTime %v, want the window's opening %s or later on the controller's clock", lr, opens)
	}

	// The window closes with the job still running: the job stays.
	clock.Set(opens.Add(31 * time.Minute))
	got = request(t, a, "after-close")
	cur := &updatev1.UpdateJob{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(&job), cur); err != nil || cur.Status.Phase.Finished() {
		t.Fatalf("the running job after the window closed: %v, phase %q; want it left running", err, cur.Status.Phase)
	}
	if w := got.Status.NextWindow; w == nil || !w.Start.Time.Equal(opens.Add(24*time.Hour)) {
		t.Errorf("nextWindow %+v after the close, want the next day's at %s", w, opens.Add(24*time.Hour))
	}
	if !conditions.IsTrue(got, conditions.ReconcilingCondition) {
		t.Errorf("Ready %+v, want the job still shown in progress", ready(got))
	}
	finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = f.head() })
	waitAutomation(t, a, "outcome recorded outside the window", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.UID == job.UID && ready(a).Reason == conditions.SucceededReason
	})

	setLatest(t, p, "1.2.0")
	got = waitAutomation(t, a, "the next change waiting", func(a *imagev1.ImageUpdateAutomation) bool {
		return ready(a).Reason == imagev1.OutsideUpdateWindowReason && strings.Contains(ready(a).Message, "ImagePolicies app (1.2.0) changed since the last run")
	})
	if !strings.Contains(ready(got).Message, opens.Add(24*time.Hour).Format(time.RFC3339)) {
		t.Errorf("Ready message %q does not name the next day's window", ready(got).Message)
	}
	if js := jobs(t, f.ns); len(js) != 1 {
		t.Errorf("%d jobs, want only the one of the window", len(js))
	}
}

// A schedule the API server accepts but that cannot work stalls the
// automation, before any job: a time zone that is no IANA name, a window
// that never opens.
func TestInvalidScheduleStalls(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.0.0")
	for _, tt := range []struct {
		name, tz, cron, want string
	}{
		{"zone", "Mars/Olympus_Mons", "0 2 * * *", `time zone "Mars/Olympus_Mons" is not an IANA time zone name`},
		{"never", "", "0 0 30 2 *", "no window opens within five years"},
		{"range", "", "0 24 * * *", `window 0: cron "0 24 * * *"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := f.automation(tt.name, func(a *imagev1.ImageUpdateAutomation) {
				a.Spec.Schedule = &imagev1.UpdateSchedule{TimeZone: tt.tz, Windows: []imagev1.UpdateWindow{
					{Cron: tt.cron, Duration: metav1.Duration{Duration: time.Hour}},
				}}
			})
			got := waitAutomation(t, a, "stalled", func(a *imagev1.ImageUpdateAutomation) bool {
				return conditions.IsTrue(a, conditions.StalledCondition)
			})
			if c := ready(got); c.Reason != imagev1.InvalidScheduleReason || !strings.Contains(c.Message, tt.want) {
				t.Errorf("Ready %s: %q, want %s naming %q", c.Reason, c.Message, imagev1.InvalidScheduleReason, tt.want)
			}
			if got.Status.NextWindow != nil {
				t.Errorf("nextWindow %+v for an invalid schedule", got.Status.NextWindow)
			}
		})
	}
	if js := jobs(t, f.ns); len(js) != 0 {
		t.Errorf("%d jobs, want none", len(js))
	}
}

// A failed job's reason stays on Ready while its retry waits for a window,
// with the opening appended once however often the run repeats.
func TestOutsideWindowKeepsFailure(t *testing.T) {
	a := &imagev1.ImageUpdateAutomation{}
	a.Status.LastJob = &imagev1.UpdateJobReference{Name: "fleet-1", Phase: updatev1.UpdateJobFailed}
	conditions.MarkFailed(a, conditions.AuthenticationFailedReason, "UpdateJob fleet-1 failed: refused")
	win := windowState{span: spanAt("2026-11-24T02:00:00Z")}
	for range 2 {
		d := outsideWindow(&a.Status, win, "a run is due")
		conditions.Record(a, d.fail, d.fail.Error())
	}
	c := ready(a)
	want := "UpdateJob fleet-1 failed: refused" + waitSuffix + "2026-11-24T02:00:00Z"
	if c.Status != metav1.ConditionFalse || c.Reason != conditions.AuthenticationFailedReason || c.Message != want {
		t.Errorf("Ready %s %s %q, want False %s %q", c.Status, c.Reason, c.Message, conditions.AuthenticationFailedReason, want)
	}
}

func spanAt(start string) schedule.Span {
	t, err := time.Parse(time.RFC3339, start)
	if err != nil {
		panic(err)
	}
	return schedule.Span{Start: t, End: t.Add(time.Hour)}
}
