package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// waitFor bounds every wait; the controller reacts in well under a second.
const waitFor = 20 * time.Second

// fixture is a namespace and a git server with a repository fleet whose
// main branch has one commit.
type fixture struct {
	t    *testing.T
	ns   string
	git  *testgit.Server
	work *testgit.Clone
}

func newFixture(t *testing.T, opts testgit.Options) *fixture {
	t.Helper()
	ns := env.Namespace(t)
	s := testgit.New(t, opts)
	work := s.CreateRepo(t, "fleet", map[string]string{
		"apps/app.yaml": "image: ghcr.io/org/app:1.0.0 # {\"$imagepolicy\": \"" + ns + ":app\"}\n",
	})
	return &fixture{t: t, ns: ns, git: s, work: work}
}

// head is the revision of main on the server, as status spells it.
func (f *fixture) head() string {
	f.t.Helper()
	return "main@sha1:" + strings.TrimSpace(testgit.Git(f.t, f.git.BarePath("fleet"), "rev-parse", "main"))
}

// commit pushes a new commit to main, as someone else would.
func (f *fixture) commit(msg string) string {
	f.t.Helper()
	h := f.work.Commit(msg, map[string]string{"README": msg + "\n"})
	f.work.Push()
	return h
}

// automation creates a standalone automation of fleet's main branch that
// runs hourly, so that only the triggers under test make it run sooner.
func (f *fixture) automation(name string, mutate func(*imagev1.ImageUpdateAutomation)) *imagev1.ImageUpdateAutomation {
	f.t.Helper()
	url := ""
	if f.git != nil {
		url = f.git.RepoURL("fleet")
	}
	a := &imagev1.ImageUpdateAutomation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: imagev1.ImageUpdateAutomationSpec{
			Interval: metav1.Duration{Duration: time.Hour},
			GitSpec: imagev1.GitSpec{
				Repository: &updatev1.GitRepositorySpec{URL: url},
				Checkout:   &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
				Commit: updatev1.CommitSpec{
					Author:          updatev1.CommitUser{Name: "imagebot", Email: "imagebot@example.com"},
					MessageTemplate: "Update {{ .AutomationObject }}",
				},
			},
		},
	}
	if mutate != nil {
		mutate(a)
	}
	create(f.t, a)
	return a
}

// policy creates an ImagePolicy and gives it a latest image, as the
// reflector would.
func (f *fixture) policy(name string, labels map[string]string, tag string) *imagev1.ImagePolicy {
	f.t.Helper()
	p := &imagev1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels},
		Spec: imagev1.ImagePolicySpec{
			ImageRepositoryRef: meta.NamespacedObjectReference{Name: name},
			Policy:             imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}},
		},
	}
	create(f.t, p)
	setLatest(f.t, p, tag)
	return p
}

// setLatest changes a policy's latest image to ghcr.io/org/<name>:<tag>.
func setLatest(t *testing.T, p *imagev1.ImagePolicy, tag string) {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	p.Status.LatestRef = &meta.ImageRef{Name: "ghcr.io/org/" + p.Name, Tag: tag}
	now := metav1.NowMicro()
	p.Status.LatestRefTime = &now
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// jobs lists the namespace's UpdateJobs from the API server, oldest first.
func jobs(t *testing.T, ns string) []updatev1.UpdateJob {
	t.Helper()
	list := &updatev1.UpdateJobList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b updatev1.UpdateJob) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return list.Items
}

// waitJobs waits until the namespace has n UpdateJobs and returns them.
func waitJobs(t *testing.T, ns string, n int) []updatev1.UpdateJob {
	t.Helper()
	var got []updatev1.UpdateJob
	testenv.Eventually(t, waitFor, func() (bool, error) {
		got = jobs(t, ns)
		return len(got) == n, fmt.Errorf("%d jobs", len(got))
	})
	return got
}

// finish plays the job runner: it sets a terminal phase on the job's
// status subresource.
func finish(t *testing.T, job *updatev1.UpdateJob, phase updatev1.UpdateJobPhase, mutate func(*updatev1.UpdateJob)) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	job.Status.Phase = phase
	job.Status.Attempts = 1
	job.Status.StartTime, job.Status.CompletionTime = &now, &now
	switch phase {
	case updatev1.UpdateJobFailed:
		conditions.MarkFailed(job, conditions.FailedReason, "failed")
	default:
		conditions.MarkReady(job, conditions.SucceededReason, "done")
	}
	if mutate != nil {
		mutate(job)
	}
	if err := env.Client.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
}

// waitAutomation waits until cond holds for the automation.
func waitAutomation(t *testing.T, a *imagev1.ImageUpdateAutomation, what string, cond func(*imagev1.ImageUpdateAutomation) bool) *imagev1.ImageUpdateAutomation {
	t.Helper()
	got := &imagev1.ImageUpdateAutomation{}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a), got); err != nil {
			return false, err
		}
		return cond(got), fmt.Errorf("%s: status %+v", what, got.Status)
	})
	return got
}

// request sets the reconcile request annotation and waits until it is
// handled; the status then reflects a full reconciliation.
func request(t *testing.T, a *imagev1.ImageUpdateAutomation, token string) *imagev1.ImageUpdateAutomation {
	t.Helper()
	p := client.RawPatch("application/merge-patch+json",
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, token)))
	if err := env.Client.Patch(context.Background(), a, p); err != nil {
		t.Fatal(err)
	}
	return waitAutomation(t, a, "request "+token+" handled", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastHandledReconcileAt == token
	})
}

// ready returns the Ready condition, or an empty one.
func ready(a *imagev1.ImageUpdateAutomation) metav1.Condition {
	if c := conditions.Get(a, conditions.ReadyCondition); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func runs(m *AutomationMetrics, outcome string) float64 {
	var d dto.Metric
	if err := m.Runs.WithLabelValues(outcome).(prometheus.Metric).Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}

func latencies(m *AutomationMetrics) (count uint64, sum float64) {
	var d dto.Metric
	if err := m.PolicyToPush.(prometheus.Metric).Write(&d); err != nil {
		panic(err)
	}
	return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
}

// unfinished returns the one job that has not finished. (Creation times
// have whole seconds, so jobs made in one second do not sort by age.)
func unfinished(t *testing.T, js []updatev1.UpdateJob) updatev1.UpdateJob {
	t.Helper()
	var out []updatev1.UpdateJob
	for _, j := range js {
		if !j.Status.Phase.Finished() {
			out = append(out, j)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d unfinished jobs, want 1", len(out))
	}
	return out[0]
}
